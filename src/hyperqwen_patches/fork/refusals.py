"""What makes a fork commit unexportable, all of it named at once: a merge, an empty commit, a change
outside the package, a submodule or symbolic link, a binary change, a message line GNU patch would read
as a diff, a module row's commit that does more than add files."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from hyperqwen_patches.display import show
from hyperqwen_patches.fork import reading as forkgit
from hyperqwen_patches.fork.binarypaths import binary_paths

# Lines of a message body that GNU patch 2.7 would take for the start of a diff (or that make git am cut
# the message): refused at export, because the patch file would no longer apply as written.
_DIFFISH = re.compile(
    rb"^(--- |\+\+\+ |\*\*\* |diff --git |diff -[a-zA-Z]|Index: |@@ -|\*{15}|Binary files |GIT binary patch|---$)"
)


def diffish_lines(message: bytes) -> list[tuple[int, bytes]]:
    """(line number in the message, line) of every body line that reads as the start of a diff."""
    lines = message.split(b"\n")
    return [(n, line) for n, line in enumerate(lines, start=1) if n > 1 and _DIFFISH.match(line)]


def refusals(
    git_dir: Path,
    commit: forkgit.ForkCommit,
    *,
    module: bool = False,
    binary: Sequence[bytes] | None = None,
    package: str = "vllm",
) -> list[str]:
    """Everything that makes ``commit`` unexportable (empty when it exports). ``package``: the
    manifest's; a change outside its directory is refused.

    ``binary``: the commit's binary paths when the caller has them (``binarypaths.binary_paths_of``)."""
    problems: list[str] = []
    if len(commit.parents) != 1:
        problems.append(
            f"a merge commit ({len(commit.parents)} parents): an export point must be linear; "
            "rebase it (git rebase --rebase-merges is not supported)"
        )
        return problems
    if not commit.changes:
        problems.append("an empty commit: it carries no change for the series to apply")
    prefix = package.encode() + b"/"
    for change in commit.changes:
        for path in (change.old_path, change.new_path):
            if path is not None and not path.startswith(prefix):
                problems.append(
                    f"touches {show(path)}, outside {package}/: the series "
                    f"patches the {package} package only; move that change to another commit off "
                    "the export point"
                )
        if "160000" in (change.old_mode, change.new_mode):
            problems.append(
                "adds or changes a submodule (gitlink): not a file the series can carry"
            )
        if "120000" in (change.old_mode, change.new_mode):
            problems.append(
                f"{show(change.new_path or change.old_path or b'')}: "
                "a symbolic link: GNU patch cannot create it"
            )
    for path in binary if binary is not None else binary_paths(git_dir, commit):
        problems.append(
            f"{show(path)}: a binary change; GNU patch cannot apply "
            "it (ship binaries outside the series)"
        )
    for n, line in diffish_lines(commit.message):
        problems.append(
            f"message line {n} {show(line)!r} reads as the start of a "
            "diff to GNU patch (or ends the message for git am); reword it (indent it, for example)"
        )
    if module:
        for change in commit.changes:
            if change.status != "A":
                problems.append(
                    f"{show(change.old_path or change.new_path or b'')}: "
                    f"a module-file row's commit may only add files (status {change.status})"
                )
    return problems
