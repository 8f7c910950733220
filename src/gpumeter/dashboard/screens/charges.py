"""Page script (st.navigation): the charges page for the session's viewer and filters."""

from gpumeter.dashboard.common import show
from gpumeter.dashboard.pages import charges

show(charges)
