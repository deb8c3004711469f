"""What a handler tells the audit log about the request it serves (issue 26).

The audit log (`api/audit.py` installs it) writes one record per change and per refused request
after the handler ran; a handler that changes configuration calls `note_change` with the
resource and its fields before and after (secrets are masked by the audit log, not here), and a
handler whose resource is not plain from its URL calls `note_resource`.
"""

from __future__ import annotations

from typing import Any

from flask import g


def note_resource(resource: str, app: str | None = None) -> None:
    """The resource the request acts on (`job/NAME`, `app/NAME`, `user/NAME`, `grant/ID`,
    `token/ID`, `task/ID`, `cluster`) and the app it belongs to, if any."""
    g.audit_resource = resource[:300]
    if app is not None:
        g.audit_app = app[:300]


def note_change(
    resource: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    app: str | None = None,
) -> None:
    """A configuration change: the resource's fields before (None: created) and after (None:
    deleted)."""
    note_resource(resource, app)
    g.audit_changes = {"before": before, "after": after}
