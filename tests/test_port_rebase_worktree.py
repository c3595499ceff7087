"""A rebase that pauses twice hands the person one worktree, moved on between the pauses.

Between two pauses the worktree is not removed and checked out again (seconds on a tree of vLLM's
size): its index, files and HEAD move to the last commit built, writing only the files that differ.
What the person left in it is in the resolved row's commit, and nothing of it stays behind for the
next row; the worktree is still the rebase's own (locked), so ``--abort`` finds it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hyperqwen_patches.port import pausing
from hyperqwen_patches.port.model import RebaseRequest, RebaseResult
from hyperqwen_patches.port.run import port
from tests.test_port import BASE, forked_series, lines_with, make_patch, release


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def test_two_pauses_share_one_worktree_moved_on(tmp_path: Path) -> None:
    repo, fork, old, new = _two_pause_project(tmp_path)
    kw = {"from_source": f"dir:{old}", "to_source": f"dir:{new}"}

    def run(action: str) -> RebaseResult:
        _, result = port(repo, "0.30.0", rebase=RebaseRequest(fork=fork, action=action), **kw)  # type: ignore[arg-type]
        assert result is not None
        return result

    first = run("start")
    assert first.paused is not None and first.paused.row == "row-c1"
    worktree = first.paused.worktree
    marker = worktree / "vllm/c1.py"
    assert "<<<<<<<" in marker.read_text()
    marker.write_text(lines_with({20: "line 20 both\n"}))
    (worktree / "vllm/NOTES.txt").write_text(
        "the person's note\n"
    )  # untracked: part of the resolution

    second = run("continue")
    assert second.paused is not None and second.paused.row == "row-c2"
    assert second.paused.worktree == worktree
    state = pausing.load(fork / ".git")
    assert state is not None
    # HEAD, index and files are the last commit built (the resolution, then row-a) ...
    assert git(worktree, "rev-parse", "HEAD") == state.parent
    resolved = dict((r, c) for r, c, _ in second.commits)["row-c1"]
    assert git(fork, "show", f"{resolved}:vllm/NOTES.txt") == "the person's note"
    assert git(fork, "show", f"{state.parent}:vllm/a.py") + "\n" == lines_with({5: "line 5 ours\n"})
    assert (worktree / "vllm/a.py").read_text() == lines_with({5: "line 5 ours\n"})
    # ... with only the paused row's file changed in it, nothing left of the last row.
    assert git(worktree, "status", "--porcelain") == "M vllm/c2.py"
    assert "<<<<<<<" in (worktree / "vllm/c2.py").read_text()
    assert worktree.resolve() in [p.resolve() for p in pausing.ours(fork / ".git")]

    (worktree / "vllm/c2.py").write_text(lines_with({20: "line 20 both\n"}))
    done = run("continue")
    assert done.state == "done" and not worktree.exists()
    assert git(fork, "show", f"{done.tip}:vllm/c2.py") + "\n" == lines_with({20: "line 20 both\n"})


def _two_pause_project(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    old = release(tmp_path, "old", {"vllm/c1.py": BASE, "vllm/c2.py": BASE, "vllm/a.py": BASE})
    new = release(
        tmp_path,
        "new",
        {
            "vllm/c1.py": lines_with({20: "line 20 upstream\n"}),
            "vllm/c2.py": lines_with({20: "line 20 upstream\n"}),
            "vllm/a.py": BASE,
        },
    )
    w = tmp_path / "w"
    rows = [
        ("row-c1", make_patch("vllm/c1.py", BASE, lines_with({20: "line 20 ours\n"}), w)),
        ("row-a", make_patch("vllm/a.py", BASE, lines_with({5: "line 5 ours\n"}), w)),
        ("row-c2", make_patch("vllm/c2.py", BASE, lines_with({20: "line 20 ours\n"}), w)),
    ]
    repo, fork = forked_series(tmp_path, rows, old)
    return repo, fork, old, new


def test_a_continue_killed_anywhere_loses_no_resolution(tmp_path: Path) -> None:
    """SIGKILL at random moments of a real ``--continue`` process (seeded delays over its whole run):
    after each, the next ``--continue`` (or a second one) ends with the person's resolutions in the
    branch, the fork's refs untouched but for the new branch, no worktree left."""
    import os
    import random
    import signal
    import sys
    import time

    rng = random.Random(43)
    both = lines_with({20: "line 20 both\n"})
    for round_ in range(12):
        work = tmp_path / f"r{round_}"
        work.mkdir()
        repo, fork, old, new = _two_pause_project(work)
        refs = git(fork, "for-each-ref")
        argv = [sys.executable, "-m", "hyperqwen_patches", "port", "--to", "0.30.0", "--rebase",
                "--fork", str(fork), "--repo", str(repo), "--from-source", f"dir:{old}",
                "--source", f"dir:{new}"]  # fmt: skip
        env = {**os.environ, "NO_COLOR": "1"}
        started = subprocess.run(argv, capture_output=True, text=True, env=env)
        assert started.returncode == 1, started.stderr  # paused at row-c1
        worktree = work / "fork-port-0.30.0"
        (worktree / "vllm/c1.py").write_text(both)
        go_on = [*argv, "--continue"]
        proc = subprocess.Popen(
            go_on, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
        )
        time.sleep(rng.uniform(0.0, 0.4))  # a --continue here runs 0.2-0.4 s
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for _ in range(4):  # resume until done, resolving what pauses
            state = pausing.load(fork / ".git")
            if state is None:
                break
            assert state.row in ("row-c1", "row-c2"), state.row
            target = worktree / ("vllm/c1.py" if state.row == "row-c1" else "vllm/c2.py")
            if state.ready and "<<<<<<<" in target.read_text():
                target.write_text(both)  # a pause the person has not seen yet
            again = subprocess.run(go_on, capture_output=True, text=True, env=env)
            assert again.returncode in (0, 1), again.stderr
        assert pausing.load(fork / ".git") is None, f"round {round_}: still paused"
        tip = git(fork, "rev-parse", "qwen/0.30")
        for path in ("vllm/c1.py", "vllm/c2.py"):
            assert git(fork, "show", f"{tip}:{path}") + "\n" == both, (round_, path)
        assert git(fork, "show", f"{tip}:vllm/a.py") + "\n" == lines_with({5: "line 5 ours\n"})
        after = set(git(fork, "for-each-ref").splitlines())
        assert after - {git(fork, "for-each-ref", "refs/heads/qwen/0.30")} == set(refs.splitlines())
        assert git(fork, "worktree", "list").count("\n") == 0 and not worktree.exists()


