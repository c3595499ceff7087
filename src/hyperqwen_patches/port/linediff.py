"""Which lines a change added and removed: the line diff the row checks read a written row by.

A row merged by ``git merge-file`` has no hunks to say where its lines went, so the checks of a
written row compare the file before and after it instead, as ``git diff`` would. Lines are compared
with their endings (``split_lines``, the engine's notion of a line), so a changed ending counts as a
changed line.
"""

from __future__ import annotations

from difflib import SequenceMatcher

from hyperqwen_patches.engine.patchmodel import split_lines
from hyperqwen_patches.records import record


@record(frozen=True)
class LineChange:
    """1-based line numbers: ``added`` in the file after, ``removed`` in the file before."""

    added: tuple[int, ...]
    removed: tuple[int, ...]


def changed_lines(before: bytes | None, after: bytes | None) -> LineChange:
    """The lines ``after`` has that ``before`` does not, and the reverse (a missing file: no lines)."""
    old = split_lines(before or b"")
    new = split_lines(after or b"")
    # A row changes a few lines of a long file: the common ends are cut off first, so the matcher
    # (quadratic at worst) only sees the region that changed.
    head = 0
    limit = min(len(old), len(new))
    while head < limit and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < limit - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    old_mid = old[head : len(old) - tail]
    new_mid = new[head : len(new) - tail]
    added: list[int] = []
    removed: list[int] = []
    if not old_mid:
        added = list(range(head + 1, head + len(new_mid) + 1))
    elif not new_mid:
        removed = list(range(head + 1, head + len(old_mid) + 1))
    else:
        # autojunk off: in a file of repeated blank lines and brackets, "popular" lines are
        # exactly the ones that must still be matched.
        matcher = SequenceMatcher(None, old_mid, new_mid, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                continue
            removed += range(head + i1 + 1, head + i2 + 1)
            added += range(head + j1 + 1, head + j2 + 1)
    return LineChange(tuple(added), tuple(removed))
