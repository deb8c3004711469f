"""Initial tables: Elastic-Job-Cloud 2.1.5's trace log (JOB_EXECUTION_LOG, JOB_STATUS_TRACE_LOG)
and statistics tables, with its names and columns.

Revision ID: 0001_initial
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_initial"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

_BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

_TASK_RESULT_TABLES = (
    "TASK_RESULT_STATISTICS_MINUTE",
    "TASK_RESULT_STATISTICS_HOUR",
    "TASK_RESULT_STATISTICS_DAY",
)
_RUNNING_TABLES = ("TASK_RUNNING_STATISTICS", "JOB_RUNNING_STATISTICS")


def upgrade() -> None:
    op.create_table(
        "JOB_EXECUTION_LOG",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("job_name", sa.String(100), nullable=False),
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("hostname", sa.String(255), nullable=False),
        sa.Column("ip", sa.String(50), nullable=False),
        sa.Column("sharding_item", sa.Integer(), nullable=False),
        sa.Column("execution_source", sa.String(20), nullable=False),
        sa.Column("failure_cause", sa.String(4000), nullable=True),
        sa.Column("is_success", sa.Boolean(), nullable=True),
        sa.Column("start_time", sa.DateTime(), nullable=True),
        sa.Column("complete_time", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_JOB_EXECUTION_LOG"),
    )
    op.create_table(
        "JOB_STATUS_TRACE_LOG",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("job_name", sa.String(100), nullable=False),
        sa.Column("original_task_id", sa.String(255), nullable=False),
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("slave_id", sa.String(255), nullable=False),
        sa.Column("source", sa.String(50), nullable=False),
        sa.Column("execution_type", sa.String(20), nullable=False),
        sa.Column("sharding_item", sa.String(100), nullable=False),
        sa.Column("state", sa.String(30), nullable=False),
        sa.Column("message", sa.String(4000), nullable=True),
        sa.Column("creation_time", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_JOB_STATUS_TRACE_LOG"),
    )
    op.create_index("TASK_ID_STATE_INDEX", "JOB_STATUS_TRACE_LOG", ["task_id", "state"])
    for name in _TASK_RESULT_TABLES:
        op.create_table(
            name,
            sa.Column("id", _BigId, autoincrement=True, nullable=False),
            sa.Column("success_count", sa.Integer(), nullable=False),
            sa.Column("failed_count", sa.Integer(), nullable=False),
            sa.Column("statistic_interval", sa.String(10), nullable=False),
            sa.Column("statistics_time", sa.DateTime(), nullable=False),
            sa.Column("creation_time", sa.DateTime(), nullable=False),
            sa.PrimaryKeyConstraint("id", name=f"pk_{name}"),
        )
        op.create_index(f"ix_{name}_statistics_time", name, ["statistics_time"])
    for name in _RUNNING_TABLES:
        op.create_table(
            name,
            sa.Column("id", _BigId, autoincrement=True, nullable=False),
            sa.Column("running_count", sa.Integer(), nullable=False),
            sa.Column("statistics_time", sa.DateTime(), nullable=False),
            sa.Column("creation_time", sa.DateTime(), nullable=False),
            sa.PrimaryKeyConstraint("id", name=f"pk_{name}"),
        )
        op.create_index(f"ix_{name}_statistics_time", name, ["statistics_time"])
    op.create_table(
        "JOB_REGISTER_STATISTICS",
        sa.Column("id", _BigId, autoincrement=True, nullable=False),
        sa.Column("registered_count", sa.Integer(), nullable=False),
        sa.Column("statistics_time", sa.DateTime(), nullable=False),
        sa.Column("creation_time", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_JOB_REGISTER_STATISTICS"),
    )
    op.create_index(
        "ix_JOB_REGISTER_STATISTICS_statistics_time", "JOB_REGISTER_STATISTICS", ["statistics_time"]
    )


def downgrade() -> None:
    for name in ("JOB_REGISTER_STATISTICS", *_RUNNING_TABLES, *_TASK_RESULT_TABLES):
        op.drop_table(name)
    op.drop_index("TASK_ID_STATE_INDEX", table_name="JOB_STATUS_TRACE_LOG")
    op.drop_table("JOB_STATUS_TRACE_LOG")
    op.drop_table("JOB_EXECUTION_LOG")
