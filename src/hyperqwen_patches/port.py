"""``port --to <version>``: triage every row of the series against another release, without stopping.

For each row, on the new release's pristine tree:

- every hunk is tried forward (fuzz 0, GNU patch placement) and, where that fails, in reverse; so each
  hunk is ``exact``, at an ``offset``, ``upstream`` (its reverse applies: the release carries it) or a
  ``conflict``;
- the row's status follows: ``exact`` / ``offset`` (every hunk applies), ``upstream`` (every hunk is
  carried), ``partly-upstream`` (some carried, the rest apply) or ``conflicts`` (at least one hunk
  neither applies nor is carried);
- rows are tried twice: **alone** on the pristine tree, and **in sequence** on the pristine tree plus the
  rows before it that went through (a partly-upstream row contributes the hunks that still apply). The
  two differ when a row depends on an earlier one, or when an earlier row already changed its region;
- a conflicting hunk carries the lines that no longer match (the engine's near miss) and the diff of
  the two pristine trees around the hunk's region, so the cause is on screen; an upstream hunk carries
  the pristine diff that brought its lines in;
- every file a row touches is compared between the releases (a row that applies cleanly into a file
  that changed around it deserves a look).

Everything here returns result objects; the command renders them (table, JSON, markdown).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from hyperqwen_patches.console import show
from hyperqwen_patches.engine.applying import (
    FileResult,
    HunkResult,
    Policy,
    apply_patch,
)
from hyperqwen_patches.engine.patchset import FilePatch, Hunk, Patch, split_lines
from hyperqwen_patches.engine.placement import FileLines, LineDiff, NearMiss, locate, near_miss
from hyperqwen_patches.errors import UsageError

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


class Tree(Protocol):
    """What port reads of a pristine tree (``pristine.PristineTree`` satisfies it)."""

    label: str

    def read(self, path: bytes) -> bytes | None: ...

    def paths(self) -> list[bytes]: ...


@dataclass(frozen=True)
class PortRow:
    """A row as port tries it: its name, place and engine patch (None for a skipped row)."""

    name: str
    position: int
    kind: Literal["patch", "files"]
    patch: Patch | None
    skip: str | None = None


@dataclass(frozen=True)
class Mismatch:
    """A line of the hunk's preimage that the new release no longer has where the hunk nearly fits."""

    line: int
    expected: bytes
    actual: bytes | None

    def to_json(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "expected": show(self.expected),
            "actual": None if self.actual is None else show(self.actual),
        }


@dataclass(frozen=True)
class HunkVerdict:
    """One hunk of a row on the new release."""

    path: bytes
    number: int
    status: HunkStatus
    stated_line: int
    line: int | None  # where it applies (GNU's reported line), or where its reverse matched
    offset: int  # GNU's cumulative offset for an applied hunk; 0 otherwise
    other_matches: tuple[int, ...] = ()  # other places the preimage matches (ambiguity)
    near_line: int | None = None  # conflicts: where the preimage came closest to matching
    matched: int = 0  # conflicts: preimage lines equal at near_line
    total: int = 0  # conflicts: preimage length
    mismatches: tuple[Mismatch, ...] = ()
    # The same, aligned: the hunk's preimage against the release's lines where it nearly fits, as
    # diff lines (" " equal, "-" only in the preimage, "+" only in the release), starting at
    # ``aligned_line``; an inserted or deleted line shows as one line, not as a shifted run.
    aligned: bytes = b""
    aligned_line: int | None = None
    cause: str = ""  # one line: why it conflicts, or where the release carries it
    pristine_diff: bytes = b""  # old-vs-new pristine diff around the hunk's region

    def to_json(self) -> dict[str, Any]:
        return {
            "path": show(self.path),
            "hunk": self.number,
            "status": self.status,
            "stated_line": self.stated_line,
            "line": self.line,
            "offset": self.offset,
            "other_matches": list(self.other_matches),
            "near_line": self.near_line,
            "matched": self.matched,
            "total": self.total,
            "mismatches": [m.to_json() for m in self.mismatches],
            "aligned": show(self.aligned),
            "aligned_line": self.aligned_line,
            "cause": self.cause,
            "pristine_diff": show(self.pristine_diff),
        }


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "position": self.position,
            "kind": self.kind,
            "status": self.status,
            "alone": self.alone.to_json(),
            "in_sequence": self.in_sequence.to_json(),
            "alone_differs": self.differs,
            "files_changed_upstream": [d.to_json() for d in self.drift],
            "skip": self.skip,
        }


