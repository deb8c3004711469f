"""multiRead's wire format: answers decode in the order of the paths, and an answer that does not
decode is the registry's own error (RegistryError), never struct.error or ValueError."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.model.errors import RegistryError
from scheduler.storage.multi_read import MalformedMultiRead, MultiRead

_HEADER = struct.Struct("!iBi")
_STAT = struct.Struct("!qqqqiiiqiiq")


def _data_entry(data: bytes | None, version: int) -> bytes:
    length = -1 if data is None else len(data)
    stat = _STAT.pack(1, 2, 3, 4, version, 0, 0, 0, max(length, 0), 0, 5)
    return _HEADER.pack(4, 0, -1) + struct.pack("!i", length) + (data or b"") + stat


def _error_entry(code: int) -> bytes:
    return _HEADER.pack(-1, 0, code) + struct.pack("!i", code)


_END = _HEADER.pack(-1, 1, -1)
_VALID = _data_entry(b"hello", 7) + _error_entry(-101) + _data_entry(None, 0) + _END


def test_an_answer_decodes_in_the_order_of_the_paths() -> None:
    answers = MultiRead(["/a", "/b", "/c"]).deserialize(b"xx" + _VALID, 2)
    assert answers == [(b"hello", 7), -101, (b"", 0)]


@pytest.mark.parametrize("cut", range(len(_VALID)))
def test_an_answer_cut_short_is_a_registry_error(cut: int) -> None:
    with pytest.raises(MalformedMultiRead) as caught:
        MultiRead(["/a", "/b", "/c"]).deserialize(_VALID[:cut], 0)
    assert isinstance(caught.value, RegistryError)
    assert "multiRead of 3 paths" in caught.value.message


def test_an_entry_of_another_op_is_a_registry_error() -> None:
    answer = _HEADER.pack(5, 0, -1) + b"\0" * 64 + _END
    with pytest.raises(MalformedMultiRead, match="op 5"):
        MultiRead(["/a"]).deserialize(answer, 0)


@pytest.mark.parametrize("length", [-2, -(2**31), 2**31 - 1, 10_000])
def test_a_data_length_past_the_answer_is_a_registry_error(length: int) -> None:
    answer = _HEADER.pack(4, 0, -1) + struct.pack("!i", length) + b"\0" * 200 + _END
    with pytest.raises(MalformedMultiRead, match=f"data length {length}"):
        MultiRead(["/a"]).deserialize(answer, 0)


@pytest.mark.parametrize("paths", [["/a", "/b"], ["/a", "/b", "/c", "/d"]])
def test_more_or_fewer_entries_than_paths_is_a_registry_error(paths: list[str]) -> None:
    with pytest.raises(MalformedMultiRead, match="3 entries"):
        MultiRead(paths).deserialize(_VALID, 0)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400), st.integers(min_value=0, max_value=5))
def test_any_bytes_decode_or_raise_the_registry_error(buffer: bytes, count: int) -> None:
    request = MultiRead([f"/n{i}" for i in range(count)])
    try:
        answers = request.deserialize(buffer, 0)
    except MalformedMultiRead as exc:
        assert isinstance(exc, RegistryError)
        assert exc.message
        return
    assert len(answers) == count
    for answer in answers:
        assert isinstance(answer, int) or (
            isinstance(answer[0], bytes) and isinstance(answer[1], int)
        )


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_valid_answer_with_bytes_flipped_decodes_or_raises_the_registry_error(
    data: st.DataObject,
) -> None:
    buffer = bytearray(_VALID)
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        at = data.draw(st.integers(min_value=0, max_value=len(buffer) - 1))
        buffer[at] = data.draw(st.integers(min_value=0, max_value=255))
    try:
        answers = MultiRead(["/a", "/b", "/c"]).deserialize(bytes(buffer), 0)
    except MalformedMultiRead:
        return
    assert len(answers) == 3
