"""Page script (st.navigation): the rightsizing page for the session's viewer and filters."""

from gpumeter.dashboard.common import show
from gpumeter.dashboard.pages import rightsizing

show(rightsizing)
