"""Layer 1, the models and rules: app and job configuration, cron, task ids, Mesos task states,
settings and the error tree.

Pure: nothing here talks to ZooKeeper, Mesos, a database or the network, starts a thread or reads
a file, and nothing here imports another layer of the scheduler. Every other layer may import it.
"""
