"""Wire helpers shared by the app and job models.

- `FieldReader` reads one JSON object leniently, as the original's Gson adapters did (numbers and
  booleans may arrive as strings, null means absent), and collects a problem per bad field instead
  of stopping at the first. Strict readers (new API input) also refuse unknown keys and strings
  that are not valid Unicode (a lone surrogate from a `\\ud800` escape cannot be encoded as UTF-8,
  and kazoo's connection thread dies on one), hold NUL, or exceed their field's size bound.
- `parse_json` decodes UTF-8 JSON with a nesting bound, so a 100,000-level document is a 400
  instead of a RecursionError.
- `gson_dumps` writes JSON byte-for-byte as Gson 2.6 does with Elastic-Job's `GsonFactory`: no
  spaces, HTML-safe escapes (`=` is written `\\u003d`), doubles as Java's `Double.toString`.
  Stored configs therefore look exactly like the ones Elastic-Job-Cloud 2.1.5 writes.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Collection, Mapping
from decimal import Decimal
from typing import TypeVar

import orjson

from scheduler.model.errors import InvalidRequest

JAVA_INT_MAX = 2**31 - 1
NAME_MAX_LENGTH = 100
RESERVED_NAMES = frozenset({"list"})  # `GET /api/app/list` would shadow an app named "list"

# Bounds of new API input (strict reads), in UTF-8 bytes per string field. Every string field
# not given its own bound gets TEXT_MAX_BYTES. A whole stored app or job (as Gson-escaped JSON,
# where `=` alone takes 6 bytes) is at most STORED_MAX_BYTES: far below ZooKeeper's 1 MB node
# limit, past which the server drops the connection instead of answering.
KIB = 1024
TEXT_MAX_BYTES = 4 * KIB
URL_MAX_BYTES = 4 * KIB
SCRIPT_MAX_BYTES = 16 * KIB
DESCRIPTION_MAX_BYTES = 16 * KIB
PARAMETER_MAX_BYTES = 64 * KIB
CRON_MAX_BYTES = 256
SHORT_TEXT_MAX_BYTES = 255
STORED_MAX_BYTES = 256 * KIB
NUMBER_TEXT_MAX_LENGTH = 64
MAX_CPU_COUNT = 1024.0
MAX_MEMORY_MB = 16.0 * 1024 * 1024  # 16 TiB
MAX_JSON_DEPTH = 32
UNKNOWN_FIELDS_NAMED = 10

# Names become ZooKeeper node names and parts of Mesos task and executor ids (`{job}@-@{item}...`),
# so no `/`, `@` or whitespace, and no leading `.` (ZooKeeper refuses "." and "..").
_N = TypeVar("_N", int, float)
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# Gson's JsonReader accepts these number shapes from a string; Python's float() would also take
# "nan", "inf", "1_000" and non-ASCII digits, which we must refuse. Written without nested or
# adjacent repeats of the same digits (`[0-9]+\.?[0-9]*` backtracks quadratically: a 16,000-digit
# string ending in 'x' took 9 s).
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")
_INTEGER = re.compile(r"[+-]?[0-9]{1,20}")
_JSON_SPECIAL = re.compile(r'[\[\]{}"\\]')
_SHOWN_VALUE_MAX = 40


def shown(value: object) -> str:
    """A short repr of a user value for an error message."""
    text = repr(value)
    return text if len(text) <= _SHOWN_VALUE_MAX else text[: _SHOWN_VALUE_MAX - 3] + "..."


def name_problem(name: str) -> str | None:
    """Why `name` cannot name an app or a job, or None if it can."""
    if not name:
        return "must not be empty"
    if len(name) > NAME_MAX_LENGTH:
        return f"must be at most {NAME_MAX_LENGTH} characters"
    if not _NAME.fullmatch(name):
        return (
            "may contain only letters, digits, '_', '-' and '.', and must not start with '-' or '.'"
        )
    if name in RESERVED_NAMES:
        return f"{name!r} is reserved"
    return None


def text_problem(value: str, max_bytes: int) -> str | None:
    """Why `value` cannot be stored as a string field of at most `max_bytes`, or None."""
    too_long = f"must be at most {max_bytes} bytes in UTF-8"
    if len(value) > max_bytes:  # every character takes at least one byte
        return too_long
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return "must be valid Unicode text (a lone surrogate such as \\ud800 is not)"
    if size > max_bytes:
        return too_long
    if "\x00" in value:
        return "must not contain NUL characters"
    return None


def cpu_problem(cpus: float) -> str | None:
    """Why `cpus` is not a CPU share an app or a job may ask for, or None."""
    if cpus < 0.001:
        return "must be at least 0.001"
    if cpus > MAX_CPU_COUNT:
        return f"must be at most {MAX_CPU_COUNT:g}"
    return None


def memory_problem(mem_mb: float) -> str | None:
    """Why `mem_mb` is not a memory size (MB) an app or a job may ask for, or None."""
    if mem_mb < 1:
        return "must be at least 1"
    if mem_mb > MAX_MEMORY_MB:
        return f"must be at most {MAX_MEMORY_MB:.0f} (16 TiB)"
    return None


def field_label(key: str) -> str:
    """`key` as an error can name it: itself when it is plain short text, else a short repr."""
    plain = len(key) <= NAME_MAX_LENGTH and text_problem(key, 4 * NAME_MAX_LENGTH) is None
    return key if plain and key.isprintable() else shown(key)


def to_text(value: object) -> str:
    if isinstance(value, str):
        return value
    raise ValueError("must be a string")


def to_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "false"):
            return lowered == "true"
    raise ValueError(f"must be true or false, not {shown(value)}")


def to_float(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            raise ValueError("is too large") from None
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value
    if isinstance(value, str) and len(value) > NUMBER_TEXT_MAX_LENGTH:
        raise ValueError(f"must be a number of at most {NUMBER_TEXT_MAX_LENGTH} characters")
    if isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
        result = float(value.strip())
        if not math.isfinite(result):
            raise ValueError("must be a finite number")
        return result
    raise ValueError(f"must be a number, not {shown(value)}")


def to_int(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError("must be an integer, not a boolean")
    if isinstance(value, int):
        result = value
    elif isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        result = int(value.strip())
    else:
        # Gson's nextInt() also takes 5.0 and "5.0", but not 5.5.
        number = to_float(value)
        if not number.is_integer():
            raise ValueError(f"must be an integer, not {shown(value)}")
        result = int(number)
    if abs(result) > JAVA_INT_MAX:
        raise ValueError(f"must be at most {JAVA_INT_MAX}")
    return result


class FieldReader:
    """Reads the fields of one JSON object, recording one problem per bad field.

    A key whose value is null counts as absent. Readers with a default return it when the key
    is absent; `required_*` readers record "is required" instead and return None. Every reader
    returns None (or the default) after recording a problem.

    A strict reader (new API input) also checks every string it reads with `text_problem`,
    against `limits[key]` or TEXT_MAX_BYTES.
    """

    def __init__(
        self,
        data: Mapping[str, object],
        *,
        strict: bool = False,
        limits: Mapping[str, int] | None = None,
    ) -> None:
        self._data = data
        self._strict = strict
        self._limits = limits or {}
        self.problems: dict[str, str] = {}

    def refuse_unknown(
        self,
        known: Collection[str],
        why: str,
        *,
        data: Mapping[str, object] | None = None,
        prefix: str = "",
    ) -> None:
        """Record `why` for each key of `data` (default: the object read) not in `known`.

        Names at most UNKNOWN_FIELDS_NAMED of them and counts the rest, so a body of a million
        keys gets a short answer.
        """
        unknown = [key for key in (self._data if data is None else data) if key not in known]
        for key in unknown[:UNKNOWN_FIELDS_NAMED]:
            self.problem(prefix + field_label(key), why)
        if len(unknown) > UNKNOWN_FIELDS_NAMED:
            more = len(unknown) - UNKNOWN_FIELDS_NAMED
            self.problem(prefix + "...", f"and {more} more unknown fields")

    def check_text(self, key: str, value: str) -> str | None:
        """`value` if a strict reader may accept it for `key` (always, when not strict)."""
        if self._strict:
            problem = text_problem(value, self._limits.get(key, TEXT_MAX_BYTES))
            if problem is not None:
                self.problem(key, problem)
                return None
        return value

    def problem(self, key: str, message: str) -> None:
        self.problems.setdefault(key, message)

    def ok(self, key: str) -> bool:
        return key not in self.problems

    def present(self, key: str) -> bool:
        return self._data.get(key) is not None

    def raw(self, key: str) -> object:
        return self._data.get(key)

    def text(self, key: str, default: str) -> str:
        value = self._data.get(key)
        if value is None:
            return default
        try:
            text = self.check_text(key, to_text(value))
        except ValueError as exc:
            self.problem(key, str(exc))
            return default
        return default if text is None else text

    def optional_text(self, key: str) -> str | None:
        value = self._data.get(key)
        if value is None:
            return None
        try:
            return self.check_text(key, to_text(value))
        except ValueError as exc:
            self.problem(key, str(exc))
            return None

    def required_text(self, key: str, *, allow_blank: bool = False) -> str | None:
        value = self.optional_text(key)
        if value is None:
            if self.ok(key):
                self.problem(key, "is required")
            return None
        if not allow_blank and not value.strip():
            self.problem(key, "must not be empty")
            return None
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self._data.get(key)
        if value is None:
            return default
        try:
            return to_bool(value)
        except ValueError as exc:
            self.problem(key, str(exc))
            return default

    def number(self, key: str, default: float | None = None) -> float | None:
        return self._converted(key, default, to_float)

    def integer(self, key: str, default: int | None = None) -> int | None:
        return self._converted(key, default, to_int)

    def _converted(
        self, key: str, default: _N | None, convert: Callable[[object], _N]
    ) -> _N | None:
        """The field converted, its default when absent, or None after recording a problem
        (a missing field with no default is required)."""
        value = self._data.get(key)
        if value is None:
            if default is None:
                self.problem(key, "is required")
            return default
        try:
            return convert(value)
        except ValueError as exc:
            self.problem(key, str(exc))
            return None

    def raise_if_any(self, what: str) -> None:
        """Raise one InvalidRequest naming every bad field, if there is any."""
        if self.problems:
            raise invalid(what, self.problems)


def invalid(what: str, problems: Mapping[str, str]) -> InvalidRequest:
    text = "; ".join(f"{key}: {why}" for key, why in problems.items())
    return InvalidRequest(f"invalid {what}: {text}", fields=dict(problems))


def merge_patch(
    base: Mapping[str, object], patch: object, name_key: str, what: str
) -> dict[str, object]:
    """`base` with `patch`'s keys laid over it, for updates that keep what they leave out.

    A null in the patch removes the key (back to its default), except the name, which identifies
    the object and must not change: a different name raises InvalidRequest.
    """
    changes = require_object(patch, what)
    name = changes.get(name_key)
    if name is not None and name != base.get(name_key):
        raise invalid(
            what, {name_key: f"does not match the one being updated ({base.get(name_key)!r})"}
        )
    result = dict(base)
    for key, value in changes.items():
        if value is None:
            if key != name_key:
                result.pop(key, None)
        else:
            result[key] = value
    return result


def require_object(data: object, what: str) -> Mapping[str, object]:
    if not isinstance(data, dict):
        raise invalid(what, {"body": f"must be a JSON object, not {_json_type(data)}"})
    return data


def loads_object(data: bytes, what: str) -> Mapping[str, object]:
    """Decode UTF-8 JSON that must be an object; NaN and Infinity literals are refused."""
    return require_object(parse_json(data, what), what)


def parse_json(data: bytes, what: str) -> object:
    """Decode UTF-8 JSON nested at most MAX_JSON_DEPTH levels; NaN and Infinity are refused.

    Raises InvalidRequest (field `body`) for anything else, without recursing into deep input.

    orjson decodes it first (a stored job in a fifth of the time: 100,000 of them at a leader's
    start): where it takes the document, its value is the standard decoder's. What it refuses
    or reads otherwise goes to the standard decoder, which says what is wrong: a byte order
    mark, NaN and Infinity, lone surrogates; and a document holding a float of 2**63 or more
    goes to it again (orjson reads an integer beyond 64 bits as a float).
    """
    if data.count(b"[") + data.count(b"{") <= MAX_JSON_DEPTH:
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # the standard decoder names the problem
        else:
            if not _holds_a_huge_float(value):
                return value
    return parse_json_standard(data, what)


def _holds_a_huge_float(value: object) -> bool:
    """Whether a decoded document holds a float at or beyond 2**63 in size: the one place
    orjson's value may differ from the standard decoder's (an integer literal beyond 64 bits,
    which orjson reads as a float)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not -_HUGE < item < _HUGE:
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def parse_json_standard(data: bytes, what: str) -> object:
    """`parse_json` by the standard library's decoder alone."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise invalid(what, {"body": "is not valid UTF-8"}) from None
    if _nested_deeper_than(text, MAX_JSON_DEPTH):
        raise invalid(what, {"body": f"is nested deeper than {MAX_JSON_DEPTH} levels"})
    try:
        return _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        # JSONDecodeError is a ValueError; so are over-long integers and NaN/Infinity.
        raise invalid(what, {"body": f"is not valid JSON ({exc})"}) from exc


def _nested_deeper_than(text: str, limit: int) -> bool:
    """Whether arrays and objects in JSON `text` nest more than `limit` deep (strings skipped).

    Linear in the number of brackets, quotes and backslashes; stops at the first level too deep.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    in_string = False
    escaped_at = -1
    for match in _JSON_SPECIAL.finditer(text):
        position, char = match.start(), match.group()
        if position == escaped_at:
            continue
        if in_string:
            if char == "\\":
                escaped_at = position + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def check_patch(
    patch: object,
    *,
    name_key: str,
    known: Collection[str],
    limits: Mapping[str, int],
    what: str,
    kind: str,
) -> Mapping[str, object]:
    """The fields of an update (`PUT`) checked as far as they can be without the stored object.

    The name must be present and well formed, every key a known field, every string valid and
    within its bound; types, ranges and cross-field rules are checked on the merged whole.
    Raises InvalidRequest naming every bad field.
    """
    changes = require_object(patch, what)
    reader = FieldReader(changes, strict=True, limits=limits)
    reader.refuse_unknown(known, f"is not a field of {kind}")
    for key, value in changes.items():
        if isinstance(value, str) and key in known:
            reader.check_text(key, value)
    name = reader.required_text(name_key)
    if name is not None and (problem := name_problem(name)):
        reader.problem(name_key, problem)
    reader.raise_if_any(what)
    return changes


