"""What can go wrong in a command, and the exit code each failure gives scripts.

| code | meaning |
|---|---|
| 0 | done |
| 1 | the server refused the request or answered an error (400, 415, 429, 5xx, ...) |
| 2 | usage: bad arguments, options, spec file or config file (nothing was sent) |
| 3 | cannot connect: no server answered, or none knows an acting leader |
| 4 | not found: unknown app, job or task (404) |
| 5 | not allowed: missing or wrong credentials (401), or a read-only user writing (403) |
| 6 | conflict: already exists, disabled, or otherwise in the wrong state (409) |
| 7 | nothing to act on: `job kill` of a job with no running task (no kill was sent) |
"""

from __future__ import annotations

from typing import Any

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_CONNECT = 3
EXIT_NOT_FOUND = 4
EXIT_AUTH = 5
EXIT_CONFLICT = 6
EXIT_NOTHING_RUNNING = 7

_EXIT_BY_STATUS = {401: EXIT_AUTH, 403: EXIT_AUTH, 404: EXIT_NOT_FOUND, 409: EXIT_CONFLICT}


class CliError(Exception):
    """A failure reported to the user as one message (never a traceback) and an exit code."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def details(self) -> list[str]:
        """Further lines printed under the message."""
        return []

    def to_json(self) -> dict[str, Any]:
        """The failure as `--json` prints it on stderr."""
        return {"error": self.message, "type": type(self).__name__, "exitCode": self.exit_code}


class UsageProblem(CliError):
    """Bad input on this side: nothing was sent."""

    exit_code = EXIT_USAGE


class ConnectFailed(CliError):
    """No server could be reached, or none of them knows an acting leader."""

    exit_code = EXIT_CONNECT


class NothingRunning(CliError):
    """The request was accepted but found nothing to act on (a kill with no task running)."""

    exit_code = EXIT_NOTHING_RUNNING


class ApiError(CliError):
    """An error answer of the REST API: its status, and the `error`, `type` and `fields` of
    its JSON body (`fields` maps a request field to its problem)."""

    def __init__(
        self, status: int, message: str, kind: str = "", fields: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.fields = dict(fields or {})
        self.exit_code = _EXIT_BY_STATUS.get(status, EXIT_ERROR)

    def details(self) -> list[str]:
        """A line for each bad field that the message does not already name with its problem
        (the API's message of a field check lists every field it found, `invalid job: cron:
        ...; shardingTotalCount: ...`, or names the one, `invalid cron 'x': ...`), so that no
        problem is printed twice."""
        return [
            f"{name}: {problem}"
            for name, problem in self.fields.items()
            if not (name in self.message and problem in self.message)
        ]

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "error": self.message,
            "type": self.kind or "HttpError",
            "status": self.status,
            "exitCode": self.exit_code,
        }
        if self.fields:
            body["fields"] = self.fields
        return body
