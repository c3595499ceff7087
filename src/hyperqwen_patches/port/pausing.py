"""A paused ``port --rebase``: its state file in the fork's git dir, and the worktree a person resolves in.

The state lives in ``<git dir>/hqp-port-rebase.json`` (as git keeps ``rebase-merge/`` there): what is
built so far, the row waiting, where. The worktree is a linked worktree of the fork (``git worktree
add --detach``) at the last commit built; the row's files are written into it with diff3 markers where
they conflict, nothing staged. Its index and HEAD are its own, so the user's checkout, index and
branches are never touched; the branch itself is written once, when the rebase is done.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hyperqwen_patches import gitrun
from hyperqwen_patches.atomicfile import write_atomic
from hyperqwen_patches.errors import GitError, UsageError
from hyperqwen_patches.fork.worktrees import run_in
from hyperqwen_patches.records import field, record

STATE_FILE = "hqp-port-rebase.json"
LOCK_FILE = "hqp-port-rebase.lock"
STATE_FORMAT = 1


@record
class RebaseState:
    """Everything a later ``--continue`` needs; plain data, stored as JSON."""

    to_version: str
    branch: str
    previous: str | None
    base: str
    parent: str  # the last commit built: the worktree's starting HEAD
    row: str  # the row waiting for a person
    worktree: str
    files: list[dict[str, Any]]  # FileMerge.to_json() of the row's files as written
    to_source: str | None = None
    from_source: str | None = None
    commits: list[list[str]] = field(default_factory=list)  # [row, sha, how]
    merged: list[list[Any]] = field(default_factory=list)  # [row, [path, ...]]
    adjacent: list[list[Any]] = field(default_factory=list)  # [row, path, line, what]
    upstream: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    messages_from: str = "fork"
    findings: list[str] = field(default_factory=list)  # the written-row checks' findings, if any
    # False from the state's save until the worktree holds the row's files: a run killed in between
    # left a worktree half written, which --continue sets up again rather than commit.
    ready: bool = True
    # row -> [message, identity env] as the rebase began with them (the export point's commits): a
    # --continue reads them here rather than the fork's history again.
    messages: dict[str, list[Any]] = field(default_factory=dict)


@contextlib.contextmanager
def exclusive(git_dir: Path) -> Iterator[None]:
    """One ``port --rebase`` at a time on a fork: a second one started while this one runs (two
    terminals, a retried CI job) would read the same state and write over it. Released on exit,
    also when the process is killed (an advisory lock dies with its process)."""
    from hyperqwen_patches import flocks

    def busy() -> GitError:
        return GitError(
            f"another port --rebase is running on {git_dir}",
            hint="wait for it to end; a paused one is not running (--continue, --skip, --abort)",
        )

    with flocks.exclusive(git_dir / LOCK_FILE, wait=0, busy=busy):
        yield


def state_path(git_dir: Path) -> Path:
    return git_dir / STATE_FILE


def load(git_dir: Path) -> RebaseState | None:
    path = state_path(git_dir)
    try:
        raw = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise GitError(
            f"{path}: unreadable state of a paused port --rebase ({exc})",
            hint="`hyperqwen-patches port --rebase --abort` drops it",
        ) from exc
    if not isinstance(raw, dict) or raw.pop("format", None) != STATE_FORMAT:
        raise GitError(
            f"{path}: not a state file this version of hyperqwen-patches wrote",
            hint="`hyperqwen-patches port --rebase --abort` drops it",
        )
    try:
        return RebaseState(**raw)
    except TypeError as exc:
        raise GitError(
            f"{path}: damaged state of a paused port --rebase ({exc})",
            hint="`hyperqwen-patches port --rebase --abort` drops it",
        ) from exc


def save(git_dir: Path, state: RebaseState) -> None:
    from hyperqwen_patches import records

    data = {"format": STATE_FORMAT, **{k: getattr(state, k) for k in records.fields(state)}}
    write_atomic(state_path(git_dir), json.dumps(data, indent=2).encode() + b"\n")


def drop(git_dir: Path) -> None:
    state_path(git_dir).unlink(missing_ok=True)


# --- the worktree -----------------------------------------------------------------------------------


def default_worktree(fork: Path, git_dir: Path, to_version: str) -> Path:
    """``../<fork>-port-<version>`` beside the fork's work tree (beside a bare fork's git dir)."""
    top = fork if git_dir != fork.resolve() else git_dir
    return top.resolve().parent / f"{top.resolve().name.removesuffix('.git')}-port-{to_version}"


def refuse_existing(worktree: Path) -> None:
    if worktree.exists() or worktree.is_symlink():
        raise UsageError(
            f"{worktree} exists; port --rebase checks a row that needs you out there",
            hint="move it away, or name another place with --worktree",
        )


# The lock reason of the worktrees a rebase opens: how --abort knows its own among the fork's linked
# worktrees, even when the state that names one is damaged or was tampered with.
LOCK_REASON = "hyperqwen-patches port --rebase"


def open_worktree(git_dir: Path, worktree: Path, commit: str, files: Sequence[Any]) -> None:
    """A linked worktree at ``commit`` (detached, locked with ``LOCK_REASON``), then ``files``
    (threeway.FileMerge) written into it; nothing staged."""
    refuse_existing(worktree)
    gitrun.check(
        ["worktree", "add", "--no-checkout", "--detach", "--lock", "--reason", LOCK_REASON,
         str(worktree), commit],
        git_dir=git_dir,
        what=f"adding the worktree {worktree}",
    )  # fmt: skip
    run_in(worktree, ["read-tree", commit], what="reading the last commit into the worktree")
    # -u: the index gets the files' stat data, so the --continue that stages the person's work
    # compares stat data, not the bytes of every file (0.26 s -> 0.05 s on vLLM's 4,886 files).
    run_in(worktree, ["checkout-index", "--all", "-u"], what="checking out the worktree")
    _write_files(worktree, files)


def move_worktree(git_dir: Path, worktree: Path, commit: str, files: Sequence[Any]) -> bool:
    """Reuse the rebase's worktree for the next pause: its index, files and HEAD moved to ``commit``
    (only the files that differ are written, as ``git checkout`` does), then ``files`` written as
    :func:`open_worktree` writes them. False, touching nothing, where ``worktree`` is not one this
    fork's rebase opened (the caller opens a new one)."""
    target = worktree.resolve()
    if not any(target == known.resolve() for known in ours(git_dir)):
        return False
    # The person's resolution is committed and named by the saved state: the worktree can go back.
    run_in(target, ["read-tree", "--reset", "-u", commit], what="moving the worktree on")
    run_in(target, ["update-ref", "--no-deref", "HEAD", commit], what="moving the worktree on")
    _write_files(target, files)
    return True


