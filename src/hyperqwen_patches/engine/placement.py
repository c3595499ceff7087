"""Hunk placement exactly as GNU patch 2.7.6 does it with ``-p1 --fuzz 0 --forward``.

The rules (docs/engine.md, ../shared/specs/gnu-patch-placement.md) modelled from ``locate_hunk`` in
GNU patch's ``patch.c``; the differential tests in ``tests/test_differential_gnu.py`` hold us to the
binary:

- a hunk's first guess is its stated line plus the offset the previous hunks of the file landed at
  (``in_offset``, cumulative), and it may never be placed at or before the last input line an earlier
  hunk consumed (``last_frozen_line``);
- candidates are tried at offsets 0, +1, -1, +2, -2, ... from the first guess, never at line <= 0 and
  never where the preimage would run past the end of the file; the first exact match wins;
- a hunk with fewer leading than trailing context lines (made at the start of a file) can only match
  at line 1, one with fewer trailing than leading (made at the end) only at the end of the file;
- an empty preimage (a pure insertion) matches at its first guess.

Instead of probing offset by offset, we index the file's lines once and look only at positions where
the preimage's first line occurs; choosing the one nearest to the first guess (positive side first at
equal distance) is the same order GNU patch's loop visits them in. The same index gives every other
match in the search range, which is what ambiguity detection reports.

Ambiguity is reported as a count plus at most ``SHOWN_OTHERS`` lines (the ones nearest the placed
line): listing every other match made N hunks over repeated lines cost O(N^2) time and memory (2,000
hunks: 1.6 GB). In a file with many hunks, the sorted starts of a preimage are computed once per
distinct preimage (``FileLines.starts``), and every hunk sharing it picks its winner, its neighbours
and its count by bisection.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from hyperqwen_patches.engine.patchmodel import Hunk
from hyperqwen_patches.records import record

SHOWN_OTHERS = 3  # other matches listed per hunk; the rest are only counted
# A preimage line occurring more often than this does not vote for a near miss: voting over every
# place of a line repeated all over the file made each failed hunk cost a pass over the file.
NEAR_MISS_COMMON = 256
# Past this many candidate places (of the preimage's rarest line), the starts of a preimage come
# from a table of every window of its length, keyed by the window itself: distinct preimages made of
# repeated lines otherwise cost one pass over the file each (10,000 hunks: 6 s).
WINDOW_FROM = 64
# At most this many lengths tabled at once. A table costs ~250 bytes per distinct window (25 MB for
# 100,000 lines all different; a file of repeated lines has few distinct windows).
WINDOW_TABLES = 8


@record(frozen=True, slots=True)
class LineDiff:
    """One line where the file differs from the hunk's preimage at a near-miss position."""

    line: int  # line number in the file (1-based)
    expected: bytes  # what the hunk's preimage has
    actual: bytes | None  # what the file has (None past the end of the file)


@record(frozen=True, slots=True)
class NearMiss:
    """The place the preimage came closest to matching: most equal lines, nearest to the first guess."""

    line: int  # where the preimage would start (1-based, in the file before this patch)
    matched: int  # how many preimage lines are equal there
    total: int  # preimage length
    differences: tuple[LineDiff, ...]  # line by line at ``line`` (what GNU compared)
    # The preimage aligned with the file there (``align``): " "/"-"/"+" lines, so a line inserted
    # upstream inside the region reads as one inserted line, not as every later line differing.
    aligned_line: int | None = None
    aligned: bytes = b""


