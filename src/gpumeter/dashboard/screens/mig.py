"""Page script (st.navigation): the mig page for the session's viewer and filters."""

from gpumeter.dashboard.common import show
from gpumeter.dashboard.pages import mig

show(mig)
