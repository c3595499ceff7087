"""A ``paths: package`` series (patch paths relative to the package directory, ``a/envs.py``) through
export, import, ``check --fork``, ``edit``/``refresh``: exactly as a ``paths: root`` one.

The incident (issue 38, item 4): after ``import`` and a rebase of an 18-row package-relative series,
``check --fork`` reported "semantic drift" on every row (the fork was exported root-relative and
compared with the package-relative files) and ``export`` refused to write them at all.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import require_gnu_patch
from fixtures_git import (
    BRANCH,
    FORK_COMMITS,
    PRISTINE,
    DictTree,
    FixtureCommit,
    make_fork,
    sh,
    write_tree_files,
)

from hyperqwen_patches.fork import exporting, exportplan, importing
from hyperqwen_patches.series.manifest import load_manifest

# The fixture's four rows (a CRLF file, Latin-1 bytes, a mode change, a rename, a new file) and a
# deletion.
COMMITS = (
    *FORK_COMMITS,
    FixtureCommit(row="drop-nonl", subject="Drop nonl.py", changes={b"vllm/nonl.py": None}),
)
# The rename's file as Python that compiles (port --rebase's verification compiles what rows touch).
TREE = {**PRISTINE, b"vllm/old_name.py": b"".join(b"STABLE_%d = %d\n" % (i, i) for i in range(12))}
ROWS = ["envs-knob", "crlf-latin1", "mode-rename", "new-module", "drop-nonl"]

MANIFEST = """\
format: 1
pin: "0.29.0"
package: vllm
source: dir:{pristine}
paths: package
export_points:
  - name: qwen38
    branch: {branch}
