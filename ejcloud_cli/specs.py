"""App and job bodies from a JSON or YAML file (`-f FILE`, `-` for stdin) and from flags.

A file holds one object with the API's own field names (`jobName`, `cron`, ...), exactly what
`ejcloud job show NAME --json` prints. `--set FIELD=VALUE` sets any field (VALUE is read as JSON
when it is valid JSON, else taken as a string), and the named flags (`--cron`, ...) set theirs;
when several give the same field, the named flag wins over `--set`, which wins over the file.
Nothing here checks the fields themselves: the server does, and names every bad one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import yaml

from ejcloud_cli.errors import UsageProblem

MAX_SPEC_BYTES = 1024 * 1024


def read_bounded(source: str, stdin: IO[bytes], limit: int) -> bytes:
    """The bytes of the file `source` (`-`: `stdin`), at most `limit` of them; UsageProblem
    naming the file when it cannot be read or is larger."""
    name = "stdin" if source == "-" else source
    try:
        if source == "-":
            raw = stdin.read(limit + 1)
        else:
            with Path(source).open("rb") as handle:
                raw = handle.read(limit + 1)
    except OSError as exc:
        raise UsageProblem(f"cannot read {name}: {exc.strerror or exc}") from exc
    if len(raw) > limit:
        raise UsageProblem(f"{name} is larger than {limit} bytes")
    return raw


def load_spec(source: str, stdin: IO[bytes]) -> dict[str, Any]:
    """The object in the file `source` (`-`: `stdin`), JSON or YAML.

    JSON when the name ends in `.json` or the text starts with `{`, else YAML (a superset of
    JSON). Raises UsageProblem naming the file for anything else than one object of JSON
    values (a YAML date, say, must be quoted).
    """
    name = "stdin" if source == "-" else source
    raw = read_bounded(source, stdin, MAX_SPEC_BYTES)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageProblem(f"{name} is not UTF-8 text") from exc
    data: Any
    if source.lower().endswith(".json") or text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UsageProblem(f"{name} is not valid JSON: {exc}") from exc
    else:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise UsageProblem(f"{name} is not valid YAML: {_yaml_problem(exc)}") from exc
    if not isinstance(data, dict):
        raise UsageProblem(f"{name} must hold one object (field: value), not {_kind(data)}")
    _check_json_values(data, name, "")
    return data


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return str(problem)


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return type(value).__name__


def _check_json_values(value: Any, name: str, where: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise UsageProblem(f"{name}: field names must be strings, not {key!r}")
            _check_json_values(item, name, f"{where}.{key}" if where else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_json_values(item, name, f"{where}[{index}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise UsageProblem(f"{name}: {where} is not a finite number")
    elif value is not None and not isinstance(value, str | int | float | bool):
        raise UsageProblem(
            f"{name}: {where} is a YAML {type(value).__name__}, not a JSON value (quote it)"
        )


def parse_sets(items: Iterable[str]) -> dict[str, Any]:
    """`--set FIELD=VALUE` items as fields: VALUE as JSON when it parses, else the string."""
    found: dict[str, Any] = {}
    for item in items:
        field, sep, raw = item.partition("=")
        field = field.strip()
        if not sep or not field:
            raise UsageProblem(f"--set takes FIELD=VALUE, not {item!r}")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        if isinstance(value, float) and not math.isfinite(value):
            value = raw
        found[field] = value
    return found


def build_body(
    name_field: str,
    name: str | None,
    spec: Mapping[str, Any] | None,
    sets: Mapping[str, Any],
    flags: Mapping[str, Any],
) -> dict[str, Any]:
    """The request body: `spec`, then `sets`, then the flags that were given (not None), and
    the name under `name_field` when given.

    Raises UsageProblem when `name` differs from the name in the file or `--set`, or when no
    name is given anywhere.
    """
    body: dict[str, Any] = dict(spec or {})
    body.update(sets)
    body.update({k: v for k, v in flags.items() if v is not None})
    if name is not None:
        given = body.get(name_field)
        if given is not None and given != name:
            raise UsageProblem(
                f"the name {name!r} differs from {name_field} {given!r} in the file or --set"
            )
        body[name_field] = name
    if not isinstance(body.get(name_field), str) or not body[name_field]:
        raise UsageProblem(f"give the name as an argument or as {name_field} in the file")
    return body
