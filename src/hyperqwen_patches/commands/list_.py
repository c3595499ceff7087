"""``list``: the rows of the series, from the manifest alone (no download, no fork)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from hyperqwen_patches.errors import exit_codes_help

if TYPE_CHECKING:
    import typer


HELP = """List the rows of the series: order, name, kind, file, export point, cut-against pin.

Read from patches/manifest.yaml only: nothing is downloaded, no fork is opened (quilt's `series`).

Examples:

  hyperqwen-patches list

  hyperqwen-patches list --json | jq -r '.rows[].name'
"""

EPILOG = exit_codes_help(
    ok="listed",
    finding="not used (list checks nothing)",
    usage="usage or an invalid manifest",
    git="not used (list runs no git)",
)


def list_command(
    repo: Annotated[
        Path | None,
        typer.Option(
            "--repo",
            file_okay=False,
            help="The repository; default: found upward from the current directory.",
        ),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
) -> None:
    from hyperqwen_patches.series.manifest import load_manifest
    from hyperqwen_patches.series.reporoot import resolve_repo

    manifest = load_manifest(resolve_repo(repo))
    if json_output:
        from hyperqwen_patches.console import emit_json

        emit_json({"pin": manifest.pin, "rows": manifest.to_json()["rows"]})
        return
    from hyperqwen_patches.console import out, table_lines

    columns = [
        ("#", "right"),
        ("row", "left"),
        ("kind", "left"),
        ("file", "left"),
        ("export point", "left"),
        ("cut against", "left"),
    ]
    rows = []
    for i, r in enumerate(manifest.rows, 1):
        cut = r.cut_against + (f" ({r.cut_note})" if r.cut_note else "")
        source = r.source_path + ("/" if r.is_module else "")
        rows.append(
            (
                str(i),
                r.name + (" (skipped)" if r.skip else ""),
                r.kind,
                source,
                r.export_point or "-",
                cut,
            )
        )
    lines = [f"series on {manifest.package} {manifest.pin}", *table_lines(columns, rows)]
    out.print("\n".join(lines), soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("list", help=HELP, epilog=EPILOG)(list_command)
