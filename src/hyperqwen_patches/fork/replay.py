"""Replay identity (invariant 4) and fork membership (invariant 7), on git objects only.

    pristine + rows 1..k == the k-th fork commit, for every k, and pristine + all rows == the tip.

The pristine side is the engine applying each row at fuzz 0 (the same code ``apply`` and the Docker image
use), in memory (``treestate.py``). The fork side is read from git objects (``forkwalk.py``); the two are
compared by blob SHA and mode, so nothing is checked out and nothing is written: not into the user's
work tree, index, refs or config. The one repository written to is a scratch bare repository of our own
(the base commit is built there; a URL or bundle fork is fetched there); a local fork is read through
``objects/info/alternates``.

Rows are matched to fork commits by ``matching.py``; what cannot be matched is named here.
:func:`check_replay` reads as its steps: the commits on the base, membership (merges, matching, order,
recorded SHAs), then the replay itself, one row at a time, each divergence said once.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from hyperqwen_patches.console import show
from hyperqwen_patches.errors import GitError
from hyperqwen_patches.fork import reading as forkgit
from hyperqwen_patches.fork.forkwalk import ForkComparer
from hyperqwen_patches.fork.matching import Matching, match_rows
from hyperqwen_patches.fork.treestate import (
    BaseEntries,
    Entry,
    LazyEntries,
    Reader,
    RowDoesNotApply,
    TreeState,
    apply_row,
    tree_entries,
)
from hyperqwen_patches.records import field, record

if TYPE_CHECKING:
    from hyperqwen_patches.engine.patchmodel import Patch

from hyperqwen_patches.checks.context import Severity

CheckName = Literal["replay-identity", "fork-commits"]

SHORT_DIFF_LINES = 20


@record(frozen=True)
class ReplayProblem:
    """One replay or membership finding (``check`` turns these into its ``Finding`` records)."""

    check: str  # "replay-identity" | "fork-commits"
    severity: Severity
    subject: str  # the row, commit or export point it is about
    message: str
    detail: str = ""


@record(frozen=True)
class ReplayRow:
    """A row as replay sees it: its name, the commit the manifest records, its engine patch."""

    name: str
    commit: str | None  # the manifest's ``commit:``
    patch: Patch | None  # None when it cannot be built (replay stops there)


@record(frozen=True)
class StepResult:
    row: str
    commit: str | None
    differing: tuple[bytes, ...]


@record
class ReplayReport:
    export_point: str
    base: str
    tip: str
    steps: list[StepResult] = field(default_factory=list)
    tip_differing: tuple[bytes, ...] = ()
    problems: list[ReplayProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)

    def error(self, check: CheckName, subject: str, message: str, detail: str = "") -> None:
        self.problems.append(ReplayProblem(check, "error", subject, message, detail))


# --- the check, step by step ---------------------------------------------------------------------------


def check_replay(
    view_dir: Path,
    *,
    export_point: str,
    base: str,
    tip: str,
    rows: Sequence[ReplayRow],
    read_base: Reader,
    others: Mapping[str, str] | None = None,
    base_entries: BaseEntries | None = None,
) -> ReplayReport:
    """Replay ``rows`` on the base and compare every step with the fork's commits in ``view_dir``;
    collect every problem.

    ``others``: the manifest's rows not on this export point, with why (:func:`matching.other_rows`).
    ``base_entries``: the base's entries computed from ``read_base`` when the base commit was built from
    it (check's session); else the base's tree is listed."""
    report = ReplayReport(export_point, base, tip)
    commits = _commits_on_base(view_dir, report)
    if commits is None:
        return report
    _report_merges(commits, report)
    matching = match_rows([(r.name, r.commit) for r in rows], commits, others)
    _report_unmatched(matching, report)
    paired = {p.row: p.commit for p in matching.pairs}
    _report_order(rows, matching, report)
    _report_recorded_commits(view_dir, rows, paired, report)
    _replay(view_dir, rows, paired, commits, report, read_base, base_entries)
    return report


def _commits_on_base(view_dir: Path, report: ReplayReport) -> list[forkgit.ForkCommit] | None:
    """The export point's commits over the base; None (with the problem) when it has no such base."""
    base, point = report.base, report.export_point
    if not forkgit.commit_exists(view_dir, base):
        report.error("fork-commits", point, f"the base commit {base} is not in the fork")
        return None
    try:
        return forkgit.list_commits(view_dir, base, report.tip)
    except GitError as exc:
        report.error(
            "fork-commits",
            point,
            f"the export point is not built on the pin's base commit {base[:12]}: {exc.message}",
        )
        return None


def _report_merges(commits: Sequence[forkgit.ForkCommit], report: ReplayReport) -> None:
    for commit in commits:
        if len(commit.parents) != 1:
            report.error(
                "fork-commits",
                commit.sha[:12],
                f"merge commit {commit.subject!r} on the export point",
            )


def _report_unmatched(matching: Matching, report: ReplayReport) -> None:
    """Invariant 7: every fork commit is a row's and every row has one commit."""
    point = report.export_point
    for name, commit in matching.missing_rows:
        report.error(
            "fork-commits",
            name,
            f"missing row: fork commit {commit.sha[:12]} {commit.subject!r} names row {name}, which "
            "the manifest does not have",
            "run export to add it, or drop the commit from the export point",
        )
    for name, commit, why in matching.misplaced:
        report.error(
            "fork-commits",
            name,
            f"fork commit {commit.sha[:12]} {commit.subject!r} carries row {name}, which is {why}",
            f"drop the commit from export point {point}, or change the row",
        )
    for commit in matching.extra_commits:
        report.error(
            "fork-commits",
            commit.sha[:12],
            f"extra fork commit {commit.sha[:12]} {commit.subject!r}: no Hqp-Row trailer and no row "
            "records it",
            "run export to add it as a row, or drop it from the export point",
        )
    for name, commit in matching.duplicate:
        report.error(
            "fork-commits",
            name,
            f"row {name} is named by more than one fork commit (also {commit.sha[:12]})",
        )
    for name in matching.vanished_rows:
        report.error(
            "fork-commits",
            name,
            f"row {name} has no commit on export point {point} (its commit vanished)",
        )


def _report_order(rows: Sequence[ReplayRow], matching: Matching, report: ReplayReport) -> None:
    paired = {p.row for p in matching.pairs}
    order = [p.row for p in matching.pairs]
    row_order = [r.name for r in rows if r.name in paired]
    if order != row_order:
        report.error(
            "replay-identity",
            report.export_point,
            "the fork's commits are in a different order than the manifest's rows",
            f"fork: {', '.join(order)}\nmanifest: {', '.join(row_order)}",
        )


def _report_recorded_commits(
    view_dir: Path,
    rows: Sequence[ReplayRow],
    paired: Mapping[str, forkgit.ForkCommit],
    report: ReplayReport,
) -> None:
    """A row's recorded ``commit:`` is its paired commit, or at least a commit of the fork."""
    unpaired = [r.commit for r in rows if r.commit and paired.get(r.name) is None]
    existing = forkgit.commits_existing(view_dir, unpaired)
    for row in rows:
        name, recorded, commit = row.name, row.commit, paired.get(row.name)
        if commit is not None and recorded and recorded != commit.sha:
            report.error(
                "fork-commits",
                name,
                f"row {name} records commit {recorded[:12]}, but its commit on "
                f"{report.export_point} is {commit.sha[:12]} (run export to update the manifest)",
            )
        elif recorded and commit is None and recorded not in existing:
            report.error(
                "fork-commits",
                name,
                f"row {name} records commit {recorded[:12]}, which is not in the fork",
            )


def _replay(
    view_dir: Path,
    rows: Sequence[ReplayRow],
    paired: Mapping[str, forkgit.ForkCommit],
    commits: Sequence[forkgit.ForkCommit],
    report: ReplayReport,
    read_base: Reader,
    base_entries: BaseEntries | None,
) -> None:
    """Invariant 4: apply the rows one by one, compare each paired step and then the tip."""
    entries: Mapping[bytes, Entry] | BaseEntries
    if base_entries is None:
        entries = tree_entries(view_dir, report.base)
        state = TreeState(entries, read_base)
    else:
        entries = base_entries
        state = TreeState(LazyEntries(base_entries), read_base)
    fork = ForkComparer(view_dir, state, report.base, commits, entries)
    said = _Divergences(view_dir, state)
    for row in rows:
        if not _apply_step(state, row, report):
            return
        commit = paired.get(row.name)
        if commit is None:
            report.steps.append(StepResult(row.name, None, ()))
            continue
        differing, actual = fork.at(commit.sha)
        report.steps.append(StepResult(row.name, commit.sha, differing))
        diff = said.new(differing, actual)
        if diff is not None:
            report.error(
                "replay-identity",
                row.name,
                f"{'first divergent step' if said.count == 1 else 'step'}: pristine + rows up to "
                f"{row.name} differs from fork commit {commit.sha[:12]} in {len(differing)} file(s): "
                + ", ".join(show(p) for p in differing[:5]),
                diff + "\n" + _fix_hint(row.name),
            )
    differing, actual = fork.at(report.tip)
    report.tip_differing = differing
    diff = said.new(differing, actual)
    if diff is not None:
        report.error(
            "replay-identity",
            report.export_point,
            f"tip: pristine + series differs from {report.tip[:12]} in {len(differing)} file(s): "
            + ", ".join(show(p) for p in differing[:5]),
            diff + "\nfix: run `hyperqwen-patches export` (the fork is the truth)",
        )


def _apply_step(state: TreeState, row: ReplayRow, report: ReplayReport) -> bool:
    """Apply one row on the state; False (with the problem) when replay must stop at it."""
    if row.patch is None:
        report.error(
            "replay-identity", row.name, f"row {row.name} cannot be built; replay stops here"
        )
        return False
    try:
        apply_row(state, row.patch, row=row.name)
    except RowDoesNotApply as exc:
        report.error("replay-identity", row.name, exc.message)
        return False
    return True


class _Divergences:
    """One edit shows at its row's step and at every later step and the tip, the same lines each
    time: said once, where it starts (with the command that fixes it)."""

    def __init__(self, git_dir: Path, state: TreeState) -> None:
        self._git_dir = git_dir
        self._state = state
        self._last: tuple[tuple[bytes, ...], tuple[str, ...]] | None = None
        self.count = 0  # divergences said so far

    def new(self, differing: tuple[bytes, ...], actual: Mapping[bytes, Entry]) -> str | None:
        """The short diff of a divergence to say, or None: nothing differs, or it is the one said at
        the step before (a step where nothing differs ends that one)."""
        if not differing:
            self._last = None
            return None
        diff = short_diff(self._git_dir, self._state, actual, differing)
        signature = _signature(differing, diff)
        if signature == self._last:
            return None
        self._last = signature
        self.count += 1
        return diff


def short_diff(
    git_dir: Path, state: TreeState, actual: Mapping[bytes, tuple[int, str]], paths: Sequence[bytes]
) -> str:
    """A short unified diff, replay (pristine + series) → fork, for the first differing files."""
    out: list[str] = []
    for path in paths[:3]:
        exp = state.entries.get(path)
        act = actual.get(path)
        if exp and act and exp[1] == act[1]:
            out.append(f"{show(path)}: mode {exp[0]:o} in the series, {act[0]:o} in the fork")
            continue
        old = state.read(path) if exp else b""
        new = forkgit.read_blob(git_dir, act[1]) if act else b""
        lines = list(
            difflib.unified_diff(
                show(old or b"").splitlines(keepends=True),
                show(new).splitlines(keepends=True),
                f"series/{show(path)}" if exp else "/dev/null",
                f"fork/{show(path)}" if act else "/dev/null",
                n=1,
            )
        )
        if len(lines) > SHORT_DIFF_LINES:
            lines = [
                *lines[:SHORT_DIFF_LINES],
                f"... ({len(lines) - SHORT_DIFF_LINES} more lines)\n",
            ]
        out.append("".join(line if line.endswith("\n") else line + "\n" for line in lines).rstrip())
    if len(paths) > 3:
        out.append(f"... and {len(paths) - 3} more file(s)")
    return "\n".join(out)


def _signature(paths: Sequence[bytes], diff: str) -> tuple[tuple[bytes, ...], tuple[str, ...]]:
    """What a divergence is, whatever step shows it: the files and the changed lines (not the @@
    line numbers, which later rows move)."""
    changed = tuple(
        line
        for line in diff.splitlines()
        if line[:1] in ("+", "-") and not line.startswith(("+++ ", "--- "))
    )
    return tuple(paths), changed


def _fix_hint(row: str) -> str:
    return (
        f"fix: run `hyperqwen-patches export` to write row {row}'s patch file from the fork (a hand "
        f"edit of the patch file is dropped; to keep one, make it on the fork: "
        f"`hyperqwen-patches edit {row}`, then `hyperqwen-patches refresh`)"
    )
