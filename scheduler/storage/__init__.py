"""Layer 2, storage: ZooKeeper's layout, the door to kazoo, and every store over it.

`layout` (every path and node codec), `registry` (namespace, reads, writes and watches with
deadlines), `transactions` (the one transaction step `Op`, fenced writes, compare-and-set),
`acl` (digest ACLs and the namespace walk), `multi_read` (multiRead's wire format);
`config_store` (apps and jobs), `state` (ready, running, failover, disable), `term_stores` (the
stores of one term together, and the forgetting of a job's last fire), `fire_ledger` (fires
accounted with their pending runs), `result_journal` (task results waiting for the statistics
tables), `queue_cache` (the term's watch-driven view of the queues) with `queue_inbox` (its
watches and writers' notes between two syncs) and `queue_configs` (the jobs and apps it
knows), and `launch_book` (a launch round's bookkeeping in batched fenced transactions).
Stores import the registry and the models only; no thread of their own, no knowledge of Mesos
or of the API.
"""
