"""Page script (st.navigation): the rightsizing page for the session's viewer and filters."""

from dashboards.common import show
from dashboards.pages import rightsizing

show(rightsizing)