def _write_files(worktree: Path, files: Sequence[Any]) -> None:
    for f in files:
        target = worktree / os.fsdecode(f.path)
        if f.content is None:
            target.unlink(missing_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(f.content)


def ours(git_dir: Path) -> list[Path]:
    """The fork's linked worktrees a rebase opened (locked with ``LOCK_REASON``), as git lists them."""
    listed = gitrun.run(["worktree", "list", "--porcelain", "-z"], git_dir=git_dir)
    found: list[Path] = []
    for entry in listed.stdout.split(b"\0\0"):
        fields = entry.split(b"\0")
        path = next((f[len(b"worktree ") :] for f in fields if f.startswith(b"worktree ")), None)
        if path is not None and f"locked {LOCK_REASON}".encode() in fields:
            found.append(Path(os.fsdecode(path)))
    return found


def close_worktree(git_dir: Path, worktree: Path) -> None:
    """Remove the worktree and git's record of it, if it is one this fork's rebase opened (git lists
    it, locked with ``LOCK_REASON``); any other path, whatever a state file says, is left alone. A
    worktree already deleted by hand is fine."""
    target = worktree.resolve()
    if any(target == known.resolve() for known in ours(git_dir)):
        # -f -f: the worktree is locked (ours) and holds the person's unstaged files.
        gitrun.run(["worktree", "remove", "-f", "-f", str(target)], git_dir=git_dir)
    gitrun.run(["worktree", "prune"], git_dir=git_dir)


MARKERS = (b"<<<<<<< ", b">>>>>>> ", b"||||||| ")


def leftover_markers(worktree: Path, paths: Sequence[str]) -> list[str]:
    """``path:line`` of every conflict marker line still in ``paths``."""
    found = []
    for path in paths:
        try:
            data = (worktree / path).read_bytes()
        except FileNotFoundError:
            continue
        for number, line in enumerate(data.splitlines(), start=1):
            if line.startswith(MARKERS):
                found.append(f"{path}:{number}")
    return found


def take_resolution(
    git_dir: Path, state: RebaseState, message: bytes, env: dict[str, str]
) -> tuple[str, str]:
    """The paused row's commit from the worktree: the person's own commit on top of ``state.parent``,
    or (nothing committed) every change in the worktree committed with the row's message. Returns
    (commit, "committed" | "from the worktree")."""
    from hyperqwen_patches.fork import reading as forkgit
    from hyperqwen_patches.sources import basecommit

    worktree = Path(state.worktree)
    if not worktree.exists():
        raise GitError(
            f"the worktree {worktree} of the paused row {state.row} is gone",
            hint="--skip leaves the row out; --abort drops the whole rebase",
        )
    head = run_in(worktree, ["rev-parse", "HEAD"], what="reading the worktree's HEAD")
    head_sha = head.decode().strip()
    if head_sha != state.parent:
        if not forkgit.is_ancestor(git_dir, state.parent, head_sha):
            raise GitError(
                f"the worktree's HEAD {head_sha[:12]} does not build on {state.parent[:12]}, where "
                f"the rebase left it",
                hint="commit your resolution on top of that commit, or --skip / --abort",
            )
        status = run_in(
            worktree,
            ["status", "--porcelain", "-z", "--untracked-files=all"],
            what="reading the worktree's status",
        )
        if status:
            raise GitError(
                f"{worktree} has changes besides your commit {head_sha[:12]}",
                hint="commit or discard them, then --continue again",
            )
        return head_sha, "committed"
    clean = ("row", "same", "merged", "adjacent")
    conflicted = [f["path"] for f in state.files if f["how"] not in clean]
    left = leftover_markers(worktree, conflicted)
    if left:
        raise UsageError(
            f"conflict markers are still in {', '.join(left[:5])}"
            + (f" and {len(left) - 5} more" if len(left) > 5 else ""),
            hint=f"resolve them in {worktree}, then --continue",
        )
    # Staged whole, then compared by tree: one scan of the worktree, not a status and an add (the
    # worktree's index is the rebase's own; staging there touches nothing of the person's).
    run_in(worktree, ["add", "--all"], what="staging the resolution")
    tree = run_in(worktree, ["write-tree"], what="writing the resolution's tree")
    before = run_in(worktree, ["rev-parse", f"{state.parent}^{{tree}}"], what="reading the tree")
    if tree.strip() == before.strip():
        raise UsageError(
            f"{worktree} holds no change on {state.parent[:12]}: the row {state.row} would add "
            "nothing",
            hint="--skip leaves the row out of the branch",
        )
    commit = basecommit.commit_tree(
        git_dir, tree.decode().strip(), parents=[state.parent], message=message, env=env
    )
    return commit, "from the worktree"
