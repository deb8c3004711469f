"""Alembic environment: run online against the connection `upgrade_to_head` hands over.

There is no alembic.ini: `database.upgrade_to_head` builds the `Config` in code and puts an open
connection in `config.attributes["connection"]`. To write a new revision by hand, copy
`versions/0001_initial.py`, set `down_revision`, and describe the change with `op.*`.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from scheduler.leader.statistics.models import Base


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER most things
    )
    with context.begin_transaction():
        context.run_migrations()


_connection = context.config.attributes.get("connection")
if not isinstance(_connection, Connection):
    raise RuntimeError(
        "run migrations through scheduler.leader.statistics.database.upgrade_to_head"
    )
_run(_connection)
