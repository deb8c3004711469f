"""Errors of the Marathon deploy command; each `message` is one line meant for the user."""

from __future__ import annotations


class DeployError(Exception):
    """Root of the deploy command's errors."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidOptions(DeployError):
    """The command line asks for something that cannot work (e.g. one instance, localhost)."""


class MarathonUnreachable(DeployError):
    """Marathon did not answer (connection refused, DNS, timeout)."""


class DefinitionRejected(DeployError):
    """Marathon refused the app definition (422) or the request (another 4xx/5xx)."""


class DeploymentTimeout(DeployError):
    """The deployment did not finish, or the instances did not become healthy, in time."""


class NoLeader(DeployError):
    """Every instance is healthy but none reports being the leader."""
