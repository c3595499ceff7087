"""Apply a series of patches to a mapping of path -> bytes, in memory, collecting every failure.

``apply_series`` never touches disk: it reads the files the patches name through a callback and
returns the new contents (``SeriesResult.changes``) or the failures, each with its context (patch, file,
hunk, stated and reported lines, the place the preimage nearly matched and the differing lines). The
caller (``sources/tree.py``) writes the changes only when every patch applied, which is what makes ``apply``
all or nothing.

Placement is GNU patch 2.7.6's at ``--fuzz 0`` (``placement.py``); the policies layered on top are ours
and each is off by default except ambiguity reporting:

- ``max_offset``: a hunk whose reported offset (GNU's cumulative ``in_offset``) exceeds it fails;
- ``exact``: no offsets at all, every hunk must match at its stated line;
- ``ambiguity``: ``"report"`` lists other exact matches of the preimage in the search range
  (``HunkResult.other_matches``); ``"error"`` fails such a hunk with status ``"ambiguous"``;
- ``forward``: a file whose first hunk does not apply but whose reverse does (every hunk of it) is
  "already-applied", not a failure (GNU patch ``--forward`` skips it, exit 1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hyperqwen_patches.display import show
from hyperqwen_patches.engine.overlay import Overlay
from hyperqwen_patches.engine.patchmodel import ADDED, FilePatch, Hunk, Patch, split_lines
from hyperqwen_patches.engine.placement import (
    FileLines,
    NearMiss,
    applicable,
    first_line,
    frozen_after,
    locate,
    near_miss,
)
from hyperqwen_patches.records import field, record, replace

TYPE_CHECKING = False  # not typing's: a plain run never imports typing (a few ms of every start)
if TYPE_CHECKING:
    from typing import Literal


if TYPE_CHECKING:  # annotations only (strings at run time)
    Ambiguity = Literal["off", "report", "error"]
    HunkStatus = Literal["exact", "offset", "failed", "ambiguous"]
    FileStatus = Literal["applied", "already-applied", "failed"]
    PatchStatus = Literal["applied", "already-applied", "failed"]
    FileAction = Literal["modify", "create", "delete", "rename", "copy"]

Reader = Callable[[bytes], bytes | None]
INDEXED_FROM = 16  # hunks in one file


@record(frozen=True, slots=True)
class Policy:
    """How strict placement is. The default is GNU patch ``--fuzz 0 --forward`` plus ambiguity reports."""

    max_offset: int | None = None
    exact: bool = False
    ambiguity: Ambiguity = "report"
    forward: bool = True


@record(slots=True)  # not frozen: built once per hunk, on the hot path
class HunkResult:
    """One hunk's outcome.

    ``applied_line`` and ``offset`` are what GNU patch prints for it (``Hunk #N succeeded at L (offset K
    lines).``): L is the line in the output file, K the file's cumulative offset. ``applied_line`` is
    None when the hunk failed; ``reported_line`` is then GNU's ``Hunk #N FAILED at L.`` number.
    ``other_matches`` are input-file lines (before this patch) where the preimage also matches within
    the search range, at most ``placement.SHOWN_OTHERS`` of them (nearest the placed line);
    ``other_count`` says how many there are in all. Under the ``"report"`` policy they do not change
    the status.
    """

    number: int
    stated_line: int
    applied_line: int | None
    offset: int
    status: HunkStatus
    reported_line: int
    other_matches: tuple[int, ...] = ()
    near_miss: NearMiss | None = None
    reason: str | None = None
    #: GNU patch's hint on a failed hunk: its first line and the file's line at the reported place
    #: differ in CRLF vs LF (printed as "FAILED at L (different line endings).").
    line_endings_differ: bool = False
    other_count: int = 0

    @property
    def ok(self) -> bool:
        return self.status in ("exact", "offset")

    def others_text(self) -> str:
        """The other matches as a message shows them (``5, 12, 19 and 9,997 more``)."""
        return others_text(self.other_matches, self.other_count)

    def gnu_message(self) -> str | None:
        """The line GNU patch would print for this hunk (None when it prints nothing)."""
        if not self.ok:
            endings = " (different line endings)" if self.line_endings_differ else ""
            return f"Hunk #{self.number} FAILED at {self.reported_line}{endings}."
        if self.offset == 0:
            return None
        plural = "" if self.offset == 1 else "s"
        return f"Hunk #{self.number} succeeded at {self.applied_line} (offset {self.offset} line{plural})."


@record(slots=True)  # not frozen: built once per hunk, on the hot path
class FileResult:
    """One file patch's outcome. ``path`` is the file written (the old path for a deletion)."""

    path: bytes
    action: FileAction
    status: FileStatus
    hunks: tuple[HunkResult, ...] = ()
    error: str | None = None
    old_path: bytes | None = None

    @property
    def ok(self) -> bool:
        return self.status != "failed"


