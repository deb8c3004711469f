"""The event trace database URL (`event_trace_rdb_url`): how its text becomes a SQLAlchemy URL,
and why a text cannot be one.

Rules only: parsing the URL and finding its dialect and driver, never a connection. SQLAlchemy is
imported when a URL is first looked at, so that the settings, which check the URL, stay cheap to
import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

__all__ = ["resolve_url", "url_problem"]

# The original's JDBC URLs (`jdbc:mysql://host:3306/db`) and the drivers that replace them.
_JDBC = {
    "jdbc:mysql://": "mysql+pymysql://",
    "jdbc:mariadb://": "mysql+pymysql://",
    "jdbc:postgresql://": "postgresql+psycopg://",
}


def resolve_url(text: str, username: str = "", password: str = "") -> URL:
    """A SQLAlchemy URL from `event_trace_rdb_url` text: a SQLAlchemy URL, or one of the
    original's JDBC URLs; `username`/`password` fill in what the URL does not say.

    Raises ValueError naming the problem (unknown JDBC database, unparsable URL).
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    text = text.strip()
    if text.lower().startswith("jdbc:"):
        prefix = next((p for p in _JDBC if text.lower().startswith(p)), None)
        if prefix is None:
            raise ValueError(
                "unsupported JDBC URL (jdbc:mysql, jdbc:mariadb and jdbc:postgresql are "
                "translated; give a SQLAlchemy URL for anything else)"
            )
        text = _JDBC[prefix] + text[len(prefix) :].split("?", 1)[0]
    try:
        url = make_url(text)
    except ArgumentError as exc:
        raise ValueError(f"not a database URL: {exc}") from None
    if username and url.username is None:
        url = url.set(username=username, password=password or None)
    return url


def url_problem(text: str) -> str | None:
    """Why `text` cannot be the trace database URL (None if it can, and for "" / "none")."""
    from sqlalchemy.exc import NoSuchModuleError

    if not text.strip() or text.strip().lower() == "none":
        return None
    try:
        url = resolve_url(text)
        dialect = url.get_dialect()
    except ValueError as exc:
        return str(exc)
    except NoSuchModuleError:
        return f"no SQLAlchemy dialect for {text.split(':', 1)[0]!r}"
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        return (
            f"the {url.get_backend_name()} driver is not installed ({exc.name}); "
            "install the extra: pip install 'ejcloud[postgresql]' or 'ejcloud[mysql]'"
        )
    return None
