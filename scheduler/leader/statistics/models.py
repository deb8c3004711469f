"""The trace and statistics tables: the original's names and column meanings, any SQL database.

Times are stored as naive UTC `DateTime` (SQLite has no time zones; PostgreSQL and MySQL agree
on naive columns). The original's DDL was MySQL-only; Alembic renders
these for whichever database the URL names.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, DateTime, Index, Integer, MetaData, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "AuditRecord",
    "Base",
    "CountedResult",
    "ExecutionLog",
    "JobRegisterStatistics",
    "JobRunningStatistics",
    "RunningStatistics",
    "StatusTraceLog",
    "TaskResultStatistics",
    "TaskResultStatisticsDay",
    "TaskResultStatisticsHour",
    "TaskResultStatisticsMinute",
    "TaskRunningStatistics",
]

# Auto-increment BIGINT on PostgreSQL/MySQL; SQLite only auto-increments INTEGER PRIMARY KEY.
_BigId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class ExecutionLog(Base):
    """One run of one shard: inserted when it starts, updated when it completes."""

    __tablename__ = "JOB_EXECUTION_LOG"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    job_name: Mapped[str] = mapped_column(String(100))
    task_id: Mapped[str] = mapped_column(String(255))
    hostname: Mapped[str] = mapped_column(String(255))
    ip: Mapped[str] = mapped_column(String(50))
    sharding_item: Mapped[int] = mapped_column(Integer)
    execution_source: Mapped[str] = mapped_column(String(20))
    failure_cause: Mapped[str | None] = mapped_column(String(4000), nullable=True)
    is_success: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    start_time: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    complete_time: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class StatusTraceLog(Base):
    """One Mesos status update (or scheduler decision) about one task."""

    __tablename__ = "JOB_STATUS_TRACE_LOG"
    __table_args__ = (
        Index("TASK_ID_STATE_INDEX", "task_id", "state"),
        # A job's runs, newest first: its TASK_STAGING rows by time.
        Index("JOB_STATE_TIME_INDEX", "job_name", "state", "creation_time"),
        # Every job's runs, newest first (the console's runs view): a page without a sort.
        Index("TRACE_TIME_INDEX", "creation_time", "id"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    job_name: Mapped[str] = mapped_column(String(100))
    original_task_id: Mapped[str] = mapped_column(String(255))
    task_id: Mapped[str] = mapped_column(String(255))
    slave_id: Mapped[str] = mapped_column(String(255))
    source: Mapped[str] = mapped_column(String(50))
    execution_type: Mapped[str] = mapped_column(String(20))
    # The original's text form of the items, e.g. "[0]" (JSON field `shardingItems`).
    sharding_item: Mapped[str] = mapped_column(String(100))
    state: Mapped[str] = mapped_column(String(30))
    message: Mapped[str | None] = mapped_column(String(4000), nullable=True)
    creation_time: Mapped[datetime] = mapped_column(DateTime)


class TaskResultStatistics(Base):
    """Columns shared by the MINUTE, HOUR and DAY tables."""

    __abstract__ = True

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    success_count: Mapped[int] = mapped_column(Integer)
    failed_count: Mapped[int] = mapped_column(Integer)
    statistic_interval: Mapped[str] = mapped_column(String(10))
    statistics_time: Mapped[datetime] = mapped_column(DateTime, index=True, unique=True)
    creation_time: Mapped[datetime] = mapped_column(DateTime)


class TaskResultStatisticsMinute(TaskResultStatistics):
    __tablename__ = "TASK_RESULT_STATISTICS_MINUTE"


class TaskResultStatisticsHour(TaskResultStatistics):
    __tablename__ = "TASK_RESULT_STATISTICS_HOUR"


class TaskResultStatisticsDay(TaskResultStatistics):
    __tablename__ = "TASK_RESULT_STATISTICS_DAY"


class RunningStatistics(Base):
    """Columns shared by TASK_RUNNING_STATISTICS and JOB_RUNNING_STATISTICS."""

    __abstract__ = True

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    running_count: Mapped[int] = mapped_column(Integer)
    statistics_time: Mapped[datetime] = mapped_column(DateTime, index=True, unique=True)
    creation_time: Mapped[datetime] = mapped_column(DateTime)


class TaskRunningStatistics(RunningStatistics):
    __tablename__ = "TASK_RUNNING_STATISTICS"


class JobRunningStatistics(RunningStatistics):
    __tablename__ = "JOB_RUNNING_STATISTICS"


class JobRegisterStatistics(Base):
    __tablename__ = "JOB_REGISTER_STATISTICS"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    registered_count: Mapped[int] = mapped_column(Integer)
    statistics_time: Mapped[datetime] = mapped_column(DateTime, index=True, unique=True)
    creation_time: Mapped[datetime] = mapped_column(DateTime)


class CountedResult(Base):
    """A task result from the ZooKeeper journal that is already in the TASK_RESULT tables.

    Not one of the original's tables: it makes moving results from ZooKeeper into the counters
    exactly-once. The journal entry's name is inserted in the same transaction that adds it to
    the counts; a leader that dies before deleting the entry from ZooKeeper leaves it for the
    next one, which finds the name here and only deletes it. Rows are pruned after two days.
    """

    __tablename__ = "STATISTICS_COUNTED_RESULT"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    statistics_time: Mapped[datetime] = mapped_column(DateTime)
    counted_time: Mapped[datetime] = mapped_column(DateTime, index=True)


class AuditRecord(Base):
    """One audit record (issue 26): a change made through the API, or a refused request.

    Not one of the original's tables. Append-only from the product's side: rows are inserted by
    the audit log (`audit.py`) and deleted only by its retention prune. `id` is made when the
    record is made (a retried batch that did commit is found by it); newest-first pages walk
    (`time`, `id`) backwards.
    """

    __tablename__ = "AUDIT_LOG"
    __table_args__ = (
        Index("AUDIT_TIME_INDEX", "time", "id"),
        Index("AUDIT_APP_TIME_INDEX", "app", "time"),
        Index("AUDIT_ACTOR_TIME_INDEX", "actor", "time"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    time: Mapped[datetime] = mapped_column(DateTime)
    actor: Mapped[str] = mapped_column(String(320))
    source: Mapped[str] = mapped_column(String(100))
    action: Mapped[str] = mapped_column(String(100))
    resource: Mapped[str] = mapped_column(String(320))
    app: Mapped[str | None] = mapped_column(String(320), nullable=True)
    job: Mapped[str | None] = mapped_column(String(320), nullable=True)
    outcome: Mapped[str] = mapped_column(String(10))
    status: Mapped[int] = mapped_column(Integer)
    request_id: Mapped[str] = mapped_column(String(64))
    term: Mapped[int] = mapped_column(BigInteger)
    # The fields before and after (JSON text, secrets masked); NULL for other records.
    changes: Mapped[str | None] = mapped_column(Text, nullable=True)
