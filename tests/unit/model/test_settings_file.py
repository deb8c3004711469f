"""conf/scheduler.properties, the example the README points `--config` at, lists every setting
with its real default."""

from __future__ import annotations

import re
from pathlib import Path

from scheduler.model.settings import KEYS_BY_NAME, Settings, load_settings, read_properties
from scheduler.model.settings.example import example_properties

EXAMPLE = Path(__file__).resolve().parents[3] / "conf" / "scheduler.properties"
REGENERATE = (
    "regenerate it: .venv/bin/python -m scheduler.model.settings.example "
    "> conf/scheduler.properties"
)


def test_every_settings_key_is_in_the_example_file() -> None:
    listed = re.findall(r"^#(\w+)=", EXAMPLE.read_text(), re.MULTILINE)
    missing = [key for key in KEYS_BY_NAME if key not in listed]
    assert missing == [], f"keys missing from {EXAMPLE}; {REGENERATE}"
    assert sorted(listed) == sorted(KEYS_BY_NAME), f"unknown keys in {EXAMPLE}; {REGENERATE}"


def test_the_example_file_is_what_the_generator_writes() -> None:
    assert EXAMPLE.read_text() == example_properties(), REGENERATE


def test_the_example_file_as_it_is_and_fully_uncommented_gives_the_defaults() -> None:
    text = EXAMPLE.read_text()
    assert load_settings(read_properties(text), {}, {}) == Settings()
    uncommented = re.sub(r"^#(\w+=)", r"\1", text, flags=re.MULTILINE)
    values = read_properties(uncommented)
    assert set(values) == set(KEYS_BY_NAME)
    assert load_settings(values, {}, {}) == Settings()
