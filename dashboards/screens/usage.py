"""Page script (st.navigation): the usage page for the session's viewer and filters."""

from dashboards.common import show
from dashboards.pages import usage

show(usage)
