"""Page script (st.navigation): the budgets page for the session's viewer and filters."""

from gpumeter.dashboard.common import show
from gpumeter.dashboard.pages import budgets

show(budgets)