class FileLines:
    """The lines of one input file; a line -> positions index is built lazily.

    ``indexed``: search through the index (for a file many hunks are placed in, where a scan per hunk
    would make placement quadratic: 2,000 hunks over repeated lines took 52 s).
    """

    __slots__ = ("_index", "_starts", "_windows", "indexed", "lines")

    def __init__(self, lines: Sequence[bytes], *, indexed: bool = False) -> None:
        self.lines = tuple(lines)
        self._index: dict[bytes, list[int]] | None = None
        self._starts: dict[tuple[bytes, ...], list[int]] = {}
        self._windows: dict[int, dict[tuple[bytes, ...], list[int]]] = {}
        self.indexed = indexed

    def starts(self, pattern: tuple[bytes, ...]) -> list[int]:
        """Every line where ``pattern`` matches in the whole file, ascending; memoised per pattern,
        so hunks sharing a preimage (repeated lines) pay for one search, not one each."""
        found = self._starts.get(pattern)
        if found is None:
            size = len(pattern)
            if min(len(self.positions(text)) for text in pattern) <= WINDOW_FROM:
                found = self._indexed_starts(pattern, 1, len(self.lines) - size + 1)
            else:
                # The table is keyed by the window itself: the dict's own equality check is the
                # comparison, so a hash collision is no match and no start is compared again.
                found = self._window_table(size).get(pattern, [])
            self._starts[pattern] = found
        return found

    def _window_table(self, size: int) -> dict[tuple[bytes, ...], list[int]]:
        """window -> its 1-based starts, for every window of ``size`` lines: one pass over the
        file per length, then each distinct preimage of that length is one lookup. Only distinct
        windows are kept (a file of repeated lines has few)."""
        table = self._windows.get(size)
        if table is None:
            if len(self._windows) >= WINDOW_TABLES:
                del self._windows[next(iter(self._windows))]  # the oldest length
            lines = self.lines
            table = {}
            get = table.get
            windows = zip(*(lines[k:] for k in range(size)), strict=False)
            for start, window in enumerate(windows, start=1):
                places = get(window)
                if places is None:
                    table[window] = [start]
                else:
                    places.append(start)
            self._windows[size] = table
        return table

    def positions(self, line: bytes) -> list[int]:
        if self._index is None:
            index: dict[bytes, list[int]] = {}
            get = index.get  # get + append: no list built per line only to be dropped (setdefault)
            for number, text in enumerate(self.lines, start=1):
                places = get(text)
                if places is None:
                    index[text] = [number]
                else:
                    places.append(number)
            self._index = index
        return self._index.get(line, [])

    def matching_starts(
        self, pattern: tuple[bytes, ...], low: int, high: int, anchor: int = 0
    ) -> list[int]:
        """Every start line in ``[low, high]`` where ``pattern`` matches exactly, ascending.

        Scans for one anchor line of the pattern (``Hunk.anchor``: its longest, usually its most
        distinctive, so a preimage that begins with a blank line does not visit every blank line of
        the file) with ``tuple.index``, a C loop, and compares the whole pattern only there.
        """
        lines = self.lines
        size = len(pattern)
        low = max(low, 1)
        high = min(high, len(lines) - size + 1)
        if high < low:
            return []
        if self.indexed:
            return self._indexed_starts(pattern, low, high)
        target = pattern[anchor]
        found: list[int] = []
        i = low - 1 + anchor
        stop = high + anchor  # exclusive index bound: start <= high
        index = lines.index
        while True:
            try:
                i = index(target, i, stop)
            except ValueError:
                return found
            base = i - anchor
            if lines[base : base + size] == pattern:
                found.append(base + 1)
            i += 1

    def _indexed_starts(self, pattern: tuple[bytes, ...], low: int, high: int) -> list[int]:
        """matching_starts through the index: visit only the places of the pattern's rarest line
        in the file, so each hunk costs what its least common line costs, not a scan of the file."""
        counts = [len(self.positions(text)) for text in pattern]
        k = min(range(len(pattern)), key=counts.__getitem__)
        places = self.positions(pattern[k])
        lines = self.lines
        size = len(pattern)
        found: list[int] = []
        # positions are 1-based lines of pattern[k]; the start is k lines above
        for number in places[bisect_left(places, low + k) : bisect_right(places, high + k)]:
            base = number - 1 - k
            if lines[base : base + size] == pattern:
                found.append(base + 1)
        return found

    def matches_at(self, pattern: tuple[bytes, ...], where: int) -> bool:
        """Does ``pattern`` equal the file's lines starting at 1-based line ``where``?"""
        if where < 1:
            return False
        base = where - 1
        # A tuple slice compared to a tuple: one C-level comparison, short-circuiting on length.
        return self.lines[base : base + len(pattern)] == pattern


@record(slots=True)  # not frozen: built once per hunk, on the hot path
class Placement:
    """Where a hunk lands in the input file (``where`` 0 = not found) and every other match."""

    where: int
    offset: int  # the jump from the first guess (where - first_guess), 0 when not found
    first_guess: int
    # Other lines in the search range where the preimage matches exactly and could apply: at most
    # SHOWN_OTHERS of them (nearest the placed line, ascending), and how many there are in all.
    others: tuple[int, ...]
    other_count: int = 0


def first_line(hunk: Hunk) -> int:
    """GNU patch's ``pch_first``: the stated old start; an empty preimage appends after that line."""
    return hunk.old_start + 1 if hunk.old_len == 0 else hunk.old_start


