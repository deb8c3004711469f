"""The Mesos fetcher: `CommandInfo.uris` into a sandbox, with extraction and a per-agent cache.

Supported URIs are absolute file paths, `file://` and `http(s)://` URLs. `extract` (default true)
unpacks tar, tar.gz/tgz, tar.bz2/tbz2, tar.xz/txz and zip archives and gunzips plain `.gz`
files into the sandbox, keeping the downloaded file as Mesos does; `executable` makes the file
executable and skips extraction; `cache` reuses an earlier download of the same URI by the same
agent; `output_file` renames the download.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import shutil
import stat
import tarfile
import threading
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
_HTTP_TIMEOUT_S = 60.0


class FetchError(Exception):
    """A URI could not be fetched or extracted; the message names the URI."""


class Fetcher:
    """Fetches URIs for one agent; `cache_dir` holds its cached downloads."""

    def __init__(self, cache_dir: Path) -> None:
        self._cache_dir = cache_dir
        # One lock per cache entry, so two launches of the same app download it once.
        self._locks_guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def fetch_all(self, uris: Any, sandbox: Path) -> None:
        """Fetch every URI of a CommandInfo into `sandbox`. Blocks; raises FetchError."""
        for uri in uris or []:
            if not isinstance(uri, dict) or not isinstance(uri.get("value"), str):
                raise FetchError(f"malformed URI {uri!r}")
            self._fetch_one(uri, sandbox)

    def _fetch_one(self, uri: dict[str, Any], sandbox: Path) -> None:
        value: str = uri["value"]
        name = uri.get("output_file") or _basename(value)
        if not name or "/" in name or name in (".", ".."):
            raise FetchError(f"cannot derive a file name from URI {value!r}")
        target = sandbox / name
        try:
            if uri.get("cache"):
                cached = self._cached(value, name)
                shutil.copyfile(cached, target)
            else:
                _download(value, target)
            if uri.get("executable"):
                target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            elif uri.get("extract", True):
                _extract(target, sandbox)
        except FetchError:
            raise
        except (OSError, ValueError, tarfile.TarError, zipfile.BadZipFile) as exc:
            raise FetchError(f"Failed to fetch '{value}': {exc}") from exc
        log.info("fetcher: %s -> %s", value, target)

    def _cached(self, value: str, name: str) -> Path:
        key = hashlib.sha256(value.encode("utf-8")).hexdigest()[:32]
        with self._locks_guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            entry = self._cache_dir / key / name
            if not entry.exists():
                entry.parent.mkdir(parents=True, exist_ok=True)
                partial = entry.with_name(entry.name + ".partial")
                _download(value, partial)
                partial.rename(entry)
                log.info("fetcher: cached %s", value)
            return entry


def _basename(value: str) -> str:
    parsed = urllib.parse.urlparse(value)
    path = parsed.path if parsed.scheme else value
    return os.path.basename(path.rstrip("/"))


def _download(value: str, target: Path) -> None:
    parsed = urllib.parse.urlparse(value)
    if parsed.scheme in ("http", "https"):
        with (
            urllib.request.urlopen(value, timeout=_HTTP_TIMEOUT_S) as response,
            open(target, "wb") as out,
        ):
            shutil.copyfileobj(response, out)
        return
    if parsed.scheme == "file":
        source = Path(urllib.parse.unquote(parsed.path))
    elif parsed.scheme == "":
        source = Path(value)
        if not source.is_absolute():
            raise FetchError(f"Failed to fetch '{value}': relative paths are not supported")
    else:
        raise FetchError(f"Failed to fetch '{value}': unsupported scheme {parsed.scheme!r}")
    if not source.is_file():
        raise FetchError(f"Failed to fetch '{value}': no such file")
    shutil.copyfile(source, target)


def _extract(archive: Path, sandbox: Path) -> None:
    name = archive.name.lower()
    if name.endswith(_TAR_SUFFIXES):
        with tarfile.open(archive) as tar:
            tar.extractall(sandbox, filter="data")
    elif name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zipped:
            for info in zipped.infolist():
                path = Path(zipped.extract(info, sandbox))
                mode = (info.external_attr >> 16) & 0o777
                if mode and not info.is_dir():
                    path.chmod(mode)
    elif name.endswith(".gz"):
        with gzip.open(archive, "rb") as source, open(sandbox / archive.name[:-3], "wb") as out:
            shutil.copyfileobj(source, out)
    else:
        return
    log.info("fetcher: extracted %s", archive.name)
