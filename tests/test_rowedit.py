"""``edit ROW`` and ``refresh`` on real git repositories: a row changed through the fork in two
commands, the later rows re-applied, the export written, and ``import`` of the result reproducing
every SHA the manifest names (the committer is pinned as import pins it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_git import PRISTINE, make_fork, sh, write_tree_files
from test_import_roundtrip import export, new_series

from hyperqwen_patches.series.manifest import load_manifest

BRANCH = "qwen38/0.29"


def hqp(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", *map(str, args)],
        cwd=cwd, capture_output=True, text=True, check=False,
    )  # fmt: skip


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    """(series repository, the maintainer's fork): four rows exported from a real fork, the pristine
    tree as a dir: source."""
    fork = tmp_path / "fork"
    make_fork(fork)
    write_tree_files(tmp_path / "pristine", PRISTINE)
    series = new_series(tmp_path / "series")
    manifest = series / "patches/manifest.yaml"
    manifest.write_text(
        manifest.read_text().replace(
            "source: pypi:vllm==0.29.0", f"source: dir:{tmp_path / 'pristine'}"
        )
    )
    export(series, fork)
    return series, fork


def failing(series: Path, *args: str) -> set[str]:
    proc = hqp("check", "--json", *args, cwd=series)
    doc = json.loads(proc.stdout)
    return {f["check"] for f in doc["findings"] if f.get("severity", "error") == "error"}


def tip(fork: Path) -> str:
    return sh(["rev-parse", f"refs/heads/{BRANCH}"], cwd=fork).decode().strip()


def test_edit_then_refresh_changes_the_row_and_import_reproduces_every_sha(
    project: tuple[Path, Path], tmp_path: Path
) -> None:
    series, fork = project
    before = failing(series, "--fork", str(fork))
    old_patch = (series / "patches/envs-knob.patch").read_bytes()
    later_patch = (series / "patches/crlf-latin1.patch").read_bytes()
    opened = hqp("edit", "envs-knob", "--fork", fork, cwd=series)
    assert opened.returncode == 0, opened.stderr
    worktree = Path(opened.stdout.strip().splitlines()[-1])
    assert worktree == series / ".hqp/edit/envs-knob"
    envs = worktree / "vllm/envs.py"
    envs.write_bytes(envs.read_bytes().replace(b"VLLM_KNOB_3 = ", b"VLLM_KNOB_3: int = "))
    (worktree / "vllm/__pycache__").mkdir()  # a test run in the work tree: not part of the row
    (worktree / "vllm/__pycache__/envs.cpython-311.pyc").write_bytes(b"\x00bytecode")

    done = hqp("refresh", "--fork", fork, cwd=series)
    assert done.returncode == 0, done.stderr
    assert "re-applied crlf-latin1" in done.stdout and "re-applied new-module" in done.stdout
    new_patch = (series / "patches/envs-knob.patch").read_bytes()
    assert new_patch != old_patch and b"+VLLM_KNOB_3: int = " in new_patch
    assert (series / "patches/crlf-latin1.patch").read_bytes() == later_patch  # content unchanged
    assert b"__pycache__" not in new_patch
    manifest = load_manifest(series)
    assert manifest.rows[-1].commit == tip(fork)
    log = sh(["log", "--format=%cn %ce %cd %ad", "--date=raw", BRANCH], cwd=fork).decode()
    for line in log.splitlines()[:4]:  # committer pinned, its date the author date
        name, email, cdate, ctz, adate, atz = line.rsplit(" ", 5)
        assert (name, email) == ("hyperqwen-patches", "pristine@hyperqwen-patches.invalid")
        assert (cdate, ctz) == (adate, atz)
    # Nothing check verifies got worse (the fixture's own findings, such as its TODO rows, stay).
    assert failing(series, "--fork", str(fork)) == before

    again = hqp("import", "--into", tmp_path / "again", "--create", cwd=series)
    assert again.returncode == 0, again.stderr
    rebuilt = sh(["log", "--format=%H", BRANCH], cwd=tmp_path / "again").decode().split()
    assert rebuilt[:4] == [r.commit for r in reversed(manifest.rows)]

    nothing = hqp("refresh", "--fork", fork, "--close", cwd=series)
    assert nothing.returncode == 0 and "nothing to do" in nothing.stdout
    assert not worktree.exists()


def test_a_later_row_that_no_longer_applies_stops_the_refresh_and_changes_nothing(
    project: tuple[Path, Path],
) -> None:
    series, fork = project
    worktree = Path(hqp("edit", "envs-knob", "--fork", fork, cwd=series).stdout.split()[-1])
    crlf = worktree / "vllm/crlf.py"
    crlf.write_bytes(crlf.read_bytes().replace(b"return 1\r\n", b"return 7\r\n"))
    files = {p: p.read_bytes() for p in (series / "patches").iterdir() if p.is_file()}
    at = tip(fork)
    proc = hqp("refresh", "--fork", fork, cwd=series)
    assert proc.returncode == 1
    assert "refresh stopped: row crlf-latin1 does not apply at fuzz 0: vllm/crlf.py" in proc.stderr
    assert "nothing was changed" in proc.stderr and "hint:" in proc.stderr
    assert tip(fork) == at
    assert {p: p.read_bytes() for p in (series / "patches").iterdir() if p.is_file()} == files
    assert crlf.read_bytes().count(b"return 7") == 1  # the work tree kept for another try


def test_without_a_fork_the_tool_keeps_one_and_refreshes_a_shipped_bundle(
    project: tuple[Path, Path],
) -> None:
    series, fork = project
    bundled = hqp("export", "--fork", fork, "--bundle", cwd=series)
    assert bundled.returncode == 0, bundled.stderr
    bundle = series / "patches/fork.bundle"
    first = bundle.read_bytes()
    before = failing(series)
    shutil.rmtree(fork)  # the maintainer's fork is gone: the series alone is enough
    opened = hqp("edit", "new-module", cwd=series)
    assert opened.returncode == 0, opened.stderr
    assert "built the fork from the series" in opened.stderr
    assert (series / ".hqp/.gitignore").read_text().splitlines()[-1] == "*"
    worktree = Path(opened.stdout.split()[-1])
    again = hqp("edit", "new-module", cwd=series)  # the open edit, as it is: no re-import under it
    assert again.returncode == 0 and Path(again.stdout.split()[-1]) == worktree
    assert "built the fork" not in again.stderr
    busy = hqp("new", "x", "--after", "envs-knob", cwd=series)
    assert busy.returncode == 2 and "row new-module is being edited" in busy.stderr
    module = next(worktree.rglob("module.py"))
    module.write_bytes(module.read_bytes() + b"EXTRA = 1\n")
    done = hqp("refresh", "--close", cwd=series)
    assert done.returncode == 0, done.stderr
    assert "patches/fork.bundle" in done.stdout
    assert bundle.read_bytes() != first
    assert failing(series) == before  # the default check reads the refreshed bundle: no drift


def test_refresh_with_no_edit_and_edit_of_no_such_row_are_usage_errors(
    project: tuple[Path, Path],
) -> None:
    series, fork = project
    none = hqp("refresh", "--fork", fork, cwd=series)
    assert none.returncode == 2 and "no edit is open" in none.stderr and "edit ROW" in none.stderr
    wrong = hqp("edit", "nope", "--fork", fork, cwd=series)
    assert wrong.returncode == 2 and "no row 'nope'" in wrong.stderr
    hqp("edit", "envs-knob", "--fork", fork, cwd=series)
    other = hqp("edit", "crlf-latin1", "--fork", fork, cwd=series)
    assert other.returncode == 2 and "row envs-knob is being edited" in other.stderr


def test_new_adds_a_row_where_it_is_asked_and_refresh_gives_it_content(
    project: tuple[Path, Path], tmp_path: Path
) -> None:
    series, _ = project
    # Start from a fork import built (the maintainer's commits carry their own committer, which no
    # import reproduces), as the shipped series does.
    fork = tmp_path / "imported"
    assert hqp("import", "--into", fork, "--create", cwd=series).returncode == 0
    assert hqp("export", "--fork", fork, cwd=series).returncode == 0
    before = failing(series, "--fork", str(fork))
    made = hqp("new", "extra-knob", "--after", "envs-knob", "--what", "One more knob", "--fork",
               fork, cwd=series)  # fmt: skip
    assert made.returncode == 0, made.stderr
    worktree = Path(made.stdout.split()[-1])
    assert [r.name for r in load_manifest(series).rows][:3] == [
        "envs-knob",
        "extra-knob",
        "crlf-latin1",
    ]
    with (worktree / "vllm/envs.py").open("ab") as fh:
        fh.write(b"VLLM_EXTRA = 1\n")
    done = hqp("refresh", "--fork", fork, "--close", cwd=series)
    assert done.returncode == 0, done.stderr
    patch = (series / "patches/extra-knob.patch").read_bytes()
    assert b"Subject: [PATCH] extra-knob: One more knob" in patch and b"+VLLM_EXTRA = 1\n" in patch
    listed = [
        line
        for line in (series / "patches/series").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert listed[:3] == ["envs-knob.patch", "extra-knob.patch", "crlf-latin1.patch"]
    # Its retires_when says TODO until someone writes it; nothing else check verifies changed.
    assert failing(series, "--fork", str(fork)) == before
    again = hqp("import", "--into", tmp_path / "again", "--create", cwd=series)
    assert again.returncode == 0, again.stderr
    rebuilt = sh(["log", "--format=%H", BRANCH], cwd=tmp_path / "again").decode().split()
    assert rebuilt[:5] == [r.commit for r in reversed(load_manifest(series).rows)]

    taken = hqp("new", "extra-knob", "--after", "envs-knob", "--fork", fork, cwd=series)
    assert taken.returncode == 2 and "exists already" in taken.stderr
    bad = hqp("new", "Bad Name", "--after", "envs-knob", "--fork", fork, cwd=series)
    assert bad.returncode == 2 and "row name" in bad.stderr
