"""Page script (st.navigation): the invoices page for the session's viewer and filters."""

from dashboards.common import show
from dashboards.pages import invoices

show(invoices)
