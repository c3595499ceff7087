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

from collections.abc import Sequence
from typing import Any, Literal

from hyperqwen_patches.console import show
from hyperqwen_patches.engine.applying import (
    FileResult,
    HunkResult,
    apply_patch,
)
from hyperqwen_patches.engine.patchmodel import ADDED, FilePatch, Hunk, Patch, split_lines
from hyperqwen_patches.engine.placement import (
    FileLines,
    LineDiff,
    NearMiss,
    align,
    locate,
    near_miss,
)
from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.port.model import (
    FORWARD,
    REVERSE,
    Attempt,
    FileVerdict,
    HunkStatus,
    HunkVerdict,
    PortRow,
    Reader,
    RowPort,
    RowStatus,
)
from hyperqwen_patches.port.pristinediff import PristinePair
from hyperqwen_patches.records import replace
from hyperqwen_patches.sources.pristinetree import PristineTree

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
            f"{miss.matched} of {miss.total} preimage lines found at line {miss.line}, the "
            "closest place"
        )
    return result.error or "does not apply"


def _same_basename(path: bytes, pair: PristinePair) -> list[bytes]:
    base = path.rsplit(b"/", 1)[-1]
    return [p for p in pair.new_paths() if p.rsplit(b"/", 1)[-1] == base][:3]


def attempt_row(patch: Patch, read: Reader, pair: PristinePair) -> Attempt:
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
        other_count=result.other_count,
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
        aligned_line, aligned = align(hunk.old_lines, split_lines(current), miss.line)
    cause = _conflict_cause(fp, fwd, result, pair)
    placed_by_content = result.near_miss is not None and not (result.reason or "").startswith(
        "misordered"
    )
    if aligned and placed_by_content:
        diff_lines = aligned.splitlines()
        # Say what matches ("4 of 6 ... found"), never a count of what does not ("0 of 6 ... are
        # not in" reads as a failure when all six are there).
        found = sum(1 for x in diff_lines if x.startswith(b" "))
        other = sum(1 for x in diff_lines if x.startswith(b"+"))
        where = (
            "where the region went upstream"
            if miss is not result.near_miss
            else "the closest place"
        )
        cause = (
            f"{found} of {len(hunk.old_lines)} preimage lines found in the release at line "
            f"{aligned_line} ({where})"
            + (f"; it has {other} other line{'s' if other != 1 else ''} there" if other else "")
        )
    evidence = _changed_form(
        hunk, current, aligned_line or (miss.line if miss else None) or old_where
    )
    if evidence:
        cause += (
            f"; every added line is in the release in changed form (whitespace or indentation) "
            f"at lines {evidence[0][0]}-{evidence[-1][0]}: upstream in changed form? review for "
            "retirement"
        )
    return HunkVerdict(
        path=path,
        number=hunk.number,
        status="conflict",
        upstream_evidence=evidence,
        stated_line=hunk.old_start,
        line=None,
        offset=0,
        total=miss.total if miss else len(hunk.old_lines),
        aligned=aligned,
        aligned_line=aligned_line,
        cause=cause,
        pristine_diff=diff,
        reported_line=result.reported_line,
    )


# A hunk's added lines found in the release near where its region went, compared without any
# whitespace: a change upstream took in another form (re-indented under a new `if`, rewrapped). Lines
# shorter than this (a lone `)`, `else:`) are too common to be evidence.
CHANGED_FORM_MIN_CHARS = 6
CHANGED_FORM_WINDOW = 40


def _squeeze(line: bytes) -> bytes:
    return b"".join(line.split())


def _changed_form(
    hunk: Hunk, content: bytes | None, center: int | None
) -> tuple[tuple[int, bytes], ...]:
    """The release lines (1-based number, text) that carry every added line of ``hunk`` in order,
    whitespace aside, within CHANGED_FORM_WINDOW lines of ``center``; () when one is missing."""
    added = [t for kind, t in hunk.lines if kind == ADDED]
    wanted = [_squeeze(t) for t in added if len(_squeeze(t)) >= CHANGED_FORM_MIN_CHARS]
    if not content or not wanted or center is None:
        return ()
    lines = split_lines(content)
    lo = max(0, center - 1 - CHANGED_FORM_WINDOW)
    hi = min(len(lines), center - 1 + len(hunk.new_lines) + CHANGED_FORM_WINDOW)
    evidence: list[tuple[int, bytes]] = []
    i = lo
    for w in wanted:
        while i < hi and _squeeze(lines[i]) != w:
            i += 1
        if i == hi:
            return ()
        evidence.append((i + 1, lines[i].rstrip(b"\r\n")))
        i += 1
    return tuple(evidence)


