"""The Mesos fetcher: `CommandInfo.uris` into a sandbox, with extraction and a per-agent cache.

Supported URIs are absolute file paths, `file://` and `http(s)://` URLs. `extract` (default true)
unpacks tar, tar.gz/tgz, tar.bz2/tbz2, tar.xz/txz and zip archives and gunzips plain `.gz`
files into the sandbox, keeping the downloaded file as Mesos does; `executable` makes the file
executable and skips extraction; `cache` reuses an earlier download of the same URI by the same
agent; `output_file` renames the download.

What an archive unpacks to is bounded (`max_extracted_bytes`, 1 GiB unless the stand-in is told
otherwise): a tar's members are summed from their headers before anything is written; a zip's
members and a gzip file are copied through a counter that stops at the bound (their headers can
lie). Over the bound the fetch fails, and with it the launch: TASK_FAILED with
REASON_CONTAINER_LAUNCH_FAILED and a message naming the URI and the bound. A real Mesos fetcher
has no such bound (the agent's disk isolation would stop the container instead); here a small
archive that unpacks to gigabytes would fill the machine the tests run on (issue 23).
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
from typing import IO, Any, Protocol

log = logging.getLogger(__name__)

_TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
_HTTP_TIMEOUT_S = 60.0
DEFAULT_MAX_EXTRACTED_BYTES = 1 << 30
_CHUNK = 1 << 16


class FetchError(Exception):
    """A URI could not be fetched or extracted; the message names the URI."""


class Fetcher:
    """Fetches URIs for one agent; `cache_dir` holds its cached downloads."""

    def __init__(
        self, cache_dir: Path, max_extracted_bytes: int = DEFAULT_MAX_EXTRACTED_BYTES
    ) -> None:
        self._cache_dir = cache_dir
        self._max_extracted_bytes = max_extracted_bytes
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
                _extract(target, sandbox, self._max_extracted_bytes)
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


class _TooBig(Exception):
    pass


class _Reader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def _extract(archive: Path, sandbox: Path, max_bytes: int) -> None:
    """Unpack `archive` into `sandbox`, at most `max_bytes` of file data. Raises FetchError
    (over the bound), OSError, tarfile.TarError, zipfile.BadZipFile."""
    name = archive.name.lower()
    try:
        if name.endswith(_TAR_SUFFIXES):
            with tarfile.open(archive) as tar:
                members = tar.getmembers()
                if sum(m.size for m in members if m.isfile()) > max_bytes:
                    raise _TooBig
                tar.extractall(sandbox, members=members, filter="data")
        elif name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zipped:
                left = max_bytes
                for info in zipped.infolist():
                    path = Path(zipped.extract(info, sandbox)) if info.is_dir() else None
                    if path is None:
                        target = _zip_target(sandbox, info.filename)
                        target.parent.mkdir(parents=True, exist_ok=True)
                        with zipped.open(info) as source, open(target, "wb") as out:
                            left = _copy_bounded(source, out, left, target)
                        path = target
                    mode = (info.external_attr >> 16) & 0o777
                    if mode and not info.is_dir():
                        path.chmod(mode)
        elif name.endswith(".gz"):
            target = sandbox / archive.name[:-3]
            with gzip.open(archive, "rb") as source, open(target, "wb") as out:
                _copy_bounded(source, out, max_bytes, target)
        else:
            return
    except _TooBig:
        raise FetchError(
            f"Failed to extract '{archive.name}': it unpacks to more than {max_bytes} bytes "
            "(the stand-in's max_extracted_bytes)"
        ) from None
    log.info("fetcher: extracted %s", archive.name)


def _zip_target(sandbox: Path, filename: str) -> Path:
    """Where a zip member goes: inside `sandbox`, as `ZipFile.extract` would place it (absolute
    paths and `..` dropped). Raises FetchError for a name that would still leave it."""
    parts = [p for p in filename.replace("\\", "/").split("/") if p not in ("", ".", "..")]
    target = sandbox.joinpath(*parts) if parts else sandbox
    if not parts or not target.resolve().is_relative_to(sandbox.resolve()):
        raise FetchError(f"Failed to extract zip member {filename!r}: outside the sandbox")
    return target


def _copy_bounded(source: _Reader, out: IO[bytes], left: int, target: Path) -> int:
    """Copy until end of file; returns the bytes still allowed. Raises _TooBig (removing the
    partial `target`) once more than `left` bytes came."""
    while chunk := source.read(_CHUNK):
        left -= len(chunk)
        if left < 0:
            out.close()
            target.unlink(missing_ok=True)
            raise _TooBig
        out.write(chunk)
    return left
