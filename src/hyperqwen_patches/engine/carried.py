"""A series onto a tree that may already carry the first rows of it: applying twice is a no-op.

Per-file ``--forward`` (``applying.Policy.forward``, GNU's rule) is not enough for a layered series: when
a later row edits lines an earlier row added, the earlier row's forward attempt on a patched tree fails
(its context is gone) and its reverse fails too (a later row changed its added lines). So the question
"which rows does the tree carry?" is answered the way ``--check-applied`` answers it: unapply the
series last to first, in memory (``verify_applied``). Then exactly three states are accepted, as quilt's
``push`` after a partial push:

- the tree carries rows 1..n (all of them): nothing to write, every row "already-applied";
- it carries rows 1..k and none of k+1..n: rows k+1..n are applied on top;
- it carries none: an ordinary apply.

Anything else (a middle row missing under a later one, a row partly there) is refused with the rows
named, and nothing is written: it is a tree no run of this series produced.
"""

from __future__ import annotations

from collections.abc import Sequence

from hyperqwen_patches.display import show
from hyperqwen_patches.engine.applying import (
    FileResult,
    PatchResult,
    Policy,
    PresenceResult,
    Reader,
    SeriesResult,
    apply_series,
    verify_applied,
)
from hyperqwen_patches.engine.expected import Divergence
from hyperqwen_patches.engine.patchmodel import Patch
from hyperqwen_patches.records import field, record, replace


@record(slots=True)
class CarriedResult:
    """``apply_carried``'s outcome: the series result, and how many leading rows the tree carried."""

    series: SeriesResult
    carried: int  # rows 1..carried were in the tree already (nothing written for them)
    refused: str | None = None  # why the tree's state was refused (then series.ok is False)
    divergent: list[Divergence] = field(default_factory=list)  # touched files unlike release + rows

    @property
    def ok(self) -> bool:
        return self.series.ok


def apply_carried(patches: Sequence[Patch], read: Reader, policy: Policy) -> CarriedResult:
    """``apply_series`` that accepts a tree carrying a prefix of the series (see the module doc).

    The common case costs one forward pass: the reverse pass runs only when the forward one met a row
    that did not apply or that was (per file) already applied.
    """
    forward = apply_series(patches, read, policy)
    if forward.ok and all(p.status == "applied" for p in forward.patches):
        return CarriedResult(forward, carried=0)
    # Statuses first: near misses only matter in a refusal, which runs the check again for them.
    presence = verify_applied(patches, read, policy, details=False)
    carried = carried_prefix(presence)
    if carried is not None:
        if carried == 0:
            return CarriedResult(forward, carried=0)  # nothing carried: the forward result stands
        on_top = apply_series(patches[carried:], read, replace(policy, forward=False))
        done = [_carried(p) for p in presence[:carried]]
        return CarriedResult(
            SeriesResult(
                patches=done + on_top.patches,
                changes=on_top.changes,
                modes=on_top.modes,
                moved=on_top.moved,
            ),
            carried=carried,
        )
    return _refuse(verify_applied(patches, read, policy))


def carried_prefix(presence: Sequence[PresenceResult]) -> int | None:
    """k when the tree carries exactly rows 1..k of the series (0: none), else None."""
    k = _leading(presence)
    return k if all(p.status == "missing" for p in presence[k:]) else None


def _leading(presence: Sequence[PresenceResult]) -> int:
    k = 0
    while k < len(presence) and presence[k].status == "present":
        k += 1
    return k


def unapply_carried(
    patches: Sequence[Patch], read: Reader, policy: Policy, *, keep: int = 0
) -> CarriedResult:
    """Take the rows a tree carries (1..k) out again, last first, down to row ``keep`` (quilt's
    ``pop ROW``; 0: all of them, the pristine tree's bytes). Rows 1..keep stay; a tree carrying no
    more than ``keep`` rows is left as it is.

    Refused, as ``apply_carried`` refuses, when the tree is not in a state a run of the series
    leaves. ``carried`` is k; the result's patches are the reversed rows, in the order undone."""
    presence = verify_applied(patches, read, policy, details=False)
    carried = carried_prefix(presence)
    if carried is None:
        return _refuse(verify_applied(patches, read, policy))
    undo = [p.reversed() for p in reversed(patches[keep:carried])]
    # Each reverse was just shown to apply in this order (verify_applied unapplies the same way).
    result = apply_series(undo, read, replace(policy, forward=False))
    return CarriedResult(result, carried=carried)


def _carried(presence: PresenceResult) -> PatchResult:
    # The files' hunks are the reverse placements: where each hunk's lines are in the tree now.
    files = tuple(replace(f, status="already-applied") for f in presence.files)
    return PatchResult(presence.name, "already-applied", files)


def _refuse(presence: Sequence[PresenceResult]) -> CarriedResult:
    carried = first_gap = _leading(presence)
    gap = presence[first_gap]
    later = [p.name for p in presence[first_gap + 1 :] if p.status != "missing"]
    partial = [p for p in presence if p.status == "partial"]
    if partial:
        p = partial[0]
        there = ", ".join(show(f.path) for f in p.files if f.status == "applied")
        absent = ", ".join(show(f.path) for f in p.files if f.status != "applied")
        reason = f"row {p.name} is partly in the tree ({there} carry it; {absent} do not)"
    else:
        shown = ", ".join(later[:5]) + (f" and {len(later) - 5} more" if len(later) > 5 else "")
        reason = f"the tree carries {shown} but not {gap.name} before " + (
            "it" if len(later) == 1 else "them"
        )
    results: list[PatchResult] = []
    for i, p in enumerate(presence):
        if i < carried:
            results.append(_carried(p))
            continue
        files = tuple(_as_found(f) for f in p.files)
        error = {
            "present": "in the tree although an earlier row is not",
            "partial": "partly in the tree",
            "missing": "not in the tree",
        }[p.status]
        results.append(PatchResult(p.name, "failed", files, error=error))
    return CarriedResult(SeriesResult(patches=results), carried=carried, refused=reason)


def _as_found(file: FileResult) -> FileResult:
    return replace(file, status="already-applied" if file.status == "applied" else "failed")
