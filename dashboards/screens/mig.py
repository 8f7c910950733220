"""Page script (st.navigation): the mig page for the session's viewer and filters."""

from dashboards.common import show
from dashboards.pages import mig

show(mig)
