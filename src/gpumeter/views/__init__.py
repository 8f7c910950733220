"""Views: what people read of the warehouse, scoped to who reads it (the dashboard's data layer), summaries
and advice."""
