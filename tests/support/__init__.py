"""Test harness shared by the suites: real servers, real processes, waiting helpers."""