@record(frozen=True, slots=True)
class PatchResult:
    name: str
    status: PatchStatus
    files: tuple[FileResult, ...]
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status != "failed"


@record(slots=True)
class SeriesResult:
    """The outcome of a series: every patch's result and, when all applied, the changes to write.

    ``changes`` maps a path to its new bytes or None (delete); ``modes`` to a new file mode. Both hold
    the changes of every patch that applied, so a caller may inspect them, but ``sources/tree.py`` writes them
    only when ``ok``.
    """

    patches: list[PatchResult]
    changes: dict[bytes, bytes | None] = field(default_factory=dict)
    modes: dict[bytes, int] = field(default_factory=dict)
    # A renamed or copied file without a mode line keeps its source's mode, which only the tree
    # knows: target -> the source path in the tree before the series.
    moved: dict[bytes, bytes] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.patches)

    @property
    def hunk_totals(self) -> dict[str, int]:
        totals = {"exact": 0, "offset": 0, "failed": 0, "ambiguous": 0}
        for patch in self.patches:
            for file in patch.files:
                for hunk in file.hunks:
                    totals[hunk.status] += 1
        return totals


class _Cache:
    """Memoises the caller's reader: every touched file is read from disk at most once per series."""

    def __init__(self, read: Reader) -> None:
        self._read = read
        self._seen: dict[bytes, bytes | None] = {}

    def __call__(self, path: bytes) -> bytes | None:
        if path not in self._seen:
            self._seen[path] = self._read(path)
        return self._seen[path]


def apply_series(
    patches: Sequence[Patch], read: Reader, policy: Policy | None = None
) -> SeriesResult:
    """Apply ``patches`` in order on top of the files ``read`` returns; collect every failure.

    A failed patch contributes no changes; later patches are still tried (against the state without
    it), so one run reports every problem of a series, not only the first.
    """
    policy = policy or Policy()
    state = Overlay(_Cache(read))
    results: list[PatchResult] = []
    for patch in patches:
        result, local = _apply_patch(patch, state, policy)
        results.append(result)
        if result.ok:
            state.merge(local)
    return SeriesResult(
        patches=results, changes=state.changes, modes=state.modes, moved=state.moved
    )


def apply_patch(patch: Patch, read: Reader, policy: Policy | None = None) -> SeriesResult:
    """One patch on its own (a series of one)."""
    return apply_series([patch], read, policy)


if TYPE_CHECKING:
    PresenceStatus = Literal["present", "missing", "partial"]


@record(frozen=True, slots=True)
class PresenceResult:
    """Whether a tree carries one patch: each file's reverse application (see ``verify_applied``)."""

    name: str
    status: PresenceStatus
    files: tuple[FileResult, ...]


