"""Scheduling state in ZooKeeper: ready queue, running tasks, failover queue, disabled apps/jobs.

Paths (under the namespace, the same as Elastic-Job-Cloud 2.1.5's):
`/state/ready/{job}` (pending run count), `/state/running/{job}/{taskId}` (task JSON),
`/state/failover/{job}/{job@-@item}` (original task id), `/state/disable/app|job/{name}`.
"""
