"""``edit``/``refresh``/``new`` keep what is not theirs: the work tree's index when a refresh stops,
other rows' uncommitted patch edits, the user's git config; the fork's own filters and hooks never
run; one edit per fork; ``edit --abort`` drops an edit."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_git import sh
from test_rowedit import BRANCH, hqp, project, tip  # noqa: F401  (project: a fixture)
from test_rowops import imported_fork, reproduced, whole

from hyperqwen_patches import gitrun
from hyperqwen_patches.fork import rowjournal


@pytest.fixture
def setup(project: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:  # noqa: F811
    series, _ = project
    return series, imported_fork(series, tmp_path)


def user_git(worktree: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=worktree, capture_output=True, text=True, check=True
    ).stdout


def test_a_refresh_that_stops_leaves_the_work_tree_and_its_index_as_they_were(
    setup: tuple[Path, Path],
) -> None:
    series, fork = setup
    worktree = Path(hqp("edit", "envs-knob", "--fork", fork, cwd=series).stdout.split()[-1])
    crlf = worktree / "vllm/crlf.py"
    crlf.write_bytes(crlf.read_bytes().replace(b"return 1\r\n", b"return 7\r\n"))
    (worktree / "vllm/brand_new.py").write_bytes(b"x = 1\n")
    status = user_git(worktree, "status", "--porcelain")
    assert " M vllm/crlf.py" in status and "?? vllm/brand_new.py" in status
    stopped = hqp("refresh", "--fork", fork, cwd=series)
    assert stopped.returncode == 1 and "edit --abort" in stopped.stderr
    assert user_git(worktree, "status", "--porcelain") == status  # nothing staged
    user_git(worktree, "checkout", ".")  # so `git checkout .` still undoes the change
    assert b"return 7" not in crlf.read_bytes()


def test_the_forks_clean_filter_and_hooks_do_not_run_in_an_edit(
    setup: tuple[Path, Path], tmp_path: Path
) -> None:
    series, fork = setup
    git_dir = gitrun.git_dir_of(fork)
    sh(["config", "filter.inject.clean", "sed '1i INJECTED_BY_FILTER = 1'"], cwd=fork)
    sh(["config", "filter.inject.smudge", "sed '1i SMUDGED_BY_FILTER = 1'"], cwd=fork)
    sh(["config", "filter.inject.required", "true"], cwd=fork)
    (git_dir / "info").mkdir(exist_ok=True)
    (git_dir / "info/attributes").write_text("*.py filter=inject\n")
    marker = tmp_path / "hook-ran"
    for hook in ("post-commit", "reference-transaction", "post-checkout", "post-index-change"):
        path = git_dir / "hooks" / hook
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"#!/bin/sh\ntouch {marker}\n")
        path.chmod(0o755)
    worktree = Path(hqp("edit", "envs-knob", "--fork", fork, cwd=series).stdout.split()[-1])
    envs = worktree / "vllm/envs.py"
    assert b"SMUDGED_BY_FILTER" not in envs.read_bytes()  # the checkout ran no smudge filter
    envs.write_bytes(envs.read_bytes().replace(b"VLLM_KNOB_3 = ", b"VLLM_KNOB_3: int = "))
    done = hqp("refresh", "--fork", fork, "--close", cwd=series)
    assert done.returncode == 0, done.stderr
    patches = b"".join(p.read_bytes() for p in (series / "patches").glob("*.patch"))
    assert b"VLLM_KNOB_3: int = " in patches
    assert b"INJECTED_BY_FILTER" not in patches
    shown = sh(["show", f"{BRANCH}~3:vllm/envs.py"], cwd=fork)
    assert b"INJECTED_BY_FILTER" not in shown
    assert not marker.exists()


def test_refresh_refuses_to_overwrite_a_hand_edit_of_another_rows_patch(
    setup: tuple[Path, Path],
) -> None:
    series, fork = setup
    worktree = Path(hqp("edit", "envs-knob", "--fork", fork, cwd=series).stdout.split()[-1])
    envs = worktree / "vllm/envs.py"
    envs.write_bytes(envs.read_bytes().replace(b"VLLM_KNOB_3 = ", b"VLLM_KNOB_3: int = "))
    other = series / "patches/crlf-latin1.patch"
    other.write_bytes(other.read_bytes().replace(b"Keep CRLF", b"Keep the CRLF"))
    before = whole(series, fork)
    refused = hqp("refresh", "--fork", fork, cwd=series)
    assert refused.returncode == 2
    assert "would overwrite changes to other rows' files: patches/crlf-latin1.patch" in (
        refused.stderr
    )
    assert whole(series, fork) == before


def test_edit_abort_drops_the_edit_and_a_second_edit_is_refused_in_one_line(
    setup: tuple[Path, Path],
) -> None:
    series, fork = setup
    worktree = Path(hqp("edit", "1", "--fork", fork, cwd=series).stdout.split()[-1])
    assert worktree.name == "envs-knob"
    second = hqp("edit", "crlf-latin1.patch", "--fork", fork, cwd=series)
    assert second.returncode == 2
    assert second.stderr.strip().count("\n") == 0 and "one edit at a time" in second.stderr
    (worktree / "vllm/envs.py").write_bytes(b"changed\n")
    at = tip(fork)
    dropped = hqp("edit", "--abort", "--fork", fork, cwd=series)
    assert dropped.returncode == 0 and "dropped the edit of row envs-knob" in dropped.stdout
    assert not worktree.exists() and tip(fork) == at
    assert not (gitrun.git_dir_of(fork) / "hqp-edit.json").exists()
    assert hqp("refresh", "--fork", fork, cwd=series).returncode == 2  # nothing open
    assert hqp("edit", "crlf-latin1", "--fork", fork, cwd=series).returncode == 0


def test_a_row_command_while_another_runs_on_the_fork_is_refused(
    setup: tuple[Path, Path],
) -> None:
    series, fork = setup
    lock = gitrun.git_dir_of(fork) / rowjournal.LOCK
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        for argv in (("edit", "envs-knob"), ("drop", "envs-knob"), ("move", "1", "--after", "2")):
            busy = hqp(*argv, "--fork", fork, cwd=series)
            assert busy.returncode == 2 and "another row command" in busy.stderr, argv
    finally:
        os.close(fd)
    assert hqp("edit", "envs-knob", "--fork", fork, cwd=series).returncode == 0


def test_new_without_a_git_identity_uses_the_tools_and_leaves_git_config_alone(
    setup: tuple[Path, Path], tmp_path: Path
) -> None:
    series, fork = setup
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_AUTHOR", "GIT_COMMITTER"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), GIT_CONFIG_NOSYSTEM="1")
    made = subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", "new", "ci-row", "--after", "envs-knob",
         "--fork", str(fork)],
        cwd=series, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    author = sh(["log", "-1", "--format=%an <%ae>", f"{BRANCH}~3"], cwd=fork).decode().strip()
    assert author == "hyperqwen-patches <pristine@hyperqwen-patches.invalid>"
    assert list(home.iterdir()) == []  # no config written anywhere


def test_a_refresh_whose_export_refuses_moves_nothing_and_the_next_one_exports(
    setup: tuple[Path, Path],
) -> None:
    series, fork = setup
    worktree = Path(hqp("edit", "envs-knob", "--fork", fork, cwd=series).stdout.split()[-1])
    envs = worktree / "vllm/envs.py"
    envs.write_bytes(envs.read_bytes().replace(b"VLLM_KNOB_3 = ", b"VLLM_KNOB_3: int = "))
    (worktree / "vllm/blob.bin").write_bytes(b"\x00\x01binary\x00")
    before = whole(series, fork)
    refused = hqp("refresh", "--fork", fork, cwd=series)
    assert refused.returncode != 0 and "binary" in refused.stderr
    assert whole(series, fork) == before  # the branch did not move without the files
    (worktree / "vllm/blob.bin").unlink()
    done = hqp("refresh", "--fork", fork, cwd=series)
    assert done.returncode == 0 and "nothing to do" not in done.stdout, done.stdout
    assert b"VLLM_KNOB_3: int = " in (series / "patches/envs-knob.patch").read_bytes()


def test_two_edits_at_once_one_wins_and_the_other_says_so(setup: tuple[Path, Path]) -> None:
    series, fork = setup
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "hyperqwen_patches", "edit", row, "--fork", str(fork)],
            cwd=series,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for row in ("envs-knob", "crlf-latin1")
    ]
    results = [(p.wait(), p.stderr.read() if p.stderr else "") for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    assert loser.strip().count("\n") == 0  # one line
    assert "another row command" in loser or "one edit at a time" in loser


def test_drop_and_move_wait_for_the_open_edit(setup: tuple[Path, Path]) -> None:
    series, fork = setup
    assert hqp("edit", "envs-knob", "--fork", fork, cwd=series).returncode == 0
    before = whole(series, fork)
    for argv in (("drop", "crlf-latin1"), ("move", "1", "--after", "2"), ("rename", "1", "x")):
        busy = hqp(*argv, "--fork", fork, cwd=series)
        assert busy.returncode == 2 and "row envs-knob is being edited" in busy.stderr, argv
    assert whole(series, fork) == before


def test_a_journal_naming_a_file_outside_the_repository_restores_nothing(
    setup: tuple[Path, Path], tmp_path: Path
) -> None:
    series, fork = setup
    git_dir = gitrun.git_dir_of(fork)
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    rowjournal.begin(
        git_dir, op="drop x", root=series,
        files={"PATCHES.md": b"forged\n", "../outside.txt": None},
        branch=BRANCH, old_tip=tip(fork),
    )  # fmt: skip
    before = whole(series, fork)
    refused = hqp("drop", "envs-knob", "--fork", fork, cwd=series)
    assert refused.returncode == 2 and "outside.txt" in refused.stderr
    assert outside.read_text() == "keep me\n"
    assert whole(series, fork) == before  # PATCHES.md not "restored" either


def test_new_killed_between_branch_and_manifest_is_undone_by_the_next_row_command(
    setup: tuple[Path, Path],
) -> None:
    series, fork = setup
    before = whole(series, fork)
    killed = subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", "new", "extra", "--after", "envs-knob",
         "--fork", str(fork)],
        cwd=series, env={**os.environ, rowjournal.KILL_ENV: "branch"}, capture_output=True,
        check=False,
    )  # fmt: skip
    assert killed.returncode == -9
    assert tip(fork) != before[1]  # the branch moved, the manifest not yet
    again = hqp("new", "extra", "--after", "envs-knob", "--fork", fork, cwd=series)
    assert again.returncode == 0, again.stderr
    names = [line.strip() for line in (series / "patches/manifest.yaml").read_text().splitlines()]
    assert names.count("- name: extra") == 1
    rows = sh(["log", "--format=%(trailers:key=Hqp-Row,valueonly)", BRANCH], cwd=fork).decode()
    assert rows.split().count("extra") == 1  # one commit for the row, not two


def test_refresh_reads_deleted_new_and_committed_files_of_the_work_tree(
    setup: tuple[Path, Path], tmp_path: Path
) -> None:
    series, fork = setup
    worktree = Path(hqp("edit", "crlf-latin1", "--fork", fork, cwd=series).stdout.split()[-1])
    (worktree / "vllm/nonl.py").unlink()  # the row now deletes the file
    (worktree / "vllm/added.py").write_bytes(b"ADDED = 1\n")  # untracked: part of the row
    (worktree / "vllm/exec.sh").write_bytes(b"#!/bin/sh\n")
    (worktree / "vllm/exec.sh").chmod(0o755)
    user_git(worktree, "add", "vllm/exec.sh")
    user_git(worktree, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "wip")
    done = hqp("refresh", "--fork", fork, "--close", cwd=series)
    assert done.returncode == 0, done.stderr
    patch = (series / "patches/crlf-latin1.patch").read_bytes()
    assert b"deleted file mode 100644" in patch and b"vllm/nonl.py" in patch
    assert b"+ADDED = 1" in patch
    assert b"new file mode 100755" in patch and b"vllm/exec.sh" in patch
    reproduced(series, tmp_path / "again")


def test_the_forks_eol_and_ident_attributes_do_not_change_the_edited_row(
    setup: tuple[Path, Path],
) -> None:
    series, fork = setup
    git_dir = gitrun.git_dir_of(fork)
    (git_dir / "info").mkdir(exist_ok=True)
    (git_dir / "info/attributes").write_text("* text eol=crlf ident\n")
    before = {p.name: p.read_bytes() for p in (series / "patches").glob("*.patch")}
    worktree = Path(hqp("edit", "envs-knob", "--fork", fork, cwd=series).stdout.split()[-1])
    envs = worktree / "vllm/envs.py"
    assert b"\r\n" not in envs.read_bytes()  # checked out as stored
    envs.write_bytes(envs.read_bytes().replace(b"VLLM_KNOB_3 = ", b"VLLM_KNOB_3: int = "))
    done = hqp("refresh", "--fork", fork, "--close", cwd=series)
    assert done.returncode == 0, done.stderr
    patch = (series / "patches/envs-knob.patch").read_bytes()
    assert patch.count(b"\n+") - before["envs-knob.patch"].count(b"\n+") == 1  # one line more
    after = {p.name: p.read_bytes() for p in (series / "patches").glob("*.patch")}
    assert {n for n in after if after[n] != before[n]} == {"envs-knob.patch"}
