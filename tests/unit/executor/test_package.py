from __future__ import annotations

import stat
import tarfile
from pathlib import Path

import pytest

from executor.package import START_SCRIPT, PackageError, build_app_archive, main, start_script

EXECUTOR_MODULES = {"executor/__init__.py", "executor/__main__.py", "executor/worker.py"}


@pytest.fixture
def app(tmp_path: Path) -> Path:
    src = tmp_path / "myapp"
    (src / "pkg" / "__pycache__").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "jobs.py").write_text("def run(ctx):\n    pass\n")
    (src / "pkg" / "__pycache__" / "jobs.cpython-311.pyc").write_bytes(b"\0")
    (src / "pkg" / "stale.pyc").write_bytes(b"\0")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref: x")
    script = src / "scripts" / "run.sh"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o700)
    return src


def members(path: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return {info.name: info for info in tar.getmembers()}


def test_the_archive_holds_the_app_files_at_its_root_and_a_start_script(
    app: Path, tmp_path: Path
) -> None:
    archive = build_app_archive(app, tmp_path / "out" / "myapp.tar.gz")
    found = members(archive.path)
    assert set(found) == {"pkg/__init__.py", "pkg/jobs.py", "scripts/run.sh", START_SCRIPT}
    assert found[START_SCRIPT].mode == 0o755
    # The owner's execute bit survives; everyone may read.
    assert found["scripts/run.sh"].mode & stat.S_IXUSR
    assert found["pkg/jobs.py"].mode == 0o644
    assert {info.uid for info in found.values()} == {0}
    assert archive.app_url == archive.path.as_uri()
    assert not archive.bundled_executor


def test_bundling_copies_the_executor_package_into_the_archive(app: Path, tmp_path: Path) -> None:
    archive = build_app_archive(app, tmp_path / "myapp.tgz", bundle_executor=True)
    names = set(members(archive.path))
    assert names >= EXECUTOR_MODULES
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]
    assert archive.bundled_executor


def test_the_start_script_prefers_ejc_python_then_the_baked_interpreter() -> None:
    text = start_script("/opt/my python/bin/python3")
    assert text.startswith("#!/bin/sh\n")
    assert "python='/opt/my python/bin/python3'" in text
    assert "python=$EJC_PYTHON" in text
    assert 'exec "$python" -m executor "$@"' in text
    assert "python=python3\n" in start_script(None)


@pytest.mark.parametrize(
    ("prepare", "message"),
    [
        (lambda src: (src / "executor").mkdir(), "top-level 'executor'"),
        (
            lambda src: (src / "bin").mkdir() or (src / "bin" / "start.sh").write_text(""),
            "the packaging writes its own",
        ),
    ],
)
def test_reserved_names_are_refused(app: Path, tmp_path: Path, prepare, message: str) -> None:
    prepare(app)
    with pytest.raises(PackageError, match=message):
        build_app_archive(app, tmp_path / "a.tar.gz")
    assert not (tmp_path / "a.tar.gz").exists()


def test_bad_paths_are_refused(app: Path, tmp_path: Path) -> None:
    with pytest.raises(PackageError, match="not a directory"):
        build_app_archive(tmp_path / "missing", tmp_path / "a.tar.gz")
    with pytest.raises(PackageError, match=r"\.tar\.gz"):
        build_app_archive(app, tmp_path / "a.zip")


def test_an_archive_written_inside_the_app_folder_does_not_contain_itself(app: Path) -> None:
    archive = build_app_archive(app, app / "dist.tar.gz")
    build_app_archive(app, app / "dist.tar.gz")
    assert "dist.tar.gz" not in members(archive.path)


def test_the_command_prints_the_app_settings_and_exits_0(
    app: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cmd.tar.gz"
    assert main([str(app), str(out), "--bundle-executor", "--python", "/usr/bin/python3"]) == 0
    printed = capsys.readouterr().out
    assert f"appURL:          {out.as_uri()}" in printed
    assert "bootstrapScript: bin/start.sh" in printed
    assert main([str(tmp_path / "nope"), str(out)]) == 2
    assert "not a directory" in capsys.readouterr().err
