"""`ejcloud`: the command-line client of the scheduler's public REST API."""
