"""Which fork commit is which manifest row: the ``Hqp-Row: <name>`` trailer first, the row's recorded
``commit:`` SHA second (docs/fork.md, "Matching rows to commits").

What cannot be paired is sorted by why: a trailer naming a row the manifest lacks (a missing row), one
naming a row that is skipped or on another export point (misplaced), a commit with neither (an extra
commit), a second commit for one row (a duplicate), a row with no commit (its commit vanished).
``check`` reports each, ``export`` refuses some, the row commands need every row paired.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from hyperqwen_patches.fork import reading as forkgit
from hyperqwen_patches.records import field, record

if TYPE_CHECKING:
    from hyperqwen_patches.series.manifestmodel import Manifest


# Named tuples, not records: callers still unpack them (``name, commit = ...``), and typed fields make
# each part say what it is.
class RowCommit(NamedTuple):
    """A row name and the fork commit that carries it."""

    row: str
    commit: forkgit.ForkCommit


class Misplaced(NamedTuple):
    """A fork commit whose trailer names a row the manifest has elsewhere, and where that row is."""

    row: str
    commit: forkgit.ForkCommit
    why: str  # "skipped (...)" | "a row of export point X"


@record
class Matching:
    pairs: list[RowCommit] = field(default_factory=list)
    missing_rows: list[RowCommit] = field(default_factory=list)  # a trailer, no such row
    extra_commits: list[forkgit.ForkCommit] = field(default_factory=list)  # no trailer, no row
    vanished_rows: list[str] = field(default_factory=list)  # a row with no commit
    duplicate: list[RowCommit] = field(default_factory=list)  # a second commit for a paired row
    # A trailer naming a row the manifest has but not here (skipped, or on another export point).
    misplaced: list[Misplaced] = field(default_factory=list)


def match_rows(
    rows: Sequence[tuple[str, str | None]],
    commits: Sequence[forkgit.ForkCommit],
    others: Mapping[str, str] | None = None,
) -> Matching:
    """Pair ``(row name, recorded commit)`` rows with fork commits: trailer first, recorded SHA second.

    ``others`` maps the manifest's other row names to why they are not among ``rows`` ("skipped",
    "on export point X"), so such a commit is named as misplaced, not as a row the manifest lacks."""
    others = others or {}
    names = {name for name, _ in rows}
    by_sha = {sha: name for name, sha in rows if sha}
    out = Matching()
    taken: set[str] = set()
    for commit in commits:
        name = commit.row
        if name is None and commit.sha in by_sha:
            name = by_sha[commit.sha]
        if name is None:
            out.extra_commits.append(commit)
        elif name not in names and name in others:
            out.misplaced.append(Misplaced(name, commit, others[name]))
        elif name not in names:
            out.missing_rows.append(RowCommit(name, commit))
        elif name in taken:
            out.duplicate.append(RowCommit(name, commit))
        else:
            taken.add(name)
            out.pairs.append(RowCommit(name, commit))
    out.vanished_rows = [name for name, _ in rows if name not in taken]
    return out


def other_rows(manifest: Manifest, point: str) -> dict[str, str]:
    """The manifest's rows that are not replayed on ``point``, with the reason."""
    out: dict[str, str] = {}
    for row in manifest.rows:
        where = manifest.point_of(row)
        if row.skip is not None:
            out[row.name] = f"skipped ({row.skip})"
        elif where != point:
            out[row.name] = f"a row of export point {where}"
    return out
