"""``import``: build the fork branch of each export point from the pristine base and the series."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from hyperqwen_patches.errors import exit_codes_help

if TYPE_CHECKING:
    import typer


HELP = """Build each export point's fork branch: the pristine base commit plus one commit per row.

The base commit's SHA depends only on the pristine tree and the pin (docs/fork.md); each row is applied
at fuzz 0 by the same engine as `apply`; messages, authors and dates come from the patch files, the
committer is fixed. The same series gives the same SHAs on any machine, so `export` of the result
reproduces the patch files byte for byte.

Works into a new repository (--create) or an existing one; only the export point's branch is written
(an existing branch at another commit is moved only with --force, a checked-out one never). The work
tree, index, HEAD and config are not touched.

Examples:

  hyperqwen-patches import --into ../vllm-fork --create

  hyperqwen-patches import --into ../vllm-fork --export-point qwen38 --force

  hyperqwen-patches import --into ../vllm-fork --json | jq -r '.branches[].tip'
"""

EPILOG = exit_codes_help(
    ok="imported",
    finding="a row does not apply",
    usage="usage or an invalid manifest",
    git="git failed (or the branch exists elsewhere without --force)",
)


def import_command(
    into: Annotated[
        Path,
        typer.Option("--into", help="The repository to build the branches in.", file_okay=False),
    ],
    repo: Annotated[
        Path | None,
        typer.Option(
            "--repo",
            help="The repository holding patches/manifest.yaml; default: found upward from the current directory.",
            file_okay=False,
        ),
    ] = None,
    export_point: Annotated[
        list[str] | None,
        typer.Option(
            "--export-point", metavar="NAME", help="Import only this export point (repeatable)."
        ),
    ] = None,
    source: Annotated[
        str | None,
        typer.Option("--source", help="Pristine tree instead of the manifest's source."),
    ] = None,
    create: Annotated[
        bool, typer.Option("--create", help="Create the repository if it does not exist.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Move a branch that exists at another commit.")
    ] = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print each branch, its tip and row commits as JSON.")
    ] = False,
) -> None:
    from hyperqwen_patches.commands.progress import StderrProgress
    from hyperqwen_patches.console import emit_json, out
    from hyperqwen_patches.fork.importing import import_series
    from hyperqwen_patches.series.manifest import load_manifest
    from hyperqwen_patches.series.reporoot import resolve_repo
    from hyperqwen_patches.sources.pristine import open_pristine

    manifest = load_manifest(resolve_repo(repo))
    progress = StderrProgress()
    label = source or manifest.source
    tree = open_pristine(label, package=manifest.package, version=manifest.pin, progress=progress)
    try:
        with progress.step(f"import: {len(manifest.rows)} rows onto the base commit of {label}"):
            results = import_series(
                manifest,
                into,
                tree=tree,
                export_points=tuple(export_point or ()),
                force=force,
                create=create,
            )
    finally:
        tree.close()
    if json_output:
        emit_json(
            {
                "ok": True,
                "into": str(into),
                "branches": [
                    {
                        "export_point": r.export_point,
                        "branch": r.branch,
                        "base": r.base,
                        "tip": r.tip,
                        "previous": r.previous,
                        "state": _state(r),
                        "rows": [{"row": row.row, "commit": row.commit} for row in r.rows],
                    }
                    for r in results
                ],
            }
        )
        return
    for result in results:
        for row in result.rows:
            out.print(f"{row.commit[:12]} {row.row}", soft_wrap=True)
        out.print(
            f"{result.branch}: {result.tip} ({_state(result)}; base {result.base[:12]}, {len(result.rows)} rows)",
            soft_wrap=True,
        )


def _state(result: Any) -> str:
    return (
        "unchanged" if not result.changed else ("created" if result.previous is None else "moved")
    )


def register(app: typer.Typer) -> None:
    app.command("import", help=HELP, epilog=EPILOG)(import_command)
