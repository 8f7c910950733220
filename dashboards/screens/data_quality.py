"""Page script (st.navigation): the data_quality page for the session's viewer and filters."""

from dashboards.common import show
from dashboards.pages import data_quality

show(data_quality)
