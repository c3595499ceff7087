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
    """``git ARGS`` in ``worktree``, as that worktree; GitError naming ``what`` on failure.

    The fork's own content filters are switched off: a ``filter.<name>.clean`` or ``smudge`` command
    in its config would run on every file git checks out or stages here (and a clean filter's output
    would become a row), so each filter the fork defines is given empty commands, which git takes as
    no filter. Hooks are off for every git call already (gitrun's pinned ``core.hooksPath``)."""
    admin = admin_dir(worktree)
    return gitrun.check(
        args,
        git_dir=admin,
        cwd=worktree,
        index=admin / "index",
        env={"GIT_WORK_TREE": str(worktree)},
        config=no_filters(admin),
        what=what,
    )


_NO_FILTERS: dict[Path, tuple[tuple[str, str], ...]] = {}


def no_filters(git_dir: Path) -> tuple[tuple[str, str], ...]:
    """``-c`` pins that switch off every content filter ``git_dir``'s config defines (once a run)."""
    if git_dir not in _NO_FILTERS:
        listed = gitrun.run(
            [
                "config",
                "--name-only",
                "--get-regexp",
                r"^filter\..+\.(clean|smudge|process|required)$",
            ],
            git_dir=git_dir,
        )
        names = {
            line.decode("utf-8", "surrogateescape").rsplit(".", 1)[0]
            for line in listed.stdout.splitlines()
            if listed.ok
        }
        _NO_FILTERS[git_dir] = tuple(
            (f"{name}.{key}", value)
            for name in sorted(names)
            for key, value in (
                ("clean", ""),
                ("smudge", ""),
                ("process", ""),
                ("required", "false"),
            )
        )
    return _NO_FILTERS[git_dir]