@dataclass(frozen=True)
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

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(1 for r in self.rows if r.status == s) for s in ROW_STATUSES}

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
    def ok(self) -> bool:
        """Every row goes through (applies, or is carried upstream): nothing for a maintainer to fix."""
        return not any(r.status == "conflicts" for r in self.rows)

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
        }


@dataclass(frozen=True)
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


# --- the pristine diff ----------------------------------------------------------------------------


class PristinePair:
    """The two releases' files, read once, with their line diffs computed once per file."""

    def __init__(self, old: Tree, new: Tree) -> None:
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
            self._ops[path] = matcher.get_opcodes()
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
            body += [b" " + _eol(x) for x in a[i:i1]]
            body += [b"-" + _eol(x) for x in a[i1:i2]]
            body += [b"+" + _eol(x) for x in b[j1:j2]]
            i = i2
        body += [b" " + _eol(x) for x in a[i:i_end]]
        header = b"@@ -%d,%d +%d,%d @@\n" % (
            i_start + 1,
            i_end - i_start,
            j_start + 1,
            j_end - j_start,
        )
        out.append(header)
        out += body
    return b"".join(out)


def _eol(line: bytes) -> bytes:
    return line if line.endswith(b"\n") else line + b"\n\\ No newline at end of file\n"


# --- classification -------------------------------------------------------------------------------


def _locate_alone(hunk: Hunk, content: bytes | None) -> int:
    """Where a hunk's preimage sits in a file on its own (no earlier hunks): exact match nearest its
    stated line, else the near miss; 0 when the file is absent."""
    if not content:
        return 0
    lines = FileLines(split_lines(content))
    placed = locate(hunk, lines, in_offset=0, last_frozen_line=0, want_others=False)
    if placed.where:
        return placed.where
    miss = near_miss(hunk, lines, hunk.old_start)
    return miss.line if miss is not None else 0


def _conflict_cause(
    fp: FilePatch, result: FileResult, hunk: HunkResult | None, pair: PristinePair
) -> str:
    path = fp.old_path if fp.old_path is not None else fp.path
    if fp.old_path is None:
        existing = pair.read_new(fp.path)
        if existing is not None:
            how = "with the same content" if fp.content == existing else "with other content"
            if pair.read_old(fp.path) is None:
                return f"the row creates {show(fp.path)}, which {pair.new.label} adds {how}"
            return f"the row creates {show(fp.path)}, which already exists {how}"
    if pair.read_new(path) is None and result.error and "does not exist" in result.error:
        moved = _same_basename(path, pair)
        where = f"; a file of that name is at {', '.join(show(m) for m in moved)}" if moved else ""
        gone = "removed upstream" if pair.read_old(path) is not None else "absent"
        return f"{show(path)} is {gone} in {pair.new.label}{where}"
    if hunk is not None and hunk.reason and hunk.reason.startswith("misordered"):
        return hunk.reason
    if hunk is not None and hunk.near_miss is not None:
        miss = hunk.near_miss
        if miss.matched == 0:
            return "no line of the hunk's preimage is where it should be"
        return (
            f"{miss.total - miss.matched} of {miss.total} preimage lines differ at line "
            f"{miss.line}, the closest place"
        )
    return result.error or "does not apply"


def _same_basename(path: bytes, pair: PristinePair) -> list[bytes]:
    base = path.rsplit(b"/", 1)[-1]
    return [p for p in pair.new_paths() if p.rsplit(b"/", 1)[-1] == base][:3]