def locate(
    hunk: Hunk,
    file: FileLines,
    *,
    in_offset: int,
    last_frozen_line: int,
    exact: bool = False,
    want_others: bool = True,
) -> Placement:
    """Place one hunk at fuzz 0, as GNU patch's ``locate_hunk(0)``.

    ``exact`` restricts the search to the first guess (our ``--exact`` policy). ``want_others`` asks
    for every other exact match in the search range (ambiguity detection).
    """
    pattern = hunk.old_lines
    pat_lines = len(pattern)
    first_guess = first_line(hunk) + in_offset
    if pat_lines == 0:
        # A null range matches always (GNU patch returns the first guess without looking).
        return Placement(first_guess, 0, first_guess, ())

    input_lines = len(file.lines)
    prefix = hunk.prefix_context
    suffix = hunk.suffix_context
    context = max(prefix, suffix)
    prefix_fuzz = prefix - context
    suffix_fuzz = suffix - context
    max_where = input_lines - (pat_lines - suffix_fuzz) + 1
    min_where = last_frozen_line + 1
    max_pos_offset = max_where - first_guess
    max_neg_offset = first_guess - min_where
    if first_guess <= max_neg_offset:  # never try lines <= 0
        max_neg_offset = first_guess - 1

    if prefix_fuzz < 0 and first_line(hunk) <= 1:
        # Fewer leading than trailing context lines: the hunk was made at the start of the file
        # and can only match there.
        offset = 1 - first_guess
        if (
            last_frozen_line <= prefix
            and offset <= max_pos_offset
            and (not exact or offset == 0)
            and file.matches_at(pattern, 1)
        ):
            return Placement(1, offset, first_guess, ())
        return Placement(0, 0, first_guess, ())

    if suffix_fuzz < 0:
        # Fewer trailing than leading context lines: made at the end of the file, matches only there.
        where = input_lines - pat_lines + 1
        offset = first_guess - where
        if (
            offset <= max_neg_offset
            and (not exact or offset == 0)
            and file.matches_at(pattern, where)
        ):
            return Placement(where, -offset, first_guess, ())
        return Placement(0, 0, first_guess, ())

    # The general case. GNU patch tries offsets 0, +1, -1, +2, -2, ...: the positive side up to
    # ``max_pos_offset`` (and, quirk kept, not bounded below by ``last_frozen_line``: a first guess
    # already behind it is still tried), the negative side down to ``min_where``. The first exact match
    # wins, so the winner is the match nearest the guess, positive side first at equal distance.
    # Both sides as one window: [first_guess - max_neg_offset, first_guess + max_pos_offset], never
    # below line 1; matching_starts also stops where the preimage would run past the end.
    low = first_guess - max_neg_offset if max_neg_offset > 0 else first_guess
    high = first_guess + max_pos_offset if max_pos_offset > 0 else first_guess
    if max_pos_offset < 0:
        high = first_guess - 1
    base = first_guess - 1
    at_guess = max_pos_offset >= 0 and base >= 0 and file.lines[base : base + pat_lines] == pattern
    if at_guess and not want_others:
        return Placement(first_guess, 0, first_guess, ())
    if exact and not at_guess:
        return Placement(0, 0, first_guess, ())
    low = max(low, 1)
    high = min(high, len(file.lines) - pat_lines + 1)
    if file.indexed:
        matches = file.starts(pattern)  # the whole file's, sorted: bisect to the window below
    else:
        matches = file.matching_starts(pattern, low, high, hunk.anchor)
    lo = bisect_left(matches, low)
    hi = bisect_right(matches, high)  # matches[lo:hi] are the window's, without copying them
    if at_guess:
        best = first_guess
    elif exact or lo == hi:
        return Placement(0, 0, first_guess, ())
    else:
        best = nearest(matches, lo, hi, first_guess)
    if not want_others:
        return Placement(best, best - first_guess, first_guess, ())
    # Applicable others form a range too: ``applicable`` is ``w >= last_frozen_line - prefix + 1``.
    lo = max(lo, bisect_left(matches, last_frozen_line - hunk.prefix_context + 1, lo, hi))
    count = hi - lo
    at = bisect_left(matches, best, lo, hi)
    if at < hi and matches[at] == best:
        count -= 1
        skip = at
    else:
        skip = -1
    if count <= SHOWN_OTHERS:  # all of them: no choosing (most hunks of most patches)
        shown = (
            tuple(matches[lo:skip] + matches[skip + 1 : hi]) if skip >= 0 else tuple(matches[lo:hi])
        )
    else:
        shown = around(matches, lo, hi, at, best, skip=skip)
    return Placement(best, best - first_guess, first_guess, shown, count)


def nearest(matches: Sequence[int], lo: int, hi: int, guess: int) -> int:
    """The match in ``matches[lo:hi]`` (ascending, not empty) nearest ``guess``, the later one at
    equal distance: the order of GNU patch's probes (offsets 0, +1, -1, +2, -2, ...)."""
    at = bisect_left(matches, guess, lo, hi)
    if at == hi:
        return matches[hi - 1]
    if at == lo:
        return matches[lo]
    before, after = matches[at - 1], matches[at]
    return after if after - guess <= guess - before else before


