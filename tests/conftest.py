"""Session-wide test configuration (fixtures live in tests/support and the per-suite conftests)."""