def verify_applied(
    patches: Sequence[Patch], read: Reader, policy: Policy | None = None, *, details: bool = True
) -> list[PresenceResult]:
    """Does the tree carry every patch? Unapply them last to first, in memory.

    A patch is present when its reverse applies (fuzz 0, offsets as ``policy`` allows; a created file
    must be there with exactly its content, a deleted one absent). A present patch is removed from the
    in-memory state before the previous one is checked, so each is checked against the tree as it was
    when it was applied; a missing one is left as is. Results come back in series order.

    ``details=False`` answers only the statuses: a file's placement stops at its first failed hunk
    and no near miss is looked for (a caller that only needs "present or not" paid for a near miss
    of every hunk of every missing row: 10,000 hunks, 1.9 s). Its failed files' hunks are then
    incomplete, so show a refusal from a ``details=True`` run.
    """
    base = policy or Policy()
    reverse_policy = Policy(
        max_offset=base.max_offset, exact=base.exact, ambiguity="off", forward=False
    )
    state = Overlay(_Cache(read))
    found: list[PresenceResult] = []
    for patch in reversed(patches):
        result, local = _apply_patch(patch.reversed(), state, reverse_policy, details)
        files = tuple(
            _still_there(fp, f, state)
            for fp, f in zip(patch.files, reversed(result.files), strict=True)
        )
        present = [f.status == "applied" for f in files]
        if all(present):
            status: PresenceStatus = "present"
            state.merge(local)
        elif any(present):
            status = "partial"
        else:
            status = "missing"
        found.append(PresenceResult(name=patch.name, status=status, files=files))
    found.reverse()
    return found


def _still_there(fp: FilePatch, found: FileResult, state: Overlay) -> FileResult:
    """A deletion is carried only where its file is gone. Its reverse (a creation) also "applies" to
    an empty file, as GNU patch creates into one; but a deletion leaves no empty file behind (GNU
    patch removes it), so an empty file there means the deletion is not carried."""
    old = fp.old_path
    deletion = fp.new_path is None and old is not None and found.status == "applied"
    if deletion and old is not None and state.read(old) is not None:
        error = f"{show(old)} is still there (empty): the deletion is not carried"
        return replace(found, status="failed", error=error)
    return found


def _apply_patch(
    patch: Patch, state: Overlay, policy: Policy, details: bool = True
) -> tuple[PatchResult, Overlay]:
    local = state.child()
    files = [_apply_file(fp, local, policy, details) for fp in patch.files]
    statuses = {f.status for f in files}
    error: str | None = None
    if "failed" in statuses:
        status: PatchStatus = "failed"
    elif statuses == {"already-applied"}:
        status = "already-applied"
    elif "already-applied" in statuses:
        # Part of the patch is in the tree already and part is not: an unexpected state that a
        # silent half-application would hide.
        status = "failed"
        carried = ", ".join(show(f.path) for f in files if f.status == "already-applied")
        error = f"partly applied already: {carried} already carry their change"
    else:
        status = "applied"
    return PatchResult(name=patch.name, status=status, files=tuple(files), error=error), local


def _apply_file(fp: FilePatch, state: Overlay, policy: Policy, details: bool = True) -> FileResult:
    action = fp.action
    if fp.old_path is None:
        return _create(fp, state, policy)
    if fp.new_path is not None and fp.new_path != fp.old_path and not (fp.rename or fp.copy):
        fp = _in_place(fp, state)
    source = fp.old_path
    assert source is not None
    if (fp.rename or fp.copy) and source in state.changes:
        # A chain inside one patch (a -> b, then b -> c): GNU patch 2.7.6 says "Cannot rename file
        # without two valid file names" and git apply refuses; so do we, rather than follow it.
        return FileResult(
            fp.path,
            action,
            "failed",
            error=f"{show(source)} was written by an earlier section of this patch: cannot "
            f"{action} it again (GNU patch and git apply refuse it too)",
            old_path=source,
        )
    content = state.read(source)
    if content is None:
        return _missing_source(fp, state, policy)
    if fp.new_path is None and fp.content is not None:
        # The reverse of a module file: present exactly as created.
        if content == fp.content:
            state.changes[source] = None
            return FileResult(source, "delete", "applied", old_path=source)
        return FileResult(
            source,
            "delete",
            "failed",
            error="content differs from the module file",
            old_path=source,
        )
    outcome = _place_hunks(fp.hunks, split_lines(content), policy, details)
    if outcome.status == "already-applied" and fp.new_path is None:
        # A deletion whose file is still there is not "already applied", whatever its reverse says
        # (the reverse of "delete every line" inserts them, which fits any file): the file holds
        # other content than the patch deletes. GNU patch refuses it too (exit 1, file kept).
        return FileResult(
            source,
            action,
            "failed",
            error=f"not deleting {show(source)}: its content differs from the lines the patch "
            "deletes",
            old_path=source,
        )
    if outcome.status == "already-applied":
        return FileResult(fp.path, action, "already-applied", outcome.hunks, old_path=fp.old_path)
    if outcome.output is None:
        return FileResult(fp.path, action, "failed", outcome.hunks, outcome.error, fp.old_path)
    if fp.new_path is None:
        if outcome.output:
            return FileResult(
                source,
                action,
                "failed",
                outcome.hunks,
                f"not deleting {show(source)}: its content differs from the patch "
                f"({len(split_lines(outcome.output))} lines would remain)",
                source,
            )
        state.changes[source] = None
        return FileResult(source, action, "applied", outcome.hunks, old_path=source)
    target = fp.new_path
    if target != source and state.read(target) is not None and (fp.rename or fp.copy):
        return FileResult(
            target,
            action,
            "failed",
            outcome.hunks,
            f"{show(target)} already exists: cannot {action} {show(source)} onto it",
            source,
        )
    if target != source and not fp.copy:
        state.changes[source] = None
    state.changes[target] = outcome.output
    if fp.new_mode is not None:
        state.modes[target] = fp.new_mode
    elif target != source:
        state.moved[target] = source  # git keeps the mode across a rename or copy
    return FileResult(target, action, "applied", outcome.hunks, old_path=source)