def _attempt(patch: Patch, read: Reader, pair: PristinePair) -> Attempt:
    """Try one row on the state ``read`` returns: forward, then the reverse of what did not apply."""
    forward = apply_patch(patch, read, FORWARD).patches[0]
    reverse = apply_patch(patch.reversed(), read, REVERSE).patches[0]
    reverse_files = list(reversed(reverse.files))  # reversed() reverses the file order
    files: list[FileVerdict] = []
    keep: list[FilePatch] = []
    for fp, fwd, rev in zip(patch.files, forward.files, reverse_files, strict=True):
        verdict, kept_hunks = _file_verdict(fp, fwd, rev, pair, read)
        files.append(verdict)
        if kept_hunks is not None:
            keep.append(replace(fp, hunks=kept_hunks))
    statuses = {f.status for f in files} | {h.status for f in files for h in f.hunks}
    if "conflict" in statuses:
        return Attempt("conflicts", tuple(files))
    applies = statuses & {"exact", "offset"}
    if "upstream" in statuses and not applies:
        return Attempt("upstream", tuple(files))
    # What goes into the sequence: the hunks that apply (a partly-upstream row without its carried
    # hunks). Re-applied as a patch of its own so the offsets are those of the subset.
    subset = replace(patch, files=tuple(keep))
    applied = apply_patch(subset, read, FORWARD)
    if not applied.ok:  # pragma: no cover - the subset of hunks that applied applies
        return Attempt("conflicts", tuple(files))
    if "upstream" in statuses:
        return Attempt("partly-upstream", tuple(files), dict(applied.changes), subset)
    status: RowStatus = "offset" if "offset" in statuses else "exact"
    return Attempt(status, tuple(files), dict(applied.changes), subset)


def _file_verdict(
    fp: FilePatch, fwd: FileResult, rev: FileResult, pair: PristinePair, read: Reader
) -> tuple[FileVerdict, tuple[Hunk, ...] | None]:
    """Combine forward and reverse results of one file; also the hunks to keep for the sequence
    (None: the file contributes nothing)."""
    action = fwd.action
    path = fwd.path
    if fwd.ok:
        hunks = tuple(_applied(path, h, pair) for h in fwd.hunks)
        status: HunkStatus = "offset" if any(h.status == "offset" for h in hunks) else "exact"
        return FileVerdict(path, action, status, hunks), fp.hunks
    if rev.ok:
        # The whole file's change is carried by the release (a created file that is there with the
        # row's content, a deleted file that is gone, every hunk's reverse applying).
        hunks = tuple(_upstream(path, h, rh, fp, pair) for h, rh in _pair_hunks(fp, rev))
        return FileVerdict(path, action, "upstream", hunks), None
    # Hunk by hunk: applies forward, else carried (reverse applies), else a conflict.
    rev_by_number = {h.number: h for h in rev.hunks}
    verdicts: list[HunkVerdict] = []
    kept: list[Hunk] = []
    if not fwd.hunks:
        cause = _conflict_cause(fp, fwd, None, pair)
        return FileVerdict(path, action, "conflict", (), error=cause), None
    for hunk, result in zip(fp.hunks, fwd.hunks, strict=True):
        back = rev_by_number.get(hunk.number)
        if result.ok:
            verdicts.append(_applied(path, result, pair))
            kept.append(hunk)
        elif back is not None and back.ok:
            verdicts.append(_upstream(path, hunk, back, fp, pair))
        else:
            verdicts.append(_conflict(path, hunk, result, fwd, fp, pair, read))
    statuses = {v.status for v in verdicts}
    file_status: HunkStatus = (
        "conflict"
        if "conflict" in statuses
        else "offset"
        if "offset" in statuses
        else "exact"
        if statuses & {"exact"}
        else "upstream"
    )
    # The hunks say what went wrong; a file-level message is kept only when it adds something (the
    # engine's "N of M hunks did not apply" summary does not).
    error = None
    if file_status == "conflict" and fwd.error and "hunks did not apply" not in fwd.error:
        error = _conflict_cause(fp, fwd, None, pair)
    return FileVerdict(path, action, file_status, tuple(verdicts), error), tuple(kept) or None


def _pair_hunks(fp: FilePatch, rev: FileResult) -> list[tuple[Hunk, HunkResult | None]]:
    by_number = {h.number: h for h in rev.hunks}
    return [(h, by_number.get(h.number)) for h in fp.hunks]


def _applied(path: bytes, result: HunkResult, pair: PristinePair) -> HunkVerdict:
    status: HunkStatus = "offset" if result.status == "offset" else "exact"
    return HunkVerdict(
        path=path,
        number=result.number,
        status=status,
        stated_line=result.stated_line,
        line=result.applied_line,
        offset=result.offset,
        other_matches=result.other_matches,
    )


