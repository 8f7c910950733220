"""Page script (st.navigation): the budgets page for the session's viewer and filters."""

from dashboards.common import show
from dashboards.pages import budgets

show(budgets)
