"""Alembic migrations for the trace and statistics tables (run by `database.upgrade_to_head`)."""
