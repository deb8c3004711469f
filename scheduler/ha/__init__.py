"""High availability: the election, leadership terms and their fence, the framework id."""
