"""One row of ``port --rebase``: tried at fuzz 0 on the branch as built so far, else merged three-way
with its old fork commit, then checked as written. Nothing is written to git here: the outcome says
what goes into the row's commit, or why a person is needed, and ``rebase.py`` acts on it.

The steps, in order (docs/port.md, "--rebase"):

1. **fuzz 0**: the row's hunks the new release does not carry yet, applied on the branch
   (``triage.attempt_row``); a row the release carries whole is "upstream" and gets no commit;
2. **merge**: a row that does not apply is merged with ``git merge-file`` from its change on the old
   release (the old side: the pin with the earlier rows, as the old fork commits hold it) into the
   branch (``threeway.merge_row``, changes that only touch combined by ``adjacent.py``); a conflict
   needs a person;
3. **verify**: every row that went in (at fuzz 0, at an offset, merged) is checked on the files as
   written (``verify.RebaseChecks``: compiles, names and calls bind, no stale copied body); a finding
   needs a person too, as a conflict does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from hyperqwen_patches.console import show
from hyperqwen_patches.engine.overlay import over
from hyperqwen_patches.fork.treestate import TreeState, apply_row, row_result
from hyperqwen_patches.port.copyindexcache import store_for
from hyperqwen_patches.port.model import Attempt, CommitHow, PortRow
from hyperqwen_patches.port.pristinediff import PristinePair
from hyperqwen_patches.port.threeway import FileMerge, merge_row
from hyperqwen_patches.port.triage import attempt_row, touched_paths
from hyperqwen_patches.port.verify import RebaseChecks
from hyperqwen_patches.records import record
from hyperqwen_patches.sources.pristinetree import PristineTree

Reader = Callable[[bytes], bytes | None]


@record(frozen=True)
class RowOutcome:
    """What one row's step decided.

    ``upstream``: the release carries the row, no commit. ``written``: the row is in ``state``; its
    commit gets ``note`` in its message. ``needs-person``: ``files`` go to the worktree (with conflict
    markers, or as written with ``findings``)."""

    kind: Literal["upstream", "written", "needs-person"]
    how: CommitHow = "applied"
    note: str = ""
    merged: tuple[bytes, ...] = ()  # files where both sides' changes were combined
    adjacent: tuple[tuple[bytes, int, str], ...] = ()  # (file, line, which changes met): review
    files: tuple[FileMerge, ...] = ()
    findings: tuple[str, ...] = ()


class OldSide:
    """The pin with the rows applied in order: each row's file before and after it, as the old fork
    commit's parent and the commit hold them (replay identity), for the three-way merge."""

    def __init__(self, old: PristineTree) -> None:
        self._old = old
        self._state: dict[bytes, bytes | None] = {}
        self.read = over(self._state, old.read)

    def step(self, row: PortRow) -> tuple[dict[bytes, bytes | None], dict[bytes, int]]:
        """``row``'s changes and modes on the old side (it moves on only at :meth:`commit`: the
        merge reads the "before" side first)."""
        assert row.patch is not None
        result = row_result(row.patch, self.read, row=f"{row.name} (on {self._old.label})")
        return dict(result.changes), dict(result.modes)

    def reader_after(self, changes: dict[bytes, bytes | None]) -> Reader:
        """The files as the row leaves them (before :meth:`commit`)."""
        return over(changes, self.read)

    def commit(self, changes: dict[bytes, bytes | None]) -> None:
        self._state.update(changes)


class RowPorter:
    """The three steps for each row in turn, sharing one old side, one pristine pair and one set of
    checks for the whole run."""

    def __init__(
        self,
        package: str,
        versions: tuple[str, str],
        old: PristineTree,
        new: PristineTree,
        *,
        accept: Sequence[str] = (),
    ) -> None:
        from_version, to_version = versions
        self._to = f"{package} {to_version}"
        self.pair = PristinePair(old, new)
        self.old_side = OldSide(old)
        self.labels = (f"{self._to} + rows before", f"{package} {from_version} + rows before")
        self.checks = RebaseChecks(
            package,
            old.read,
            old.paths,
            new.read,
            old_label=self.labels[1],
            new_label=f"{self._to} + rows",
            accept=accept,
            copy_store=store_for(old.label, package),
        )

    def skip_to(self, rows: Sequence[PortRow]) -> None:
        """The old side after ``rows`` (a --continue starts after the rows already built)."""
        for row in rows:
            if row.patch is not None:
                self.old_side.commit(self.old_side.step(row)[0])

    def port(self, row: PortRow, state: TreeState) -> RowOutcome:
        """Try ``row`` on ``state`` (which it changes when the row goes in)."""
        assert row.patch is not None
        old_changes, old_modes = self.old_side.step(row)
        attempt = attempt_row(row.patch, state.read, self.pair)
        if attempt.status == "upstream":
            self.old_side.commit(old_changes)
            return RowOutcome("upstream")
        paths = touched_paths(row.patch)
        before = {path: state.read(path) for path in paths}
        merged: tuple[FileMerge, ...] | None = None
        if attempt.status != "conflicts":
            assert attempt.carried is not None
            apply_row(state, attempt.carried, row=row.name)
            outcome = self._applied(attempt)
        else:
            merge = merge_row(
                paths,
                self.old_side.read,
                self.old_side.reader_after(old_changes),
                state.read,
                (*self.labels, f"row {row.name}"),
            )
            if not merge.clean:
                return RowOutcome("needs-person", files=merge.files)
            merged = merge.files
            state.apply_changes(row.patch, {f.path: f.content for f in merged}, old_modes)
            outcome = self._merged(merge.merged_paths, merge.adjacent)
        written = self.checks.check(
            row.name,
            paths,
            self.old_side.read,
            self.old_side.reader_after(old_changes),
            over(before, state.read),
            state.read,
        )
        if not written.ok:
            # As a conflict does: the row's files as written, for a person, with the findings.
            files = merged if merged is not None else tuple(
                FileMerge(path, state.read(path), "row")
                for path in paths
                if state.read(path) != before[path]
            )  # fmt: skip
            return RowOutcome("needs-person", files=files, findings=tuple(written.lines()))
        self.old_side.commit(old_changes)
        return outcome

    def _applied(self, attempt: Attempt) -> RowOutcome:
        if attempt.status != "partly-upstream":
            return RowOutcome("written", "applied")
        dropped = ", ".join(
            f"{show(h.path)} hunk #{h.number}" for h in attempt.hunks if h.status == "upstream"
        )
        return RowOutcome(
            "written",
            "partly-upstream",
            note=f"Ported to {self._to}: {dropped} dropped, already upstream.",
        )

    def _merged(
        self, both: tuple[bytes, ...], adjacent: tuple[tuple[bytes, int, str], ...]
    ) -> RowOutcome:
        note = f"Ported to {self._to} by a three-way merge" + (
            f"; both sides changed {', '.join(show(p) for p in both)}." if both else "."
        )
        if adjacent:
            sites = ", ".join(f"{show(p)}:{n}" for p, n, _ in adjacent)
            note += f" Merged next to an upstream change (review): {sites}."
        return RowOutcome("written", "merged", note=note, merged=both, adjacent=adjacent)
