"""The export and import commands end to end (Typer CLI), the shipped bundle, and refusals' exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fixtures_git import (
    BRANCH,
    PRISTINE,
    FixtureCommit,
    apply_commit,
    make_fork,
    sh,
    write_tree_files,
)
from test_import_roundtrip import new_series
from typer.testing import CliRunner

from hyperqwen_patches.cli import app

runner = CliRunner()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The real entry point (exit codes are mapped in cli.main, which CliRunner bypasses)."""
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_export_bundle_import_cycle(tmp_path: Path) -> None:
    fork = tmp_path / "fork"
    base, shas = make_fork(fork)
    series = new_series(tmp_path / "series")
    result = runner.invoke(app, ["export", "--fork", str(fork), "--repo", str(series), "--bundle"])
    assert result.exit_code == 0, result.output
    assert "new row    envs-knob" in result.output
    bundle = series / "patches" / "fork.bundle"
    first = bundle.read_bytes()
    # The bundle's one prerequisite is the base commit, and it carries the export point's branch.
    verify = sh(["bundle", "list-heads", str(bundle)], cwd=fork).decode()
    assert verify == f"{shas[-1]} refs/heads/{BRANCH}\n"
    header = first.split(b"\n\n", 1)[0].decode()
    assert f"-{base}" in header
    # Deterministic: the same fork gives the same bundle bytes.
    runner.invoke(app, ["export", "--fork", str(fork), "--repo", str(series), "--bundle"])
    assert bundle.read_bytes() == first

    # import into a fresh repository from the series (pristine from a directory source).
    pristine = tmp_path / "pristine"
    write_tree_files(pristine, PRISTINE)
    into = tmp_path / "rebuilt"
    result = runner.invoke(
        app,
        [
            "import",
            "--repo",
            str(series),
            "--into",
            str(into),
            "--create",
            "--source",
            f"dir:{pristine}",
        ],
    )
    assert result.exit_code == 0, result.output
    assert f"{BRANCH}: " in result.output and "(created; base 18cf6b708adc" in result.output
    # The rebuilt repository can fetch the bundle: its prerequisite (the base) is there.
    sh(["fetch", "-q", str(bundle), f"refs/heads/{BRANCH}:refs/remotes/bundle/fork"], cwd=into)
    assert sh(["rev-parse", "refs/remotes/bundle/fork^{tree}"], cwd=into) == sh(
        ["rev-parse", f"{BRANCH}^{{tree}}"], cwd=into
    )


def test_export_refusal_exit_code_and_nothing_written(tmp_path: Path) -> None:
    fork = tmp_path / "fork"
    make_fork(fork)
    apply_commit(fork, 7, FixtureCommit("outside", "Touch setup.py", {b"setup.py": b"x\n"}))
    series = new_series(tmp_path / "series")
    before = sorted(p.relative_to(series) for p in series.rglob("*"))
    result = cli("export", "--fork", str(fork), "--repo", str(series))
    assert result.returncode == 1, result.stderr
    assert "'Touch setup.py': touches setup.py, outside vllm/" in result.stderr
    assert sorted(p.relative_to(series) for p in series.rglob("*")) == before


def test_export_check_on_up_to_date_series(tmp_path: Path) -> None:
    fork = tmp_path / "fork"
    make_fork(fork)
    series = new_series(tmp_path / "series")
    runner.invoke(app, ["export", "--fork", str(fork), "--repo", str(series)])
    result = runner.invoke(app, ["export", "--fork", str(fork), "--repo", str(series), "--check"])
    assert result.exit_code == 0, result.output
    assert "every export is up to date" in result.output


def test_export_of_a_fork_on_another_pin_is_refused(tmp_path: Path) -> None:
    fork = tmp_path / "fork"
    make_fork(fork)
    series = new_series(tmp_path / "series")
    manifest = series / "patches" / "manifest.yaml"
    text = manifest.read_text().replace('pin: "0.29.0"', 'pin: "0.30.0"')
    manifest.write_text(text.replace("vllm==0.29.0", "vllm==0.30.0"))
    result = cli("export", "--fork", str(fork), "--repo", str(series))
    assert result.returncode == 1, result.stderr
    assert "is not built on the vllm 0.30.0 base commit" in result.stderr
    assert "says 'vllm 0.29.0 pristine tree'" in result.stderr


def test_import_into_a_missing_repository_without_create(tmp_path: Path) -> None:
    fork = tmp_path / "fork"
    make_fork(fork)
    series = new_series(tmp_path / "series")
    runner.invoke(app, ["export", "--fork", str(fork), "--repo", str(series)])
    pristine = tmp_path / "pristine"
    write_tree_files(pristine, PRISTINE)
    result = cli(
        "import", "--repo", str(series), "--into", str(tmp_path / "nowhere"),
        "--source", f"dir:{pristine}",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr  # bad input (README's table), not a git failure
    message = " ".join(result.stderr.split())  # the console wraps long lines
    assert "nowhere: no such repository" in message and "--create" in message
    assert not (tmp_path / "nowhere").exists()


def test_a_fork_path_that_is_not_there_is_exit_2_with_one_line(tmp_path: Path) -> None:
    series = new_series(tmp_path / "series")
    missing = tmp_path / "no-such-fork"
    for argv in (
        ["export", "--repo", str(series), "--fork", str(missing)],
        ["check", "--repo", str(series), "--fork", str(missing)],
    ):
        result = cli(*argv)
        assert result.returncode == 2, (argv, result.stderr)
        assert result.stderr.count(f"--fork {missing}: no such repository") == 1, result.stderr
