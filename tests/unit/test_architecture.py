"""The house rules of ARCHITECTURE.md, read from the code's own imports.

Every `import` and `from ... import` of every module counts, wherever it stands: at the top, inside
a function, or under `if TYPE_CHECKING:` (an import made only for the type checker is still a
coupling: the importer cannot be read, moved or type-checked without the imported). An import is
an arrow to the most specific module it names: `from scheduler.model.config import _wire` points
at `scheduler.model.config._wire`, `from scheduler.model.config import JobConfig` at the package
`scheduler.model.config` (its `__init__.py`).

Checked:
- inside `scheduler/`, every module sits in a layer (1 model, 2 storage, 3 leader, and the top
  floor's 4a edge, 4b replica, 4c api, 4d wiring) and imports only its own layer or lower ones;
- in layer 3, a room (each module or package directly inside `leader/`: producer, config
  listener, mesos, statistics, webhooks, ...) imports no other room, only the shared lifecycle
  and outbound (the leader's outbound HTTP requests);
- no cycle between units (a unit is a module: one `.py` file, a package's `__init__.py` being a
  unit of its own);
- the executor imports nothing of the scheduler; the scheduler imports of the executor only its
  wire modules, which import nothing beyond the standard library;
- the local Mesos stand-in (`deploy/localmesos`) imports nothing of the product.
Nothing here may load a module dynamically (`importlib`, `__import__`): such an import would be
invisible to these checks, so it is refused too (`importlib.metadata`, which only reads installed
distributions' metadata, is allowed).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# (rank, layer, module prefixes): a module is in the layer of its longest matching prefix, and
# imports only its own layer or one of a lower rank. Layer 4, the top floor, has four sub-layers:
# 4a the edge (what faces HTTP on every replica), 4b the replica (session, election, terms),
# 4c the API (a term's Flask app), 4d the wiring and the entry point.
LAYERS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (1, "1 model", ("scheduler.model",)),
    (2, "2 storage", ("scheduler.storage",)),
    (3, "3 leader", ("scheduler.leader",)),
    (4, "4a edge", ("scheduler.edge",)),
    (5, "4b replica", ("scheduler.replica",)),
    (6, "4c api", ("scheduler.api",)),
    (7, "4d wiring", ("scheduler", "scheduler.__main__", "scheduler.wiring")),
)
# Layer 3: every module or package directly inside leader/ is a room, but these, which every
# room may import.
LEADER = "scheduler.leader"
LEADER_SHARED = frozenset(
    {"scheduler.leader", "scheduler.leader.lifecycle", "scheduler.leader.outbound"}
)
# The executor's modules the scheduler may use: the wire formats both sides share.
EXECUTOR_WIRE = frozenset({"executor.taskdata", "executor.records"})
PRODUCT = ("scheduler", "executor", "ejcloud_cli", "marathon")
STAND_IN = "deploy.localmesos"


@dataclass(frozen=True)
class Arrow:
    """`source` imports `target` at `path:line`."""

    source: str
    target: str
    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.source} imports {self.target}"


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Module name -> file of every `.py` file under the packages (dotted, relative to root)."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package.replace(".", "/")).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """Dotted names an import statement may refer to (a from-import: base and base.name)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base_parts = module.split(".") if is_package else module.split(".")[:-1]
        base_parts = base_parts[: len(base_parts) - (node.level - 1)]
        base = ".".join([*base_parts, *([node.module] if node.module else [])])
    else:
        base = node.module or ""
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The most specific known module that `name` names, or None (a library)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def arrows(modules: Mapping[str, Path], sources: Iterable[str], root: Path) -> list[Arrow]:
    """Every import arrow out of `sources` to a module in `modules`."""
    out: list[Arrow] = []
    for source in sources:
        path = modules[source]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        shown = str(path.relative_to(root))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            names = _imported_names(node, source, path.name == "__init__.py")
            if isinstance(node, ast.ImportFrom):
                # `from pkg import sub` names the module pkg.sub when there is one, else pkg.
                named = [n for n in names[:-1] if n in modules and n != source] or names[-1:]
            else:
                named = names
            for name in named:
                target = _resolve(name, modules)
                if target is not None and target != source:
                    out.append(Arrow(source, target, shown, node.lineno))
    return out


_METADATA = "importlib.metadata"


