"""Page script (st.navigation): the capacity page for the session's viewer and filters."""

from gpumeter.dashboard.common import show
from gpumeter.dashboard.pages import capacity

show(capacity)
