"""The repository a command works on: the directory that holds ``patches/manifest.yaml``, found at or
above the working directory or given with ``--repo``, and paths inside it that must not lead out."""

from __future__ import annotations

from pathlib import Path

from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.series.manifestmodel import MANIFEST_RELPATH


def find_repo_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` that holds ``patches/manifest.yaml``. Of any
    kind: a manifest that is a directory or a FIFO is then refused by name (``load_manifest``), not
    passed over for a repository further up."""
    start = start.resolve()
    for candidate in (start, *start.parents):
        if (candidate / MANIFEST_RELPATH).exists():
            return candidate
    return None


def resolve_repo(repo: Path | None) -> Path:
    """The repository to work on: ``repo`` as given, else the nearest one at or above the cwd."""
    if repo is not None:
        if not (repo / MANIFEST_RELPATH).exists():
            raise UsageError(
                f"{repo} is not a hyperqwen-patches repository (no {MANIFEST_RELPATH} in it)",
                hint="pass --repo with the directory that holds patches/manifest.yaml",
            )
        return repo
    found = find_repo_root(Path.cwd())
    if found is None:
        raise UsageError(
            f"no {MANIFEST_RELPATH} in {Path.cwd()} or any directory above it",
            hint="run inside the repository or pass --repo PATH",
        )
    return found


def inside_repo(root: Path, name: str) -> Path:
    """``root / name``, refused (UsageError) when it is a link leading out of the repository: the
    series' files (``patches/``) and the tool's work (``.hqp/``) are read and written there, and a
    link would carry those reads and writes to wherever it points."""
    path = root / name
    if path.is_symlink():
        target = path.resolve()
        if not target.is_relative_to(root.resolve()):
            raise UsageError(
                f"{path} is a link to {target}, outside the repository {root}",
                hint=f"make {name} a directory of the repository (or a link inside it)",
            )
    return path
