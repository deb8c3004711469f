"""Layer 3, the leader's components: each runs for one leadership term over storage and models.

The rooms: `producer` (cron fires into pending runs), `config_listener` (follows the
configuration in ZooKeeper), `mesos/` (driver, launcher with its pure placement, status
handling, reconciliation, actions) and `statistics/` (event trace and counters). A room imports
the shared `lifecycle` base, storage and models, never another room: what one needs of another
is handed in when a term's components are built (a callable, a listener, or a small protocol).
"""
