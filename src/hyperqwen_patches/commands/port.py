"""``port --to VERSION``: triage the series against another release; ``--rebase`` builds the new branch."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from hyperqwen_patches.errors import FindingError, UsageError, exit_codes_help
from hyperqwen_patches.records import record

if TYPE_CHECKING:
    import typer

    from hyperqwen_patches.port.model import PortReport, RebaseAction, RebaseRequest, RebaseResult


HELP = """Triage every row of the series against another release, without stopping at a failure.

Each row is tried on the new release's pristine tree (same cache as the pin), alone and in series
order: it applies exactly, at an offset (per hunk), is already upstream (its reverse applies), is
partly upstream (some hunks carried, the rest apply), or conflicts. A conflicting hunk shows the lines
that no longer match and the old-vs-new pristine diff around it; every row lists which of its files
changed between the releases.

With --rebase, a new fork branch is built on the new release's base commit, one commit per row in
order, each tried on the branch as built so far: at fuzz 0 (offsets refreshed, already-upstream hunks
dropped), else by a three-way merge of the row's old fork commit (git merge-file: a release change in
the hunk's context merges; one on the same or the next line does not). Rows the release carries get
no commit. A row that needs a person pauses the rebase: its files are checked out with diff3 conflict
markers in a worktree of the fork (../FORK-port-VERSION, or --worktree), nothing staged. Resolve them,
then --continue (commits the worktree with the row's message, or takes your own commit there);
--skip leaves the row out; --abort drops the paused rebase. The branch is written when the last row
is through; the old branch, the checked-out branch and the fork's index are never touched.

Examples:

\b
  hyperqwen-patches port --to 0.30.0
  hyperqwen-patches port --to 0.31.0 --markdown port-0.31.md --json > port-0.31.json
  hyperqwen-patches port --to 0.30.0 --to 0.31.0 --to 0.32.0 --markdown docs/port-matrix.md
  hyperqwen-patches port --to 0.30.0 --rebase --fork ../fork
  hyperqwen-patches port --rebase --continue --fork ../fork     (after resolving the paused row)
"""

EPILOG = exit_codes_help(
    ok="every row applies or is upstream (with --rebase: the branch is written with every row that "
    "is not upstream) and the static checks find no error on the target",
    finding="at least one row conflicts (with --rebase: the rebase paused for a person, or a row "
    "was skipped), or a static check finds an error (a name the target removed, a call that no "
    "longer binds: code that applies but would fail there)",
    usage="usage or environment problem (a version not on PyPI, the pin itself, conflict markers "
    "left at --continue)",
)


def register(app: typer.Typer) -> None:
    app.command("port", help=HELP, epilog=EPILOG, no_args_is_help=True)(port)


def port(
    to: Annotated[
        list[str] | None,
        typer.Option(
            "--to",
            help="The release to port to, such as 0.30.0; repeat it for a matrix of releases. "
            "Not needed with --continue, --skip or --abort.",
        ),
    ] = None,
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
        typer.Option(
            "--rebase",
            help="Build the new fork branch on the new release, a row at a time (fuzz 0, else a "
            "three-way merge, else a pause for you).",
        ),
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
    worktree: Annotated[
        Path | None,
        typer.Option(
            "--worktree",
            help="Where --rebase checks out a row that needs you (default: ../FORK-port-VERSION).",
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--continue",
            help="Go on with a paused --rebase: commit the resolved worktree (or take your commit "
            "there) as the paused row.",
        ),
    ] = False,
    skip: Annotated[
        bool, typer.Option("--skip", help="Go on with a paused --rebase, leaving its row out.")
    ] = False,
    abort: Annotated[
        bool,
        typer.Option(
            "--abort", help="Drop a paused --rebase: its worktree and state; no branch is written."
        ),
    ] = False,
) -> None:
    from hyperqwen_patches.console import err
    from hyperqwen_patches.port.model import RebaseRequest

    action = _action(
        rebase,
        resume=resume,
        skip=skip,
        abort=abort,
        rebase_only=fork is not None or branch is not None or force or bool(worktree),
        new_branch=branch is not None or force or worktree is not None,
    )
    if repo is None:
        from hyperqwen_patches.series.reporoot import find_repo_root

        repo = find_repo_root(Path.cwd()) or Path.cwd()
    fork_path = (fork or repo).resolve()
    if action == "abort":
        _abort(fork_path, as_json)
        return
    if action != "start":
        to, source, from_source = _resume_options(fork_path, action, to, source, from_source)
    versions = _versions(to, source, rebase=rebase)
    request = None
    if rebase:
        request = RebaseRequest(
            fork=fork_path,
            branch=branch,
            force=force,
            action=action,
            worktree=worktree,
            repo=repo.resolve(),
        )
    run = _run(repo.resolve(), versions, source, from_source, request)
    if markdown is not None:
        markdown.write_text(run.markdown(), encoding="utf-8")
    if as_json:
        from hyperqwen_patches.console import emit_json

        emit_json(run.to_json())
    else:
        render_run(run, details=diffs)
    if markdown is not None:
        err.print(f"wrote {markdown}")
    failure = run.failure()
    if failure is not None:
        raise failure


def _action(
    rebase: bool, *, resume: bool, skip: bool, abort: bool, rebase_only: bool, new_branch: bool
) -> RebaseAction:
    """What --rebase is asked to do: start, or one of --continue/--skip/--abort (at most one).
    ``rebase_only``: an option given that only --rebase reads; ``new_branch``: one that only a
    starting rebase reads (--branch, --force, --worktree)."""
    flags: tuple[tuple[RebaseAction, bool], ...] = (
        ("continue", resume),
        ("skip", skip),
        ("abort", abort),
    )
    chosen = [name for name, on in flags if on]
    if len(chosen) > 1:
        raise UsageError(f"--{chosen[0]} and --{chosen[1]} cannot go together")
    if not rebase and (rebase_only or chosen):
        raise UsageError(
            "--fork, --branch, --force, --worktree, --continue, --skip and --abort only make "
            "sense with --rebase"
        )
    action: RebaseAction = chosen[0] if chosen else "start"
    if action != "start" and new_branch:
        raise UsageError(f"--{action} goes on with the paused rebase's own branch and worktree")
    return action


def _versions(to: list[str] | None, source: str | None, *, rebase: bool) -> list[str]:
    """The releases to port to (--to), checked against --rebase and --source."""
    if not to:
        raise UsageError("give the release to port to with --to, such as --to 0.30.0")
    if len(to) != len(set(to)):
        raise UsageError("--to names the same release twice")
    if rebase and len(to) > 1:
        raise UsageError("--rebase builds one branch: give one --to with it")
    if source is not None and len(to) > 1 and "{version}" not in source:
        raise UsageError(
            "--source names one release's tree: give one --to with it",
            hint="or put {version} in it, such as --source 'git:../vllm@v{version}'",
        )
    return to


@record(frozen=True)
class PortRun:
    """What one ``port`` run found: a report per --to (in order), and the rebase of the one --to
    when --rebase was asked."""

    reports: tuple[PortReport, ...]
    rebases: tuple[RebaseResult | None, ...]  # one per report; only the first can be a rebase

    @property
    def rebased(self) -> RebaseResult | None:
        return self.rebases[0]

    def markdown(self) -> str:
        from hyperqwen_patches.port.report import render_markdown, render_matrix

        if len(self.reports) == 1:
            return render_markdown(self.reports[0], rebased=self.rebased)
        return render_matrix(list(self.reports))

    def to_json(self) -> dict[str, Any]:
        payloads = []
        for report, rebase_result in zip(self.reports, self.rebases, strict=True):
            payload = report.to_json()
            payload["rebase"] = rebase_result.to_json() if rebase_result is not None else None
            payloads.append(payload)
        # One shape whatever the number of --to: a script reads reports[i] for the i-th --to.
        return {"ok": all(p.get("ok", True) for p in payloads), "reports": payloads}

    def failure(self) -> FindingError | None:
        """The run's outcome as the error the CLI exits with (exit 1), or None when it holds."""
        rebased = self.rebased
        if rebased is not None:
            return _rebase_failure(rebased)
        conflicting = [r for r in self.reports if not r.ok]
        if not conflicting:
            return None
        parts = []
        for r in conflicting:
            what = []
            if r.conflicts:
                what.append(f"{r.conflicts} of {len(r.rows)} rows conflict")
            if r.static_errors:
                what.append(f"{r.static_errors} static error(s)")
            parts.append(f"{r.to_version}: {' and '.join(what)}")
        return FindingError(
            "; ".join(parts),
            hint="the table and --markdown show each conflicting hunk and its cause, and each "
            "static finding with its row, file and line",
        )


def _rebase_failure(rebased: RebaseResult) -> FindingError | None:
    """With --rebase the branch is the outcome: the triage's conflicts are what it met on the way."""
    if rebased.paused is not None:
        todo = (
            f"fix the {len(rebased.paused.findings)} static error(s) it adds"
            if rebased.paused.findings
            else "resolve the conflict markers"
        )
        return FindingError(
            f"row {rebased.paused.row} needs you: {todo} in {rebased.paused.worktree}",
            hint=f"then `{rebased.paused.resume}` (or --skip to leave the row out, --abort)",
        )
    # The triage's static findings are of the old patch text on the new release; every row the
    # branch holds was checked as written (port/verify.py) and would have paused on an error,
    # so they do not decide the branch's outcome.
    if not rebased.ok:
        what = [f"left out: {', '.join(rebased.skipped)}"] if rebased.skipped else []
        return FindingError(f"{rebased.branch} is written; " + " and ".join(what))
    return None


def _run(
    repo: Path,
    versions: list[str],
    source: str | None,
    from_source: str | None,
    request: RebaseRequest | None,
) -> PortRun:
    from hyperqwen_patches.port.run import port as run_port

    results = [
        run_port(
            repo,
            version,
            to_source=None if source is None else source.replace("{version}", version),
            from_source=from_source,
            progress=_progress(),
            rebase=request,
        )
        for version in versions
    ]
    return PortRun(tuple(r for r, _ in results), tuple(b for _, b in results))


def render_run(run: PortRun, *, details: bool) -> None:
    """The terminal's view of a run: each report's table, then what the rebase did."""
    from hyperqwen_patches.console import out

    for i, report in enumerate(run.reports):
        if i:
            out.print()
        if report.triaged:  # a --continue/--skip prints the row's outcome, not the triage again
            render_terminal(report, details=details)
    if run.rebased is not None:
        render_rebase(run.rebased)


def _resume_options(
    fork: Path, action: str, to: list[str] | None, source: str | None, from_source: str | None
) -> tuple[list[str], str | None, str | None]:
    """--continue/--skip take the release and the sources the paused rebase was started with."""
    from hyperqwen_patches.errors import UsageError
    from hyperqwen_patches.port.rebase import paused_rebase

    saved = paused_rebase(fork)
    if saved is None:
        raise UsageError(f"no port --rebase is paused in {fork}: nothing to {action}")
    if to and to != [saved.to_version]:
        raise UsageError(f"the paused port --rebase is to {saved.to_version}, not {', '.join(to)}")
    return [saved.to_version], source or saved.to_source, from_source or saved.from_source


def _abort(fork: Path, as_json: bool) -> None:
    from hyperqwen_patches.console import emit_json, out
    from hyperqwen_patches.port.rebase import abort_rebase

    saved, removed = abort_rebase(fork)
    gone = ", ".join(str(p) for p in removed) or "no worktree"
    if saved is None:  # the state was damaged: dropped with the worktrees the rebase had opened
        if as_json:
            aborted: dict[str, object] = {"to": None, "branch": None, "row": None,
                                          "worktree": None, "removed": [str(p) for p in removed]}  # fmt: skip
            emit_json({"ok": True, "reports": [], "aborted": aborted})
            return
        out.print(f"dropped a damaged port --rebase state; removed {gone}; no branch was written")
        return
    if as_json:
        aborted = {"to": saved.to_version, "branch": saved.branch, "row": saved.row,
                   "worktree": saved.worktree, "removed": [str(p) for p in removed]}  # fmt: skip
        emit_json({"ok": True, "reports": [], "aborted": aborted})
        return
    out.print(
        f"dropped the paused port --rebase to {saved.to_version} (at row {saved.row}); "
        f"removed {gone}; {saved.branch} was not written"
    )


def _progress() -> object:
    """The same progress as ``check`` (rich on a terminal, a line per step's start and end elsewhere)."""
    from hyperqwen_patches.commands.progress import StderrProgress

    return StderrProgress()


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
                    others = h.others_text()
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

    from hyperqwen_patches.console import as_typed, out, show
    from hyperqwen_patches.port.model import ADJACENT_NOTE, RebaseResult

    assert isinstance(result, RebaseResult)
    out.print()
    if result.paused is None:
        verb = "moved" if result.previous else "created"
        head = f"{verb} {result.branch} in {result.fork}"
    else:
        head = f"paused building {result.branch} in {result.fork} (not written yet)"
    out.print(
        Text(
            f"{head}: base {result.base[:12]}, {len(result.commits)} commit(s), "
            f"{'tip' if result.paused is None else 'last'} {result.tip[:12]} "
            f"(messages from the {result.messages_from})",
            style="bold",
        )
    )
    merged = dict(result.merged)
    if result.earlier:
        out.print(f"  ... {result.earlier} commit(s) of the runs before this one")
    for row, sha, how in result.commits[result.earlier :]:
        extra = ""
        if how == "merged":
            both = merged.get(row, ())
            extra = " (both sides changed " + ", ".join(show(p) for p in both) + ")" if both else ""
        out.print(f"  {sha[:12]} {row}  [{how}{extra}]")
    now = {row for row, _, _ in result.commits[result.earlier :]}
    for row, path, line, what in result.adjacent:
        if row in now:
            out.print(f"  {row}: {show(path)}:{line}: {ADJACENT_NOTE} ({what})")
    if result.upstream:
        out.print(f"left out, already upstream: {', '.join(result.upstream)}")
    if result.skipped:
        out.print(Text(f"left out with --skip: {', '.join(result.skipped)}", style="red"))
    if result.paused is not None:
        paused = result.paused
        out.print(Text(f"row {paused.row} needs you, in {paused.worktree}:", style="red bold"))
        for f in paused.files:
            what = {
                "conflict": f"{f.conflicts} conflict(s), markers left"
                + (f": {'; '.join(f.why)}" if f.why else ""),
                "adjacent": "merged next to an upstream change at "
                + ", ".join(f"line {n}" for n, _ in f.review)
                + ": review",
                "removed-upstream": "the release removed it; the row's version is there",
                "modify-delete": "the row deletes it, the release changed it; the release's is there",
            }.get(f.how, f"clean ({f.how})")
            out.print(f"  {show(f.path)}: {what}")
        if paused.findings:
            out.print("  it went in, and is wrong as written; fix these there:")
            for finding in paused.findings:
                out.print(f"    {finding}", soft_wrap=True)
        out.print(f"then: {as_typed(paused.resume)}   (or --skip, --abort)")
