"""Job code the executor tests package and run. `jobParameter` is a directory for markers."""