def _upstream(
    path: bytes, hunk: Hunk, back: HunkResult | None, fp: FilePatch, pair: PristinePair
) -> HunkVerdict:
    """A hunk the new release carries: where its lines are, and the pristine change that put them
    there (the old-vs-new diff over the region its postimage occupies in the new release)."""
    target = fp.new_path or fp.path
    new_content = pair.read_new(target)
    where = _locate_alone(hunk.reversed(), new_content) if new_content else 0
    diff = b""
    if where:
        diff = pair.region_diff(target, new_range=(where, where + max(hunk.new_len, 1) - 1))
    if fp.old_path is None:
        cause = f"{pair.new.label} has {show(target)} with the row's content"
    elif fp.new_path is None:
        cause = f"{pair.new.label} no longer has {show(fp.old_path)}"
    elif diff:
        cause = f"{pair.new.label} carries these lines at line {where}; the pristine diff shows the change"
    elif where:
        cause = f"{pair.new.label} carries these lines at line {where}"
    else:
        cause = f"{pair.new.label} carries this change"
    return HunkVerdict(
        path=path,
        number=hunk.number,
        status="upstream",
        stated_line=hunk.old_start,
        line=where or (back.applied_line if back else None),
        offset=0,
        cause=cause,
        pristine_diff=diff,
    )


# How far from where a hunk's region went in the new release a partial match may be and still be
# shown as "the lines that no longer match" (farther, it is a coincidence of common lines).
NEAR_WINDOW = 30


def _near_region(hunk: Hunk, content: bytes, center: int) -> NearMiss | None:
    """The best partial match of the hunk's preimage within NEAR_WINDOW lines of ``center``."""
    lines = split_lines(content)
    pattern = hunk.old_lines
    if not pattern or not lines:
        return None
    best: tuple[int, int] | None = None  # (matched, start)
    for start in range(max(1, center - NEAR_WINDOW), center + NEAR_WINDOW + 1):
        if start > len(lines):
            break
        matched = sum(
            1
            for k, text in enumerate(pattern)
            if start + k <= len(lines) and lines[start + k - 1] == text
        )
        key = (matched, -abs(start - center))
        if best is None or key > (best[0], -abs(best[1] - center)):
            best = (matched, start)
    assert best is not None
    matched, start = best
    differences = tuple(
        LineDiff(start + k, text, lines[start + k - 1] if start + k <= len(lines) else None)
        for k, text in enumerate(pattern)
        if start + k > len(lines) or lines[start + k - 1] != text
    )
    return NearMiss(line=start, matched=matched, total=len(pattern), differences=differences)


def _align(pattern: Sequence[bytes], lines: Sequence[bytes], near: int) -> tuple[int, bytes]:
    """The preimage aligned with the file around 1-based line ``near``: (first file line, diff
    lines). The window reaches one preimage length either side, so lines inserted or deleted
    upstream inside the region show as such."""
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
            out += [b" " + _eol(x) for x in pattern[i1:i2]]
            continue
        out += [b"-" + _eol(x) for x in pattern[i1:i2]]
        out += [b"+" + _eol(x) for x in span[j1:j2]]
    return lo + start + 1, b"".join(out)


def _conflict(
    path: bytes,
    hunk: Hunk,
    result: HunkResult,
    fwd: FileResult,
    fp: FilePatch,
    pair: PristinePair,
    read: Reader,
) -> HunkVerdict:
    miss = result.near_miss
    source = fp.old_path if fp.old_path is not None else fp.path
    old_where = _locate_alone(hunk, pair.read_old(source))
    diff = b""
    if old_where:
        diff = pair.region_diff(source, old_range=(old_where, old_where + max(hunk.old_len, 1) - 1))
        # The engine's near miss is the best partial match anywhere in the file; when it is far
        # from where the hunk's region went upstream, it matched common lines (blank lines, a
        # closing bracket) by chance. The lines that no longer match are then the ones there.
        center = pair.map_line(source, old_where)
        current = read(source)
        if center and current and (miss is None or abs(miss.line - center) > NEAR_WINDOW):
            miss = _near_region(hunk, current, center) or miss
    aligned, aligned_line = b"", None
    current = read(source)
    if miss is not None and current:
        aligned_line, aligned = _align(hunk.old_lines, split_lines(current), miss.line)
    cause = _conflict_cause(fp, fwd, result, pair)
    placed_by_content = result.near_miss is not None and not (result.reason or "").startswith(
        "misordered"
    )
    if aligned and placed_by_content:
        diff_lines = aligned.splitlines()
        gone = sum(1 for x in diff_lines if x.startswith(b"-"))
        other = sum(1 for x in diff_lines if x.startswith(b"+"))
        where = (
            "where the region went upstream"
            if miss is not result.near_miss
            else "the closest place"
        )
        cause = (
            f"{gone} of {len(hunk.old_lines)} preimage lines are not in the release at line "
            f"{aligned_line} ({where})"
            + (f"; it has {other} other line{'s' if other != 1 else ''} there" if other else "")
        )
    return HunkVerdict(
        path=path,
        number=hunk.number,
        status="conflict",
        stated_line=hunk.old_start,
        line=None,
        offset=0,
        near_line=miss.line if miss else None,
        matched=miss.matched if miss else 0,
        total=miss.total if miss else len(hunk.old_lines),
        mismatches=tuple(Mismatch(d.line, d.expected, d.actual) for d in miss.differences)
        if miss
        else (),
        aligned=aligned,
        aligned_line=aligned_line,
        cause=cause,
        pristine_diff=diff,
    )


