"""STATISTICS_COUNTED_RESULT (counting results from the ZooKeeper journal exactly once), and
one row per period: the statistics tables' `statistics_time` indexes become unique, so two
leaders (a deposed one still finishing a write) can never insert the same period twice.

Revision ID: 0002_counted_results
Revises: 0001_initial
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_counted_results"
down_revision: str | None = "0001_initial"
branch_labels: str | None = None
depends_on: str | None = None

_PERIOD_TABLES = (
    "TASK_RESULT_STATISTICS_MINUTE",
    "TASK_RESULT_STATISTICS_HOUR",
    "TASK_RESULT_STATISTICS_DAY",
    "TASK_RUNNING_STATISTICS",
    "JOB_RUNNING_STATISTICS",
    "JOB_REGISTER_STATISTICS",
)


def upgrade() -> None:
    op.create_table(
        "STATISTICS_COUNTED_RESULT",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("statistics_time", sa.DateTime(), nullable=False),
        sa.Column("counted_time", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_STATISTICS_COUNTED_RESULT"),
    )
    op.create_index(
        "ix_STATISTICS_COUNTED_RESULT_counted_time",
        "STATISTICS_COUNTED_RESULT",
        ["counted_time"],
    )
    for name in _PERIOD_TABLES:
        op.drop_index(f"ix_{name}_statistics_time", table_name=name)
        op.create_index(f"ix_{name}_statistics_time", name, ["statistics_time"], unique=True)


def downgrade() -> None:
    for name in _PERIOD_TABLES:
        op.drop_index(f"ix_{name}_statistics_time", table_name=name)
        op.create_index(f"ix_{name}_statistics_time", name, ["statistics_time"])
    op.drop_index(
        "ix_STATISTICS_COUNTED_RESULT_counted_time", table_name="STATISTICS_COUNTED_RESULT"
    )
    op.drop_table("STATISTICS_COUNTED_RESULT")