def dynamic_imports(modules: Mapping[str, Path], sources: Iterable[str]) -> list[str]:
    """`path:line` of every use of importlib or `__import__` in `sources`."""
    found: list[str] = []
    for source in sources:
        path = modules[source]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Name) and node.id == "__import__":
                names = ["__import__"]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            # `importlib.metadata` reads installed distributions' metadata (the version shown in
            # /health); it loads no module, so every arrow stays visible.
            names = [n for n in names if n != _METADATA]
            if any(n in ("__import__", "importlib") or n.startswith("importlib.") for n in names):
                found.append(f"{path}:{getattr(node, 'lineno', 0)}")
    return found


def layer_of(module: str) -> tuple[int, str] | None:
    best: tuple[int, tuple[int, str]] | None = None
    for number, name, prefixes in LAYERS:
        for prefix in prefixes:
            # The bare package name `scheduler` only claims its own __init__.py.
            matches = module == prefix if prefix == "scheduler" else _within(module, prefix)
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), (number, name))
    return None if best is None else best[1]


def room_of(module: str) -> str | None:
    """The room of a layer-3 module (`scheduler.leader.mesos` for `...mesos.driver`); None for
    the shared modules and outside layer 3."""
    if not _within(module, LEADER) or module in LEADER_SHARED:
        return None
    return ".".join(module.split(".")[:3])


def layer_problems(found: Iterable[Arrow]) -> list[str]:
    """An arrow against the layer order, or between two rooms of layer 3."""
    problems: list[str] = []
    for arrow in found:
        if not (_within(arrow.source, "scheduler") and _within(arrow.target, "scheduler")):
            continue
        source, target = layer_of(arrow.source), layer_of(arrow.target)
        if source is None or target is None:
            continue  # reported by test_every_scheduler_module_is_in_a_layer
        if target[0] > source[0]:
            problems.append(f"{arrow}: layer {source[1]} may not import layer {target[1]}")
            continue
        rooms = room_of(arrow.source), room_of(arrow.target)
        if rooms[0] and rooms[1] and rooms[0] != rooms[1]:
            problems.append(
                f"{arrow}: room {rooms[0]} may not import room {rooms[1]} (hand what it needs "
                "in when the term's components are built)"
            )
    return problems


def cycles(found: Iterable[Arrow]) -> list[list[Arrow]]:
    """The import cycles among the modules: per strongly connected group, its arrows."""
    graph: dict[str, set[str]] = {}
    for arrow in found:
        graph.setdefault(arrow.source, set()).add(arrow.target)
        graph.setdefault(arrow.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(start: str) -> None:
        # Tarjan's algorithm, iteratively (a deep package must not hit the recursion limit).
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    group: set[str] = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(group)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])

    for node in sorted(graph):
        if node not in index:
            visit(node)
    found = list(found)
    return [
        sorted(
            (a for a in found if a.source in group and a.target in group),
            key=lambda a: (a.source, a.line),
        )
        for group in groups
    ]


LAYER_FOLDERS = (
    "scheduler.model",
    "scheduler.storage",
    "scheduler.leader",
    "scheduler.edge",
    "scheduler.replica",
    "scheduler.wiring",
)


def unit_of(module: str, modules: Mapping[str, Path]) -> str:
    """The unit `module` belongs to: a package inside a layer folder (`scheduler.leader.mesos`)
    or beside the layer folders (`scheduler.api`) is one unit with all it holds; any other
    module is a unit of its own."""
    parts = module.split(".")
    depth = 3 if ".".join(parts[:2]) in LAYER_FOLDERS else 2
    package = ".".join(parts[:depth])
    if len(parts) >= depth and package in modules and modules[package].name == "__init__.py":
        return package
    return module


def unit_arrows(found: Iterable[Arrow], modules: Mapping[str, Path]) -> list[Arrow]:
    """The arrows between two different units, each named by its units."""
    out: list[Arrow] = []
    for arrow in found:
        source, target = unit_of(arrow.source, modules), unit_of(arrow.target, modules)
        if source != target:
            out.append(Arrow(source, target, arrow.path, arrow.line))
    return out


def _scheduler() -> tuple[dict[str, Path], list[str]]:
    modules = module_files(ROOT, ["scheduler", "executor"])
    return modules, sorted(m for m in modules if _within(m, "scheduler"))


# -- the rules, on the real tree ----------------------------------------------------------------


def test_every_scheduler_module_is_in_a_layer() -> None:
    _modules, sources = _scheduler()
    assert sources, "no module found under scheduler/"
    homeless = [m for m in sources if layer_of(m) is None]
    assert not homeless, f"modules in no layer (put them in a layer folder): {homeless}"


