"""Page script (st.navigation): the idle page for the session's viewer and filters."""

from dashboards.common import show
from dashboards.pages import idle

show(idle)
