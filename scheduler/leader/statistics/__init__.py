"""Event trace and statistics store: tables, migrations, the trace writer, result counters and
the queries behind `/api/job/events/*` and `/api/job/statistics/*`, with the tables, columns and
JSON of Elastic-Job-Cloud 2.1.5's event trace and StatisticManager.
"""

from __future__ import annotations

from scheduler.leader.statistics.counters import ResultCounters as ResultCounters
from scheduler.leader.statistics.counters import StatisticInterval as StatisticInterval
from scheduler.leader.statistics.database import DEFAULT_URL as DEFAULT_URL
from scheduler.leader.statistics.database import create_trace_engine as create_trace_engine
from scheduler.leader.statistics.database import upgrade_to_head as upgrade_to_head
from scheduler.leader.statistics.sampler import Sampler as Sampler
from scheduler.leader.statistics.writer import TraceWriter as TraceWriter
from scheduler.storage.result_journal import ResultJournal as ResultJournal
