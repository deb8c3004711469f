"""Build the leader's Flask app for one term."""

from __future__ import annotations

from flask import Flask

from scheduler.api.auth import install_auth
from scheduler.api.errors import install_error_handlers
from scheduler.ha.term import LeaderContext


def create_app(ctx: LeaderContext | None = None) -> Flask:
    """The `/api` application of a leader (blueprints register here as they are built)."""
    app = Flask("scheduler.api")
    app.config["PROPAGATE_EXCEPTIONS"] = False
    app.json.sort_keys = False  # type: ignore[attr-defined]
    install_error_handlers(app)
    if ctx is not None:
        install_auth(app, ctx.settings)
    app.extensions["ejc_context"] = ctx
    return app
