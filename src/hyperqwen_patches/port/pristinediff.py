"""The two pristine trees side by side: which files changed between the releases and the diff around
a region, shown as a conflict's cause or an upstream hunk's origin.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from hyperqwen_patches.engine.patchmodel import split_lines
from hyperqwen_patches.engine.placement import eol_marked
from hyperqwen_patches.port.model import DIFF_CONTEXT, REGION_MARGIN, FileDrift
from hyperqwen_patches.sources.pristinetree import PristineTree

# --- the pristine diff ----------------------------------------------------------------------------


class PristinePair:
    """The two releases' files, read once, with their line diffs computed once per file."""

    def __init__(self, old: PristineTree, new: PristineTree) -> None:
        self.old = old
        self.new = new
        self._old: dict[bytes, bytes | None] = {}
        self._new: dict[bytes, bytes | None] = {}
        self._ops: dict[bytes, list[tuple[str, int, int, int, int]]] = {}
        self._new_paths: list[bytes] | None = None

    def read_old(self, path: bytes) -> bytes | None:
        if path not in self._old:
            self._old[path] = self.old.read(path)
        return self._old[path]

    def read_new(self, path: bytes) -> bytes | None:
        if path not in self._new:
            self._new[path] = self.new.read(path)
        return self._new[path]

    def new_paths(self) -> list[bytes]:
        if self._new_paths is None:
            self._new_paths = self.new.paths()
        return self._new_paths

    def opcodes(self, path: bytes) -> list[tuple[str, int, int, int, int]]:
        """difflib opcodes old -> new for one file (0-based line ranges)."""
        if path not in self._ops:
            a = split_lines(self.read_old(path) or b"")
            b = split_lines(self.read_new(path) or b"")
            # autojunk off: with it, blank and ")" lines of a 6,000-line file count as junk and the
            # matcher pairs unrelated blocks, which shows a reader changes that are not there.
            matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
            self._ops[path] = [(t, i1, i2, j1, j2) for t, i1, i2, j1, j2 in matcher.get_opcodes()]
        return self._ops[path]

    def drift(self, path: bytes) -> FileDrift:
        old, new = self.read_old(path), self.read_new(path)
        if old is None and new is None:
            return FileDrift(path, "absent")
        if old is None:
            return FileDrift(path, "added", added=len(split_lines(new or b"")))
        if new is None:
            return FileDrift(path, "removed", removed=len(split_lines(old)))
        if old == new:
            return FileDrift(path, "unchanged")
        added = removed = 0
        for tag, i1, i2, j1, j2 in self.opcodes(path):
            if tag != "equal":
                removed += i2 - i1
                added += j2 - j1
        return FileDrift(path, "changed", added=added, removed=removed)

    def map_line(self, path: bytes, line: int) -> int:
        """Where 1-based ``line`` of the old release's file is in the new one (a line of a changed
        block maps proportionally into what replaced it); 0 when the file is gone."""
        if self.read_new(path) is None or self.read_old(path) is None:
            return 0
        x = line - 1
        for tag, i1, i2, j1, j2 in self.opcodes(path):
            if i1 <= x < i2 or (i1 == i2 == x):
                if tag == "equal":
                    return j1 + (x - i1) + 1
                # Inside a rewritten block: the same fraction of the way through its replacement
                # (a re-indented 40-line block keeps its lines in order).
                return j1 + ((x - i1) * (j2 - j1)) // max(i2 - i1, 1) + 1
        return line

    def region_diff(
        self,
        path: bytes,
        *,
        old_range: tuple[int, int] | None = None,
        new_range: tuple[int, int] | None = None,
    ) -> bytes:
        """The old-vs-new diff hunks of ``path`` that touch a 1-based inclusive line range of the old
        (or the new) release, widened by REGION_MARGIN lines; empty when nothing changed there."""
        old, new = self.read_old(path), self.read_new(path)
        if old is None or new is None or old == new:
            return b""
        a, b = split_lines(old), split_lines(new)
        changes = [op for op in self.opcodes(path) if op[0] != "equal"]
        picked = []
        for op in changes:
            _, i1, i2, j1, j2 = op
            if old_range is not None:
                lo, hi = old_range[0] - 1 - REGION_MARGIN, old_range[1] + REGION_MARGIN
                if i1 < hi and max(i2, i1 + 1) > lo:
                    picked.append(op)
            elif new_range is not None:
                lo, hi = new_range[0] - 1 - REGION_MARGIN, new_range[1] + REGION_MARGIN
                if j1 < hi and max(j2, j1 + 1) > lo:
                    picked.append(op)
        return _format_ops(path, a, b, picked)


def _format_ops(
    path: bytes,
    a: Sequence[bytes],
    b: Sequence[bytes],
    ops: Sequence[tuple[str, int, int, int, int]],
) -> bytes:
    """Unified-diff text for the chosen change opcodes, each with DIFF_CONTEXT lines around it;
    neighbouring changes whose context overlaps share one hunk, as diff -u does."""
    if not ops:
        return b""
    groups: list[list[tuple[str, int, int, int, int]]] = [[ops[0]]]
    for op in ops[1:]:
        if op[1] - groups[-1][-1][2] <= 2 * DIFF_CONTEXT:
            groups[-1].append(op)
        else:
            groups.append([op])
    out = [b"--- a/" + path + b"\n", b"+++ b/" + path + b"\n"]
    for group in groups:
        i_start = max(0, group[0][1] - DIFF_CONTEXT)
        j_start = max(0, group[0][3] - (group[0][1] - i_start))
        i_end = min(len(a), group[-1][2] + DIFF_CONTEXT)
        j_end = min(len(b), group[-1][4] + (i_end - group[-1][2]))
        body: list[bytes] = []
        i = i_start
        for _, i1, i2, j1, j2 in group:
            body += [b" " + eol_marked(x) for x in a[i:i1]]
            body += [b"-" + eol_marked(x) for x in a[i1:i2]]
            body += [b"+" + eol_marked(x) for x in b[j1:j2]]
            i = i2
        body += [b" " + eol_marked(x) for x in a[i:i_end]]
        header = b"@@ -%d,%d +%d,%d @@\n" % (
            i_start + 1,
            i_end - i_start,
            j_start + 1,
            j_end - j_start,
        )
        out.append(header)
        out += body
    return b"".join(out)
