"""Page script (st.navigation): the data_quality page for the session's viewer and filters."""

from gpumeter.dashboard.common import show
from gpumeter.dashboard.pages import data_quality

show(data_quality)
