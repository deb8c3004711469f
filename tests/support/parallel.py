"""How the suite shares the machine when it runs in parallel (pytest-xdist, `--dist loadgroup`).

Registered for every suite by `pytest_plugins` in tests/conftest.py. Most tests are isolated
already: each has its own ZooKeeper namespace, free ports, temporary directories and children,
and every xdist worker is a session of its own (its own ZooKeeper server and, when asked for,
PostgreSQL server). They run on any worker. The files in `GROUPS` are not spread out:

- timing-sensitive tests: the chaos and fault tests hold bounds on how fast the system recovers,
  and the flood tests hold bounds on how fast it answers while flooded. Each such group runs on
  one worker, one test after another, so no two of them load the machine at the same time (the
  other workers run ordinary tests beside them);
- files whose module-scoped fixture starts something expensive (a cluster, a browser, a replica
  with TLS): kept on one worker so the fixture starts once, not once per worker.

A group keeps two timing-sensitive tests apart, not the rest of the suite away: the flood tests'
bounds (/health answered within 1 s) are on the replica under attack, and CI once measured
/health p99 1.03 s while the other workers' ZooKeeper servers, replicas and stand-ins ran beside
it. Those tests put their replica (and their probe) `ahead_of_the_suite`: Linux shares the CPU
between sessions first ("autogroups"), and every process a test starts is a session of its own
(`deploy.children`), so each replica, ZooKeeper server or stand-in of another test counts as
much as the replica measured; a nice of -10 for the measured one's session weighs it about nine
times as much. The attack and its bounds are unchanged.

Grouped tests are collected first, the longest groups (first in `GROUPS`) first, so that they
start at once instead of being the last work left to one worker; then the end-to-end, security
and integration tests, and the unit tests last, so that short tests fill the end of the run.
Without xdist (`pytest` alone) the groups change nothing but that order.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

_AHEAD_NICE = -10


def ahead_of_the_suite(pid: int) -> bool:
    """Give the session (autogroup) of `pid`, a session leader, a nice of -10, so that other
    tests' processes do not slow it; False where that cannot be done (no autogroups, not
    permitted), and the test then runs as before. A process that is not a session leader is
    left alone: its session may be the test workers' own."""
    try:
        if os.getsid(pid) != pid:
            return False
        with open(f"/proc/{pid}/autogroup", "w") as autogroup:
            autogroup.write(str(_AHEAD_NICE))
    except OSError:
        return False
    return True


# A file (from the repository's root) -> the group its tests run in, one after another.
GROUPS: dict[str, str] = {
    # Timing-sensitive: recovery bounds under injected faults (2.5-3 min each).
    "tests/e2e/test_chaos.py": "chaos",
    "tests/e2e/test_infra_chaos.py": "chaos",
    "tests/e2e/test_workflow_chaos.py": "workflow-chaos",
    "tests/e2e/test_zk_faults.py": "faults",
    "tests/e2e/test_mesos_faults.py": "faults",
    # Timing-sensitive: floods of connections and wrong passwords, and what /health does meanwhile.
    "tests/security/test_auth_flood.py": "floods",
    "tests/security/test_http_edge.py": "floods",
    # An expensive module-scoped fixture: one start per file.
    "tests/e2e/test_console.py": "console",
    "tests/e2e/test_console_trust.py": "console-trust",
    "tests/e2e/test_workflows.py": "workflows",
    "tests/e2e/test_backfill.py": "backfill",
    "tests/e2e/test_workflow_backfill.py": "workflow-backfill",
    "tests/e2e/test_teams.py": "teams",
    "tests/e2e/test_console_access.py": "console-access",
    "tests/security/test_console_tls.py": "console-tls",
    "tests/security/test_edge_trust.py": "edge-trust",
    "tests/security/test_tls_server.py": "tls-server",
    "tests/integration/api/test_hostile_routes.py": "hostile-routes",
    "tests/integration/api/test_role_matrix.py": "role-matrix",
    "tests/integration/api/test_quotas_and_paging.py": "quotas-and-paging",
    "tests/integration/api/test_unicode_inputs.py": "unicode-inputs",
    "tests/integration/replica/test_vouching.py": "vouching",
    "tests/unit/edge/test_console.py": "unit-console",
}


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` that groups by `GROUPS` itself.

    xdist's own loadgroup reads the group from a suffix it adds to each test's node id
    (`item._nodeid`), which pytest 9 no longer reads (a node's id is `item._id`): the marks
    grouped nothing, and the grouped files were spread over every worker. This scheduler finds
    the group from the test's file in the node id instead.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling  # type: ignore[import-untyped]

    class _FileGroups(LoadGroupScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            group = GROUPS.get(nodeid.split("::", 1)[0])
            return nodeid if group is None else group

    return _FileGroups(config, log)


def _group_of(item: pytest.Item, root: Path) -> str | None:
    try:
        relative = item.path.relative_to(root).as_posix()
    except ValueError:
        return None
    return GROUPS.get(relative)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the grouped tests to the front, keeping every other order (the scheduler above
    keeps each group on one worker)."""
    root = config.rootpath
    stale = sorted(path for path in GROUPS if not (root / path).is_file())
    if stale:
        raise pytest.UsageError(
            f"tests/support/parallel.py names files that do not exist: {', '.join(stale)}"
        )
    grouped: list[pytest.Item] = []
    others: list[pytest.Item] = []
    for item in items:
        group = _group_of(item, root)
        if group is None:
            others.append(item)
        else:
            grouped.append(item)
    # The longest groups first (GROUPS lists them so), each group's tests in their own order;
    # then the slow tiers' tests, so that the run ends on short unit tests, not on a long one.
    rank = {group: i for i, group in enumerate(dict.fromkeys(GROUPS.values()))}
    grouped.sort(key=lambda item: rank[_group_of(item, root) or ""])
    others.sort(key=lambda item: _tier_rank(item, root))
    items[:] = grouped + others


_TIERS = ("tests/e2e/", "tests/security/", "tests/integration/")


def _tier_rank(item: pytest.Item, root: Path) -> int:
    try:
        relative = item.path.relative_to(root).as_posix()
    except ValueError:
        return len(_TIERS)
    return next((i for i, tier in enumerate(_TIERS) if relative.startswith(tier)), len(_TIERS))
