"""The leader's REST API (`/api/*`): a Flask app built fresh for each leadership term."""

from __future__ import annotations

from scheduler.api.app import create_app

__all__ = ["create_app"]
