"""Page script (st.navigation): the idle page for the session's viewer and filters."""

from gpumeter.dashboard.common import show
from gpumeter.dashboard.pages import idle

show(idle)