def around(
    matches: Sequence[int], lo: int, hi: int, at: int, target: int, *, skip: int
) -> tuple[int, ...]:
    """Up to SHOWN_OTHERS entries of ``matches[lo:hi]`` nearest ``target`` (``at`` is where it
    sorts; index ``skip`` excluded), ascending: a merge outward from ``at``, so its cost does not
    grow with the number of matches."""
    left, right = at - 1, at
    picked: list[int] = []
    while len(picked) < SHOWN_OTHERS:
        if right == skip:
            right += 1
        if left == skip:
            left -= 1
        has_left, has_right = left >= lo, right < hi
        if not (has_left or has_right):
            break
        if has_right and (not has_left or matches[right] - target <= target - matches[left]):
            picked.append(matches[right])
            right += 1
        else:
            picked.append(matches[left])
            left -= 1
    return tuple(sorted(picked))


def applicable(hunk: Hunk, where: int, last_frozen_line: int) -> bool:
    """GNU patch copies input up to the line before a hunk's first change; a placement whose first
    change is at or before ``last_frozen_line`` fails ("misordered hunks"). Context may overlap."""
    return where + hunk.prefix_context - 1 >= last_frozen_line


def frozen_after(hunk: Hunk, where: int) -> int:
    """``last_frozen_line`` after applying at ``where``: the input line of the hunk's last change
    (trailing context is not consumed, so the next hunk's context may overlap it)."""
    return where - 1 + len(hunk.old_lines) - hunk.suffix_context


def near_miss(hunk: Hunk, file: FileLines, first_guess: int) -> NearMiss | None:
    """Where the preimage nearly matches: the start with the most equal lines (nearest the guess).

    Only runs for failed hunks, so a full vote over the file's line index is affordable.
    """
    pattern = hunk.old_lines
    if not pattern or not file.lines:
        return None
    votes: dict[int, int] = {}
    for k, text in enumerate(pattern):
        places = file.positions(text)
        if len(places) > NEAR_MISS_COMMON:
            continue
        for position in places:
            start = position - k
            if start >= 1:
                votes[start] = votes.get(start, 0) + 1
    if votes:
        best = min(votes, key=lambda s: (-votes[s], abs(s - first_guess), s < first_guess))
    else:
        best = max(1, min(first_guess, len(file.lines)))
    differences: list[LineDiff] = []
    for k, expected in enumerate(pattern):
        number = best + k
        actual = file.lines[number - 1] if number <= len(file.lines) else None
        if actual != expected:
            differences.append(LineDiff(number, expected, actual))
    aligned_line, aligned = align(pattern, file.lines, best) if differences else (None, b"")
    return NearMiss(
        line=best,
        matched=len(pattern) - len(differences),
        total=len(pattern),
        differences=tuple(differences),
        aligned_line=aligned_line,
        aligned=aligned,
    )


def aligned_summary(miss: NearMiss) -> str:
    """``4 of 4 preimage lines are there, with 1 other line among them`` (from the aligned view)."""
    lines = miss.aligned.splitlines()
    same = sum(1 for x in lines if x[:1] == b" ")
    other = sum(1 for x in lines if x[:1] == b"+")
    text = f"{same} of {miss.total} preimage lines are there"
    if other:
        text += f", with {other} other line{'s' if other != 1 else ''} among them"
    return text


def align(pattern: Sequence[bytes], lines: Sequence[bytes], near: int) -> tuple[int, bytes]:
    """The preimage aligned with the file around 1-based line ``near``: (first file line, diff lines
    of preimage against file). The window reaches one preimage length either side, so lines inserted
    or deleted inside the region show as such."""
    import difflib  # only a near miss pays for it (3 ms to import)

    lo = max(0, near - 1 - len(pattern))
    hi = min(len(lines), near - 1 + 2 * len(pattern))
    window = list(lines[lo:hi])
    matcher = difflib.SequenceMatcher(None, list(pattern), window, autojunk=False)
    blocks = [b for b in matcher.get_matching_blocks() if b.size]
    if blocks:
        first, last = blocks[0], blocks[-1]
        start = max(0, first.b - first.a)
        end = min(len(window), last.b + last.size + (len(pattern) - last.a - last.size))
    else:
        start = max(0, near - 1 - lo)
        end = min(len(window), start + len(pattern))
    span = window[start:end]
    out: list[bytes] = []
    ops = difflib.SequenceMatcher(None, list(pattern), span, autojunk=False).get_opcodes()
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal":
            out += [b" " + eol_marked(x) for x in pattern[i1:i2]]
            continue
        out += [b"-" + eol_marked(x) for x in pattern[i1:i2]]
        out += [b"+" + eol_marked(x) for x in span[j1:j2]]
    return lo + start + 1, b"".join(out)


def eol_marked(line: bytes) -> bytes:
    """A line as a diff shows it: a last line without newline gets GNU's marker line."""
    return line if line.endswith(b"\n") else line + b"\n\\ No newline at end of file\n"
