"""What ``port`` returns: a verdict per hunk, file and row, the whole report, and the rebase's request
and result. Plain data with ``to_json``; the triage fills it, the commands render it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple

from hyperqwen_patches.console import show
from hyperqwen_patches.engine.applying import (
    Policy,
)
from hyperqwen_patches.engine.patchmodel import Patch
from hyperqwen_patches.records import field, record

RowStatus = Literal["exact", "offset", "upstream", "partly-upstream", "conflicts", "skipped"]
HunkStatus = Literal["exact", "offset", "upstream", "conflict"]
DriftStatus = Literal["unchanged", "changed", "added", "removed", "absent"]

ROW_STATUSES: tuple[RowStatus, ...] = (
    "exact",
    "offset",
    "partly-upstream",
    "upstream",
    "conflicts",
    "skipped",
)

# Lines of unchanged pristine text shown around a change in the old-vs-new pristine diffs, and how far
# from a hunk's region a pristine change may start and still be shown as its cause.
DIFF_CONTEXT = 3
REGION_MARGIN = 3

Reader = Callable[[bytes], bytes | None]

# Forward attempts: GNU placement at fuzz 0 with ambiguity reported (a hunk that lands on one of two
# copies of its context applies, but the report says so); no --forward short-cut, because the reverse
# is tried per hunk below and a whole-file "already applied" would hide a partly-upstream file.
FORWARD = Policy(ambiguity="report", forward=False)
REVERSE = Policy(ambiguity="off", forward=False)


@record(frozen=True)
class PortRow:
    """A row as port tries it: its name, place and engine patch (None for a skipped row)."""

    name: str
    position: int
    kind: Literal["patch", "files"]
    patch: Patch | None
    skip: str | None = None


@record(frozen=True)
class HunkVerdict:
    """One hunk of a row on the new release."""

    path: bytes
    number: int
    status: HunkStatus
    stated_line: int
    line: int | None  # where it applies (GNU's reported line), or where its reverse matched
    offset: int  # GNU's cumulative offset for an applied hunk; 0 otherwise
    other_matches: tuple[int, ...] = ()  # other places the preimage matches (ambiguity): at most 3
    other_count: int = 0  # how many other places in all
    total: int = 0  # conflicts: preimage length
    # The same, aligned: the hunk's preimage against the release's lines where it nearly fits, as
    # diff lines (" " equal, "-" only in the preimage, "+" only in the release), starting at
    # ``aligned_line``; an inserted or deleted line shows as one line, not as a shifted run.
    aligned: bytes = b""
    aligned_line: int | None = None
    cause: str = ""  # one line: why it conflicts, or where the release carries it
    pristine_diff: bytes = b""  # old-vs-new pristine diff around the hunk's region
    # conflicts: GNU patch's "Hunk #N FAILED at L" number (the stated line moved by what the file's
    # earlier hunks added), to find the hunk in a .rej or a GNU log
    reported_line: int | None = None
    # conflicts: the earlier rows whose added lines the hunk's preimage needs and the file lacks (in
    # sequence: rows not carried; alone: rows it builds on). Non-empty: a cascade, not a clash with
    # the new release itself.
    caused_by: tuple[str, ...] = ()
    # conflicts: release lines (number, text) that carry every added line in another form
    # (whitespace, indentation): upstream may have taken the change; review for retirement.
    upstream_evidence: tuple[tuple[int, bytes], ...] = ()

    def others_text(self) -> str:
        """``5, 12, 19`` or ``5, 12, 19 and 9,997 more`` (at most 3 lines are kept)."""
        text = ", ".join(map(str, self.other_matches))
        rest = self.other_count - len(self.other_matches)
        return f"{text} and {rest:,} more" if rest > 0 else text

    def to_json(self) -> dict[str, Any]:
        return {
            "path": show(self.path),
            "hunk": self.number,
            "status": self.status,
            "stated_line": self.stated_line,
            "line": self.line,
            "offset": self.offset,
            "other_matches": list(self.other_matches),
            "other_count": self.other_count,
            "total": self.total,
            "aligned": show(self.aligned),
            "aligned_line": self.aligned_line,
            "cause": self.cause,
            "pristine_diff": show(self.pristine_diff),
            "reported_line": self.reported_line,
            "caused_by": list(self.caused_by),
            "upstream_form": "changed" if self.upstream_evidence else None,
            "evidence": [{"line": n, "text": show(t)} for n, t in self.upstream_evidence],
        }


@record(frozen=True)
class FileVerdict:
    """One file of a row: its action, a file-level problem if any, and its hunks."""

    path: bytes
    action: str
    status: HunkStatus
    hunks: tuple[HunkVerdict, ...]
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": show(self.path),
            "action": self.action,
            "status": self.status,
            "error": self.error,
            "hunks": [h.to_json() for h in self.hunks],
        }


@record(frozen=True)
class Attempt:
    """A row tried once (alone, or in sequence): its status and what each file and hunk did."""

    status: RowStatus
    files: tuple[FileVerdict, ...] = ()
    # The changes this attempt contributes to the sequence (path -> bytes, None = delete): every hunk
    # that applies; nothing for a conflicting row. ``carried`` is the patch that makes them (the row
    # without its upstream hunks), which is what ``--rebase`` commits.
    changes: Mapping[bytes, bytes | None] = field(default_factory=dict)
    carried: Patch | None = None

    @property
    def hunks(self) -> tuple[HunkVerdict, ...]:
        return tuple(h for f in self.files for h in f.hunks)

    def count(self, status: HunkStatus) -> int:
        return sum(1 for f in self.files for h in (f.hunks or (f,)) if h.status == status)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "counts": {s: self.count(s) for s in ("exact", "offset", "upstream", "conflict")},
            "files": [f.to_json() for f in self.files],
        }


@record(frozen=True)
class FileDrift:
    """Whether a file the row touches changed between the two releases, and by how much."""

    path: bytes
    status: DriftStatus
    added: int = 0
    removed: int = 0

    def describe(self) -> str:
        if self.status == "changed":
            return f"{show(self.path)} changed (+{self.added} -{self.removed})"
        if self.status == "unchanged":
            return f"{show(self.path)} unchanged"
        if self.status == "absent":
            return f"{show(self.path)} in neither release"
        return f"{show(self.path)} {self.status} upstream"

    def to_json(self) -> dict[str, Any]:
        return {
            "path": show(self.path),
            "status": self.status,
            "added": self.added,
            "removed": self.removed,
        }


@record(frozen=True)
class RowPort:
    """One row on the new release: alone, in sequence, and how its files moved."""

    name: str
    position: int
    kind: str
    alone: Attempt
    in_sequence: Attempt
    drift: tuple[FileDrift, ...] = ()
    skip: str | None = None

    @property
    def status(self) -> RowStatus:
        """The headline: what a rebase in series order meets."""
        return self.in_sequence.status

    @property
    def differs(self) -> bool:
        return self.alone.status != self.in_sequence.status

    @property
    def changed_files(self) -> tuple[FileDrift, ...]:
        return tuple(d for d in self.drift if d.status in ("changed", "added", "removed"))

    @property
    def cascade(self) -> tuple[str, ...]:
        """In sequence, the earlier rows behind every conflicting hunk, when all of them are such
        cascades (the row itself does not clash with the new release); () otherwise."""
        failed = [h for h in self.in_sequence.hunks if h.status == "conflict"]
        if not failed or any(not h.caused_by for h in failed):
            return ()
        return tuple(dict.fromkeys(name for h in failed for name in h.caused_by))

    @property
    def upstream_changed_form(self) -> bool:
        """Every conflicting hunk (in sequence) has its added lines in the release in another form."""
        failed = [h for h in self.in_sequence.hunks if h.status == "conflict"]
        return bool(failed) and all(h.upstream_evidence for h in failed)

    def to_json(self) -> dict[str, Any]:
        return {
            "upstream_form": "changed" if self.upstream_changed_form else None,
            "name": self.name,
            "position": self.position,
            "kind": self.kind,
            "status": self.status,
            "alone": self.alone.to_json(),
            "in_sequence": self.in_sequence.to_json(),
            "alone_differs": self.differs,
            "cascade_from": list(self.cascade),
            "files_changed_upstream": [d.to_json() for d in self.drift],
            "skip": self.skip,
        }


@record(frozen=True)
class PortReport:
    """Every row of the series on another release."""

    package: str
    from_version: str
    to_version: str
    from_label: str
    to_label: str
    rows: tuple[RowPort, ...]
    # Removed names and changed signatures of the added lines (statics.report.port_statics).
    statics: Any = None
    # False for a rebase's --continue/--skip: the rows were triaged when it started; going on needs
    # no second triage (rows and statics are empty then).
    triaged: bool = True

    @property
    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {
            s: sum(1 for r in self.rows if r.status == s) for s in ROW_STATUSES
        }
        # Of the conflicting rows, those that conflict only because earlier rows were not carried.
        counts["conflicts_by_cascade"] = sum(1 for r in self.rows if r.cascade)
        # Of the conflicting rows, those whose every failing hunk the release carries in changed form.
        counts["upstream_in_changed_form"] = sum(1 for r in self.rows if r.upstream_changed_form)
        return counts

    @property
    def retirement_candidates(self) -> tuple[RetirementCandidate, ...]:
        """Rows (or hunks) the new release carries, with the evidence, ready for the manifest."""
        out: list[RetirementCandidate] = []
        for row in self.rows:
            if row.status not in ("upstream", "partly-upstream"):
                continue
            upstream = [h for h in row.in_sequence.hunks if h.status == "upstream"]
            upstream_files = [
                f for f in row.in_sequence.files if f.status == "upstream" and not f.hunks
            ]
            where = "; ".join(
                [f"{show(h.path)} hunk #{h.number} at line {h.line}" for h in upstream]
                + [f"{show(f.path)} ({f.action})" for f in upstream_files]
            )
            evidence = (
                f"the reverse of the row applies exactly on {self.to_label} ({where}); "
                f"found by hyperqwen-patches port --to {self.to_version}"
            )
            if row.status == "upstream":
                out.append(RetirementCandidate(row.name, self.to_version, None, evidence))
            else:
                for h in upstream:
                    out.append(
                        RetirementCandidate(
                            row.name,
                            self.to_version,
                            f"{show(h.path)}#{h.number}",
                            f"hunk #{h.number} of {show(h.path)} reverse-applies exactly on "
                            f"{self.to_label} at line {h.line}; found by hyperqwen-patches port "
                            f"--to {self.to_version}",
                        )
                    )
        return tuple(out)

    @property
    def conflicts(self) -> int:
        return sum(1 for r in self.rows if r.status == "conflicts")

    @property
    def static_errors(self) -> int:
        """Errors of the static checks on the target (a name it removed, a call that no longer
        binds): code that applies but would fail there."""
        return self.statics.errors if self.statics is not None else 0

    @property
    def ok(self) -> bool:
        """Every row goes through (applies, or is carried upstream) and no static check finds an
        error on the target: nothing for a maintainer to fix."""
        return self.conflicts == 0 and self.static_errors == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "package": self.package,
            "from": self.from_version,
            "to": self.to_version,
            "from_source": self.from_label,
            "to_source": self.to_label,
            "counts": self.counts,
            "ok": self.ok,
            "rows": [r.to_json() for r in self.rows],
            "retirement_candidates": [c.to_json() for c in self.retirement_candidates],
            "statics": self.statics.to_json() if self.statics is not None else None,
            "triaged": self.triaged,
        }


@record(frozen=True)
class RetirementCandidate:
    """A row (``hunk`` None) or one hunk of it that the new release carries: a manifest retirement
    waiting for its upstream reference (which a wheel cannot name: the maintainer fills it in)."""

    row: str
    pin: str
    hunk: str | None  # "PATH#N": hunk N of PATH, the form ``check`` verifies
    evidence: str

    def to_json(self) -> dict[str, Any]:
        return {"row": self.row, "pin": self.pin, "hunk": self.hunk, "evidence": self.evidence}

    def to_yaml(self) -> str:
        """A ``retirements:`` entry for the manifest (upstream and reason left for the maintainer)."""
        lines = [
            f"- row: {self.row}",
            f'  pin: "{self.pin}"',
            "  upstream: TODO  # the upstream PR or commit that carries it",
            "  reason: TODO",
            f"  evidence: {_yaml_str(self.evidence)}",
        ]
        if self.hunk is not None:
            lines.append(f"  hunk: {_yaml_str(self.hunk)}")
        return "\n".join(lines) + "\n"


def _yaml_str(text: str) -> str:
    import json

    return json.dumps(text, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar


RebaseAction = Literal["start", "continue", "skip", "abort"]


@record(frozen=True)
class RebaseRequest:
    """``--rebase``: where to build the new fork branch, and whether a paused rebase goes on."""

    fork: Path  # the fork repository (objects, one new ref, one linked worktree while paused)
    branch: str | None = None  # default: the export point's branch with the new release's version
    force: bool = False  # move the new branch if it exists (never an export point's own branch)
    # "continue": take the person's resolution of the paused row; "skip": leave it out; "abort": drop
    # the paused rebase (its worktree and state), writing no branch.
    action: RebaseAction = "start"
    worktree: Path | None = None  # where a row that needs a person is checked out
    repo: Path | None = None  # the series repository, named in the command that goes on


ADJACENT_NOTE = "merged next to an upstream change: review"

# How a row reached the new branch: its hunks applied at fuzz 0 ("applied"), without the hunks the
# release carries ("partly-upstream"), by a clean three-way merge ("merged"), or by a person
# ("resolved").
CommitHow = Literal["applied", "partly-upstream", "merged", "resolved"]


class BranchCommit(NamedTuple):
    """A row's commit on the new branch, and how the row got there."""

    row: str
    commit: str
    how: CommitHow


