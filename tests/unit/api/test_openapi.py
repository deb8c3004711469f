"""The OpenAPI document assembled from its route table: what a wrong row would break.

That every Flask route of `/api` is in the document is checked against a live API elsewhere
(tests/integration/api/test_api.py); here the table is read without a server.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler.api.openapi import ROUTES, document

SHARED_ERRORS = {"400", "401", "403", "404", "409", "413", "415", "503"}


def operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in document()["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def test_each_endpoint_has_one_row_and_one_operation() -> None:
    # A second row for the same method and path would silently replace the first.
    twice = [endpoint for endpoint, n in Counter(r.endpoint for r in ROUTES).items() if n > 1]
    assert twice == []
    assert len(list(operations())) == len(ROUTES)
    assert all(re.fullmatch(r"(GET|POST|PUT|DELETE) /api/\S*", r.endpoint) for r in ROUTES)


@pytest.mark.parametrize("path,method,operation", list(operations()))
def test_path_parameters_are_the_names_in_the_path(
    path: str, method: str, operation: dict[str, Any]
) -> None:
    parameters = operation.get("parameters", [])
    in_path = [p["name"] for p in parameters if p["in"] == "path"]
    assert in_path == re.findall(r"\{(\w+)\}", path)
    assert all(p["required"] for p in parameters if p["in"] == "path")
    names = [p["name"] for p in parameters]
    assert len(names) == len(set(names)), names


@pytest.mark.parametrize("path,method,operation", list(operations()))
def test_every_operation_answers_the_shared_errors_and_one_success(
    path: str, method: str, operation: dict[str, Any]
) -> None:
    codes = set(operation["responses"])
    successes = {code for code in codes if code.startswith("2")}
    assert len(successes) == 1, (method, path, codes)
    assert codes - successes - {"502"} == SHARED_ERRORS
    assert operation["summary"]
    if method == "get":
        assert "requestBody" not in operation


def test_agent_reads_may_answer_502_and_nothing_else_does() -> None:
    with_502 = {(m, p) for p, m, op in operations() if "502" in op["responses"]}
    assert with_502 == {
        ("get", "/api/job/{jobName}/runs/{taskId}/log"),
        ("get", "/api/operate/sandbox"),
    }


def test_every_reference_names_a_schema_and_every_schema_is_used() -> None:
    doc = document()
    schemas = doc["components"]["schemas"]
    used = {ref.rsplit("/", 1)[-1] for ref in refs(doc)}
    assert all(ref.startswith("#/components/schemas/") for ref in refs(doc))
    assert used == set(schemas)


def test_the_document_is_json_and_does_not_change_between_calls() -> None:
    first = json.dumps(document())
    assert json.loads(first)["openapi"] == "3.0.3"
    assert json.dumps(document()) == first
