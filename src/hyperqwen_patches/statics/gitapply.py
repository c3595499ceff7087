"""The git apply contract: rows marked ``git_apply: true`` also pass ``git apply --check
--whitespace=error``, in series order, on what the rows before them produced; a row marked with a
list of flags (``git_apply: [--ignore-whitespace]``, the series' own check's) passes it with them.

Some downstream users apply the series with git, which is stricter than GNU patch at fuzz 0 about
whitespace and about a hunk's exact line counts. Real git runs (through ``gitrun``, the one git
runner) in a temporary directory holding only the files the marked row touches, as the pristine tree
plus the earlier rows (applied in memory by the engine) left them; a scratch bare repository is its
``GIT_DIR``, so no repository around the temporary directory is ever found or read.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hyperqwen_patches import resultcache
from hyperqwen_patches.engine.overlay import over
from hyperqwen_patches.series.gitapplyflags import BASE_ARGS, check_args
from hyperqwen_patches.statics.analysis import StaticFinding

if TYPE_CHECKING:
    from hyperqwen_patches.checks.context import CheckContext, Finding
    from hyperqwen_patches.engine.patchmodel import Patch
    from hyperqwen_patches.series.manifestmodel import Manifest
    from hyperqwen_patches.series.rows import SeriesRow

CHECK = "git-apply"
ARGS = BASE_ARGS


def _write(work: Path, path: bytes, data: bytes) -> None:
    target = os.path.join(os.fsencode(work), path)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "wb") as fh:
        fh.write(data)


# Bump when what a cached git apply result means changes (its entries are then never read again).
RESULT_VERSION = "1"


def gitapply_findings(
    manifest: Manifest, series: list[SeriesRow], read: Callable[[bytes], bytes | None]
) -> list[StaticFinding]:
    from hyperqwen_patches import gitrun
    from hyperqwen_patches.console import show
    from hyperqwen_patches.engine.applying import Policy, apply_series

    active = [s for s in series if s.row.skip is None and s.patch is not None]
    marked = [i for i, s in enumerate(active) if s.row.git_apply]
    if not marked:
        return []
    found: list[StaticFinding] = []
    state: dict[bytes, bytes | None] = {}
    current = over(state, read)

    # The scratch directory and its git dir are made only when a verdict is not in the result cache.
    tmp: Path | None = None
    git_dir: Path | None = None
    version: str | None = None
    try:
        for index, s in enumerate(active[: marked[-1] + 1]):
            patch: Patch = s.patch  # type: ignore[assignment]
            if s.row.git_apply and s.row.patch is not None:
                # Exactly what git apply sees: the files the row touches as the rows before it left
                # them, the patch file's bytes and where it runs; the verdict is pure in these.
                files: dict[bytes, bytes] = {}
                for fp in patch.files:
                    for path in sorted({fp.old_path, fp.new_path} - {None}):  # type: ignore[type-var]
                        assert path is not None
                        data = current(path)
                        if data is not None:
                            files[path] = data
                patch_file = manifest.root / s.row.patch
                patch_bytes = patch_file.read_bytes()
                subdir = manifest.package if manifest.paths == "package" else ""
                if version is None:
                    version = gitrun.version()
                args = check_args(s.row.git_apply_flags)
                parts: list[bytes | str] = [version, " ".join(args), subdir, s.row.patch]
                parts.append(patch_bytes)
                for path, data in sorted(files.items()):
                    parts += [path, data]

                def verdict(
                    index: int = index,
                    files: dict[bytes, bytes] = files,
                    patch_file: Path = patch_file,
                    subdir: str = subdir,
                    name: str = s.row.patch,
                    args: tuple[str, ...] = args,
                ) -> dict[str, Any]:
                    nonlocal tmp, git_dir
                    if tmp is None:
                        tmp = Path(tempfile.mkdtemp(prefix="hqp-gitapply-"))
                        git_dir = gitrun.init_bare(tmp / "repo.git")
                    work = tmp / f"work-{index}"
                    work.mkdir()
                    for path, data in files.items():
                        _write(work, path, data)
                    cwd = work / subdir if subdir else work
                    cwd.mkdir(exist_ok=True)
                    result = gitrun.run(
                        [*args, str(patch_file.resolve())], git_dir=git_dir, cwd=cwd
                    )
                    text = show(result.stderr).strip()
                    text = text.replace(str(patch_file.resolve()), name)
                    return {"code": result.code, "stderr": text}

                outcome = resultcache.cached(CHECK, RESULT_VERSION, parts, verdict)
                if outcome["code"] != 0:
                    found.append(
                        StaticFinding(
                            CHECK,
                            "error",
                            s.row.name,
                            None,
                            None,
                            f"git {' '.join(args[:-1])} refuses {s.row.patch} (exit "
                            f"{outcome['code']}) on the tree the rows before it produce",
                            outcome["stderr"],
                        )
                    )
            step = apply_series([patch], current, Policy(ambiguity="off"))
            if step.ok:
                state.update(step.changes)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return found


def check_git_apply(ctx: CheckContext) -> list[Finding]:
    """Rows marked ``git_apply: true`` pass ``git apply --check --whitespace=error`` in order."""
    if not asked_for(ctx.manifest):
        return []
    found = gitapply_findings(ctx.manifest, ctx.series, ctx.pristine.read)
    return [f.to_finding() for f in found]


def asked_for(manifest: Manifest) -> bool:
    """Whether any row asks for the check (else ``check`` reports it "not asked for", not "held")."""
    return any(r.git_apply for r in manifest.active_rows)


check_git_apply.asked_for = asked_for  # type: ignore[attr-defined]