rows: []
retirements: []
"""


def hqp(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", *map(str, args)],
        cwd=cwd, capture_output=True, text=True, check=False,
    )  # fmt: skip


def export(root: Path, fork: Path) -> exportplan.ExportPlan:
    plan = exporting.plan_export(load_manifest(root), fork)
    exporting.write_export(plan)
    return plan


def patch_files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "patches").glob("*.patch"))}


def tree_of(repo: Path, rev: str) -> str:
    return sh(["rev-parse", f"{rev}^{{tree}}"], cwd=repo).decode().strip()


def failing(series: Path, fork: Path) -> set[str]:
    doc = json.loads(hqp("check", "--json", "--fork", fork, cwd=series).stdout)
    return {f["check"] for f in doc["findings"] if f.get("severity", "error") == "error"}


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    """(a package-relative series exported from a maintainer's fork, that fork)."""
    fork = tmp_path / "fork"
    make_fork(fork, COMMITS, TREE)
    write_tree_files(tmp_path / "pristine", TREE)
    series = tmp_path / "series"
    (series / "patches").mkdir(parents=True)
    (series / "patches/manifest.yaml").write_text(
        MANIFEST.format(pristine=tmp_path / "pristine", branch=BRANCH)
    )
    plan = export(series, fork)
    assert plan.added_rows == ROWS
    return series, fork


def test_export_writes_package_relative_files_that_gnu_patch_applies_inside_the_package(
    project: tuple[Path, Path], tmp_path: Path
) -> None:
    series, fork = project
    files = patch_files(series)
    joined = b"".join(files.values())
    assert b"a/vllm/" not in joined and b"b/vllm/" not in joined
    assert b"diff --git a/envs.py b/envs.py\n" in files["envs-knob.patch"]
    assert b"rename from old_name.py\nrename to new_name.py\n" in files["mode-rename.patch"]
    assert b"--- a/nonl.py\n+++ /dev/null\n" in files["drop-nonl.patch"]
    assert b"+++ b/hqp/module.py\n" in files["new-module.patch"]
    # The oracle: GNU patch -p1 inside the pristine package directory gives the fork's tip.
    work = tmp_path / "gnu"
    write_tree_files(work, TREE)
    for name in ROWS:
        subprocess.run(
            [require_gnu_patch(), "-p1", "--fuzz", "0", "--batch", "-s", "-i",
             series / f"patches/{name}.patch"],
            cwd=work / "vllm", check=True,
        )  # fmt: skip
    got = {
        p.relative_to(work).as_posix(): p.read_bytes()
        for p in sorted(work.rglob("*"))
        if p.is_file()
    }
    want = {
        p.relative_to(fork).as_posix(): p.read_bytes()
        for p in sorted((fork / "vllm").rglob("*"))
        if p.is_file()
    }
    assert got == want
    assert exporting.plan_export(load_manifest(series), fork).up_to_date


def test_import_then_export_is_byte_identical_and_check_fork_is_clean(
    project: tuple[Path, Path], tmp_path: Path
) -> None:
    series, fork = project
    first = patch_files(series)
    rebuilt = tmp_path / "rebuilt"
    results = importing.import_series(
        load_manifest(series), rebuilt, tree=DictTree(TREE), create=True
    )
    imported = [r.commit for r in results[0].rows]
    shas = sh(["rev-list", "--reverse", f"{BRANCH}~5..{BRANCH}"], cwd=fork).decode().split()
    # Replay identity per step: each imported commit's tree is the fork's.
    assert [tree_of(rebuilt, c) for c in imported] == [tree_of(fork, c) for c in shas]
    second = tmp_path / "series2"
    shutil.copytree(series, second)
    plan = export(second, rebuilt)
    assert patch_files(second) == first
    assert not plan.semantic and not plan.positional and not plan.added_rows
    # Every fork check passes on the imported fork (no "semantic drift", no replay difference).
    assert not failing(second, rebuilt) & {"export", "replay-identity", "fork-commits"}


def test_edit_and_refresh_a_row_of_a_package_relative_series(
    project: tuple[Path, Path], tmp_path: Path
) -> None:
    series, _ = project
    fork = tmp_path / "imported"
    assert hqp("import", "--into", fork, "--create", cwd=series).returncode == 0
    assert hqp("export", "--fork", fork, cwd=series).returncode == 0
    before = patch_files(series)
    opened = hqp("edit", "envs-knob", "--fork", fork, cwd=series)
    assert opened.returncode == 0, opened.stderr
    worktree = Path(opened.stdout.split()[-1])
    envs = worktree / "vllm/envs.py"
    envs.write_bytes(envs.read_bytes().replace(b"VLLM_KNOB_3 = ", b"VLLM_KNOB_3: int = "))
    done = hqp("refresh", "--fork", fork, "--close", cwd=series)
    assert done.returncode == 0, done.stderr
    after = patch_files(series)
    assert b"+VLLM_KNOB_3: int = " in after["envs-knob.patch"]
    assert b"diff --git a/envs.py b/envs.py\n" in after["envs-knob.patch"]
    assert {n: d for n, d in after.items() if n != "envs-knob.patch"} == {
        n: d for n, d in before.items() if n != "envs-knob.patch"
    }
    assert not failing(series, fork) & {"export", "replay-identity", "fork-commits"}
    again = tmp_path / "again"
    assert hqp("import", "--into", again, "--create", cwd=series).returncode == 0
    rebuilt = sh(["log", "--format=%H", "-5", BRANCH], cwd=again).decode().split()
    assert rebuilt == [r.commit for r in reversed(load_manifest(series).rows)]
    assert os.fsdecode(envs.name) == "envs.py"


def test_port_rebase_then_export_keeps_the_package_relative_files(
    project: tuple[Path, Path], tmp_path: Path
) -> None:
    """``port --rebase`` onto a release where envs.py moved by three lines: the new branch exports
    package-relative files that differ from the old ones only positionally, and check --fork on the
    new pin is clean."""
    from hyperqwen_patches.port.model import RebaseRequest
    from hyperqwen_patches.port.run import port

    series, _ = project
    fork = tmp_path / "imported"
    assert hqp("import", "--into", fork, "--create", cwd=series).returncode == 0
    newer = dict(TREE)
    newer[b"vllm/envs.py"] = b"import os\n\n\n" + PRISTINE[b"vllm/envs.py"]
    write_tree_files(tmp_path / "newer", newer)
    before = patch_files(series)
    _, rebased = port(
        series,
        "0.30.0",
        from_source=f"dir:{tmp_path / 'pristine'}",
        to_source=f"dir:{tmp_path / 'newer'}",
        rebase=RebaseRequest(fork=fork),
    )
    assert rebased is not None and rebased.ok, rebased
    manifest = series / "patches/manifest.yaml"
    text = manifest.read_text().replace('pin: "0.29.0"', 'pin: "0.30.0"')
    text = text.replace(f"dir:{tmp_path / 'pristine'}", f"dir:{tmp_path / 'newer'}")
    manifest.write_text(text.replace(f"branch: {BRANCH}", "branch: qwen38/0.30"))
    plan = export(series, fork)
    assert not plan.semantic, [(c.path, c.drift) for c in plan.changes]
    assert [c.path for c in plan.positional] == ["patches/envs-knob.patch"]
    after = patch_files(series)
    assert b"@@ -21,6 +21,7 @@" in after["envs-knob.patch"]
    assert b"diff --git a/envs.py b/envs.py\n" in after["envs-knob.patch"]
    assert {n: d for n, d in after.items() if n != "envs-knob.patch"} == {
        n: d for n, d in before.items() if n != "envs-knob.patch"
    }
    assert not failing(series, fork) & {"export", "replay-identity", "fork-commits"}
