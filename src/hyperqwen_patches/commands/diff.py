"""``diff OLD NEW``: compare two revisions of the series, range-diff style."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from hyperqwen_patches.errors import exit_codes_help

if TYPE_CHECKING:
    import typer


HELP = """Compare two revisions of the series, row by row (like git range-diff, for patch files).

OLD and NEW are git revisions of the repository (a commit, branch or tag) or directories holding a
series (a checkout with patches/manifest.yaml, a patches/series or series file, or a directory of
*.patch files). Prefix with git: or dir: when a name is both.

Rows are paired by name (unpaired rows with near-identical content are paired as renames) and
classified unchanged, positional (only index hashes and @@ line numbers moved), reformatted (the same
removed and added lines written another way: preamble, context, hunk split; export calls it format
drift), changed, added, removed or renamed. Reformatted and changed rows show an interdiff of the two
patch texts with positions folded.

Examples:

\b
  hyperqwen-patches diff main HEAD
  hyperqwen-patches diff v0.29-cut1 dir:../other-checkout --json
"""

EPILOG = exit_codes_help(
    ok="compared",
    finding="with --exit-code: anything beyond positional or format drift changed",
    usage="usage or input problem",
)


def register(app: typer.Typer) -> None:
    app.command("diff", help=HELP, epilog=EPILOG, no_args_is_help=True)(diff)


def diff(
    old: Annotated[
        str, typer.Argument(metavar="OLD", help="The old series: a git revision or a directory.")
    ],
    new: Annotated[
        str, typer.Argument(metavar="NEW", help="The new series: a git revision or a directory.")
    ],
    repo: Annotated[
        Path, typer.Option("--repo", help="The git repository revisions are read from.")
    ] = Path("."),
    as_json: Annotated[bool, typer.Option("--json", help="Print the records as JSON.")] = False,
    interdiff: Annotated[
        bool, typer.Option("--interdiff/--no-interdiff", help="Show interdiffs of changed rows.")
    ] = True,
    exit_code: Annotated[
        bool,
        typer.Option(
            "--exit-code", help="Exit 1 when anything beyond positional or format drift changed."
        ),
    ] = False,
) -> None:
    from rich.table import Table
    from rich.text import Text

    from hyperqwen_patches.console import emit_json, out
    from hyperqwen_patches.series.rangediff import diff_series, load_snapshot, open_series_tree

    result = diff_series(
        load_snapshot(open_series_tree(old, repo=repo)),
        load_snapshot(open_series_tree(new, repo=repo)),
    )
    if as_json:
        emit_json(result.to_json())
    else:
        title = f"{result.old_label} -> {result.new_label}"
        if result.old_pin != result.new_pin:
            title += f" (pin {result.old_pin} -> {result.new_pin})"
        table = Table(title=title, title_justify="left")
        for column in ("old", "new", "row", "status", "notes"):
            table.add_column(column, no_wrap=column != "notes")
        styles = {
            "unchanged": "dim",
            "positional": "cyan",
            "reformatted": "blue",
            "changed": "yellow",
            "added": "green",
            "removed": "red",
            "renamed": "magenta",
        }
        for row in result.rows:
            notes: list[str] = []
            if row.status == "renamed" and row.old is not None:
                notes.append(
                    f"was {row.old.name} ({row.similarity:.0%} similar, {row.drift} drift)"
                )
            if row.moved:
                notes.append("moved in the apply order")
            notes += [f"{f}: {o!r} -> {n!r}" for f, o, n in row.metadata_changes]
            table.add_row(
                str(row.old.position) if row.old else "-",
                str(row.new.position) if row.new else "-",
                row.name,
                Text(row.status, style=styles[row.status]),
                "; ".join(notes),
            )
        out.print(table)
        summary = ", ".join(f"{n} {s}" for s, n in result.counts.items() if n)
        out.print(summary or "no rows")
        if interdiff:
            for row in result.rows:
                if not row.interdiff:
                    continue
                out.print()
                out.print(Text(f"interdiff: {row.name}", style="bold"))
                out.print(render_diff(row.interdiff))
    if exit_code and result.semantic:
        from hyperqwen_patches.errors import FindingError

        changed = ", ".join(
            f"{n} {s}"
            for s, n in result.counts.items()
            if n and s not in ("unchanged", "positional", "reformatted")
        )
        raise FindingError(f"the series changed beyond positional or format drift: {changed}")


def render_diff(data: bytes) -> object:
    """A unified diff as coloured rich Text (markup off: user bytes are never read as markup)."""
    from rich.text import Text

    from hyperqwen_patches.console import show

    text = Text()
    for line in show(data).splitlines(keepends=True):
        style = ""
        if line.startswith(("+++", "---")):
            style = "bold"
        elif line.startswith("@@"):
            style = "cyan"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        text.append(line, style=style)
    text.rstrip()
    return text
