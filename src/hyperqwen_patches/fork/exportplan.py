"""What export would do, as data: each repository file it would write or remove, with its drift, and
the manifest's commits and export points it would move. ``exporting.plan_export`` builds it,
``exporting.write_export`` carries it out, ``export --check`` reports it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from hyperqwen_patches.records import field, record

# "format": the same changes written another way (a hand-kept preamble, context, hunk split):
# what the first export after `adopt` finds on files the project wrote by hand.
Drift = Literal[
    "unchanged", "new", "removed", "positional", "format", "semantic", "rendered", "manifest"
]


@record(frozen=True)
class FileChange:
    """One repository file export would write (``new``) or remove (``new`` None)."""

    path: str  # repo-relative POSIX path
    row: str  # the row it belongs to ("" for the manifest and the rendered files)
    old: bytes | None
    new: bytes | None
    drift: Drift


@record
class ExportPlan:
    """What export would do; ``write_export`` does it, ``export --check`` reports it."""

    root: Path
    changes: list[FileChange] = field(default_factory=list)
    added_rows: list[str] = field(default_factory=list)
    vanished_rows: list[str] = field(default_factory=list)
    commit_updates: dict[str, str] = field(default_factory=dict)  # row -> new commit SHA
    point_of: dict[str, str] = field(default_factory=dict)  # row without export_point -> its point
    point_updates: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (base, tip)

    @property
    def semantic(self) -> list[FileChange]:
        return [c for c in self.changes if c.drift in ("new", "removed", "semantic")]

    @property
    def positional(self) -> list[FileChange]:
        return [c for c in self.changes if c.drift == "positional"]

    @property
    def format_only(self) -> list[FileChange]:
        return [c for c in self.changes if c.drift == "format"]

    @property
    def up_to_date(self) -> bool:
        return not self.changes and not self.added_rows

    def to_json(self) -> dict[str, Any]:
        return {
            "root": str(self.root),
            "up_to_date": self.up_to_date,
            "semantic_drift": bool(self.semantic or self.added_rows),
            "changes": [{"path": c.path, "row": c.row, "drift": c.drift} for c in self.changes],
            "added_rows": self.added_rows,
            "vanished_rows": self.vanished_rows,
            "commit_updates": dict(sorted(self.commit_updates.items())),
            "export_points": {
                k: {"base": b, "commit": t} for k, (b, t) in sorted(self.point_updates.items())
            },
        }


def classify(old: bytes | None, new: bytes | None) -> Drift:
    """unchanged / new / removed, else the row patch's drift by the rule ``diff`` uses too
    (``rangediff.patch_drift``): positional / format / semantic."""
    from hyperqwen_patches.series.rangediff import patch_drift

    if old is None or new is None:
        return "unchanged" if old == new else ("new" if old is None else "removed")
    drift = patch_drift(old, new)
    return "unchanged" if drift == "none" else drift
