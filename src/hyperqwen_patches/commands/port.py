"""``port --to VERSION``: triage the series against another release; ``--rebase`` builds the new branch."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

if TYPE_CHECKING:
    import typer


HELP = """Triage every row of the series against another release, without stopping at a failure.

Each row is tried on the new release's pristine tree (same cache as the pin), alone and in series
order: it applies exactly, at an offset (per hunk), is already upstream (its reverse applies), is
partly upstream (some hunks carried, the rest apply), or conflicts. A conflicting hunk shows the lines
that no longer match and the old-vs-new pristine diff around it; every row lists which of its files
changed between the releases.

With --rebase, a new fork branch is built on the new release's base commit from every row that goes
through (offsets refreshed; already-upstream hunks dropped), the upstream rows are recorded as
retirement candidates with their evidence, and the conflicting rows are listed. The old branch is
never rewritten.

Examples:

\b
  hqp port --to 0.30.0
  hqp port --to 0.31.0 --markdown port-0.31.md --json > port-0.31.json
  hqp port --to 0.30.0 --to 0.31.0 --to 0.32.0 --markdown docs/port-matrix.md
  hqp port --to 0.30.0 --rebase --fork ../fork

Exit codes: 0 every row applies or is upstream and the static checks find no error on the target;
1 at least one row conflicts, or a static check finds an error (a name the target removed, a call
that no longer binds: code that applies but would fail there); 2 usage or environment problem (a
version not on PyPI, the pin itself); 3 git failed.
"""


def register(app: typer.Typer) -> None:
    app.command("port", help=HELP, no_args_is_help=True)(port)


def port(
    to: Annotated[
        list[str],
        typer.Option(
            "--to",
            help="The release to port to, such as 0.30.0; repeat it for a matrix of releases.",
        ),
    ],
    repo: Annotated[
        Path | None,
        typer.Option(
            "--repo",
            help="The repository holding patches/manifest.yaml; default: found upward from the "
            "current directory.",
            file_okay=False,
        ),
    ] = None,
    source: Annotated[
        str | None,
        typer.Option(
            "--source",
            help="The new release's pristine source (default pypi:vllm==VERSION; or dir:PATH, "
            "git:PATH@REF); {version} in it stands for each --to.",
        ),
    ] = None,
    from_source: Annotated[
        str | None,
        typer.Option("--from-source", help="The pin's pristine source (default: the manifest's)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the records as JSON.")] = False,
    markdown: Annotated[
        Path | None, typer.Option("--markdown", help="Also write the report as markdown to FILE.")
    ] = None,
    diffs: Annotated[
        bool,
        typer.Option("--diffs/--no-diffs", help="Show conflict details and pristine diffs."),
    ] = True,
    rebase: Annotated[
        bool,
        typer.Option("--rebase", help="Build the new fork branch from the rows that go through."),
    ] = False,
    fork: Annotated[
        Path | None,
        typer.Option("--fork", help="The fork repository for --rebase (default: --repo)."),
    ] = None,
    branch: Annotated[
        str | None,
        typer.Option(
            "--branch",
            help="The new branch (default: the export point's branch with the new version, "
            "e.g. qwen38/0.29 -> qwen38/0.30; else port/VERSION).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Move --branch if it exists (never an export point).")
    ] = False,
) -> None:
    from hyperqwen_patches.console import emit_json, err, out
    from hyperqwen_patches.errors import FindingError, UsageError
    from hyperqwen_patches.port.model import RebaseRequest
    from hyperqwen_patches.port.report import render_markdown, render_matrix
    from hyperqwen_patches.port.run import port as run_port

    if not rebase and (fork is not None or branch is not None or force):
        raise UsageError("--fork, --branch and --force only make sense with --rebase")
    if repo is None:
        from hyperqwen_patches.series.manifest import find_repo_root

        repo = find_repo_root(Path.cwd()) or Path.cwd()
    if len(to) != len(set(to)):
        raise UsageError("--to names the same release twice")
    if rebase and len(to) > 1:
        raise UsageError("--rebase builds one branch: give one --to with it")
    if source is not None and len(to) > 1 and "{version}" not in source:
        raise UsageError(
            "--source names one release's tree: give one --to with it",
            hint="or put {version} in it, such as --source 'git:../vllm@v{version}'",
        )
    request = None
    if rebase:
        request = RebaseRequest(fork=(fork or repo).resolve(), branch=branch, force=force)
    results = [
        run_port(
            repo.resolve(),
            version,
            to_source=None if source is None else source.replace("{version}", version),
            from_source=from_source,
            progress=_progress(),
            rebase=request,
        )
        for version in to
    ]
    reports = [r for r, _ in results]
    rebased = results[0][1]
    if markdown is not None:
        if len(reports) == 1:
            text = render_markdown(reports[0], rebased=rebased)
        else:
            text = render_matrix(reports)
        markdown.write_text(text, encoding="utf-8")
    if as_json:
        payloads = []
        for report, rebase_result in results:
            payload = report.to_json()
            payload["rebase"] = rebase_result.to_json() if rebase_result is not None else None
            payloads.append(payload)
        # One shape whatever the number of --to: a script reads reports[i] for the i-th --to.
        emit_json({"ok": all(p.get("ok", True) for p in payloads), "reports": payloads})
    else:
        for i, report in enumerate(reports):
            if i:
                out.print()
            render_terminal(report, details=diffs)
        if rebased is not None:
            render_rebase(rebased)
    if markdown is not None:
        err.print(f"wrote {markdown}")
    conflicting = [r for r in reports if not r.ok]
    if conflicting:
        if rebased is not None:
            err.print(
                f"{rebased.branch} holds the {len(rebased.commits)} row(s) that go through; "
                "resolve the conflicting rows on it"
            )
        parts = []
        for r in conflicting:
            what = []
            if r.conflicts:
                what.append(f"{r.conflicts} of {len(r.rows)} rows conflict")
            if r.static_errors:
                what.append(f"{r.static_errors} static error(s)")
            parts.append(f"{r.to_version}: {' and '.join(what)}")
        raise FindingError(
            "; ".join(parts),
            hint="the table and --markdown show each conflicting hunk and its cause, and each "
            "static finding with its row, file and line",
        )


def _progress() -> object:
    """The same download progress as ``check`` (rich on a terminal, silent otherwise)."""
    from hyperqwen_patches.commands.check import TerminalProgress

    return TerminalProgress()


STYLES = {
    "exact": "green",
    "offset": "cyan",
    "upstream": "magenta",
    "partly-upstream": "magenta",
    "conflicts": "red",
    "conflict": "red",
    "skipped": "dim",
}


def render_terminal(report: object, *, details: bool) -> None:
    """The table (one line per row) and, for rows that need a look, their hunks and pristine diffs."""
    from rich.table import Table
    from rich.text import Text

    from hyperqwen_patches.commands.diff import render_diff
    from hyperqwen_patches.console import out, show
    from hyperqwen_patches.port.model import PortReport
    from hyperqwen_patches.port.report import count_line, hunk_counts

    assert isinstance(report, PortReport)
    table = Table(
        title=f"{report.package} {report.from_version} -> {report.to_version} ({report.to_label})",
        title_justify="left",
    )
    for column in ("#", "row", "status", "alone", "hunks", "files changed"):
        table.add_column(column, no_wrap=column in ("#", "row", "status"))
    for row in report.rows:
        table.add_row(
            str(row.position),
            row.name,
            Text(row.status, style=STYLES[row.status]),
            "same" if not row.differs else Text(row.alone.status, style=STYLES[row.alone.status]),
            hunk_counts(row.in_sequence),
            f"{len(row.changed_files)} of {len(row.drift)}" if row.drift else "-",
        )
    out.print(table)
    out.print(count_line(report) or "the series has no rows")
    statics = report.statics
    if statics is not None and statics.findings:
        out.print()
        out.print(
            Text(
                f"static checks against {report.to_version}: {len(statics.findings)} finding(s)",
                style="bold",
            )
        )
        for f in statics.findings:
            out.print(
                Text(
                    f"{f.severity} [{f.check}] {f.subject}: {f.message}",
                    style={"error": "red", "warning": "yellow"}.get(f.severity, ""),
                )
            )
    candidates = report.retirement_candidates
    if candidates:
        out.print()
        out.print(Text("retirement candidates (for the manifest's retirements:)", style="bold"))
        for c in candidates:
            out.print(c.to_yaml().rstrip("\n"))
    if not details:
        return
    for row in report.rows:
        for f in row.in_sequence.files:
            if f.error:
                out.print(
                    Text(f"{row.name}: {show(f.path)}: {f.error}", style=STYLES.get(f.status, ""))
                )
            for h in f.hunks:
                if h.other_matches:
                    others = ", ".join(map(str, h.other_matches))
                    out.print(
                        Text(
                            f"{row.name}: {show(h.path)} hunk #{h.number} applies at line {h.line} "
                            f"but its preimage also matches at line(s) {others}: check the place",
                            style="yellow",
                        )
                    )
                if h.status not in ("upstream", "conflict"):
                    continue
                out.print()
                out.print(
                    Text(
                        f"{row.name}: {show(h.path)} hunk #{h.number} (stated line {h.stated_line}): "
                        f"{h.status}: {h.cause}",
                        style="bold",
                    )
                )
                if h.aligned:
                    out.print(
                        Text(
                            f"  preimage (-) against {report.to_version} (+) from line "
                            f"{h.aligned_line}:",
                            style="dim",
                        )
                    )
                    out.print(render_diff(h.aligned))
                if h.pristine_diff:
                    out.print(Text("  old -> new pristine:", style="dim"))
                    out.print(render_diff(h.pristine_diff))


def render_rebase(result: object) -> None:
    from rich.text import Text

    from hyperqwen_patches.console import out
    from hyperqwen_patches.port.model import RebaseResult

    assert isinstance(result, RebaseResult)
    out.print()
    verb = "moved" if result.previous else "created"
    out.print(
        Text(
            f"{verb} {result.branch} in {result.fork}: base {result.base[:12]}, "
            f"{len(result.commits)} commit(s), tip {result.tip[:12]} "
            f"(messages from the {result.messages_from})",
            style="bold",
        )
    )
    for row, sha in result.commits:
        out.print(f"  {sha[:12]} {row}")
    if result.upstream:
        out.print(f"left out, already upstream: {', '.join(result.upstream)}")
    if result.conflicts:
        out.print(Text(f"left for you, conflicting: {', '.join(result.conflicts)}", style="red"))