def touched_paths(patch: Patch) -> list[bytes]:
    paths: list[bytes] = []
    for fp in patch.files:
        for p in (fp.old_path, fp.new_path):
            if p is not None and p not in paths:
                paths.append(p)
    return paths


def _added_lines(patch: Patch) -> dict[bytes, set[bytes]]:
    """The lines a row adds, per file it leaves (what a later row's context may be made of)."""
    out: dict[bytes, set[bytes]] = {}
    for fp in patch.files:
        target = fp.new_path if fp.new_path is not None else fp.path
        for hunk in fp.hunks:
            added = {text for kind, text in hunk.lines if kind == ADDED and text.strip()}
            out.setdefault(target, set()).update(added)
    return out


def _with_causes(
    attempt: Attempt,
    patch: Patch,
    read: Reader,
    candidates: Sequence[tuple[str, dict[bytes, set[bytes]]]],
) -> Attempt:
    """The attempt with ``caused_by`` on each conflicting hunk whose preimage needs lines (not blank
    ones) that an earlier candidate row adds and the file, as tried, lacks."""
    if attempt.status != "conflicts" or not candidates:
        return attempt
    by_key = {(fp.old_path if fp.old_path is not None else fp.path, h.number): h
              for fp in patch.files for h in fp.hunks}  # fmt: skip
    files = []
    for fv in attempt.files:
        hunks = []
        content = read(fv.path) if any(h.status == "conflict" for h in fv.hunks) else None
        have = set(split_lines(content)) if content else set()
        for hv in fv.hunks:
            hunk = by_key.get((fv.path, hv.number))
            if hv.status != "conflict" or hunk is None:
                hunks.append(hv)
                continue
            missing = {line for line in hunk.old_lines if line.strip() and line not in have}
            causes = tuple(
                name for name, added in candidates if missing & added.get(fv.path, set())
            )
            if causes:
                hv = replace(
                    hv,
                    caused_by=causes,
                    cause=f"conflict by cascade from {', '.join(causes)}: its preimage needs lines "
                    f"{'that row adds' if len(causes) == 1 else 'those rows add'}; " + hv.cause,
                )
            hunks.append(hv)
        files.append(replace(fv, hunks=tuple(hunks)))
    return replace(attempt, files=tuple(files))


def classify_rows(rows: Sequence[PortRow], old: PristineTree, new: PristineTree) -> list[RowPort]:
    """Try every row alone and in sequence on ``new``; compare touched files with ``old``."""
    pair = PristinePair(old, new)
    state: dict[bytes, bytes | None] = {}

    def read_sequence(path: bytes) -> bytes | None:
        return state[path] if path in state else pair.read_new(path)

    out: list[RowPort] = []
    earlier: list[tuple[str, dict[bytes, set[bytes]], bool]] = []  # (row, added lines, carried)
    for row in rows:
        if row.patch is None:
            skipped = Attempt("skipped")
            out.append(RowPort(row.name, row.position, row.kind, skipped, skipped, skip=row.skip))
            continue
        alone = attempt_row(row.patch, pair.read_new, pair)
        in_sequence = attempt_row(row.patch, read_sequence, pair)
        # A cascade: alone, the rows this one builds on; in sequence, the ones not carried.
        alone = _with_causes(alone, row.patch, pair.read_new, [(n, a) for n, a, _ in earlier])
        in_sequence = _with_causes(
            in_sequence, row.patch, read_sequence, [(n, a) for n, a, ok in earlier if not ok]
        )
        earlier.append((row.name, _added_lines(row.patch), in_sequence.status != "conflicts"))
        state.update(in_sequence.changes)
        drift = tuple(pair.drift(p) for p in touched_paths(row.patch))
        out.append(RowPort(row.name, row.position, row.kind, alone, in_sequence, drift))
    return out


# --- the series, the manifest, the releases ---------------------------------------------------------


def rows_from_manifest(manifest: Any) -> list[PortRow]:
    """The manifest's rows as engine patches, in apply order; skipped rows kept (not tried)."""
    from hyperqwen_patches.series.rows import load_series

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
