"""Page script (st.navigation): the usage page for the session's viewer and filters."""

from gpumeter.dashboard.common import show
from gpumeter.dashboard.pages import usage

show(usage)
