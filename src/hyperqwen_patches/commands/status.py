"""``status DIR`` (which rows DIR carries, quilt's ``applied``) and ``unapply DIR`` (take them out)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from hyperqwen_patches.errors import FindingError, exit_codes_help

if TYPE_CHECKING:
    import typer

    from hyperqwen_patches.engine.patchmodel import Patch

# The signatures are read only when the command is registered with Typer (commands/__init__.py), so
# they are written out in full rather than as module-level aliases that would import Typer on load.
DIR_HELP = "The patched directory (holds the package: site-packages)."
REPO_HELP = (
    "The repository whose series to compare with; default: found upward from the current directory."
)

STATUS_HELP = """Say which rows of the series DIR carries (quilt's `applied`), writing nothing.

The rows are unapplied last to first in memory (as `apply --check-applied` does): DIR carries rows
1..k when those reverse-apply and none of the others is there. Then every file the series touches is
compared with the manifest's release plus rows 1..k (digests computed once per series and release,
kept in the cache): a file that holds anything else "carries an earlier or foreign change" (a row
since dropped or rewritten, a hand edit) and is named with the rows that touch it. Any other state (a
middle row missing, a row partly there, such a file) is named, exit 1. A release that cannot be read
is said on stderr; the rest of the answer stands.

Examples:

  hyperqwen-patches status site-packages

  hyperqwen-patches status site-packages --repo ../series --json
"""

STATUS_EPILOG = exit_codes_help(
    ok="DIR carries rows 1..k (none, some or all)",
    finding="DIR is in a state no run of the series leaves (rows out of order, a row partly there, "
    "a touched file that is not the release plus the rows carried)",
    usage="bad input (no manifest, DIR not the package's parent, an interrupted write in DIR, "
    "another run holding DIR's lock longer than HQP_LOCK_WAIT seconds)",
)

UNAPPLY_HELP = """Take the rows DIR carries out again, last first, all or nothing (quilt's `pop -a`;
with --to ROW, quilt's `pop ROW`).

DIR must carry rows 1..k of the series (see `status`), and every file the series touches must be the
release plus those rows; the reverse of each row after ROW (default: every row) is applied at fuzz 0
in memory, then written through the same journal as `apply`, so DIR ends at rows 1..ROW (pristine)
or untouched. A file carrying an earlier or foreign change is named and nothing is written: taking the
rows out would not give the release back.

Examples:

  hyperqwen-patches unapply site-packages

  hyperqwen-patches unapply site-packages --to 3 --dry-run
"""

UNAPPLY_EPILOG = exit_codes_help(
    ok="the rows were taken out (or DIR carried none)",
    finding="DIR is in a state no run of the series leaves (a file carrying an earlier or foreign "
    "change included), or a reverse did not apply; nothing written",
    usage="bad input (a --to ROW not in the series); a write journal in DIR that this tool did not sign (refused, nothing written); "
    "another run holding DIR's lock longer than HQP_LOCK_WAIT seconds",
    interrupted="interrupted (Ctrl-C), DIR put back",
    terminated="terminated (SIGTERM), DIR put back",
)


def _series(directory: Path, repo: Path | None) -> list[Patch]:
    from hyperqwen_patches.commands.apply import default_series, refuse_misplaced

    patches = default_series(Path.cwd(), repo=repo)
    refuse_misplaced(directory, patches)
    return patches


def status_command(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help=DIR_HELP)],
    repo: Annotated[Path | None, typer.Option("--repo", file_okay=False, help=REPO_HELP)] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    from hyperqwen_patches.commands.apply import divergent_records, release_reference
    from hyperqwen_patches.engine.applying import Policy
    from hyperqwen_patches.engine.carried import carried_prefix
    from hyperqwen_patches.sources.tree import check_applied

    patches = _series(directory, repo)
    reference = release_reference(repo, patches, Policy())
    checked = check_applied(directory, patches, Policy(), reference.expected)
    carried = carried_prefix(checked.patches)
    total = len(patches)
    if carried is None or checked.divergent:
        state = "inconsistent"
    else:
        state = "pristine" if carried == 0 else "complete" if carried == total else "partial"
    payload = {
        "directory": str(directory),
        "state": state,
        "carried": carried,
        "total": total,
        "rows": [{"name": p.name, "status": p.status} for p in checked.patches],
        "divergent": divergent_records(checked.divergent),
        "compared_with_release": checked.divergent is not None,
        "not_compared": reference.unavailable,
    }
    if json_output:
        from hyperqwen_patches.console import emit_json

        emit_json(payload)
    else:
        from hyperqwen_patches.console import out, table_lines

        rows = [(str(i), p.name, p.status) for i, p in enumerate(checked.patches, 1)]
        lines = table_lines([("#", "right"), ("row", "left"), ("in DIR", "left")], rows)
        out.print("\n".join([f"status → {directory}", *lines]), soft_wrap=True)
        if carried is not None and not checked.divergent:
            nxt = f"; next: {patches[carried].name}" if carried < total else ""
            out.print(f"{directory} carries {carried} of {total} rows ({state}){nxt}")
    if reference.unavailable:
        from hyperqwen_patches.console import err

        err.print(f"note: not compared with the release file by file: {reference.unavailable}")
    if checked.divergent:
        from hyperqwen_patches.engine.expected import describe

        raise FindingError(
            f"{directory} carries rows 1-{carried} of {total} and something else: "
            + describe(checked.divergent),
            hint="restore the pristine files (or re-install the package), then apply",
        )
    if carried is None:
        odd = [p.name for p in checked.patches if p.status != "missing"]
        raise FindingError(
            f"{directory} is in a state no run of this series leaves: rows {', '.join(odd[:6])} "
            "are there, but not as a prefix of the series",
            hint="restore the pristine files (or re-install the package), then apply",
        )


def unapply_command(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help=DIR_HELP)],
    repo: Annotated[Path | None, typer.Option("--repo", file_okay=False, help=REPO_HELP)] = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            metavar="ROW",
            help="Take out only the rows after ROW (a row name, its 1-based number or its patch "
            "file); rows 1..ROW stay (quilt's pop ROW). Default: every row.",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Check that it would work; write nothing.")
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    from hyperqwen_patches.commands.apply import (
        release_reference,
        render_taken_out,
        row_files,
        row_index,
    )
    from hyperqwen_patches.engine.applying import Policy
    from hyperqwen_patches.sources.tree import unapply_tree

    patches = _series(directory, repo)
    keep = 0 if to is None else row_index(patches, to, "--to", row_files(repo)) + 1
    reference = release_reference(repo, patches, Policy())
    if reference.unavailable:
        from hyperqwen_patches.console import err

        err.print(f"note: not compared with the release file by file: {reference.unavailable}")
    result = unapply_tree(
        directory, patches, Policy(), dry_run=dry_run, keep=keep, expected=reference.expected
    )
    render_taken_out(result, patches, keep, json_output, "unapply")


def register(app: typer.Typer) -> None:
    app.command("status", help=STATUS_HELP, epilog=STATUS_EPILOG)(status_command)
    app.command("unapply", help=UNAPPLY_HELP, epilog=UNAPPLY_EPILOG)(unapply_command)
