"""``export``: write one patch file per fork commit, the manifest SHAs, patches/series and PATCHES.md."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from hyperqwen_patches.errors import exit_codes_help

if TYPE_CHECKING:
    import typer

    from hyperqwen_patches.fork.exportplan import ExportPlan

HELP = """Export the fork: one patch file per commit of each export point (base..branch).

Each file is `git format-patch` of its commit with every output-affecting option pinned (docs/fork.md),
so the same commit gives the same bytes on any machine and under any git configuration, and a rebase
that keeps content changes only `index` hashes and `@@` numbers. Rows are matched to commits by the
`Hqp-Row: <name>` trailer (else the row's recorded commit); a commit without a row becomes a new row
whose metadata `check` flags until filled in; module-file rows export to their directory. The
manifest's commit SHAs, patches/series and PATCHES.md are updated in the same run.

Refused, with every offending commit named: merge commits, changes outside vllm/, binary changes, and
a message line GNU patch would read as the start of a diff.

With --check nothing is written: the command lists what would change, separating positional drift
(only `index` hashes and `@@` line numbers moved) and format drift (the same removed and added lines
of the same files, written another way: a hand-kept preamble, more context, another hunk split; what
the first export after `adopt` finds) from semantic drift, and fails on semantic drift only.

Examples:

  hyperqwen-patches export --fork ../vllm-fork

  hyperqwen-patches export --fork ../vllm-fork --check
"""

EPILOG = exit_codes_help(
    ok="written (with --check: nothing, or only positional or format drift)",
    finding="--check found semantic drift, or a commit cannot be exported",
    usage="usage or an invalid manifest",
)

REPO_HELP = (
    "The repository (the directory holding patches/manifest.yaml); default: found upward from the "
    "current directory."
)


def print_plan(plan: ExportPlan, *, check: bool) -> None:
    from hyperqwen_patches.console import out

    verb = "would" if check else "will"
    for change in plan.changes:
        label = {
            "positional": "positional",
            "format": "format",
            "semantic": "SEMANTIC",
            "new": "new",
            "removed": "removed",
            "manifest": "manifest",
            "rendered": "rendered",
        }.get(change.drift, change.drift)
        row = f" ({change.row})" if change.row else ""
        out.print(f"{label:10} {change.path}{row}", soft_wrap=True)
    for name in plan.added_rows:
        out.print(f"new row    {name}: fill in its kind, what and retires_when", soft_wrap=True)
    for name in plan.vanished_rows:
        out.print(
            f"vanished   {name}: no commit on its export point {verb} carry it", soft_wrap=True
        )


def export_command(
    fork: Annotated[
        Path,
        typer.Option(
            "--fork", help="The fork repository (work tree or .git directory).", file_okay=False
        ),
    ],
    repo: Annotated[Path | None, typer.Option("--repo", help=REPO_HELP, file_okay=False)] = None,
    export_point: Annotated[
        list[str] | None,
        typer.Option(
            "--export-point", metavar="NAME", help="Export only this export point (repeatable)."
        ),
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Write nothing; list what would change; fail on semantic drift."
        ),
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    bundle: Annotated[
        bool,
        typer.Option(
            "--bundle",
            help="Write patches/fork.bundle (base..branch of every export point) for offline check; "
            "a bundle already there is always refreshed.",
        ),
    ] = False,
) -> None:
    from hyperqwen_patches.console import emit_json, err
    from hyperqwen_patches.errors import FindingError
    from hyperqwen_patches.fork.bundlewriter import BUNDLE_RELPATH, write_bundle
    from hyperqwen_patches.fork.exporting import plan_export, write_export
    from hyperqwen_patches.series.manifest import load_manifest
    from hyperqwen_patches.series.reporoot import resolve_repo

    manifest = load_manifest(resolve_repo(repo))
    plan = plan_export(manifest, fork, export_points=tuple(export_point or ()))
    if json_output:
        emit_json(plan.to_json())
    else:
        print_plan(plan, check=check)
    semantic = len(plan.semantic) + len(plan.added_rows)
    if check:
        if semantic:
            raise FindingError(
                f"export --check: semantic drift in {semantic} file(s)/row(s); "
                f"{len(plan.positional)} with positional drift only, "
                f"{len(plan.format_only)} with format drift only",
                hint="run: hyperqwen-patches export --fork " + str(fork),
            )
        if plan.changes:
            only = (
                f"positional drift only ({len(plan.positional)} patch file(s); "
                "index hashes and @@ line numbers moved)"
            )
            if plan.format_only:
                only += (
                    f", format drift only ({len(plan.format_only)}: the same changes written "
                    "another way)"
                )
            err.print(f"export --check: {only}, no semantic change", soft_wrap=True)
        else:
            err.print("export --check: every export is up to date", soft_wrap=True)
        return
    written = write_export(plan)
    # A shipped bundle is refreshed with the patches it must match (check compares them): a plain
    # export that left it behind made the next check fail with 13 findings.
    if bundle or (manifest.root / BUNDLE_RELPATH).is_file():
        before = _read_bytes(manifest.root / BUNDLE_RELPATH)
        write_bundle(plan, fork, manifest)
        if _read_bytes(manifest.root / BUNDLE_RELPATH) != before:
            written.append(BUNDLE_RELPATH)
    err.print(
        f"export: wrote {len(written)} file(s)" if written else "export: already up to date",
        soft_wrap=True,
    )


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def register(app: typer.Typer) -> None:
    app.command("export", help=HELP, epilog=EPILOG)(export_command)
