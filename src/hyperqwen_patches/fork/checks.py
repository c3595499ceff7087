"""The fork's entries in the check pipeline: replay identity (invariant 4), export up to date (5) and
manifest commits on their export points (7). The fork is opened once per run (:class:`ForkSession`)
and shared by the three. Also export's own lint: rows it added whose metadata still says TODO.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from hyperqwen_patches import gitrun
from hyperqwen_patches.checks.context import Slot
from hyperqwen_patches.errors import FindingError, GitError, UsageError
from hyperqwen_patches.fork import reading as forkgit
from hyperqwen_patches.fork.bundlewriter import BUNDLE_RELPATH
from hyperqwen_patches.fork.matching import other_rows
from hyperqwen_patches.fork.replay import ReplayProblem, ReplayReport, ReplayRow, check_replay
from hyperqwen_patches.fork.treestate import BaseEntries, tree_entries
from hyperqwen_patches.records import record
from hyperqwen_patches.sources import basecommit

if TYPE_CHECKING:
    from hyperqwen_patches.checks.context import CheckContext, Finding, Severity
    from hyperqwen_patches.series.manifestmodel import ExportPoint


# --- the check pipeline entries (invariants 4, 5 and 7) ------------------------------------------------


@record
class ForkSession:
    """The fork as ``check`` sees it, opened once per run and shared by the fork checks."""

    label: str
    git_dir: Path  # a scratch repository that reads the fork's objects
    base: str  # the pin's base commit, built from the pristine tree in the scratch repository
    tips: dict[str, str]  # export point name -> tip
    missing: dict[str, str]  # export point name -> why it could not be read
    _stack: contextlib.ExitStack

    def close(self) -> None:
        self._stack.close()


def fork_source(ctx: CheckContext) -> str | None:
    """``--fork`` if given, else the shipped bundle when it exists, else None (nothing to compare)."""
    if ctx.fork:
        return ctx.fork
    bundle = ctx.root / BUNDLE_RELPATH
    return str(bundle) if bundle.is_file() else None


def _points(ctx: CheckContext) -> list[ExportPoint]:
    manifest = ctx.manifest
    if ctx.export_point:
        point = manifest.export_point(ctx.export_point)
        if point is None:
            raise UsageError(
                f"--export-point {ctx.export_point}: the manifest has no such export point",
                hint="export points: "
                + (", ".join(p.name for p in manifest.export_points) or "none"),
            )
        return [point]
    return list(manifest.export_points)


def _open_fork(ctx: CheckContext) -> ForkSession | None:
    source = fork_source(ctx)
    if source is None:
        return None
    session = _open_session(ctx, source)
    ctx.closes(session)
    return session


# Checks share work through the context (checks/context.py's rule): the fork is opened and replayed
# once per run, whichever of the three fork checks asks first.
FORK_SESSION: Slot[ForkSession | None] = Slot("fork session", _open_fork)


def fork_session(ctx: CheckContext) -> ForkSession | None:
    """Open (once per check run) the fork named by ``--fork`` or the shipped bundle."""
    return ctx.shared(FORK_SESSION)


def _open_session(ctx: CheckContext, source: str) -> ForkSession:
    manifest = ctx.manifest
    stack = contextlib.ExitStack()
    path = Path(source)
    local_repo = path.is_dir()
    borrow = gitrun.git_dir_of(path) if local_repo else None
    from hyperqwen_patches.cachedir import cache_dir

    # A release's base commit is built once per machine into the cache and borrowed from there.
    try:
        cached = basecommit.cached_base(
            cache_dir(),
            ctx.pristine.label,
            ctx.pristine,
            package=manifest.package,
            version=manifest.pin,
            progress=ctx.progress,
            hold=stack,  # a shared lock on the entry while this session borrows it: prune skips it
        )
    except BaseException:
        stack.close()
        raise
    lenders = [cached[0]] if cached is not None else []
    scratch = stack.enter_context(forkgit.scratch_repo(borrow=borrow, also=lenders))
    try:
        if cached is not None:
            base = cached[1]
        else:
            base = basecommit.write_base_commit(
                scratch,
                ctx.pristine,
                package=manifest.package,
                version=manifest.pin,
                compression=0,  # the scratch repository lives for one check
            ).commit
        tips: dict[str, str] = {}
        missing: dict[str, str] = {}
        heads: dict[str, str] = {}
        if borrow is None and path.is_file():
            # A bundle is fetched once per machine (bundlecache.py); its objects are lent from there.
            from hyperqwen_patches.fork import bundlecache

            fetched = bundlecache.cached_heads(cache_dir(), path, base=base, prerequisites=scratch)
            if fetched is not None:
                heads = fetched[1]
                forkgit.lend(scratch, fetched[0] / "objects")
        for point in _points(ctx):
            if point.branch in heads:
                tips[point.name] = heads[point.branch]
                continue
            if borrow is not None:
                tip = forkgit.resolve(borrow, f"refs/heads/{point.branch}", what="fork")
                if tip is None:
                    missing[point.name] = f"{source} has no branch {point.branch}"
                else:
                    tips[point.name] = tip
                continue
            try:
                tips[point.name] = forkgit.fetch_branch(scratch, source, point.branch)
            except GitError as exc:
                missing[point.name] = exc.message
    except BaseException:
        stack.close()
        raise
    record: dict[str, object] = {"fork": source, "base": base, "tips": dict(tips)}
    if path.is_file():  # a bundle: its bytes name it exactly
        import hashlib

        record["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    ctx.evidence["fork"] = record
    return ForkSession(source, scratch, base, tips, missing, stack)


def _finding(problem: ReplayProblem) -> Finding:
    from hyperqwen_patches.checks.context import Finding

    severity: Severity = (
        problem.severity if problem.severity in ("error", "unverified") else "warning"
    )
    return Finding(problem.check, severity, problem.subject, problem.message, problem.detail)


def _replay_reports(ctx: CheckContext) -> list[ReplayReport] | None:
    session = fork_session(ctx)
    if session is None:
        return None
    manifest = ctx.manifest
    patches = {s.row.name: s.patch for s in ctx.series}
    reports: list[ReplayReport] = []
    # The session's base commit was built from ctx.pristine, so its entries come from the pristine
    # tree (BaseEntries); the listing is there for a fork that is not a linear chain.
    git_dir, base = session.git_dir, session.base
    base_entries = BaseEntries(ctx.pristine.read, lambda: tree_entries(git_dir, base))
    for point in _points(ctx):
        if point.name not in session.tips:
            report = ReplayReport(point.name, session.base, "")
            reason = session.missing.get(point.name, "no tip")
            report.problems.append(ReplayProblem("fork-commits", "error", point.name, reason))
            reports.append(report)
            continue
        rows = [
            ReplayRow(r.name, r.commit, patches.get(r.name)) for r in manifest.rows_on(point.name)
        ]
        reports.append(
            check_replay(
                session.git_dir,
                export_point=point.name,
                base=session.base,
                tip=session.tips[point.name],
                rows=rows,
                read_base=ctx.pristine.read,
                others=other_rows(manifest, point.name),
                base_entries=base_entries,
            )
        )
    return reports


# Replay's reports, per export point (None: no fork to compare with); replay identity and fork
# commits both read them.
REPLAY_REPORTS: Slot[list[ReplayReport] | None] = Slot("replay reports", _replay_reports)


def _reports(ctx: CheckContext) -> list[ReplayReport] | None:
    return ctx.shared(REPLAY_REPORTS)


def _no_fork_warning(ctx: CheckContext, check: str) -> list[Finding]:
    if not ctx.manifest.active_rows:
        return []
    return [
        _finding(
            ReplayProblem(
                check,
                "unverified",
                "fork",
                f"not verified: no fork given and no {BUNDLE_RELPATH} in the repository",
                "pass --fork PATH|URL|BUNDLE, or ship the bundle (docs/fork.md)",
            )
        )
    ]


def check_replay_identity(ctx: CheckContext) -> list[Finding]:
    """Invariant 4: pristine + rows 1..k == the k-th fork commit, and pristine + series == the tip."""
    reports = _reports(ctx)
    if reports is None:
        return _no_fork_warning(ctx, "replay-identity")
    if not reports and ctx.manifest.active_rows:
        message = (
            "not verified: the manifest names no export point (export_points in docs/manifest.md)"
        )
        return [_finding(ReplayProblem("replay-identity", "unverified", "fork", message))]
    return [_finding(p) for r in reports for p in r.problems if p.check == "replay-identity"]


def check_fork_commits(ctx: CheckContext) -> list[Finding]:
    """Invariant 7: every manifest commit is on its export point, and every export point grows from
    the pin's base commit; fork commits without rows and rows without commits are named."""
    reports = _reports(ctx)
    if reports is None:
        return _no_fork_warning(ctx, "fork-commits")
    findings = [_finding(p) for r in reports for p in r.problems if p.check == "fork-commits"]
    session = fork_session(ctx)
    assert session is not None
    manifest = ctx.manifest
    for point in _points(ctx):
        if point.base and point.base != session.base:
            findings.append(
                _finding(
                    ReplayProblem(
                        "fork-commits",
                        "error",
                        point.name,
                        f"export point {point.name} records base {point.base[:12]}, but the "
                        f"{manifest.package} {manifest.pin} base commit is {session.base[:12]}",
                    )
                )
            )
        tip = session.tips.get(point.name)
        if point.commit and tip and point.commit != tip:
            findings.append(
                _finding(
                    ReplayProblem(
                        "fork-commits",
                        "error",
                        point.name,
                        f"export point {point.name} records commit {point.commit[:12]}, but its "
                        f"branch is at {tip[:12]} (run export)",
                    )
                )
            )
    return findings