def test_a_worktree_half_set_up_is_set_up_again_not_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed while the worktree moves on to the next pause (the state already saved, not ready):
    --continue tries the row again and sets the worktree up, rather than commit what it holds."""
    repo, fork, old, new = _two_pause_project(tmp_path)
    kw = {"from_source": f"dir:{old}", "to_source": f"dir:{new}"}

    def run(action: str) -> RebaseResult:
        _, result = port(repo, "0.30.0", rebase=RebaseRequest(fork=fork, action=action), **kw)  # type: ignore[arg-type]
        assert result is not None
        return result

    worktree = run("start").paused.worktree  # type: ignore[union-attr]
    (worktree / "vllm/c1.py").write_text(lines_with({20: "line 20 both\n"}))

    def dies(git_dir: Path, wt: Path, commit: str, files: object) -> bool:
        git(
            wt, "read-tree", "--reset", "-u", commit
        )  # half way: moved, the row's files not written
        raise KeyboardInterrupt

    monkeypatch.setattr(pausing, "move_worktree", dies)
    with pytest.raises(KeyboardInterrupt):
        run("continue")
    monkeypatch.undo()
    state = pausing.load(fork / ".git")
    assert state is not None and state.row == "row-c2" and not state.ready
    again = run("continue")  # not a resolution of row-c2: the worktree is set up again
    assert again.paused is not None and again.paused.row == "row-c2"
    assert "<<<<<<<" in (worktree / "vllm/c2.py").read_text()
    assert pausing.load(fork / ".git").ready  # type: ignore[union-attr]
    assert [c[0] for c in again.commits] == ["row-c1", "row-a"]


def test_the_forks_own_filters_never_run_on_the_rebases_files(tmp_path: Path) -> None:
    """A fork whose config defines a clean and a smudge filter for .py files (attributes in its
    info/attributes, as an LFS-like setup has them): the pause's worktree holds the rows' bytes and
    the resolved commit the person's bytes, with nothing of either filter in them."""
    repo, fork, old, new = _two_pause_project(tmp_path)
    git(fork, "config", "filter.inject.clean", "sed 's/^/CLEANED /'")
    git(fork, "config", "filter.inject.smudge", "sed 's/^/SMUDGED /'")
    git(fork, "config", "filter.inject.required", "true")
    (fork / ".git/info").mkdir(exist_ok=True)
    (fork / ".git/info/attributes").write_text("*.py filter=inject\n")
    kw = {"from_source": f"dir:{old}", "to_source": f"dir:{new}"}
    _, first = port(repo, "0.30.0", rebase=RebaseRequest(fork=fork), **kw)  # type: ignore[arg-type]
    assert first is not None and first.paused is not None
    worktree = first.paused.worktree
    assert (worktree / "vllm/a.py").read_text() == BASE  # no smudge on checkout
    (worktree / "vllm/c1.py").write_text(lines_with({20: "line 20 both\n"}))
    _, second = port(repo, "0.30.0", rebase=RebaseRequest(fork=fork, action="continue"), **kw)  # type: ignore[arg-type]
    assert second is not None
    resolved = dict((r, c) for r, c, _ in second.commits)["row-c1"]
    assert git(fork, "show", f"{resolved}:vllm/c1.py") + "\n" == lines_with({20: "line 20 both\n"})
    assert "SMUDGED" not in (worktree / "vllm/a.py").read_text()
