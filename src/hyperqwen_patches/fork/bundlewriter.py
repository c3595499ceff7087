"""The shipped bundle, ``patches/fork.bundle``: the fork's export points, with the base commit as its only
prerequisite, written with the pack knobs pinned."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from hyperqwen_patches import gitrun
from hyperqwen_patches.errors import UsageError

if TYPE_CHECKING:
    from hyperqwen_patches.fork.exportplan import ExportPlan
    from hyperqwen_patches.series.manifestmodel import Manifest

BUNDLE_RELPATH = "patches/fork.bundle"


def write_bundle(plan: ExportPlan, fork: Path, manifest: Manifest) -> str:
    """Write ``patches/fork.bundle``: ``base..branch`` of every exported point, so that the bundle's only
    prerequisite is the deterministic base commit (anyone can rebuild it from PyPI with ``import``)."""
    git_dir = gitrun.git_dir_of(fork)
    args = ["bundle", "create", "--quiet", "--version=2"]
    target = manifest.root / BUNDLE_RELPATH
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    refs: list[str] = []
    for point in manifest.export_points:
        if point.name in plan.point_updates:
            base, _tip = plan.point_updates[point.name]
            refs += [f"refs/heads/{point.branch}", f"^{base}"]
    if not refs:
        raise UsageError("no export point to bundle")
    gitrun.check(
        [*args, str(tmp), *refs],
        git_dir=git_dir,
        # One pack thread makes the delta search deterministic, and the pack knobs a repository config
        # may set are pinned, so the same fork repository gives the same file. (Deltas already stored
        # in the fork's packs are reused, so a repacked fork may give other bytes, same objects.)
        config=(
            ("pack.threads", "1"),
            ("pack.window", "10"),
            ("pack.depth", "50"),
            ("pack.compression", "-1"),
            ("core.compression", "-1"),
            ("pack.useBitmaps", "false"),
        ),
        what="writing the fork bundle",
    )
    os.replace(tmp, target)
    return BUNDLE_RELPATH
