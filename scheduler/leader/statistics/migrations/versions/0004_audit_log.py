"""AUDIT_LOG (issue 26): one row per change made through the API and per refused request, with
indexes for its newest-first pages (all, one app's, one actor's).

Revision ID: 0004_audit_log
Revises: 0003_runs_index
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_audit_log"
down_revision: str | None = "0003_runs_index"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "AUDIT_LOG",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("time", sa.DateTime(), nullable=False),
        sa.Column("actor", sa.String(320), nullable=False),
        sa.Column("source", sa.String(100), nullable=False),
        sa.Column("action", sa.String(100), nullable=False),
        sa.Column("resource", sa.String(320), nullable=False),
        sa.Column("app", sa.String(320), nullable=True),
        sa.Column("job", sa.String(320), nullable=True),
        sa.Column("outcome", sa.String(10), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("term", sa.BigInteger(), nullable=False),
        sa.Column("changes", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_AUDIT_LOG"),
    )
    op.create_index("AUDIT_TIME_INDEX", "AUDIT_LOG", ["time", "id"])
    op.create_index("AUDIT_APP_TIME_INDEX", "AUDIT_LOG", ["app", "time"])
    op.create_index("AUDIT_ACTOR_TIME_INDEX", "AUDIT_LOG", ["actor", "time"])


def downgrade() -> None:
    op.drop_index("AUDIT_ACTOR_TIME_INDEX", table_name="AUDIT_LOG")
    op.drop_index("AUDIT_APP_TIME_INDEX", table_name="AUDIT_LOG")
    op.drop_index("AUDIT_TIME_INDEX", table_name="AUDIT_LOG")
    op.drop_table("AUDIT_LOG")
