"""A job's failure webhook in the API: judged when a job is written, hidden from readers.

- `refuse_internal_webhook`: a `notifyWebhookUrl` the leader may not POST to is a 400 before
  anything is written. The URL's host is normalised and judged (`model/net_targets.py`), then,
  when it is a name, resolved and every address judged; a name that does not resolve (yet) is
  accepted, since the leader judges the target again before every POST.
- `job_json`: a job as an answer shows it. The webhook's path and query often hold a token, so
  a reader (a viewer or operator of the job's app, such as the settings' guest) sees only
  `scheme://host[:port]/...`; an editor of the app, who may set it anyway, sees it whole.

The allowed targets come from the app's `ejc_webhook_targets` extension (the
`notify_webhook_allowed_targets` setting), read once per distinct value.
"""

from __future__ import annotations

import functools
import logging
from urllib.parse import urlsplit

from flask import current_app

from scheduler.api.access_control import current_rights
from scheduler.leader.outbound import resolve_target
from scheduler.model.access.roles import Role
from scheduler.model.config.job import JobConfig
from scheduler.model.errors import InvalidRequest
from scheduler.model.net_targets import AllowList, TargetRefused

__all__ = ["WEBHOOK_TARGETS", "hidden_webhook_url", "job_json", "refuse_internal_webhook"]

log = logging.getLogger(__name__)

WEBHOOK_TARGETS = "ejc_webhook_targets"
"""The Flask extension that holds `notify_webhook_allowed_targets` (absent: none allowed)."""


@functools.lru_cache(maxsize=8)
def _allow_list(text: str) -> AllowList:
    return AllowList.parse(text)


def refuse_internal_webhook(job: JobConfig) -> None:
    """Raise InvalidRequest (400, the field named) when the leader may not POST to the job's
    `notifyWebhookUrl`. Resolves a host name (blocks for the resolver)."""
    url = job.notify_webhook_url
    if not url:
        return
    allowed = _allow_list(str(current_app.extensions.get(WEBHOOK_TARGETS, "")))
    try:
        resolve_target(url, allowed)
    except TargetRefused as exc:
        why = exc.message
    except OSError as exc:  # does not resolve now: judged again at every POST
        log.info("api: job %s: webhook host does not resolve (%s)", job.job_name, exc)
        return
    else:
        return
    raise InvalidRequest(f"invalid job: notifyWebhookUrl: {why}", fields={"notifyWebhookUrl": why})


def hidden_webhook_url(url: str) -> str:
    """`scheme://host[:port]/...`: what a reader may see of a webhook URL."""
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/..."
    except ValueError:
        return "(hidden)"


def job_json(job: JobConfig) -> dict[str, object]:
    """The job's JSON for the requester: its webhook hidden unless an editor of its app asks."""
    shown = job.to_json()
    url = shown.get("notifyWebhookUrl")
    if isinstance(url, str) and not current_rights().may(Role.EDITOR, job.app_name):
        shown["notifyWebhookUrl"] = hidden_webhook_url(url)
    return shown
