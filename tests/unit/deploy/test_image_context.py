"""What the container build takes from the locks, and the Containerfile's stages (no podman)."""

from __future__ import annotations

import re

from deploy.image import build

# The image's PostgreSQL driver comes from the whole lock (requirements-run.lock leaves it out).
EXTRA = ("psycopg", "psycopg-binary")


def _names(text: str) -> list[str]:
    return re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", text, re.M)


def test_the_extra_entries_are_the_locks_own_with_every_hash() -> None:
    picked = build._lock_entries(build.LOCK, EXTRA)
    assert sorted(_names(picked)) == sorted(EXTRA)
    lock = build.LOCK.read_text()
    for name in EXTRA:
        block = re.search(rf"^{re.escape(name)}==.*?(?=^\S)", lock, re.M | re.S)
        assert block is not None
        hashes = re.findall(r"--hash=sha256:[0-9a-f]{64}", block.group(0))
        assert hashes and all(h in picked for h in hashes)
    assert "# via" not in picked


def test_names_are_matched_whole_and_normalised() -> None:
    assert _names(build._lock_entries(build.LOCK, ("PSYCOPG",))) == ["psycopg"]
    assert build._lock_entries(build.LOCK, ("psyco",)).strip() == ""


def test_the_containerfile_has_each_target_a_non_root_user_and_the_default_base() -> None:
    text = build.CONTAINERFILE.read_text()
    stages = re.findall(r"^FROM \S+ AS (\S+)$", text, re.M)
    assert set(build.TARGETS) <= set(stages)
    assert f"ARG BASE={build.DEFAULT_BASE}" in text
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and all(not u.startswith(("0", "root")) for u in users)
    assert re.search(r"^HEALTHCHECK .*healthcheck\.py", text, re.M | re.S)
    # Every pip install in the image reads no index.
    installs = re.findall(r"^(?!#).*\bpip install\b.*$", text, re.M)
    assert installs and all("--no-index" in i for i in installs)
