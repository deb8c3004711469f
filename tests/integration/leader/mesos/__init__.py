"""Leader components that answer Mesos, on a real ZooKeeper."""
