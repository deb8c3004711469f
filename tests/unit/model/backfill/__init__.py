"""Backfill model tests (issue 28)."""
