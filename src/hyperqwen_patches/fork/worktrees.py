"""Git commands run in a linked worktree of a fork, as that worktree: its own git dir (``<fork git
dir>/worktrees/<name>``), index and HEAD, so the fork's own checkout, index and branches are never
touched. ``edit``/``refresh`` and a paused ``port --rebase`` both work this way."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hyperqwen_patches import gitrun
from hyperqwen_patches.errors import GitError


def admin_dir(worktree: Path) -> Path:
    """A linked worktree's own git dir, from its ``.git`` file."""
    dotgit = worktree / ".git"
    try:
        text = dotgit.read_text()
    except OSError as exc:
        raise GitError(f"{worktree}: not a linked worktree ({exc})") from exc
    if not text.startswith("gitdir: "):
        raise GitError(f"{dotgit} does not name a git directory")
    admin = Path(text[len("gitdir: ") :].strip())
    return admin if admin.is_absolute() else (worktree / admin).resolve()


def run_in(worktree: Path, args: Sequence[str], *, what: str) -> bytes:
    """``git ARGS`` in ``worktree``, as that worktree; GitError naming ``what`` on failure."""
    admin = admin_dir(worktree)
    return gitrun.check(
        args,
        git_dir=admin,
        cwd=worktree,
        index=admin / "index",
        env={"GIT_WORK_TREE": str(worktree)},
        what=what,
    )
