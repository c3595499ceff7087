"""``check``: every invariant as an independent function returning findings, aggregated in one report.

A check is a function ``(ctx: CheckContext) -> list[Finding]``; :func:`run_check` runs the ones it is
given, in order. The full pipeline is composed above every stage it runs (``checklist.py``): **adding
an invariant is adding one line there**, and the layering test sees each check's module as an import.
Checks share work through the context's cached properties (the manifest, each row's parsed patch, the
pristine tree, the result of applying the series) and its declared slots, never through each other.

Severities: ``error`` (an invariant is broken → exit 1), ``warning`` (shown, exit unchanged) and
``problem`` (the check could not run: a usage or environment problem such as an unreachable registry
→ exit 2). A check that raises a typed error (``HqpError``) becomes a ``problem`` finding, so one
broken input never hides the other checks' results.

Nothing here writes: not into the repository, not into any tree (the pristine tree is read from the
cache, the series is applied in memory).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hyperqwen_patches.checks.context import CheckContext, CheckFunction, Finding
from hyperqwen_patches.errors import ExitCode, HqpError
from hyperqwen_patches.records import field, record
from hyperqwen_patches.series.manifest import load_manifest

if TYPE_CHECKING:
    from hyperqwen_patches.sources.pristinetree import Progress


# The checks that read the fork; --require-fork fails when they could not (names as check_name gives).
FORK_CHECK_NAMES = frozenset({"replay-identity", "export", "fork-commits"})


def check_name(check: CheckFunction) -> str:
    """The short name a check reports under: ``check_pin`` → ``pin``."""
    return check.__name__.removeprefix("check_").replace("_", "-")


# --- the report -------------------------------------------------------------------------------------


@record(frozen=True)
class HunkRecord:
    path: str
    number: int
    stated_line: int
    applied_line: int | None
    offset: int
    status: str
    other_matches: tuple[int, ...] = ()  # at most 3 (nearest the placed line) of other_count
    other_count: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "hunk": self.number,
            "stated_line": self.stated_line,
            "applied_line": self.applied_line,
            "offset": self.offset,
            "status": self.status,
            "other_matches": list(self.other_matches),
            "other_count": self.other_count,
        }


@record(frozen=True)
class RowRecord:
    """One line of the table: a row and how it applied."""

    row: str
    kind: str
    source: str
    files: int
    hunks: int
    exact: int
    offset: int
    status: str  # exact | offset | failed | ambiguous | already-applied | skipped | error | not-run
    note: str = ""
    hunk_records: tuple[HunkRecord, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "row": self.row,
            "kind": self.kind,
            "source": self.source,
            "files": self.files,
            "hunks": self.hunks,
            "exact": self.exact,
            "at_offset": self.offset,
            "status": self.status,
            "note": self.note,
            "hunk_results": [h.to_json() for h in self.hunk_records],
        }


@record(frozen=True)
class CheckReport:
    repo: Path
    pin: str
    source: str
    checks: tuple[str, ...]
    rows: tuple[RowRecord, ...]
    findings: tuple[Finding, ...]
    require_fork: bool = False  # the fork checks' "not verified" fails (check --require-fork)
    against: dict[str, Any] = field(default_factory=dict)  # what it was checked against
    # Checks no row asks for (git-apply without a ``git_apply: true`` row): they looked at nothing,
    # so they are not said to hold.
    not_asked: tuple[str, ...] = ()

    def status(self, check: str) -> str:
        """held, failed, could not run, not verified, or not asked for: what one check came to."""
        if check in self.not_asked:
            return "not asked for"
        mine = {f.severity for f in self.findings if f.check == check}
        if "problem" in mine:
            return "could not run"
        if "error" in mine:
            return "failed"
        if "unverified" in mine:
            return "not verified"
        return "held"

    @property
    def not_verified(self) -> tuple[str, ...]:
        """The checks that could not look, in pipeline order: never counted as holding."""
        names = {f.check for f in self.findings if f.severity == "unverified"}
        return tuple(c for c in self.checks if c in names)

    @property
    def exit_code(self) -> ExitCode:
        if any(f.severity == "problem" for f in self.findings):
            return ExitCode.USAGE
        if any(f.severity == "error" for f in self.findings):
            return ExitCode.FINDING
        if self.require_fork and set(self.not_verified) & FORK_CHECK_NAMES:
            return ExitCode.FINDING
        return ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        return {
            "repo": str(self.repo),
            "pin": self.pin,
            "source": self.source,
            "checks": list(self.checks),
            "status": {c: self.status(c) for c in self.checks},
            "not_verified": list(self.not_verified),
            "against": self.against,
            "ok": self.exit_code == ExitCode.OK,
            "exit_code": int(self.exit_code),
            "rows": [r.to_json() for r in self.rows],
            "findings": [f.to_json() for f in self.findings],
        }


def run_check(
    root: Path,
    *,
    source: str | None = None,
    max_offset: int | None = None,
    progress: Progress | None = None,
    fork: str | None = None,
    export_point: str | None = None,
    pipeline: Sequence[CheckFunction],
    background: Collection[CheckFunction] = (),
    require_fork: bool = False,
) -> CheckReport:
    """Run every check of ``pipeline``; an invalid manifest raises ``ManifestError`` (exit 2) first.

    ``background``: checks whose time is mostly spent waiting on git processes; they run, in
    pipeline order, on one worker thread while the others run on the calling thread (the GIL is
    free while a child process runs, so the two overlap). The report keeps pipeline order."""
    # git runs in scratch directories, where a relative root would name nothing.
    root = root.resolve()
    manifest = load_manifest(root)
    if source is not None:
        from hyperqwen_patches.sources.spec import parse_source

        parse_source(source)  # a malformed --source is a usage error before anything runs
    if fork is not None:
        # A URL ("https://...", "ssh://...", scp's "host:path") is fetched; anything else is a path,
        # and a path that is not there is a typo to say once, before the checks (exit 2), not a
        # failed fetch in three of them.
        url = "://" in fork or ":" in fork.split("/", 1)[0]
        if not url and not Path(fork).exists():
            from hyperqwen_patches.errors import UsageError

            raise UsageError(
                f"--fork {fork}: no such repository or bundle",
                hint="give a fork's work tree or .git directory, a bundle file, or a URL",
            )
    ctx = CheckContext(
        root=root,
        manifest=manifest,
        source=source or manifest.source,
        max_offset=max_offset,
        progress=progress,
        fork=fork,
        export_point=export_point,
    )

    def run_one(check: CheckFunction) -> list[Finding]:
        name = check_name(check)
        try:
            return check(ctx)
        except HqpError as exc:
            detail = f"hint: {exc.hint}" if exc.hint else ""
            return [Finding(name, "problem", name, exc.message, detail)]

    def run_background(indexes: list[int]) -> dict[int, list[Finding]]:
        return {i: run_one(pipeline[i]) for i in indexes}

    results: dict[int, list[Finding]] = {}
    try:
        later = [i for i, c in enumerate(pipeline) if c in background]
        # Leaving the with block waits for the worker (also when a check raises), so nothing still
        # runs when the context is closed below.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="hqp-check") as pool:
            pending = pool.submit(run_background, later) if later else None
            for i, check in enumerate(pipeline):
                if check not in background:
                    results[i] = run_one(check)
            if pending is not None:
                results.update(pending.result())  # re-raises what the worker raised
        rows = row_records(ctx)
    finally:
        ctx.close()
    findings = [f for i in range(len(pipeline)) for f in results[i]]
    # A check may say whether any row asks for it (an ``asked_for(manifest)`` attribute).
    not_asked = tuple(
        check_name(c) for c in pipeline if not getattr(c, "asked_for", lambda _m: True)(manifest)
    )
    return CheckReport(
        repo=root,
        pin=manifest.pin,
        source=ctx.source,
        checks=tuple(check_name(c) for c in pipeline),
        rows=tuple(rows),
        findings=tuple(findings),
        require_fork=require_fork,
        against={"pristine": ctx.source, **ctx.evidence},
        not_asked=not_asked,
    )


def _hunk_records(result: Any) -> tuple[HunkRecord, ...]:
    out: list[HunkRecord] = []
    for file in result.files:
        for h in file.hunks:
            out.append(
                HunkRecord(
                    path=file.path.decode("utf-8", errors="backslashreplace"),
                    number=h.number,
                    stated_line=h.stated_line,
                    applied_line=h.applied_line,
                    offset=h.offset,
                    status=h.status,
                    other_matches=tuple(h.other_matches),
                    other_count=h.other_count,
                )
            )
    return tuple(out)


def row_records(ctx: CheckContext) -> list[RowRecord]:
    """The table: one record per row, from the apply result when the apply check ran."""
    from hyperqwen_patches.series.rows import SeriesRow

    applied = ctx.peek("applied")  # never applied just for the table
    results = {p.name: p for p in applied.patches} if applied is not None else {}
    out: list[RowRecord] = []
    series = ctx.peek("series") or [SeriesRow(row, None, None) for row in ctx.manifest.rows]
    for s in series:
        row = s.row
        base = {"row": row.name, "kind": row.kind, "source": row.source_path}
        patch = s.patch
        n_files = len(patch.files) if patch is not None else 0
        n_hunks = sum(len(f.hunks) for f in patch.files) if patch is not None else 0
        if row.skip is not None:
            out.append(
                RowRecord(
                    **base,
                    files=n_files,
                    hunks=n_hunks,
                    exact=0,
                    offset=0,
                    status="skipped",
                    note=row.skip,
                )
            )
            continue
        if s.error is not None:
            out.append(
                RowRecord(**base, files=0, hunks=0, exact=0, offset=0, status="error", note=s.error)
            )
            continue
        result = results.get(row.name)
        if result is None:
            out.append(
                RowRecord(**base, files=n_files, hunks=n_hunks, exact=0, offset=0, status="not-run")
            )
            continue
        hunks = _hunk_records(result)
        exact = sum(1 for h in hunks if h.status == "exact")
        at_offset = sum(1 for h in hunks if h.status == "offset")
        if result.status == "failed":
            status = "ambiguous" if any(h.status == "ambiguous" for h in hunks) else "failed"
        elif result.status == "already-applied":
            status = "already-applied"
        else:
            status = "offset" if at_offset else "exact"
        out.append(
            RowRecord(
                **base,
                files=n_files,
                hunks=n_hunks,
                exact=exact,
                offset=at_offset,
                status=status,
                note=result.error or "",
                hunk_records=hunks,
            )
        )
    return out
