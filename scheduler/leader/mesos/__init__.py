"""The leader's Mesos side: the driver, offers and placement, TaskInfo building, status updates,
reconciliation."""
