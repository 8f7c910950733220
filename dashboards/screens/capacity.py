"""Page script (st.navigation): the capacity page for the session's viewer and filters."""

from dashboards.common import show
from dashboards.pages import capacity

show(capacity)
