"""A rebase that pauses twice hands the person one worktree, moved on between the pauses.

Between two pauses the worktree is not removed and checked out again (seconds on a tree of vLLM's
size): its index, files and HEAD move to the last commit built, writing only the files that differ.
What the person left in it is in the resolved row's commit, and nothing of it stays behind for the
next row; the worktree is still the rebase's own (locked), so ``--abort`` finds it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from hyperqwen_patches.fork import importing
from hyperqwen_patches.port import pausing
from hyperqwen_patches.port.model import RebaseRequest, RebaseResult
from hyperqwen_patches.port.run import port
from hyperqwen_patches.series.manifest import load_manifest
from hyperqwen_patches.sources.pristine import open_pristine
from tests.test_port import BASE, lines_with, make_patch, make_repo, release


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def test_two_pauses_share_one_worktree_moved_on(tmp_path: Path) -> None:
    old = release(tmp_path, "old", {"vllm/c1.py": BASE, "vllm/c2.py": BASE, "vllm/a.py": BASE})
    # Upstream rewrote the very lines both rows change: each row needs a person.
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
    repo = make_repo(tmp_path, rows)
    manifest = repo / "patches/manifest.yaml"
    manifest.write_text(
        manifest.read_text().replace(
            "rows:\n", "export_points:\n  - name: qwen\n    branch: qwen/0.29\nrows:\n"
        )
    )
    fork = tmp_path / "fork"
    importing.import_series(
        load_manifest(repo), fork, tree=open_pristine(f"dir:{old}", version="0.29.0"), create=True
    )
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
