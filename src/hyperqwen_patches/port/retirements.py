"""Invariant 8: a retirement names the pin that carries it and is verified against that pin
(it reverse-applies there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from hyperqwen_patches.console import show
from hyperqwen_patches.engine.applying import (
    apply_patch,
)
from hyperqwen_patches.engine.patchmodel import Patch
from hyperqwen_patches.port.model import FORWARD
from hyperqwen_patches.records import replace

if TYPE_CHECKING:
    from hyperqwen_patches.checks.context import CheckContext, Finding

# --- check: a retirement is verified against the pin that carries it (invariant 8) ----------------


def check_retirements(ctx: CheckContext) -> list[Finding]:
    """Invariant 8: every manifest retirement reverse-applies on its pin's pristine tree.

    The retired row must still be in the manifest (with a skip reason) so its patch can be read; a
    hunk retirement names ``PATH#N``. Pipeline function of ``check`` (``checklist.PIPELINE``).
    """
    from hyperqwen_patches.checks.context import Finding
    from hyperqwen_patches.engine.applying import verify_applied
    from hyperqwen_patches.sources.pristine import open_pristine

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
                    severity: Literal["error", "warning"] = (
                        "error" if "is not of the form" in picked else "warning"
                    )
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
