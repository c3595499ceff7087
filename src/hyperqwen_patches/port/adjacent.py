"""A three-way merge that also combines changes which only touch: the row's and upstream's.

``git merge-file`` (diff3) calls two changes a conflict as soon as they touch: an insertion right
next to a line the other side reworded, two insertions at one place, a rewrite next to an added
blank line. Porting a series, most such "conflicts" have one mechanical answer, and a person who
resolves them by hand writes exactly that answer. This module gives it, on bytes, and only where
it is safe: where the two changes share no line of the base, and where the line next to an
insertion is still there (reworded at most). Everything else stays a clash for a person:

- both sides change the same base line (or one inserts inside a block the other replaces);
- the line an insertion sits next to is deleted by the other side, or replaced by something that
  no longer resembles it (the anchor is gone), or reworded so that a name the inserted lines use is
  gone from it (a variable renamed where it is assigned);
- both sides replace lines that touch (a rewrite next to a rewrite: each may assume the other line);
- the lines next to the meeting point were moved (deleted in one place and inserted in another);
- both sides insert the same line next to each other (part of the row already upstream);
- both insert at one place and the row's lines are indented deeper than upstream's (they continue
  the block before; after upstream's lines they would join upstream's block).

Where the sides do not touch, the merge is diff3's: the same bytes as ``git merge-file`` where that
merges cleanly (tests/test_port_adjacent.py checks it against git). Diffs are difflib's longest
matching blocks with insertions and deletions slid down as far as they go, as git's diff does, so
that "touching" means what it means to git.

Names: ``base`` is the file before the row on the old release, ``row`` after it (the row's change is
base -> row), ``upstream`` the file on the new branch (upstream's change is base -> upstream).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from difflib import SequenceMatcher
from typing import Literal

from hyperqwen_patches.records import record

Side = Literal["upstream", "row"]

# A replaced block next to the other side's insertion counts as the same lines reworded when at
# least this share of the shorter side's tokens survives in the other (_kept); below, the anchor
# the insertion sat next to is gone.
REWORDED = 0.6
_TOKEN = re.compile(rb"\w+|[^\w\s]")
_WORD = re.compile(rb"\w")
_NAME = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
# A quoted string; an escape and any other character are disjoint alternatives, so an unterminated
# run of backslashes fails in linear time (overlapping ones backtrack exponentially).
_STRING = re.compile(rb"""(["'])(?:\\.|(?!\1)[^\\])*\1""")
# Lines shorter than this (stripped) are not evidence of a move or of a duplicate: `)`, `else:`,
# `pass`, blank lines recur everywhere. The same bar as the triage's "upstream in changed form".
SIGNIFICANT = 6


@record(frozen=True)
class Hunk:
    """One change of one side: base lines ``[start, end)`` replaced by ``lines`` (0-based)."""

    side: Side
    start: int
    end: int
    lines: tuple[bytes, ...]
    old: tuple[bytes, ...]  # the base lines it replaces

    @property
    def inserts(self) -> bool:
        return self.start == self.end

    @property
    def deletes(self) -> bool:
        return not self.lines


@record(frozen=True)
class Adjacency:
    """Where both sides' changes met and were combined: read it."""

    line: int  # 1-based, in the merged file: the first line of the combined region
    count: int  # lines of the combined region in the merged file
    base_line: int  # 1-based, in the base: where the region starts there
    what: str  # which kinds of change met

    def describe(self) -> str:
        return f"line {self.line}: merged next to an upstream change ({self.what}): review"


@record(frozen=True)
class Clash:
    """A region where combining would be a guess: a person decides."""

    base_line: int  # 1-based, in the base
    reason: str


@record(frozen=True)
class AdjacentMerge:
    """The merge: the file (None where anything clashes), the regions combined, and the clashes."""

    content: bytes | None
    adjacent: tuple[Adjacency, ...] = ()
    clashes: tuple[Clash, ...] = ()

    @property
    def clean(self) -> bool:
        return self.content is not None


def split_lines(data: bytes) -> list[bytes]:
    """Lines with their endings (``\\r\\n`` kept; a last line without one is its own line)."""
    return data.splitlines(keepends=True) if b"\r" not in data else _split_on_lf(data)


def _split_on_lf(data: bytes) -> list[bytes]:
    # bytes.splitlines also splits on a lone "\r"; git splits on "\n" only.
    parts = data.split(b"\n")
    lines = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def diff_hunks(side: Side, a: Sequence[bytes], b: Sequence[bytes]) -> list[Hunk]:
    """The changes from ``a`` to ``b`` as hunks on ``a``'s lines, in order, each separated from the
    next by at least one unchanged line."""
    head = 0
    limit = min(len(a), len(b))
    while head < limit and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < limit - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    # Trimming the common ends first keeps difflib's quadratic worst case to the changed middle. It
    # can leave an insertion anywhere in a run of equal lines; the compaction below puts it where
    # git's diff would.
    matcher = SequenceMatcher(None, a[head : len(a) - tail], b[head : len(b) - tail], False)
    raw: list[tuple[int, int, int, int]] = [
        (i1 + head, i2 + head, j1 + head, j2 + head)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]
    return _compact(side, a, b, raw)


def _compact(
    side: Side, a: Sequence[bytes], b: Sequence[bytes], raw: list[tuple[int, int, int, int]]
) -> list[Hunk]:
    """Slide each pure insertion and pure deletion down as far as equal lines let it (git's diff
    does: an inserted function lands right above the next ``def``, not after the blank line
    before it), joining a hunk it comes to touch."""
    out: list[list[int]] = []
    for n, (i1, i2, j1, j2) in enumerate(raw):
        next_start = raw[n + 1][0] if n + 1 < len(raw) else len(a)
        if i1 == i2:  # insertion of b[j1:j2] before a[i1]
            while i1 < next_start and j2 < len(b) and b[j1] == a[i1] and b[j2] == a[i1]:
                i1, i2, j1, j2 = i1 + 1, i2 + 1, j1 + 1, j2 + 1
        elif j1 == j2:  # deletion of a[i1:i2]
            while i2 < next_start and a[i1] == a[i2]:
                i1, i2, j1, j2 = i1 + 1, i2 + 1, j1 + 1, j2 + 1
        if out and out[-1][1] == i1:
            out[-1][1], out[-1][3] = i2, j2
        else:
            out.append([i1, i2, j1, j2])
    # A slid hunk may now touch the next one, which the loop above joins as it reaches it.
    return [Hunk(side, i1, i2, tuple(b[j1:j2]), tuple(a[i1:i2])) for i1, i2, j1, j2 in out]


def merge(base: bytes, upstream: bytes, row: bytes) -> AdjacentMerge:
    """Carry the row's change (``base -> row``) onto ``upstream``; see the module's docstring."""
    lines = split_lines(base)
    ups = diff_hunks("upstream", lines, split_lines(upstream))
    rows = diff_hunks("row", lines, split_lines(row))
    # A row hunk upstream made exactly is already there (git's merge drops it the same way).
    taken = {(h.start, h.end, h.lines) for h in ups}
    rows = [h for h in rows if (h.start, h.end, h.lines) not in taken]
    moved = _moved_lines(ups) | _moved_lines(rows)
    out: list[bytes] = []
    adjacent: list[Adjacency] = []
    clashes: list[Clash] = []
    cursor = 0
    for group in _groups(ups + rows):
        start = min(h.start for h in group)
        end = max(h.end for h in group)
        out.extend(lines[cursor:start])
        cursor = end
        sides = {h.side for h in group}
        if len(sides) == 1:
            out.extend(_apply(lines, group, start, end))
            continue
        mine = _apply(lines, [h for h in group if h.side == "upstream"], start, end)
        theirs = _apply(lines, [h for h in group if h.side == "row"], start, end)
        if mine == theirs:
            out.extend(mine)  # both made the same change, cut differently
            continue
        # In an empty base there is no line for either insertion to sit next to (two files
        # created at one path, say): their order would be a guess.
        reason = "both sides fill a file that was empty" if not lines else _why_not(group, moved)
        if reason is not None:
            clashes.append(Clash(start + 1, reason))
            continue
        combined = _apply(lines, group, start, end)
        adjacent.append(Adjacency(len(out) + 1, len(combined), start + 1, _kinds(group)))
        out.extend(combined)
    out.extend(lines[cursor:])
    if any(not line.endswith(b"\n") for line in out[:-1]):
        # Only a last line may lack its newline; one inside means a region was put after it.
        clashes.append(Clash(len(lines), "a change meets the end of a file without a newline"))
    if clashes:
        return AdjacentMerge(None, tuple(adjacent), tuple(clashes))
    return AdjacentMerge(b"".join(out), tuple(adjacent))


def _groups(hunks: list[Hunk]) -> list[list[Hunk]]:
    """Hunks of both sides in base order, grouped where they overlap or touch (diff3's regions).
    At one base position: a replacement ending there, then upstream's insertion, then the row's,
    then a replacement starting there (which is the order the combined text takes)."""
    order = {"upstream": 0, "row": 1}
    ordered = sorted(hunks, key=lambda h: (h.start, h.end, order[h.side]))
    groups: list[list[Hunk]] = []
    reach = -1
    for h in ordered:
        if groups and h.start <= reach:
            groups[-1].append(h)
            reach = max(reach, h.end)
        else:
            groups.append([h])
            reach = h.end
    return groups


def _apply(lines: Sequence[bytes], hunks: Sequence[Hunk], start: int, end: int) -> list[bytes]:
    """Base ``[start, end)`` with ``hunks`` (in order, not overlapping) applied."""
    out: list[bytes] = []
    cursor = start
    for h in hunks:
        assert h.start >= cursor, "overlapping hunks are never applied together"
        out.extend(lines[cursor : h.start])
        out.extend(h.lines)
        cursor = h.end
    out.extend(lines[cursor:end])
    return out


def _why_not(group: Sequence[Hunk], moved: set[bytes]) -> str | None:
    """Why the group's two sides cannot be combined mechanically, or None when they can."""
    for u in (h for h in group if h.side == "upstream"):
        for r in (h for h in group if h.side == "row"):
            reason = _pair(u, r)
            if reason is not None:
                return reason
    for h in group:
        if any(_key(x) in moved for x in h.lines + h.old):
            return f"{_who(h.side)} moved lines here from elsewhere in the file, or from here"
    added_up = {_key(x) for h in group if h.side == "upstream" for x in h.lines} - {b""}
    if any(_key(x) in added_up for h in group if h.side == "row" for x in h.lines):
        return "upstream adds some of the row's lines right there: part of the row may be upstream"
    return None


def _pair(u: Hunk, r: Hunk) -> str | None:
    """One upstream hunk against one row hunk of the same group."""
    if max(u.start, r.start) < min(u.end, r.end):
        return "both sides change the same base line"
    if u.start < r.start < u.end and r.inserts:
        return "the row inserts inside lines upstream replaced"
    if r.start < u.start < r.end and u.inserts:
        return "upstream inserts inside lines the row replaces"
    if u.end != r.start and r.end != u.start:
        return None  # joined through other hunks of the group, apart from each other
    if u.inserts and r.inserts:  # at one place
        # Upstream's lines go first. Lines of the row indented deeper than upstream's continue the
        # block before the insertion point (a call at the end of an `if` body); after upstream's
        # new block they would join it.
        if _indent(r.lines) > _indent(u.lines):
            return (
                "the row's lines are indented deeper than upstream's, inserted at the same place: "
                "after them they would join upstream's block"
            )
        return None
    if not u.inserts and not r.inserts:
        return "both sides replace lines that touch"
    insertion, other = (u, r) if u.inserts else (r, u)
    if other.deletes:
        return f"{_who(other.side)} deletes the line next to {_whose(insertion.side)} insertion"
    if not _anchor_kept(other, at_end=insertion.start == other.end):
        return (
            f"{_who(other.side)} replaced the line next to {_whose(insertion.side)} insertion "
            "with other code"
        )
    # A reworded line may rename what the inserted lines use (`x = f()` became `y = f()`, and the
    # row logs `x`): the merge would be well-formed text and wrong code.
    gone = sorted((_names(other.old) - _names(other.lines)) & _names(insertion.lines))
    if gone:
        return (
            f"{_who(other.side)} drops {b', '.join(gone).decode('ascii')} next to "
            f"{_whose(insertion.side)} insertion, which uses it"
        )
    return None


def _kinds(group: Sequence[Hunk]) -> str:
    ups = [h for h in group if h.side == "upstream"]
    rows = [h for h in group if h.side == "row"]
    if all(h.inserts for h in group):
        return "both insert at one place: upstream's lines first, then the row's"
    if all(h.inserts for h in rows):
        return "the row inserts next to lines upstream changed"
    if all(h.inserts for h in ups):
        return "upstream inserts next to lines the row changed"
    return "the row's and upstream's changes touch"


def _who(side: Side) -> str:
    return "upstream" if side == "upstream" else "the row"


def _whose(side: Side) -> str:
    return "upstream's" if side == "upstream" else "the row's"


def _key(line: bytes) -> bytes:
    """A line compared without its indentation and line ending; short lines map to b"" (no key)."""
    stripped = line.strip()
    return stripped if len(stripped) >= SIGNIFICANT else b""


def _moved_lines(hunks: Sequence[Hunk]) -> set[bytes]:
    """Significant lines one side deletes in one hunk and inserts in another: a move. A line
    deleted and re-added by the same hunk is an edit in place, not a move."""
    gone: set[bytes] = set()
    added: set[bytes] = set()
    for h in hunks:
        old = {_key(x) for x in h.old} - {b""}
        new = {_key(x) for x in h.lines} - {b""}
        gone |= old - new
        added |= new - old
    return gone & added


def _anchor_kept(block: Hunk, *, at_end: bool) -> bool:
    """Whether the line of ``block`` that an insertion touches (its last, ``at_end``, else its
    first) is still there, reworded at most. A single line may become several (a comment split, a
    call wrapped): then the whole block counts. Of several lines, the boundary line must match the
    new boundary line, and better than any other old line does: `run(size)` + `capture()` becoming
    `forward(size)` is the first reworded and the second, the anchor, deleted."""
    if len(block.old) == 1:
        return _kept(block.old, block.lines) >= REWORDED
    old, rest = (block.old[-1], block.old[:-1]) if at_end else (block.old[0], block.old[1:])
    new = block.lines[-1] if at_end else block.lines[0]
    kept = _kept([old], [new])
    return kept >= REWORDED and all(_kept([other], [new]) <= kept for other in rest)


def _indent(lines: Sequence[bytes]) -> int:
    """The indentation of the first line that is not blank (-1: all blank)."""
    for line in lines:
        if line.strip():
            return len(line.expandtabs(8)) - len(line.expandtabs(8).lstrip())
    return -1


def _names(lines: Sequence[bytes]) -> set[bytes]:
    """The identifiers of some lines' code (string literals and comments left out)."""
    names: set[bytes] = set()
    for line in lines:
        code = _STRING.sub(b"", line).split(b"#", 1)[0]
        names.update(_NAME.findall(code))
    return names


def _kept(old: Sequence[bytes], new: Sequence[bytes]) -> float:
    """How much of the shorter of two blocks survives in the other, by tokens (a call that gained
    arguments keeps all of its old tokens; a comment split in two keeps its words). A block that
    keeps no word (only ``)`` or ``:``), or a blank one, keeps nothing."""
    a = _TOKEN.findall(b" ".join(old))
    b = _TOKEN.findall(b" ".join(new))
    if not a or not b:
        return 0.0
    blocks = SequenceMatcher(None, a, b, False).get_matching_blocks()
    matched = [t for m in blocks for t in a[m.a : m.a + m.size]]
    if not any(_WORD.match(t) for t in matched):
        return 0.0
    return len(matched) / min(len(a), len(b))
