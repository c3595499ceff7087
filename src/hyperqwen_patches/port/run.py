"""``port()``: open both releases, triage every row, report the static findings, and rebase on request."""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.port.model import PortReport, RebaseRequest, RebaseResult
from hyperqwen_patches.port.rebase import rebase_fork
from hyperqwen_patches.port.triage import classify_rows, rows_from_manifest
from hyperqwen_patches.sources.pristinetree import PristineTree


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
    from hyperqwen_patches.series.manifest import load_manifest
    from hyperqwen_patches.series.manifestmodel import VERSION_RE
    from hyperqwen_patches.sources.pristine import open_pristine

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
            # A paused rebase going on (--continue, --skip) was triaged when it started: it resumes
            # at its row, with no second triage.
            resuming = rebase is not None and rebase.action != "start"
            classified, statics = [], None
            if not resuming:
                with _step(progress, f"port: triaging {len(rows)} rows on {new.label}"):
                    classified = classify_rows(rows, old, new)
                    # With --rebase every row is checked as the branch has it (port/verify.py):
                    # the static checks of the old patch text would only add false findings.
                    if rebase is None:
                        statics = _port_statics(manifest, old, new)
            report = PortReport(
                package=manifest.package,
                from_version=manifest.pin,
                to_version=to_version,
                from_label=old.label,
                to_label=new.label,
                rows=tuple(classified),
                statics=statics,
                triaged=not resuming,
            )
            result = None
            if rebase is not None:
                with _step(progress, f"port --rebase: the rows onto {new.label}"):
                    result = rebase_fork(
                        manifest,
                        report,
                        rows,
                        old,
                        new,
                        rebase,
                        sources=_kept(to_source, from_source),
                    )
        finally:
            new.close()
    finally:
        old.close()
    return report, result


def _kept(*sources: str | None) -> tuple[str | None, str | None]:
    """The sources as a paused rebase keeps them: paths absolute, so ``--continue`` from any
    directory reads the trees the rebase started with."""
    from hyperqwen_patches.sources.spec import absolute_source

    kept = [None if s is None else absolute_source(s, Path.cwd()) for s in sources]
    return kept[0], kept[1]


def _step(progress: Any, label: str) -> AbstractContextManager[None]:
    """A long step told through ``progress`` (a start and an end line in a log), if there is one."""
    return progress.waiting(label) if progress is not None else contextlib.nullcontext()


def _port_statics(manifest: Any, old: PristineTree, new: PristineTree) -> Any:
    from hyperqwen_patches.statics.report import port_statics

    return port_statics(manifest, old, new)