def _touched(patch: Patch) -> list[bytes]:
    paths: list[bytes] = []
    for fp in patch.files:
        for p in (fp.old_path, fp.new_path):
            if p is not None and p not in paths:
                paths.append(p)
    return paths


def classify_rows(rows: Sequence[PortRow], old: Tree, new: Tree) -> list[RowPort]:
    """Try every row alone and in sequence on ``new``; compare touched files with ``old``."""
    pair = PristinePair(old, new)
    state: dict[bytes, bytes | None] = {}

    def read_sequence(path: bytes) -> bytes | None:
        return state[path] if path in state else pair.read_new(path)

    out: list[RowPort] = []
    for row in rows:
        if row.patch is None:
            skipped = Attempt("skipped")
            out.append(RowPort(row.name, row.position, row.kind, skipped, skipped, skip=row.skip))
            continue
        alone = _attempt(row.patch, pair.read_new, pair)
        in_sequence = _attempt(row.patch, read_sequence, pair)
        state.update(in_sequence.changes)
        drift = tuple(pair.drift(p) for p in _touched(row.patch))
        out.append(RowPort(row.name, row.position, row.kind, alone, in_sequence, drift))
    return out


# --- the series, the manifest, the releases ---------------------------------------------------------


def rows_from_manifest(manifest: Any) -> list[PortRow]:
    """The manifest's rows as engine patches, in apply order; skipped rows kept (not tried)."""
    from hyperqwen_patches.series import load_series

    rows: list[PortRow] = []
    for position, entry in enumerate(load_series(manifest, include_skipped=True), start=1):
        row = entry.row
        kind: Literal["patch", "files"] = "files" if row.is_module else "patch"
        if row.skip is not None:
            rows.append(PortRow(row.name, position, kind, None, skip=row.skip))
            continue
        if entry.patch is None:
            raise UsageError(entry.error or f"row {row.name}: cannot be built")
        rows.append(PortRow(row.name, position, kind, entry.patch))
    return rows


@dataclass(frozen=True)
class RebaseRequest:
    """``--rebase``: where to build the new fork branch."""

    fork: Path  # the fork repository (objects and one new ref are written; nothing else)
    branch: str | None = None  # default: the export point's branch with the new release's version
    force: bool = False  # move the new branch if it exists (never an export point's own branch)


@dataclass(frozen=True)
class RebaseResult:
    """The new fork branch: its base, one commit per row that went through, and what was left out."""

    fork: Path
    branch: str
    base: str
    tip: str
    previous: str | None
    commits: tuple[tuple[str, str], ...]  # (row, commit SHA), in order
    conflicts: tuple[str, ...]  # rows left for the maintainer
    upstream: tuple[str, ...]  # rows left out because the release carries them
    messages_from: str  # "fork" (the export point's commits) or "patch files"

    def to_json(self) -> dict[str, Any]:
        return {
            "fork": str(self.fork),
            "branch": self.branch,
            "base": self.base,
            "tip": self.tip,
            "previous": self.previous,
            "commits": [{"row": r, "commit": c} for r, c in self.commits],
            "conflicts": list(self.conflicts),
            "upstream": list(self.upstream),
            "messages_from": self.messages_from,
        }