def _in_place(fp: FilePatch, state: Overlay) -> FilePatch:
    """A plain diff whose two names differ patches one file in place; like GNU patch, pick the
    existing name with the fewest components, then the shortest base name, then the shortest name."""
    names = [n for n in (fp.old_path, fp.new_path) if n is not None]
    existing = [n for n in names if state.read(n) is not None] or names
    best = min(existing, key=lambda n: (n.count(b"/"), len(n.rsplit(b"/", 1)[-1]), len(n)))
    return replace(fp, old_path=best, new_path=best)


def _missing_source(fp: FilePatch, state: Overlay, policy: Policy) -> FileResult:
    """The file to patch is absent: already deleted / renamed (forward), or a failure."""
    assert fp.old_path is not None
    source = fp.old_path
    action = fp.action
    if fp.new_path is None:
        if policy.forward:
            return FileResult(source, action, "already-applied", old_path=source)
        return FileResult(
            source, action, "failed", error=f"{show(source)} does not exist", old_path=source
        )
    if fp.rename and policy.forward:
        # Renamed already? The destination must carry the patched content (its reverse applies).
        landed = state.read(fp.new_path)
        if landed is not None:
            reverse = tuple(h.reversed() for h in fp.hunks)
            back = _place_hunks(reverse, split_lines(landed), _strict(policy), details=False)
            if back.output is not None:
                return FileResult(fp.new_path, action, "already-applied", old_path=source)
    return FileResult(
        fp.path,
        action,
        "failed",
        tuple(
            HunkResult(
                h.number,
                h.old_start,
                None,
                0,
                "failed",
                first_line(h),
                reason="file does not exist",
            )
            for h in fp.hunks
        ),
        error=f"{show(source)} does not exist: nothing to {action}",
        old_path=source,
    )


def _strict(policy: Policy) -> Policy:
    return Policy(max_offset=policy.max_offset, exact=policy.exact, ambiguity="off", forward=False)


def _create(fp: FilePatch, state: Overlay, policy: Policy) -> FileResult:
    assert fp.new_path is not None
    target = fp.new_path
    wanted = fp.content
    if wanted is None:
        wanted = b"".join(text for h in fp.hunks for kind, text in h.lines if kind == ADDED)
    existing = state.read(target)
    hunks = tuple(HunkResult(h.number, h.old_start, 1, 0, "exact", 1) for h in fp.hunks)
    if existing or (existing is not None and fp.content is not None):
        # A module file present with exactly its content is already applied, even when empty.
        if existing == wanted and policy.forward:
            return FileResult(target, "create", "already-applied", hunks)
        failed = tuple(
            HunkResult(h.number, h.old_start, None, 0, "failed", 1, reason="file exists")
            for h in fp.hunks
        )
        same = " with the same content" if existing == wanted else " with different content"
        return FileResult(
            target,
            "create",
            "failed",
            failed,
            f"cannot create {show(target)}: it already exists{same}",
        )
    # Absent, or present and empty: GNU patch creates into an empty file as well.
    state.changes[target] = wanted
    if fp.new_mode is not None:
        state.modes[target] = fp.new_mode
    return FileResult(target, "create", "applied", hunks)