def test_scheduler_imports_run_down_the_layers_and_rooms_stay_apart() -> None:
    modules, sources = _scheduler()
    problems = layer_problems(arrows(modules, sources, ROOT))
    assert not problems, "imports against the layers:\n" + "\n".join(problems)


def _shown(found: list[list[Arrow]]) -> str:
    return "\n".join("cycle:\n  " + "\n  ".join(str(a) for a in group) for group in found)


def test_no_import_cycle_between_the_units_of_the_scheduler() -> None:
    modules, sources = _scheduler()
    found = cycles(unit_arrows(arrows(modules, sources, ROOT), modules))
    assert not found, _shown(found)


def test_no_import_cycle_between_the_modules_of_the_scheduler() -> None:
    modules, sources = _scheduler()
    found = cycles(arrows(modules, sources, ROOT))
    assert not found, _shown(found)


def test_the_executor_imports_nothing_of_the_scheduler() -> None:
    modules = module_files(ROOT, ["scheduler", "executor"])
    sources = sorted(m for m in modules if _within(m, "executor"))
    assert sources
    wrong = [str(a) for a in arrows(modules, sources, ROOT) if _within(a.target, "scheduler")]
    assert not wrong, "the executor imports the scheduler:\n" + "\n".join(wrong)


def test_the_scheduler_uses_only_the_executors_wire_modules_and_they_need_only_the_stdlib() -> None:
    modules, sources = _scheduler()
    wrong = [
        str(a)
        for a in arrows(modules, sources, ROOT)
        if _within(a.target, "executor") and a.target not in EXECUTOR_WIRE
    ]
    assert not wrong, "the scheduler imports executor modules beyond the wire format:\n" + (
        "\n".join(wrong)
    )
    for wire in sorted(EXECUTOR_WIRE):
        tree = ast.parse(modules[wire].read_text(encoding="utf-8"))
        outside = sorted(
            {
                name.split(".")[0]
                for node in ast.walk(tree)
                if isinstance(node, ast.Import | ast.ImportFrom)
                for name in (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [("." if node.level else "") + (node.module or "")]
                )
            }
            - set(sys.stdlib_module_names)
            - {"__future__"}
        )
        assert not outside, f"{wire} imports beyond the standard library: {outside}"


def test_the_local_mesos_stand_in_imports_nothing_of_the_product() -> None:
    modules = module_files(ROOT, [STAND_IN, *PRODUCT])
    sources = sorted(m for m in modules if _within(m, STAND_IN))
    assert sources
    wrong = [
        str(a)
        for a in arrows(modules, sources, ROOT)
        if any(_within(a.target, product) for product in PRODUCT)
    ]
    assert not wrong, "the Mesos stand-in imports the product:\n" + "\n".join(wrong)


