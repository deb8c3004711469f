"""A local Mesos stand-in: one master and N agents in one process, for tests and the quick start.

It speaks the Mesos v1 scheduler and executor HTTP APIs closely enough for pymesos 0.3.15's
`MesosSchedulerDriver` and `MesosExecutorDriver` to work unchanged, runs executors and command
tasks as local processes in sandboxes under
`<work_dir>/slaves/<agent>/frameworks/<fw>/executors/<ex>/runs/<c>`, offers resources, tracks
task states, and answers reconciliation and `/master/state`. It is never kinder than real Mesos:
what a real master does not report, it does not report either.

Master port (`LocalMesos.address`), all on 127.0.0.1:
    GET  /version, /health, /master/state (/state), /master/state.json
    POST /api/v1/scheduler (/master/api/v1/scheduler)   the scheduler API
    POST /api/v1 (/api/v1/operator, /master/api/v1)       GET_STATE, GET_TASKS, GET_FRAMEWORKS,
                                                          GET_AGENTS, GET_EXECUTORS, GET_HEALTH,
                                                          GET_VERSION, GET_FLAGS, GET_MASTER
    POST /api/v1/executor                                 executor API, routed to the agent that
                                                          runs the executor
Each agent has its own port (`MESOS_AGENT_ENDPOINT`, `slave(1)@127.0.0.1:PORT` in /state):
    GET  /state (/slave(1)/state), /version, /health; POST /api/v1/executor
    GET  /files/read?path=&offset=&length=, /files/browse?path=   the sandboxes' files, as a
                                                          Mesos agent serves them (files.py)
Sandbox directories are in the agent's /state only (as on Mesos; the master's shows none), and
GET_TASKS keeps each status whole but for its data.

Executors and command tasks get only the environment a Mesos agent gives them: the operator's
`executor_environment` (`--executor-environment-variables`, Mesos's
`--executor_environment_variables`), the MESOS_* variables, LIBPROCESS_PORT, the host's default
PATH unless one is set, and the command's own variables; never this process's environment. An
archive the fetcher extracts may unpack to at most `max_extracted_bytes`
(`--max-extracted-bytes`, 1 GiB), else the launch fails (REASON_CONTAINER_LAUNCH_FAILED).

Fault injection, on the master port; JSON in, JSON out; ids may be strings or {"value": ...}:
    POST /faults/remove_agent  {"agent_id": A}
        -> 200 {"removed": A}; 404 if unknown. Offers on A are rescinded, every task the
           master still holds there (running, or ended but its end not yet acknowledged, as
           Mesos holds it) becomes TASK_LOST (TASK_GONE for PARTITION_AWARE frameworks, reason
           REASON_AGENT_REMOVED, no uuid), every framework gets FAILURE{agent_id}, its
           processes are SIGKILLed and its unacknowledged updates die with it.
    POST /faults/kill_executor {"framework_id": F, "executor_id": E}
        -> 200 {"killed": E}; 404 if no such live executor. SIGKILLs the executor's process
           group; its unfinished tasks then get TASK_FAILED/REASON_EXECUTOR_TERMINATED and the
           framework a FAILURE with the wait status (9). Command tasks: executor_id = task id.
    POST /faults/add_agent     {"resources": "cpus:2;mem:1024"} (optional)
        -> 200 {"agent_id": A, "endpoint": "127.0.0.1:PORT"}
    POST /faults/master_failover {"agent_reregister_delay_s": 1.0} (optional, default 0)
        -> 200 {"master_id": NEW, "previous_master_id": OLD}; 400 for a delay outside
           [0, 600]. A new master is elected on the same address: every subscription stream
           closes (frameworks re-subscribe with their ids), outstanding offers are void, the
           agents re-register with their tasks after the delay and then resend every update
           not acknowledged; until then their tasks get no reconciliation answer. With --zk,
           the master's node is replaced by the new master's. `failover.py` says what a real
           failover does that this one does not.
The same faults are methods of `LocalMesos`: remove_agent, kill_executor, add_agent,
fail_over_master(agent_reregister_delay_s); `LocalMesos.master_listeners` are called with the
new MasterInfo after each failover.
"""

from __future__ import annotations

from .cluster import DEFAULT_RESOURCES, LocalMesos
from .resources import Resources

__all__ = ["DEFAULT_RESOURCES", "LocalMesos", "Resources"]