@record(slots=True)
class _Outcome:
    status: str  # "applied" | "already-applied" | "failed"
    output: bytes | None
    hunks: tuple[HunkResult, ...]
    error: str | None = None


def _place_hunks(
    hunks: Sequence[Hunk], lines: list[bytes], policy: Policy, details: bool = True
) -> _Outcome:
    """Place and apply the hunks of one file (its ``split_lines``), as GNU patch's main loop does
    for one file. ``details=False``: stop at the first failed hunk, no near miss (the caller only
    asks whether every hunk applies)."""
    # Past a few hunks, one index of the file's lines beats a scan per hunk (placement stays linear
    # in the hunks over a file of repeated lines); below that the C-level scan is cheaper.
    file = FileLines(lines, indexed=len(hunks) > INDEXED_FROM)
    in_offset = 0
    out_offset = 0
    last_frozen = 0
    copied = 0  # input lines already copied to the output
    output: list[bytes] = []
    results: list[HunkResult] = []
    failed = False
    want_others = policy.ambiguity != "off"
    for hunk in hunks:
        placed = locate(
            hunk,
            file,
            in_offset=in_offset,
            last_frozen_line=last_frozen,
            exact=policy.exact,
            want_others=want_others,
        )
        if (
            placed.where == 0
            and hunk.number == 1
            and policy.forward
            and _reverse_applies(hunks, file, policy)
        ):
            return _Outcome(
                "already-applied",
                None,
                tuple(
                    HunkResult(h.number, h.old_start, None, 0, "exact", 0, reason="already applied")
                    for h in hunks
                ),
            )
        if placed.where == 0:
            if not details:
                return _Outcome("failed", None, (*results, _bare_failure(hunk, in_offset)))
            failed = True
            # GNU patch reports a hunk it could not locate at its stated line plus out_offset only.
            reported = first_line(hunk) + out_offset
            miss = near_miss(hunk, file, placed.first_guess)
            results.append(
                HunkResult(
                    number=hunk.number,
                    stated_line=hunk.old_start,
                    applied_line=None,
                    offset=in_offset,
                    status="failed",
                    reported_line=reported,
                    near_miss=miss,
                    reason=_unlocated(hunk, miss),
                    line_endings_differ=_endings_differ(hunk, lines, reported),
                )
            )
            continue
        # GNU patch updates its running offset as soon as the hunk is located, even if applying it
        # then fails (below); later hunks' first guesses depend on it.
        in_offset += placed.offset
        reported = placed.where + out_offset
        reason: str | None = None
        status: HunkStatus = "offset" if in_offset else "exact"
        if not applicable(hunk, placed.where, last_frozen):
            status, reason = "failed", "misordered: it would change lines an earlier hunk changed"
        elif policy.max_offset is not None and abs(in_offset) > policy.max_offset:
            status = "failed"
            reason = f"offset {in_offset} exceeds the allowed maximum of {policy.max_offset}"
        elif placed.others and policy.ambiguity == "error":
            status = "ambiguous"
            reason = f"the preimage also matches at line(s) {others_text(placed.others, placed.other_count)}"
        if status in ("failed", "ambiguous"):
            if not details:
                return _Outcome("failed", None, (*results, _bare_failure(hunk, in_offset, status)))
            failed = True
            results.append(
                HunkResult(
                    line_endings_differ=status == "failed"
                    and _endings_differ(hunk, lines, reported),
                    number=hunk.number,
                    stated_line=hunk.old_start,
                    applied_line=None,
                    offset=in_offset,
                    status=status,
                    reported_line=reported,
                    other_matches=placed.others,
                    other_count=placed.other_count,
                    near_miss=None,
                    reason=reason,
                )
            )
            continue
        # Apply: copy input up to the first change, then the hunk's changes; trailing context stays
        # uncopied (GNU patch copies lazily, which is why the next hunk's context may overlap it).
        start = placed.where - 1
        first_change = start + hunk.prefix_context
        output.extend(lines[copied:first_change])
        # The postimage between the leading and trailing context: added lines and the context between
        # changes (equal to the input's lines at fuzz 0).
        new_lines = hunk.new_lines
        output.extend(new_lines[hunk.prefix_context : len(new_lines) - hunk.suffix_context])
        copied = frozen_after(hunk, placed.where)
        last_frozen = copied
        out_offset += hunk.new_len - hunk.old_len
        results.append(
            HunkResult(
                number=hunk.number,
                stated_line=hunk.old_start,
                applied_line=reported,
                offset=in_offset,
                status=status,
                reported_line=reported,
                other_matches=placed.others,
                other_count=placed.other_count,
            )
        )
    if failed:
        return _Outcome("failed", None, tuple(results), _failure_summary(results))
    output.extend(lines[copied:])
    unended = any(not x.endswith(b"\n") for h in hunks for x in h.new_lines)
    if unended or (lines and not lines[-1].endswith(b"\n")):
        # A line without newline that is no longer the last one (an insertion after a last line
        # without newline, a marker on a context line) gets one, as GNU patch writes it.
        for k in range(len(output) - 1):
            if not output[k].endswith(b"\n"):
                output[k] += b"\n"
    return _Outcome("applied", b"".join(output), tuple(results))


