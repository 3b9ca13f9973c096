"""Run records (SQLAlchemy models, the store API, Alembic migrations): a leaf both sides
share, so the receiver's dashboard and metrics read what the workers write without `bot/`
importing `workers/`."""
