"""Every relative link and `#anchor` in the repository's Markdown resolves (issue 25).

The README is the front door and the rest lives in docs/; sections move between files and files
between folders, so a link that named a README section or a moved file must follow it. Checked:
README.md, docs/*.md and every other Markdown file of the checkout (ARCHITECTURE.md, the folders'
READMEs), outside the virtualenv, build and data folders. Anchors are computed as GitHub renders
headings (lower case, punctuation dropped, spaces to hyphens, `-1`, `-2` for repeats); headings
and links inside fenced code blocks and inline code are not headings or links.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_NOT_OURS = {".venv", "build", "data", "node_modules"}


def _markdown_files() -> list[Path]:
    """README.md and docs/ first, then every other Markdown file of the checkout."""
    first = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    rest: list[Path] = []
    for top in sorted(ROOT.iterdir()):
        if top.name in _NOT_OURS or top.name.startswith("."):
            continue  # not walked at all: the virtualenv alone holds thousands of files
        found = [top] if top.suffix == ".md" else sorted(top.rglob("*.md")) if top.is_dir() else []
        rest += [
            path
            for path in found
            if path not in first
            and not any(
                part in _NOT_OURS or part.startswith(".") for part in path.relative_to(ROOT).parts
            )
        ]
    return first + rest


DOCS = _markdown_files()

_LINK = re.compile(r"(?<!!)\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_CODE_SPAN = re.compile(r"`+[^`]*`+")


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks (``` or ~~~), inline code removed."""
    lines: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        marker = line.lstrip()[:3]
        if fence is None and marker in ("```", "~~~"):
            fence = marker
            continue
        if fence is not None:
            if marker == fence:
                fence = None
            continue
        lines.append(_CODE_SPAN.sub("", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").replace("*", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub gives the headings of a Markdown file."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    fence: str | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        marker = line.lstrip()[:3]
        if marker in ("```", "~~~") and fence in (None, marker):
            fence = None if fence else marker
            continue
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line) if fence is None else None
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path: Path) -> list[str]:
    """The relative link targets of a Markdown file (not http:, https:, mailto:)."""
    # The lines joined again: a link's text may wrap onto the next line.
    prose = "\n".join(_prose(path.read_text(encoding="utf-8")))
    found = [m.group(1) for m in _LINK.finditer(prose)]
    return [t for t in found if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_the_docs_are_there() -> None:
    # README plus the folder it points at: a glob that found nothing would check nothing.
    names = {str(p.relative_to(ROOT)) for p in DOCS}
    assert names >= {"README.md", "ARCHITECTURE.md", "docs/api.md", "executor/README.md"}
    assert not any(name.startswith(".venv") for name in names)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    broken = []
    for target in links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(
                f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}"
            )
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(
                f"{target}: no heading with the anchor #{anchor} in {dest.relative_to(ROOT)}"
            )
    assert not broken, "\n".join(broken)


def test_slug_follows_github() -> None:
    # The forms the docs use: punctuation, numbers with dots, code in headings.
    assert (
        slug("REST API (Elastic-Job-Cloud 2.1.5 compatible)")
        == "rest-api-elastic-job-cloud-215-compatible"
    )
    assert slug("Host names: the allow-list") == "host-names-the-allow-list"
    assert slug("1. Write the jobs") == "1-write-the-jobs"
    assert slug("Command-line client: `ejcloud`") == "command-line-client-ejcloud"


def test_a_missing_anchor_is_found(tmp_path: Path) -> None:
    # The checker itself fails on what it is meant to catch, and skips code.
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n[ok](#title) [bad](#nowhere) `[code](#nowhere2)`\n```\n[x](#fenced)\n```\n"
        "A link whose text [wraps onto\nthe next line](#wrapped).\n"
    )
    assert links(page) == ["#title", "#nowhere", "#wrapped"]
    assert anchors(page) == {"title"}
