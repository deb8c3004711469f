"""Layer 2, storage: the ZooKeeper registry and every store over it.

`registry` (namespace, ACLs, deadlines, fenced writes), `config_store` (apps and jobs), `state`
(ready, running, failover, disable), `term_stores` (the stores of one term together, and the
forgetting of a job's last fire), `result_journal` (task results waiting for the statistics
tables), `queue_cache` (the launcher's watch-driven view of the queues) and `launch_book` (a
launch round's bookkeeping in batched fenced transactions). Stores import the registry and the
models only; no thread of their own, no knowledge of Mesos or of the API.
"""
