"""``statics``: the static checks of the series, with their counts, on the pin or against releases."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from hyperqwen_patches.errors import exit_codes_help

if TYPE_CHECKING:
    import typer


HELP = """Run the static checks of what the rows add, and show what they counted.

On the pin: every touched or added Python file compiles; knobs are read through vllm.envs and
registered (with the registry's entry count before and after the series); added lines pass
`git diff --check`; rows marked git_apply pass `git apply --check --whitespace=error` (plus the
flags a row lists: `git_apply: [--ignore-whitespace]`). With --to,
also: names the added lines use that the pin has and the release lacks, and calls whose callee
changed its parameters, with how many were resolved and skipped. `check` runs the same checks as
part of its pipeline; this command adds the counts. Rules: docs/static-checks.md.

Examples:

\b
  hyperqwen-patches statics
  hyperqwen-patches statics --to 0.30.0 --to 0.33.0 --markdown statics.md
  hyperqwen-patches statics --to 0.31.0 --json
"""

EPILOG = exit_codes_help(
    ok="no error found", finding="an error finding", usage="usage or environment problem"
)


def register(app: typer.Typer) -> None:
    app.command("statics", help=HELP, epilog=EPILOG)(statics)


def statics(
    to: Annotated[
        list[str] | None,
        typer.Option("--to", help="A release to compare names and signatures with (repeatable)."),
    ] = None,
    repo: Annotated[
        Path | None,
        typer.Option("--repo", help="The repository (default: found upward).", file_okay=False),
    ] = None,
    source: Annotated[
        str | None, typer.Option("--source", help="The pin's pristine source.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the records as JSON.")] = False,
    markdown: Annotated[
        Path | None, typer.Option("--markdown", help="Also write the report as markdown to FILE.")
    ] = None,
) -> None:
    from hyperqwen_patches.console import emit_json, out
    from hyperqwen_patches.errors import FindingError
    from hyperqwen_patches.series.reporoot import resolve_repo
    from hyperqwen_patches.statics.report import render_markdown, run_statics

    root = resolve_repo(repo)
    reports = run_statics(root, list(to or []), source=source)
    if markdown is not None:
        markdown.write_text(render_markdown(reports), encoding="utf-8")
    if as_json:
        emit_json({"reports": [r.to_json() for r in reports]})
    else:
        for r in reports:
            out.print(r.pin if r.target is None else f"{r.pin} -> {r.target}", soft_wrap=True)
            for check, text in r.counts.items():
                out.print(f"  {check}: {text}", soft_wrap=True)
            for f in r.findings:
                label = {"error": "FAIL", "warning": "warn", "problem": "ERROR", "note": "note"}[
                    f.severity
                ]
                out.print(f"  {label} [{f.check}] {f.subject}: {f.message}", soft_wrap=True)
                for line in f.detail.splitlines():
                    out.print(f"      {line}", soft_wrap=True)
    errors = sum(r.errors for r in reports)
    if errors:
        raise FindingError(f"statics: {errors} error finding{'s' if errors != 1 else ''}")
