"""Page script (st.navigation): the charges page for the session's viewer and filters."""

from dashboards.common import show
from dashboards.pages import charges

show(charges)