def port(
    root: Path,
    to_version: str,
    *,
    to_source: str | None = None,
    from_source: str | None = None,
    cache: Path | None = None,
    progress: Any = None,
    rebase: RebaseRequest | None = None,
) -> tuple[PortReport, RebaseResult | None]:
    """Triage the series of the repository at ``root`` against release ``to_version``; with
    ``rebase``, also build the new fork branch from the rows that go through."""
    from hyperqwen_patches.manifest import VERSION_RE, load_manifest
    from hyperqwen_patches.pristine import open_pristine

    manifest = load_manifest(root)
    if not VERSION_RE.match(to_version):
        raise UsageError(
            f"--to {to_version!r} is not a release version", hint="give one such as 0.30.0"
        )
    if to_version == manifest.pin:
        raise UsageError(
            f"--to {to_version} is the pin itself: there is nothing to port",
            hint="`check` verifies the series on its pin; give another release to port to",
        )
    rows = rows_from_manifest(manifest)
    if rebase is not None:
        # Fail on a bad fork before any download.
        from hyperqwen_patches import gitrun

        gitrun.git_dir_of(rebase.fork)
    old = open_pristine(
        from_source or manifest.source,
        package=manifest.package,
        version=manifest.pin,
        cache=cache,
        progress=progress,
    )
    try:
        new = open_pristine(
            to_source or f"pypi:{manifest.package}=={to_version}",
            package=manifest.package,
            version=to_version,
            cache=cache,
            progress=progress,
        )
        try:
            classified = classify_rows(rows, old, new)
            report = PortReport(
                package=manifest.package,
                from_version=manifest.pin,
                to_version=to_version,
                from_label=old.label,
                to_label=new.label,
                rows=tuple(classified),
                statics=_port_statics(manifest, old, new),
            )
            result = None
            if rebase is not None:
                result = rebase_fork(manifest, report, new, rebase)
        finally:
            new.close()
    finally:
        old.close()
    return report, result


def _port_statics(manifest: Any, old: Tree, new: Tree) -> Any:
    from hyperqwen_patches.statics.report import port_statics

    return port_statics(manifest, old, new)


# --- --rebase: the new fork branch -----------------------------------------------------------------

_VERSION_IN_BRANCH = re.compile(r"(?P<pre>.*?)(?P<ver>\d+\.\d+(?:\.\d+)?)(?P<post>[^0-9]*)$")


def default_branch(manifest: Any, to_version: str) -> str:
    """The export point's branch with the pin's version replaced (``qwen38/0.29`` -> ``qwen38/0.30``);
    ``port/<version>`` when there is no export point or its name carries no version."""
    if manifest.export_points:
        branch = manifest.export_points[0].branch
        m = _VERSION_IN_BRANCH.match(branch)
        if m is not None:
            old = m["ver"]
            parts = to_version.split(".")
            new = ".".join(parts[: len(old.split("."))])
            if new != old:
                return f"{m['pre']}{new}{m['post']}"
    return f"port/{to_version}"


def _author_env(header: bytes) -> dict[str, str]:
    """The identity env of a commit: its author kept, the committer pinned (as ``import`` does)."""
    from hyperqwen_patches import basecommit

    env: dict[str, str] = {}
    for line in header.split(b"\n"):
        if line.startswith(b"author "):
            ident = line[len(b"author ") :]
            name, _, rest = ident.partition(b" <")
            email, _, date = rest.partition(b"> ")
            env = basecommit.fixed_identity_env(date.decode())
            env["GIT_AUTHOR_NAME"] = name.decode("utf-8", "surrogateescape")
            env["GIT_AUTHOR_EMAIL"] = email.decode("utf-8", "surrogateescape")
    return env


def _fork_messages(git_dir: Path, manifest: Any) -> dict[str, tuple[bytes, dict[str, str]]]:
    """Row -> (message, identity) from the export points' commits in the fork, when it has them.

    Only commits are read: whatever the fork's work tree or index hold is not looked at.
    """
    from hyperqwen_patches import exporting, forkgit, gitrun

    found: dict[str, tuple[bytes, dict[str, str]]] = {}
    for point in manifest.export_points:
        tip = forkgit.resolve(git_dir, f"refs/heads/{point.branch}", what="port --rebase")
        if tip is None:
            continue
        base = exporting.find_base(
            git_dir, tip, package=manifest.package, pin=manifest.pin, branch=point.branch
        )
        for commit in forkgit.list_commits(git_dir, base, tip):
            if commit.row is None or commit.row in found:
                continue
            raw = gitrun.check(
                ["cat-file", "commit", commit.sha], git_dir=git_dir, what="reading a fork commit"
            )
            header = raw.partition(b"\n\n")[0]
            found[commit.row] = (commit.message, _author_env(header))
    return found