def check_export(ctx: CheckContext) -> list[Finding]:
    """Invariant 5: every row's file is exactly what export writes from the fork (drift named)."""
    from hyperqwen_patches.fork import exporting

    session = fork_session(ctx)
    if session is None:
        return _no_fork_warning(ctx, "export")
    tips = {p.name: session.tips[p.name] for p in _points(ctx) if p.name in session.tips}
    if not tips:
        return []
    try:
        plan = exporting.plan_export_at(ctx.manifest, session.git_dir, tips)
    except (
        FindingError
    ) as exc:  # an unexportable commit on the fork is a finding, not a usage problem
        return [_finding(ReplayProblem("export", "error", "fork", exc.message, exc.hint or ""))]
    what = {
        "positional": "positional drift only (index hashes and @@ line numbers moved); run export",
        "format": "format drift only (the same changes written another way: preamble, context, "
        "hunks); run export",
        "semantic": "semantic drift: export would change its content",
        "new": "export would create it",
        "removed": "export would remove it",
    }
    findings: list[Finding] = []
    for change in plan.changes:
        if (
            change.drift in what
        ):  # the manifest's SHAs are fork-commits' business, rendered files render's
            message = f"{change.path}: {what[change.drift]}"
            findings.append(
                _finding(ReplayProblem("export", "error", change.row or change.path, message))
            )
    for name in plan.added_rows:
        message = f"fork commit for {name} has no row (run export)"
        findings.append(_finding(ReplayProblem("export", "error", name, message)))
    return findings


# --- rows export added stay flagged until a person fills them in -------------------------------------

TODO_MARK = "TODO"


def check_unfilled_rows(ctx: CheckContext) -> list[Finding]:
    """A row whose ``what`` or ``retires_when`` still starts with TODO (as export adds new rows) fails."""
    from hyperqwen_patches.checks.context import Finding

    findings: list[Finding] = []
    for row in ctx.manifest.rows:
        if row.unset:
            findings.append(
                Finding(
                    "unfilled-rows",
                    "warning",
                    row.name,
                    f"row {row.name} was adopted without header lines for {', '.join(row.unset)}; "
                    f"defaults stand in for them: fill them in and drop `unset` "
                    f"({row.source_path}, manifest line {row.line})",
                )
            )
        empty = [
            f for f in ("what", "retires_when") if getattr(row, f).strip().startswith(TODO_MARK)
        ]
        if empty:
            findings.append(
                Finding(
                    "unfilled-rows",
                    "error",
                    row.name,
                    f"row {row.name} was added by export and its {', '.join(empty)} still say "
                    f"{TODO_MARK}; describe it in the manifest (line {row.line})",
                )
            )
    return findings