def others_text(shown: Sequence[int], count: int) -> str:
    """``5, 12, 19`` or, when more matched than are listed, ``5, 12, 19 and 9,997 more``."""
    text = ", ".join(str(w) for w in shown)
    rest = count - len(shown)
    return f"{text} and {rest:,} more" if rest > 0 else text


def _unlocated(hunk: Hunk, miss: NearMiss | None) -> str:
    """Why a hunk was not found. A preimage that matches somewhere, line for line, failed only for
    GNU's context-asymmetry rule: say so, or the report shows "4 of 4 lines equal" and no reason."""
    lead, trail = hunk.prefix_context, hunk.suffix_context
    if miss is not None and not miss.differences and lead != trail:
        where, fewer = ("end", "trailing") if trail < lead else ("start", "leading")
        return (
            f"its {lead} leading and {trail} trailing context lines differ, so at fuzz 0 it can "
            f"only match at the {where} of the file (a hunk with fewer {fewer} lines was cut "
            f"there); its lines match at line {miss.line}, which is not the {where}"
        )
    return "the preimage does not match exactly anywhere in the search range"


def _endings_differ(hunk: Hunk, lines: Sequence[bytes], where: int) -> bool:
    """GNU patch's ``check_line_endings``: the hunk's first preimage line and the input line at the
    reported place (clamped to the last line) differ in ending CRLF vs not."""
    if not hunk.old_lines or not lines:
        return False
    first = hunk.old_lines[0]
    if not first:
        return False
    actual = lines[min(max(where, 1), len(lines)) - 1]
    return first.endswith(b"\r\n") != actual.endswith(b"\r\n")


def _reverse_applies(hunks: Sequence[Hunk], file: FileLines, policy: Policy) -> bool:
    """GNU patch ``--forward`` checks the reverse of hunk 1 only; we require every hunk to reverse-apply,
    so a file that carries only part of the change is a failure, not "already applied"."""
    reverse = tuple(h.reversed() for h in hunks)
    outcome = _place_hunks(reverse, list(file.lines), _strict(policy), details=False)
    return outcome.output is not None


def _bare_failure(hunk: Hunk, in_offset: int, status: HunkStatus = "failed") -> HunkResult:
    """A failed hunk of a ``details=False`` placement: its status only (nobody shows it)."""
    return HunkResult(hunk.number, hunk.old_start, None, in_offset, status, first_line(hunk))


def _failure_summary(results: Sequence[HunkResult]) -> str:
    bad = [r for r in results if not r.ok]
    numbers = ", ".join(f"#{r.number}" for r in bad)
    return f"{len(bad)} of {len(results)} hunks did not apply ({numbers})"