def check_stored_size(data: bytes, what: str) -> None:
    """InvalidRequest when `data`, a whole app or job as stored, exceeds STORED_MAX_BYTES."""
    if len(data) > STORED_MAX_BYTES:
        raise invalid(
            what,
            {"body": f"takes {len(data)} bytes stored; at most {STORED_MAX_BYTES} are allowed"},
        )


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a number JSON allows")


_HUGE = 2.0**63
# One decoder for every document (`json.loads` with an argument builds one per call).
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


# Gson's JsonWriter in its default HTML-safe mode.
_GSON_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\t": "\\t",
    "\b": "\\b",
    "\n": "\\n",
    "\r": "\\r",
    "\f": "\\f",
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "=": "\\u003d",
    "'": "\\u0027",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


# Any character `_gson_string` writes otherwise than as itself: most strings have none, and
# are written at C speed (a job's stored JSON is made at every registration and update).
_GSON_SPECIAL = re.compile("[\x00-\x1f\"\\\\<>&='\u2028\u2029\ud800-\udfff]")


def _gson_string(text: str) -> str:
    if _GSON_SPECIAL.search(text) is None:
        return f'"{text}"'
    out = ['"']
    for char in text:
        escaped = _GSON_ESCAPES.get(char)
        if escaped is not None:
            out.append(escaped)
        elif char < " " or "\ud800" <= char <= "\udfff":
            # Control characters as Gson writes them; lone surrogates so the bytes stay UTF-8.
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def java_double(value: float) -> str:
    """`Double.toString(value)`: plain between 10^-3 and 10^7, else `1.0E7` notation."""
    if not math.isfinite(value):
        raise ValueError(f"{value!r} cannot be written as JSON")
    if value == 0.0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    if 1e-3 <= abs(value) < 1e7:
        return repr(value)  # Python's shortest repr is plain notation in this range, with ".0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = f"{digits[0]}.{''.join(map(str, digits[1:])) or '0'}"
    return f"{'-' if sign else ''}{mantissa}E{len(digits) + exponent - 1}"


def gson_dumps(value: object) -> str:
    """Serialise dicts, lists, strings, booleans, ints and floats as Gson writes them (nulls
    omitted from objects)."""
    if isinstance(value, list | tuple):
        return "[" + ",".join(gson_dumps(item) for item in value) + "]"
    if isinstance(value, dict):
        members = (
            f"{_gson_string(str(key))}:{gson_dumps(item)}"
            for key, item in value.items()
            if item is not None
        )
        return "{" + ",".join(members) + "}"
    if isinstance(value, str):
        return _gson_string(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return java_double(value)
    raise TypeError(f"cannot write {type(value).__name__} as config JSON")
