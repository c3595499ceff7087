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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hyperqwen_patches.engine.patchset import Hunk


@dataclass(frozen=True, slots=True)
class LineDiff:
    """One line where the file differs from the hunk's preimage at a near-miss position."""

    line: int  # line number in the file (1-based)
    expected: bytes  # what the hunk's preimage has
    actual: bytes | None  # what the file has (None past the end of the file)


@dataclass(frozen=True, slots=True)
class NearMiss:
    """The place the preimage came closest to matching: most equal lines, nearest to the first guess."""

    line: int  # where the preimage would start (1-based, in the file before this patch)
    matched: int  # how many preimage lines are equal there
    total: int  # preimage length
    differences: tuple[LineDiff, ...]


class FileLines:
    """The lines of one input file with a lazily built index: line bytes -> sorted 1-based positions."""

    __slots__ = ("_index", "lines")

    def __init__(self, lines: Sequence[bytes]) -> None:
        self.lines = lines
        self._index: dict[bytes, list[int]] | None = None

    def positions(self, line: bytes) -> list[int]:
        if self._index is None:
            index: dict[bytes, list[int]] = {}
            for number, text in enumerate(self.lines, start=1):
                index.setdefault(text, []).append(number)
            self._index = index
        return self._index.get(line, [])

    def starts(self, pattern: Sequence[bytes]) -> list[int]:
        """Candidate start lines for ``pattern``, from the index of its rarest line (so a preimage
        that begins with a blank line does not visit every blank line of the file)."""
        self.positions(pattern[0])  # builds the index
        assert self._index is not None
        index = self._index
        best_k = min(range(len(pattern)), key=lambda k: len(index.get(pattern[k], ())))
        return [p - best_k for p in index.get(pattern[best_k], ()) if p - best_k >= 1]

    def matches_at(self, pattern: Sequence[bytes], where: int) -> bool:
        """Does ``pattern`` equal the file's lines starting at 1-based line ``where``?"""
        if where < 1 or where - 1 + len(pattern) > len(self.lines):
            return False
        lines = self.lines
        base = where - 1
        return all(lines[base + k] == text for k, text in enumerate(pattern))


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a hunk lands in the input file (``where`` 0 = not found) and every other match."""

    where: int
    offset: int  # the jump from the first guess (where - first_guess), 0 when not found
    first_guess: int
    others: tuple[int, ...]  # other lines in the search range where the preimage matches exactly


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
    def candidate(where: int) -> bool:
        offset = where - first_guess
        if offset >= 0:
            return offset <= max_pos_offset and where >= 1
        return -offset <= max_neg_offset

    if exact:
        if candidate(first_guess) and file.matches_at(pattern, first_guess):
            others = (
                _others(hunk, file, pattern, candidate, first_guess, last_frozen_line)
                if want_others
                else ()
            )
            return Placement(first_guess, 0, first_guess, others)
        return Placement(0, 0, first_guess, ())
    best = 0
    best_key: tuple[int, int] | None = None
    for where in file.starts(pattern):
        if not candidate(where) or not file.matches_at(pattern, where):
            continue
        offset = where - first_guess
        key = (abs(offset), 0 if offset >= 0 else 1)
        if best_key is None or key < best_key:
            best_key, best = key, where
            if offset == 0:
                break
    if best == 0:
        return Placement(0, 0, first_guess, ())
    others = _others(hunk, file, pattern, candidate, best, last_frozen_line) if want_others else ()
    return Placement(best, best - first_guess, first_guess, others)


def applicable(hunk: Hunk, where: int, last_frozen_line: int) -> bool:
    """GNU patch copies input up to the line before a hunk's first change; a placement whose first
    change is at or before ``last_frozen_line`` fails ("misordered hunks"). Context may overlap."""
    return where + hunk.prefix_context - 1 >= last_frozen_line


def frozen_after(hunk: Hunk, where: int) -> int:
    """``last_frozen_line`` after applying at ``where``: the input line of the hunk's last change
    (trailing context is not consumed, so the next hunk's context may overlap it)."""
    return where - 1 + len(hunk.old_lines) - hunk.suffix_context


def _others(
    hunk: Hunk,
    file: FileLines,
    pattern: Sequence[bytes],
    candidate: Callable[[int], bool],
    chosen: int,
    last_frozen_line: int,
) -> tuple[int, ...]:
    """Every other place in the search range where the preimage matches and could be applied."""
    return tuple(
        where
        for where in file.starts(pattern)
        if where != chosen
        and candidate(where)
        and applicable(hunk, where, last_frozen_line)
        and file.matches_at(pattern, where)
    )


def near_miss(hunk: Hunk, file: FileLines, first_guess: int) -> NearMiss | None:
    """Where the preimage nearly matches: the start with the most equal lines (nearest the guess).

    Only runs for failed hunks, so a full vote over the file's line index is affordable.
    """
    pattern = hunk.old_lines
    if not pattern or not file.lines:
        return None
    votes: dict[int, int] = {}
    for k, text in enumerate(pattern):
        for position in file.positions(text):
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
    return NearMiss(
        line=best,
        matched=len(pattern) - len(differences),
        total=len(pattern),
        differences=tuple(differences),
    )