class MergedRow(NamedTuple):
    """A row combined by git merge-file, with the files where both sides' changes met."""

    row: str
    files: tuple[bytes, ...]


class AdjacentSite(NamedTuple):
    """Where merge-file stopped because the row's and upstream's changes touch, and port/adjacent.py
    combined them: the row, the file, the line on the branch, which changes met. A person reads it."""

    row: str
    path: bytes
    line: int
    what: str


@record(frozen=True)
class Paused:
    """A row that needs a person: it neither applies at fuzz 0 nor merges cleanly, or it went in and
    the checks of the row as written found errors in it. Checked out in a worktree."""

    row: str
    worktree: Path
    files: tuple[Any, ...]  # threeway.FileMerge, each file of the row as written there
    resume: str  # the command that goes on after the person's resolution
    # What the checks of the row as written found (port/verify.py): a row that went in cleanly and
    # is still wrong pauses with these instead of conflict markers. One "path:line: message" each.
    findings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "row": self.row,
            "worktree": str(self.worktree),
            "files": [f.to_json() for f in self.files],
            "findings": list(self.findings),
            "continue": self.resume,
        }


@record(frozen=True)
class RebaseResult:
    """The new fork branch: its base, one commit per row that went through, and what was left out.

    ``state`` is "done" (the branch is written), "paused" (a row waits for a person in ``paused``'s
    worktree; no branch is written yet) or "aborted"."""

    fork: Path
    branch: str
    base: str
    tip: str  # the branch's tip; while paused, the last commit so far
    previous: str | None
    commits: tuple[BranchCommit, ...]  # in order
    upstream: tuple[str, ...]  # rows left out because the release carries them
    messages_from: str  # "fork" (the export point's commits) or "patch files"
    state: Literal["done", "paused", "aborted"] = "done"
    merged: tuple[MergedRow, ...] = ()
    adjacent: tuple[AdjacentSite, ...] = ()
    skipped: tuple[str, ...] = ()  # rows a person left out with --skip
    paused: Paused | None = None
    # Commits an earlier run of this rebase made (a --continue/--skip goes on after them): the
    # report of a resumed run shows what this run did, the JSON every commit.
    earlier: int = 0

    @property
    def conflicts(self) -> tuple[str, ...]:
        """Rows left for a person: skipped ones and the one paused."""
        return self.skipped + ((self.paused.row,) if self.paused is not None else ())

    @property
    def ok(self) -> bool:
        return self.state == "done" and not self.skipped

    def to_json(self) -> dict[str, Any]:
        return {
            "fork": str(self.fork),
            "branch": self.branch,
            "state": self.state,
            "base": self.base,
            "tip": self.tip,
            "previous": self.previous,
            "commits": [{"row": r, "commit": c, "how": h} for r, c, h in self.commits],
            "merged": [{"row": r, "files": [show(p) for p in ps]} for r, ps in self.merged],
            "adjacent": [
                {"row": r, "file": show(p), "line": n, "what": w, "note": ADJACENT_NOTE}
                for r, p, n, w in self.adjacent
            ],
            "conflicts": list(self.conflicts),
            "skipped": list(self.skipped),
            "upstream": list(self.upstream),
            "paused": self.paused.to_json() if self.paused is not None else None,
            "messages_from": self.messages_from,
        }
