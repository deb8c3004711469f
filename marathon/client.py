"""A small client of Marathon's REST API (`/v2/apps`, `/v2/deployments`) over urllib."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from marathon.errors import DefinitionRejected, DeployError, MarathonUnreachable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Response:
    status: int
    body: Any


def _rejection(what: str, response: Response) -> DefinitionRejected:
    body = response.body if isinstance(response.body, dict) else {}
    message = str(body.get("message") or response.body or "no message")
    parts = [f"Marathon rejected {what} ({response.status}): {message}"]
    for detail in body.get("details") or []:
        if isinstance(detail, dict):
            errors = detail.get("errors") or []
            joined = ", ".join(str(e) for e in errors) if isinstance(errors, list) else errors
            parts.append(f"{detail.get('path', '?')}: {joined}")
    return DefinitionRejected("; ".join(parts))


@dataclass(frozen=True)
class MarathonClient:
    """Calls Marathon at `url`; every method blocks for at most `request_timeout_s`.

    Raises MarathonUnreachable when Marathon does not answer and DefinitionRejected when it
    answers with an unexpected status.
    """

    url: str
    request_timeout_s: float = 10.0

    def _call(self, method: str, path: str, body: Any = None) -> Response:
        url = self.url.rstrip("/") + path
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        log.debug("marathon: %s %s", method, url)
        try:
            with urllib.request.urlopen(request, timeout=self.request_timeout_s) as answer:
                status, raw = answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise MarathonUnreachable(f"cannot reach Marathon at {self.url}: {reason}") from exc
        try:
            parsed: Any = json.loads(raw) if raw.strip() else None
        except ValueError:
            parsed = raw.decode("utf-8", "replace").strip()[:200]
        return Response(status, parsed)

    def create_or_update(self, app: dict[str, Any]) -> str | None:
        """POST the app; if it exists (409) PUT it instead. Returns the deployment id if any."""
        app_id = str(app["id"])
        created = self._call("POST", "/v2/apps", app)
        if created.status == 201:
            body = created.body if isinstance(created.body, dict) else {}
            deployments = body.get("deployments") or []
            log.info("app %s: created", app_id)
            return str(deployments[0]["id"]) if deployments else None
        if created.status != 409:
            raise _rejection(f"app {app_id}", created)
        updated = self._call("PUT", "/v2/apps" + urllib.parse.quote(app_id), app)
        if updated.status not in (200, 201):
            raise _rejection(f"the update of app {app_id}", updated)
        log.info("app %s: updated", app_id)
        body = updated.body if isinstance(updated.body, dict) else {}
        deployment = body.get("deploymentId")
        return str(deployment) if deployment else None

    def deployments_of(self, app_id: str) -> list[str]:
        """Ids of the running deployments that affect `app_id`."""
        answer = self._call("GET", "/v2/deployments")
        if answer.status != 200 or not isinstance(answer.body, list):
            raise _rejection("GET /v2/deployments", answer)
        return [
            str(d.get("id"))
            for d in answer.body
            if isinstance(d, dict) and app_id in (d.get("affectedApps") or [])
        ]

    def app(self, app_id: str) -> dict[str, Any]:
        """The app as Marathon reports it (with `tasks`); raises DeployError if it is missing."""
        answer = self._call("GET", "/v2/apps" + urllib.parse.quote(app_id))
        if answer.status == 404:
            message = answer.body.get("message") if isinstance(answer.body, dict) else None
            raise DeployError(f"Marathon: {message or f'app {app_id} does not exist'}")
        if answer.status != 200 or not isinstance(answer.body, dict):
            raise _rejection(f"GET app {app_id}", answer)
        app = answer.body.get("app")
        if not isinstance(app, dict):
            raise DeployError(f"Marathon answered GET app {app_id} without an app")
        return app