def _with_port_note(message: bytes, note: bytes) -> bytes:
    """Insert a paragraph before the trailer paragraph (``Hqp-Row`` stays last)."""
    body = message.rstrip(b"\n")
    head, sep, last = body.rpartition(b"\n\n")
    if sep and last.lower().startswith(b"hqp-row:"):
        return head + b"\n\n" + note.rstrip(b"\n") + b"\n\n" + last + b"\n"
    return body + b"\n\n" + note.rstrip(b"\n") + b"\n"


def rebase_fork(
    manifest: Any, report: PortReport, new: Tree, request: RebaseRequest
) -> RebaseResult:
    """Build the new fork branch: the new release's base commit, then one commit per row that goes
    through in sequence (the row's hunks that apply, at their refreshed offsets). Rows the release
    carries and conflicting rows get no commit. Only objects and the new branch's ref are written."""
    from hyperqwen_patches import basecommit, forkgit, gitrun, importing, replay
    from hyperqwen_patches.errors import GitError

    git_dir = gitrun.git_dir_of(request.fork)
    branch = request.branch or default_branch(manifest, report.to_version)
    ref = f"refs/heads/{branch}"
    protected = {p.branch for p in manifest.export_points}
    if branch in protected:
        raise UsageError(
            f"--branch {branch} is an export point of the {manifest.pin} series; port never "
            "rewrites the old branch",
            hint="name a new branch with --branch",
        )
    check = gitrun.run(["check-ref-format", ref], git_dir=git_dir)
    if not check.ok:
        raise UsageError(f"--branch {branch!r} is not a valid branch name")
    previous = forkgit.resolve(git_dir, ref, what="port --rebase")
    if previous is not None and not request.force:
        raise GitError(
            f"branch {branch} already exists in {request.fork} (at {previous[:12]})",
            hint="pass --force to move it, or name another branch with --branch",
        )
    head = gitrun.run(["symbolic-ref", "--quiet", "HEAD"], git_dir=git_dir).stdout.strip()
    if previous is not None and head == ref.encode():
        raise GitError(
            f"branch {branch} is checked out in {request.fork}; port never moves a checked-out branch"
        )

    messages = _fork_messages(git_dir, manifest)
    base = basecommit.write_base_commit(
        git_dir, new, package=manifest.package, version=report.to_version
    )
    state = replay.TreeState(replay.tree_entries(git_dir, base.commit), new.read)
    parent = base.commit
    commits: list[tuple[str, str]] = []
    from_patch_files = False
    with forkgit.scratch_repo() as view:
        for row in report.rows:
            attempt = row.in_sequence
            if attempt.carried is None or attempt.status not in (
                "exact",
                "offset",
                "partly-upstream",
            ):
                continue
            replay.apply_row(state, attempt.carried, row=row.name)
            if row.name in messages:
                message, env = messages[row.name]
            else:
                from_patch_files = True
                message, env = importing.commit_for_row(view, manifest, manifest.row(row.name))
            if row.status == "partly-upstream":
                dropped = ", ".join(
                    f"{show(h.path)} hunk #{h.number}"
                    for h in attempt.hunks
                    if h.status == "upstream"
                )
                message = _with_port_note(
                    message,
                    f"Ported to {report.package} {report.to_version}: {dropped} dropped, "
                    f"already upstream.".encode(),
                )
            parent = importing.write_state_commit(git_dir, state, parent, message, env)
            commits.append((row.name, parent))
    gitrun.check(
        [
            "update-ref",
            "-m",
            f"hyperqwen-patches port --to {report.to_version} --rebase",
            ref,
            parent,
            previous or "0" * 40,
        ],
        git_dir=git_dir,
        what=f"creating {branch}",
    )
    return RebaseResult(
        fork=request.fork,
        branch=branch,
        base=base.commit,
        tip=parent,
        previous=previous,
        commits=tuple(commits),
        conflicts=tuple(r.name for r in report.rows if r.status == "conflicts"),
        upstream=tuple(r.name for r in report.rows if r.status == "upstream"),
        messages_from="patch files" if from_patch_files or not messages else "fork",
    )