def test_only_the_registry_and_the_replica_talk_to_kazoo() -> None:
    modules, sources = _scheduler()
    allowed = (
        "scheduler.storage.registry",
        "scheduler.storage.transactions",
        "scheduler.storage.acl",
        "scheduler.storage.zk_handler",
        "scheduler.replica.replica",
        "scheduler.replica.election_nodes",
        "scheduler.replica.silence",
        "scheduler.replica.leader_watch",
    )
    wrong = []
    for source in sources:
        if source in allowed:
            continue
        for node in ast.walk(ast.parse(modules[source].read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            wrong += [f"{modules[source]}:{node.lineno}" for n in names if _within(n, "kazoo")]
    assert not wrong, f"kazoo imported outside the registry and the replica: {wrong}"


def test_no_module_of_the_scheduler_or_the_stand_in_imports_dynamically() -> None:
    modules = module_files(ROOT, ["scheduler", STAND_IN])
    found = dynamic_imports(modules, sorted(modules))
    assert not found, f"imports these checks cannot see: {found}"


# -- the checks themselves fail where they must ------------------------------------------------


def _tree(tmp_path: Path, files: Mapping[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return module_files(tmp_path, ["scheduler"])


def test_an_import_up_the_layers_is_named_even_inside_a_function_or_for_the_type_checker(
    tmp_path: Path,
) -> None:
    modules = _tree(
        tmp_path,
        {
            "scheduler/__init__.py": "",
            "scheduler/model/__init__.py": "",
            "scheduler/model/job.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from scheduler.storage.registry import Registry\n"
                "def f():\n"
                "    from scheduler.replica import replica\n"
            ),
            "scheduler/storage/__init__.py": "",
            "scheduler/storage/registry.py": "from scheduler.model.job import f\n",
            "scheduler/replica/__init__.py": "",
            "scheduler/replica/replica.py": "",
        },
    )
    problems = layer_problems(arrows(modules, sorted(modules), tmp_path))
    assert problems == [
        "scheduler/model/job.py:3: scheduler.model.job imports scheduler.storage.registry: "
        "layer 1 model may not import layer 2 storage",
        "scheduler/model/job.py:5: scheduler.model.job imports scheduler.replica.replica: "
        "layer 1 model may not import layer 4b replica",
    ]


def test_an_import_between_two_leader_rooms_is_named(tmp_path: Path) -> None:
    modules = _tree(
        tmp_path,
        {
            "scheduler/leader/__init__.py": "",
            "scheduler/leader/lifecycle.py": "",
            "scheduler/leader/producer.py": "from scheduler.leader import lifecycle\n",
            "scheduler/leader/config_listener.py": "from scheduler.leader.producer import P\n",
        },
    )
    problems = layer_problems(arrows(modules, sorted(modules), tmp_path))
    assert problems == [
        "scheduler/leader/config_listener.py:1: scheduler.leader.config_listener imports "
        "scheduler.leader.producer: room scheduler.leader.config_listener may not import room "
        "scheduler.leader.producer (hand what it needs in when the term's components are built)"
    ]


def test_a_cycle_is_named_with_each_of_its_imports(tmp_path: Path) -> None:
    modules = _tree(
        tmp_path,
        {
            "scheduler/model/__init__.py": "from .a import A\n",
            "scheduler/model/a.py": "from scheduler.model import b\n",
            "scheduler/model/b.py": "import scheduler.model\n",
            "scheduler/model/c.py": "from scheduler.model import a\n",
        },
    )
    found = cycles(arrows(modules, sorted(modules), tmp_path))
    assert [[str(a) for a in group] for group in found] == [
        [
            "scheduler/model/__init__.py:1: scheduler.model imports scheduler.model.a",
            "scheduler/model/a.py:1: scheduler.model.a imports scheduler.model.b",
            "scheduler/model/b.py:1: scheduler.model.b imports scheduler.model",
        ]
    ]


def test_a_from_import_of_a_submodule_points_at_the_submodule_not_the_package(
    tmp_path: Path,
) -> None:
    modules = _tree(
        tmp_path,
        {
            "scheduler/model/__init__.py": "from scheduler.model.a import A\n",
            "scheduler/model/a.py": "from scheduler.model import _wire\n",
            "scheduler/model/_wire.py": "",
        },
    )
    found = arrows(modules, sorted(modules), tmp_path)
    assert {(a.source, a.target) for a in found} == {
        ("scheduler.model", "scheduler.model.a"),
        ("scheduler.model.a", "scheduler.model._wire"),
    }
    assert cycles(found) == []


@pytest.mark.parametrize(
    ("text", "hit"),
    [
        ("import importlib\n", True),
        ("from importlib import import_module\n", True),
        ("m = __import__('os')\n", True),
        ("import importlib.util\n", True),
        ("import os\n", False),
        ("import importlib.metadata\n", False),
        ("from importlib.metadata import version\n", False),
    ],
)
def test_a_dynamic_import_is_found(tmp_path: Path, text: str, hit: bool) -> None:
    modules = _tree(tmp_path, {"scheduler/x.py": text})
    assert bool(dynamic_imports(modules, ["scheduler.x"])) is hit


def test_an_import_up_the_top_floors_sub_layers_is_named(tmp_path: Path) -> None:
    modules = _tree(
        tmp_path,
        {
            "scheduler/edge/__init__.py": "",
            "scheduler/edge/http.py": "from scheduler.replica.term import Term\n",
            "scheduler/replica/__init__.py": "",
            "scheduler/replica/term.py": "from scheduler.edge import http\n",
            "scheduler/api/__init__.py": "from scheduler.wiring.term import build\n",
            "scheduler/wiring/__init__.py": "",
            "scheduler/wiring/term.py": "from scheduler.api import create_app\n",
        },
    )
    problems = layer_problems(arrows(modules, sorted(modules), tmp_path))
    assert problems == [
        "scheduler/api/__init__.py:1: scheduler.api imports scheduler.wiring.term: "
        "layer 4c api may not import layer 4d wiring",
        "scheduler/edge/http.py:1: scheduler.edge.http imports scheduler.replica.term: "
        "layer 4a edge may not import layer 4b replica",
    ]
