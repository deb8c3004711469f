"""One HTTP exchange through urllib, whose error answers are returned and always closed.

urllib raises an answer outside 2xx as an `HTTPError` that still holds the answer's connection.
Read without a close, that socket outlives the request whenever the read raises (a timeout under
load) or stops short of the end, and is left to the garbage collector: its ResourceWarning then
fails whichever test the collection lands in, since the suite runs with `filterwarnings = error`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from email.message import Message
from typing import Any


@dataclass(frozen=True)
class Answer:
    """What the server answered, whatever its status. `headers` looks names up ignoring case."""

    status: int
    headers: Message
    body: bytes

    def json(self) -> Any:
        """The body decoded as JSON, None when empty; raises ValueError when it is not JSON."""
        return json.loads(self.body) if self.body else None


class _KeepRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx is the answer (a standby's 307, say): returned, not followed with the credentials."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_NOT_FOLLOWING = urllib.request.build_opener(_KeepRedirects)


def exchange(
    method: str,
    url: str,
    *,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 10.0,
    follow_redirects: bool = True,
) -> Answer:
    """Send one request and read the whole answer, 2xx or not; blocks up to about `timeout_s`
    per socket operation.

    Redirects are followed as urllib does by default, unless `follow_redirects` is False.
    Raises OSError (`urllib.error.URLError`, `TimeoutError`, ...) when no whole answer arrives;
    the connection is closed either way.
    """
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    opener = urllib.request.urlopen if follow_redirects else _NOT_FOLLOWING.open
    try:
        with opener(request, timeout=timeout_s) as resp:
            return Answer(resp.status, resp.headers, resp.read())
    except urllib.error.HTTPError as exc:
        try:
            return Answer(exc.code, exc.headers, exc.read())
        finally:
            exc.close()
