"""``drop``, ``move`` and ``rename`` on real git repositories: each followed by ``check`` (nothing
check verifies gets worse) and ``import`` (every SHA the manifest names reproduced), and killed
(SIGKILL at each step) leaving the series and the fork as they were once the next row command ran."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_git import sh
from test_rowedit import BRANCH, failing, hqp, project, tip  # noqa: F401  (project: a fixture)

from hyperqwen_patches import gitrun
from hyperqwen_patches.fork import rowjournal
from hyperqwen_patches.series.manifest import load_manifest


def imported_fork(series: Path, tmp_path: Path) -> Path:
    """A fork import built, exported back (the series' files are then what export writes)."""
    fork = tmp_path / "imported"
    assert hqp("import", "--into", fork, "--create", cwd=series).returncode == 0
    assert hqp("export", "--fork", fork, cwd=series).returncode == 0
    return fork


def listed(series: Path) -> list[str]:
    lines = (series / "patches/series").read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def reproduced(series: Path, into: Path) -> None:
    again = hqp("import", "--into", into, "--create", cwd=series)
    assert again.returncode == 0, again.stderr
    rows = [r for r in load_manifest(series).rows if r.skip is None]
    rebuilt = sh(["log", "--format=%H", BRANCH], cwd=into).decode().split()
    assert rebuilt[: len(rows)] == [r.commit for r in reversed(rows)]


def snapshot(series: Path, fork: Path) -> tuple[dict[str, bytes], str]:
    files = {
        str(p.relative_to(series)): p.read_bytes()
        for p in series.rglob("*")
        if p.is_file() and ".hqp" not in p.parts
    }
    return files, tip(fork)


@pytest.fixture
def setup(project: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:  # noqa: F811
    series, _ = project
    return series, imported_fork(series, tmp_path)


def test_move_reorders_fork_manifest_and_files_and_import_reproduces_them(
    setup: tuple[Path, Path], tmp_path: Path
) -> None:
    series, fork = setup
    before = failing(series, "--fork", str(fork))
    names = [r.name for r in load_manifest(series).rows]
    last = names[-1]
    done = hqp("move", last, "--before", "1", "--fork", fork, cwd=series)
    assert done.returncode == 0, done.stderr
    assert [r.name for r in load_manifest(series).rows] == [last, *names[:-1]]
    subjects = sh(["log", "--format=%(trailers:key=Hqp-Row,valueonly)", BRANCH], cwd=fork)
    assert subjects.decode().split()[: len(names)] == list(reversed([last, *names[:-1]]))
    assert failing(series, "--fork", str(fork)) == before
    reproduced(series, tmp_path / "again")


def test_drop_with_retirement_and_rename_by_number_hold_check_and_import(
    setup: tuple[Path, Path], tmp_path: Path
) -> None:
    series, fork = setup
    before = failing(series, "--fork", str(fork))
    first = load_manifest(series).rows[0]
    gone = hqp("drop", first.name, "--retired-by", "0.30.0", "--fork", fork, cwd=series)
    assert gone.returncode == 0, gone.stderr
    manifest = load_manifest(series)
    kept = manifest.row(first.name)
    assert kept is not None and kept.skip == "retired by 0.30.0 (see retirements)"
    assert [(t.row, t.pin) for t in manifest.retirements] == [(first.name, "0.30.0")]
    assert first.patch is not None and (series / first.patch).exists()  # check reverse-applies it
    assert Path(first.patch).name not in listed(series)
    rows = sh(["log", "--format=%(trailers:key=Hqp-Row,valueonly)", BRANCH], cwd=fork).decode()
    assert first.name not in rows.split()
    # What check says about the retirement is its own (the pin 0.30.0 is not at hand offline).
    assert failing(series, "--fork", str(fork)) - {"retirements"} <= before
    reproduced(series, tmp_path / "after-drop")

    plain = manifest.rows[-1]
    gone = hqp("drop", Path(plain.patch or "").name, "--fork", fork, cwd=series)
    assert gone.returncode == 0, gone.stderr
    manifest = load_manifest(series)
    assert manifest.row(plain.name) is None and not (series / (plain.patch or "x")).exists()
    assert failing(series, "--fork", str(fork)) - {"retirements"} <= before
    reproduced(series, tmp_path / "after-plain-drop")

    second = manifest.rows[1].name
    renamed = hqp("rename", "2", "renamed-row", "--fork", fork, cwd=series)
    assert renamed.returncode == 0, renamed.stderr
    manifest = load_manifest(series)
    assert manifest.rows[1].name == "renamed-row" and manifest.row(second) is None
    assert not any(second in line for line in listed(series))
    assert failing(series, "--fork", str(fork)) - {"retirements"} <= before
    reproduced(series, tmp_path / "after-rename")


def edit_state(fork: Path) -> bytes | None:
    state = gitrun.git_dir_of(fork) / "hqp-edit.json"
    return state.read_bytes() if state.exists() else None


def whole(series: Path, fork: Path) -> tuple[dict[str, bytes], str, bytes | None]:
    files, at = snapshot(series, fork)
    return files, at, edit_state(fork)


STEPS = ("journal", "file0", "file1", "files", "branch", "bundle", "state")


@pytest.mark.parametrize("op", ["refresh", "drop", "move"])
def test_a_row_command_killed_at_any_step_is_undone_whole_and_then_runs(
    setup: tuple[Path, Path], tmp_path: Path, op: str
) -> None:
    series, fork = setup
    assert hqp("export", "--fork", fork, "--bundle", cwd=series).returncode == 0
    if op == "refresh":
        worktree = Path(hqp("edit", "envs-knob", "--fork", fork, cwd=series).stdout.split()[-1])
        envs = worktree / "vllm/envs.py"
        envs.write_bytes(envs.read_bytes().replace(b"VLLM_KNOB_3 = ", b"VLLM_KNOB_3: int = "))
        argv: tuple[str | Path, ...] = ("refresh", "--fork", fork)
    elif op == "drop":
        argv = ("drop", "crlf-latin1", "--fork", fork)
    else:
        argv = ("move", "1", "--after", "3", "--fork", fork)
    before = whole(series, fork)
    git_dir = gitrun.git_dir_of(fork)
    for step in STEPS:
        killed = subprocess.run(
            [sys.executable, "-m", "hyperqwen_patches", *map(str, argv)],
            cwd=series, capture_output=True, env={**os.environ, rowjournal.KILL_ENV: step},
            check=False,
        )  # fmt: skip
        assert killed.returncode == -signal.SIGKILL, (step, killed.stderr)
        assert (git_dir / rowjournal.JOURNAL).exists(), step
        undone = rowjournal.recover(git_dir)
        assert undone is not None and op in undone
        assert whole(series, fork) == before, step  # as it was: files, branch, edit state
    # Killed once more, the next run of the command undoes the cut-short one and then does it.
    env = {**os.environ, rowjournal.KILL_ENV: "branch"}
    subprocess.run([sys.executable, "-m", "hyperqwen_patches", *map(str, argv)], cwd=series,
                   env=env, capture_output=True, check=False)  # fmt: skip
    done = hqp(*argv, cwd=series)
    assert done.returncode == 0, done.stderr
    assert "an interrupted" in done.stdout + done.stderr
    assert not (git_dir / rowjournal.JOURNAL).exists()
    after = whole(series, fork)
    assert after[1] != before[1] and after[0] != before[0]
    assert "bundle" not in failing(series)  # the bundle matches the exported series
    reproduced(series, tmp_path / "again")


def test_numbered_patch_files_follow_the_rows_new_order(
    setup: tuple[Path, Path], tmp_path: Path
) -> None:
    series, fork = setup
    manifest = series / "patches/manifest.yaml"
    text = manifest.read_text()
    patched = [r for r in load_manifest(series).rows if r.patch]
    for n, row in enumerate(patched, 1):
        old = Path(row.patch or "")
        new = old.with_name(f"{n:04d}-{old.name}")
        text = text.replace(f"patch: {old}\n", f"patch: {new}\n")
        (series / old).rename(series / new)
    manifest.write_text(text)
    assert hqp("render", cwd=series).returncode == 0
    assert hqp("export", "--fork", fork, cwd=series).returncode == 0
    names = [r.name for r in patched]
    moved = hqp("move", f"{len(names):04d}-{names[-1]}.patch", "--after", "1", "--fork", fork,
                cwd=series)  # fmt: skip
    assert moved.returncode == 0, moved.stderr
    assert f"removed: patches/{len(names):04d}-{names[-1]}.patch" in moved.stdout
    order = [names[0], names[-1], *names[1:-1]]
    assert listed(series) == [f"{n:04d}-{name}.patch" for n, name in enumerate(order, 1)]
    on_disk = sorted(p.name for p in (series / "patches").glob("*.patch"))
    assert on_disk == sorted(listed(series))  # the old numbers are gone
    reproduced(series, tmp_path / "again")
    renamed = hqp("rename", "0002-" + names[-1] + ".patch", "late-row", "--fork", fork, cwd=series)
    assert renamed.returncode == 0, renamed.stderr
    assert listed(series)[1] == "0002-late-row.patch"
    assert not (series / "patches" / f"0002-{names[-1]}.patch").exists()
    reproduced(series, tmp_path / "after-rename")


def test_a_move_that_breaks_a_later_row_stops_with_nothing_written(
    setup: tuple[Path, Path],
) -> None:
    series, fork = setup
    made = hqp("new", "knob-doc", "--after", "envs-knob", "--fork", fork, cwd=series)
    assert made.returncode == 0, made.stderr
    envs = Path(made.stdout.split()[-1]) / "vllm/envs.py"
    envs.write_bytes(envs.read_bytes().replace(b"'VLLM_HQP_KNOB', '1'", b"'VLLM_HQP_KNOB', '2'"))
    assert hqp("refresh", "--close", "--fork", fork, cwd=series).returncode == 0
    before = whole(series, fork)
    stopped = hqp("move", "knob-doc", "--before", "envs-knob", "--fork", fork, cwd=series)
    assert stopped.returncode == 1, stopped.stderr
    assert "move stopped: row knob-doc does not apply" in stopped.stderr
    assert "nothing was changed" in stopped.stderr
    assert whole(series, fork) == before
    cut = hqp("drop", "envs-knob", "--fork", fork, cwd=series)
    assert cut.returncode == 1 and "drop stopped: row knob-doc does not apply" in cut.stderr
    assert whole(series, fork) == before


def test_a_rewrite_refuses_to_overwrite_a_hand_edit_of_a_patch_file(
    setup: tuple[Path, Path],
) -> None:
    series, fork = setup
    other = series / "patches/new-module.patch"
    other.write_bytes(other.read_bytes().replace(b"Subject: [PATCH] ", b"Subject: [PATCH] Hand: "))
    before = whole(series, fork)
    for argv in (("drop", "crlf-latin1"), ("move", "1", "--after", "2"), ("rename", "2", "z")):
        refused = hqp(*argv, "--fork", fork, cwd=series)
        assert refused.returncode == 2, (argv, refused.stderr)
        assert "would overwrite changes" in refused.stderr
        assert "patches/new-module.patch" in refused.stderr
        assert whole(series, fork) == before


def test_the_files_a_module_row_owns_are_its_directorys() -> None:
    """What `drop` removes with a module row: the files of its directory (the shipped kvarn-modules
    row). Passing the row's directory name where the row was expected raised AttributeError on
    every module row (found by mypy)."""
    from hyperqwen_patches.fork.rowops import _row_files

    repo = Path(__file__).resolve().parent.parent
    manifest = load_manifest(repo)
    row = next(r for r in manifest.rows if r.is_module)
    files = _row_files(manifest, row)
    assert files and all(f.startswith(f"{row.files}/") for f in files)
    assert any(f.endswith(".py") for f in files)