# --- check: a retirement is verified against the pin that carries it (invariant 8) ----------------


def check_retirements(ctx: Any) -> list[Any]:
    """Invariant 8: every manifest retirement reverse-applies on its pin's pristine tree.

    The retired row must still be in the manifest (with a skip reason) so its patch can be read; a
    hunk retirement names ``PATH#N``. Pipeline function of ``check`` (``check.PIPELINE``).
    """
    from hyperqwen_patches.check import Finding
    from hyperqwen_patches.engine.applying import verify_applied
    from hyperqwen_patches.pristine import open_pristine

    manifest = ctx.manifest
    findings: list[Finding] = []
    if not manifest.retirements:
        return findings
    built = {s.row.name: s for s in ctx.series}
    trees: dict[str, Any] = {}
    try:
        for ret in manifest.retirements:
            subject = f"retirement of {ret.row} at {ret.pin}" + (
                f" ({ret.hunk})" if ret.hunk else ""
            )
            entry = built.get(ret.row)
            if entry is None:
                findings.append(
                    Finding(
                        "retirements",
                        "error",
                        subject,
                        f"row {ret.row} is not in the manifest, so the retirement cannot be verified",
                        "keep the row with a skip reason (its patch file stays) so check can "
                        "reverse-apply it on the pin that carries it",
                    )
                )
                continue
            if entry.patch is None:
                findings.append(
                    Finding("retirements", "error", subject, entry.error or "unreadable")
                )
                continue
            patch = entry.patch
            if ret.hunk is not None:
                picked = _pick_hunk(patch, ret.hunk)
                if isinstance(picked, str):
                    # A malformed PATH#N is an error; a hunk the row no longer has (it was cut out
                    # when it was retired) cannot be reverse-applied, which is worth a warning only.
                    severity = "error" if "is not of the form" in picked else "warning"
                    findings.append(Finding("retirements", severity, subject, picked))
                    continue
                patch = picked
            if ret.pin not in trees:
                source = (
                    ctx.source if ret.pin == manifest.pin else f"pypi:{manifest.package}=={ret.pin}"
                )
                trees[ret.pin] = open_pristine(
                    source, package=manifest.package, version=ret.pin, progress=ctx.progress
                )
            tree = trees[ret.pin]
            (presence,) = verify_applied([patch], tree.read)
            if presence.status != "present" and ret.hunk is not None and entry.row.skip is None:
                live = apply_patch(patch, tree.read, FORWARD).ok
                if live:
                    # Hunk numbers name the row as it was when the hunk was retired; once the row
                    # is re-cut without it, #N is another, live hunk (it applies forward). The
                    # retired hunk is not in the row any more, so there is nothing to verify.
                    findings.append(
                        Finding(
                            "retirements",
                            "warning",
                            subject,
                            f"cannot be verified: hunk {ret.hunk} of the row as it is now applies "
                            f"on {tree.label}, so the row was re-cut and the number names another "
                            "hunk",
                        )
                    )
                    continue
            if presence.status != "present":
                missing = "; ".join(
                    f"{show(f.path)}: " + (f.error or "its reverse does not apply")
                    for f in presence.files
                    if f.status != "applied"
                )
                findings.append(
                    Finding(
                        "retirements",
                        "error",
                        subject,
                        f"{tree.label} does not carry it: the reverse of the "
                        f"{'hunk' if ret.hunk else 'row'} does not apply ({presence.status})",
                        missing,
                    )
                )
    finally:
        for tree in trees.values():
            tree.close()
    return findings


def _pick_hunk(patch: Patch, spec: str) -> Patch | str:
    """The patch reduced to hunk ``PATH#N``, or a message saying why ``spec`` names none."""
    path, sep, number = spec.rpartition("#")
    if not sep or not number.isdigit():
        return f"hunk {spec!r} is not of the form PATH#N (such as vllm/envs.py#2)"
    for fp in patch.files:
        if fp.path == path.encode():
            hunks = tuple(h for h in fp.hunks if h.number == int(number))
            if not hunks:
                return f"{path} has no hunk #{number} in the row ({len(fp.hunks)} hunks)"
            return replace(patch, files=(replace(fp, hunks=hunks),))
    return f"the row does not touch {path}"
