"""Page script (st.navigation): the invoices page for the session's viewer and filters."""

from gpumeter.dashboard.common import show
from gpumeter.dashboard.pages import invoices

show(invoices)
