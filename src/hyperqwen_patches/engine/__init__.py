"""The engine: pure functions on bytes (parse, place, apply, reverse). No disk, no git.

The contract other modules code against is in docs/architecture.md; the placement rules in
docs/engine.md.

May import: ``errors`` only (the engine is the lowest stage).
"""

from __future__ import annotations

from hyperqwen_patches.engine.applying import (
    FileResult,
    HunkResult,
    PatchResult,
    Policy,
    PresenceResult,
    SeriesResult,
    apply_patch,
    apply_series,
    verify_applied,
)
from hyperqwen_patches.engine.patchmodel import FilePatch, Hunk, Patch, PatchParseError
from hyperqwen_patches.engine.patchscan import parse_patch, patch_from_files
from hyperqwen_patches.engine.placement import LineDiff, NearMiss

__all__ = [
    "FilePatch",
    "FileResult",
    "Hunk",
    "HunkResult",
    "LineDiff",
    "NearMiss",
    "Patch",
    "PatchParseError",
    "PatchResult",
    "Policy",
    "PresenceResult",
    "SeriesResult",
    "apply_patch",
    "apply_series",
    "parse_patch",
    "patch_from_files",
    "verify_applied",
]
