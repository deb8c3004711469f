"""An index for a job's runs, newest first: JOB_STATUS_TRACE_LOG (job_name, state,
creation_time), so `GET /api/job/{job}/runs` reads a page of the job's TASK_STAGING rows without
scanning the table.

Revision ID: 0003_runs_index
Revises: 0002_counted_results
"""

from __future__ import annotations

from alembic import op

revision = "0003_runs_index"
down_revision: str | None = "0002_counted_results"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_index(
        "JOB_STATE_TIME_INDEX",
        "JOB_STATUS_TRACE_LOG",
        ["job_name", "state", "creation_time"],
    )


def downgrade() -> None:
    op.drop_index("JOB_STATE_TIME_INDEX", table_name="JOB_STATUS_TRACE_LOG")
