"""``check``: the CI patch-integrity job and the reviewer's command; every invariant in one table."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from hyperqwen_patches.errors import exit_codes_help

if TYPE_CHECKING:
    from collections.abc import Sequence

    import typer

    from hyperqwen_patches.checks.context import Finding
    from hyperqwen_patches.checks.pipeline import CheckReport

HELP = """Check the series against its invariants, without writing anything anywhere.

Runs the 15 checks below, each on its own, and prints the row table (row, files, hunks, exact, at
offset, status), the findings, what each check came to (held, failed, could not run, not verified, not asked for)
and what it was checked against (the pristine source, the fork or bundle and its sha256, the base
commit, each export point's tip):

\b
  pin              the manifest pin equals docker/requirements.txt's vllm==
  series           patches/series, the patch and module files and the rows agree, both ways
  apply            every row applies in order at fuzz 0 onto the pristine tree (ambiguity fails;
                   offsets reported per hunk; --max-offset bounds them)
  render           PATCHES.md and patches/series are exactly what `render` writes
  replay-identity  pristine + rows 1..k == the k-th fork commit, and at the tip
  export           every row's file is what `export` writes from the fork
  fork-commits     every manifest commit is on its export point, grown from the pin's base
  unfilled-rows    rows `export` added have their kind, what and retires_when written
  retirements      a retired row reverse-applies on the pin that carries it
  compiles         the .py files the rows touch compile
  knobs            knobs are read through vllm.envs, registered, and keyed where they must be
  names            names a row used at its cut_against still exist at the pin
  signatures       calls whose callee's signature changed by the pin
  whitespace       added lines pass git diff --check
  git-apply        rows marked git_apply pass git apply --check

The fork is --fork PATH|URL|BUNDLE, else the shipped patches/fork.bundle (offline); it is read from
git objects only (docs/fork.md).

The pristine tree defaults to the manifest's source (pypi:vllm==<pin>, downloaded once into the cache:
$HQP_CACHE, else $XDG_CACHE_HOME/hyperqwen-patches). An invalid manifest stops before the checks, with
every problem listed (file, line, field).

Examples:

  hyperqwen-patches check

  hyperqwen-patches check --json

  hyperqwen-patches check --source git:../vllm@v0.29.0 --max-offset 20
"""

EPILOG = exit_codes_help(
    ok="every invariant holds or could not be verified (the summary names those: 'not verified' "
    "never counts as holding; --require-fork fails on the fork's)",
    finding="a finding (an invariant is broken)",
    usage="a usage or environment problem (bad option, invalid manifest, the pristine tree cannot "
    "be obtained)",
    git="git failed on the fork or a git: source",
)


COLUMNS: tuple[tuple[str, str], ...] = (
    ("row", "left"),
    ("files", "right"),
    ("hunks", "right"),
    ("exact", "right"),
    ("at offset", "right"),
    ("status", "left"),
)


def table_lines(rows: Sequence[Sequence[str]]) -> list[str]:
    """The row table (console.table_lines with check's columns)."""
    from hyperqwen_patches.console import table_lines as lines

    return lines(COLUMNS, rows)


def render_table(report: CheckReport) -> str:
    """Print the table and the findings on stdout; return the one-line summary."""
    from hyperqwen_patches.console import as_typed, out

    rows = [
        (r.row, str(r.files), str(r.hunks), str(r.exact), str(r.offset), r.status)
        for r in report.rows
    ]
    if report.rows:
        lines = [f"series on {report.source}", *table_lines(rows)]
        offsets = [
            (r.row, h) for r in report.rows for h in r.hunk_records if h.offset and h.applied_line
        ]
        for row, h in offsets:
            lines.append(
                f"  {row}: {h.path} hunk #{h.number} at line {h.applied_line} (offset {h.offset} lines)"
            )
        # One print for the whole block: rich's per-call overhead adds up over a thousand lines.
        out.print("\n".join(lines), soft_wrap=True)
    else:
        out.print(f"series on {report.source}: no rows", soft_wrap=True)
    for checks, f in _grouped(report.findings):
        label = {
            "error": "FAIL",
            "warning": "warn",
            "problem": "ERROR",
            "note": "note",
            "unverified": "NOT VERIFIED",
        }[f.severity]
        if len(checks) > 1:
            out.print(f"{label} [{', '.join(checks)}] {as_typed(f.message)}", soft_wrap=True)
        else:
            out.print(f"{label} [{f.check}] {f.subject}: {as_typed(f.message)}", soft_wrap=True)
        if f.detail:
            for line in f.detail.rstrip("\n").splitlines():
                out.print(f"    {line}", soft_wrap=True)
    out.print("\n".join(verified_lines(report)), soft_wrap=True)
    errors = sum(1 for f in report.findings if f.severity == "error")
    problems = sum(1 for f in report.findings if f.severity == "problem")
    applied = sum(1 for r in report.rows if r.status in ("exact", "offset"))
    applicable = sum(1 for r in report.rows if r.status != "skipped")
    n = len(report.checks)
    unseen = report.not_verified
    if report.exit_code == 0:
        if unseen:
            return (
                f"check: {n - len(unseen)} of {n} checks hold, {len(unseen)} not verified "
                f"({', '.join(unseen)}); {applied} rows applied onto {report.source}"
            )
        return f"check: all {n} checks hold; {applied} rows applied onto {report.source}"
    parts = []
    if errors:
        parts.append(f"{errors} finding{'s' if errors != 1 else ''}")
    if problems:
        parts.append(f"{problems} check{'s' if problems != 1 else ''} could not run")
    if unseen:
        parts.append(
            f"{len(unseen)} not verified ({', '.join(unseen)})"
            + ("; --require-fork" if report.require_fork else "")
        )
    summary = f"check: {', '.join(parts)} ({n} checks); {applied} of {applicable} rows applied"
    return summary


def _grouped(findings: Sequence[Finding]) -> list[tuple[list[str], Finding]]:
    """The findings in order, a problem that stopped several checks alike told once: one cause (the
    release cannot be downloaded, say) is one message naming every check it stopped, not seven."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    order: list[tuple[list[str], Finding]] = []
    for f in findings:
        if f.severity == "problem" and f.subject == f.check:
            key = (f.severity, f.message, f.detail)
            if key in groups:
                groups[key].append(f.check)
                continue
            groups[key] = [f.check]
            order.append((groups[key], f))
        else:
            order.append(([f.check], f))
    return order


def verified_lines(report: CheckReport) -> list[str]:
    """What each check came to, and what it was checked against: a reviewer reads here what a
    passing check verified (not only that it passed)."""
    lines = ["checks:"]
    by_status: dict[str, list[str]] = {}
    for check in report.checks:
        by_status.setdefault(report.status(check), []).append(check)
    for status in ("held", "failed", "could not run", "not verified", "not asked for"):
        if status in by_status:
            lines.append(f"  {status:13} {', '.join(by_status[status])}")
    lines.append("against:")
    lines.append(f"  pristine      {report.against.get('pristine', report.source)}")
    fork = report.against.get("fork")
    if fork is None and report.status("replay-identity") == "could not run":
        lines.append("  fork          not opened (the checks that read it could not run)")
    elif fork is None:
        lines.append("  fork          none (no --fork and no patches/fork.bundle)")
    else:
        sha = f" (sha256 {fork['sha256']})" if fork.get("sha256") else ""
        lines.append(f"  fork          {fork['fork']}{sha}")
        lines.append(
            f"  base commit   {fork['base']} (the pristine tree's; the same on any machine)"
        )
        for point, tip in fork["tips"].items():
            lines.append(f"  {point:13} tip {tip}")
    return lines


def check_command(
    repo: Annotated[
        Path | None,
        typer.Option(
            "--repo",
            help="The repository (the directory holding patches/manifest.yaml); default: found upward from the current directory.",
            file_okay=False,
        ),
    ] = None,
    source: Annotated[
        str | None,
        typer.Option(
            "--source",
            help="Pristine tree instead of the manifest's: pypi:vllm==X[#sdist], git:PATH@REF or dir:PATH.",
        ),
    ] = None,
    max_offset: Annotated[
        int | None,
        typer.Option(
            "--max-offset", min=0, help="Fail a hunk that applies more than this many lines away."
        ),
    ] = None,
    fork: Annotated[
        str | None,
        typer.Option(
            "--fork",
            help="The fork to verify replay identity against: a repository path, a URL or a bundle file (default: patches/fork.bundle).",
        ),
    ] = None,
    export_point: Annotated[
        str | None,
        typer.Option("--export-point", help="Verify only this export point (a manifest name)."),
    ] = None,
    json_output: Annotated[
        bool,
        typer.Option("--json", help="Print the records (rows, hunks, findings) as JSON on stdout."),
    ] = False,
    require_fork: Annotated[
        bool,
        typer.Option(
            "--require-fork",
            help="Fail (exit 1) when replay identity, export or fork commits could not be verified "
            "(no fork given and no patches/fork.bundle): what a reviewer's run should use.",
        ),
    ] = False,
) -> None:
    from hyperqwen_patches.checklist import BACKGROUND, PIPELINE
    from hyperqwen_patches.checks.pipeline import run_check
    from hyperqwen_patches.commands.progress import StderrProgress
    from hyperqwen_patches.console import emit_json, out
    from hyperqwen_patches.errors import EnvironmentProblem, ExitCode, FindingError
    from hyperqwen_patches.series.reporoot import resolve_repo

    # An invalid manifest raises ManifestError here: cli.main gives a --json caller the error
    # document, every problem in it with its file, line and field (error.schema.json).
    report = run_check(
        resolve_repo(repo),
        source=source,
        max_offset=max_offset,
        progress=StderrProgress(),
        fork=fork,
        export_point=export_point,
        pipeline=PIPELINE,
        background=BACKGROUND,
        require_fork=require_fork,
    )
    if json_output:
        emit_json(report.to_json())
        summary = f"check: exit {int(report.exit_code)}"
    else:
        summary = render_table(report)
    from hyperqwen_patches.commands import annotate

    if annotate.wanted():
        from hyperqwen_patches.console import err

        row_files = {r.row: r.source for r in report.rows}  # a row's finding goes on its file
        for line in annotate.for_findings(report.findings, report.repo, row_files):
            err.print(line, soft_wrap=True)
    # The exit code travels as a typed error so that cli.main maps it (the summary becomes its message).
    if report.exit_code == ExitCode.FINDING:
        raise FindingError(summary)
    if report.exit_code == ExitCode.USAGE:
        raise EnvironmentProblem(summary)
    if not json_output:
        out.print(summary, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("check", help=HELP, epilog=EPILOG)(check_command)
