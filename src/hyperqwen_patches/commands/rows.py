"""``edit ROW``, ``refresh`` and ``new NAME --after ROW``: change or add a row through the fork in
two commands (stgit's edit/refresh, quilt's new)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from hyperqwen_patches.errors import exit_codes_help

if TYPE_CHECKING:
    import typer

FORK_HELP = (
    "The fork repository; default: the one the tool keeps in .hqp/fork (built from the series by "
    "import when needed; .hqp is ignored by git)."
)
REPO_HELP = "The series repository; default: found upward from the current directory."

EDIT_HELP = """Open a work tree of the fork at ROW's commit, to change the row there.

Without --fork the fork is the one the tool keeps for this repository (.hqp/fork), built from the
series by `import` when it is missing or behind. The work tree is .hqp/edit/ROW; change files in it
(commit there or not, as you like), then run `refresh`. The path is the last line printed, so

  cd "$(hyperqwen-patches edit ROW | tail -1)"

works in scripts. One row is edited at a time; editing the same row again reopens its work tree,
editing another is refused. `edit --abort` drops the open edit (its work tree and its changes).
"""

REFRESH_HELP = """Fold the open edit into its row, re-apply the later rows, export.

The work tree's files become the row's new content: the row's commit is written anew (same message
and trailers, same author and date; the committer pinned as `import` pins it, so `import` of the
exported series reproduces every SHA), each later row is re-applied on top at fuzz 0, the branch is
moved, and export writes the patch files, the manifest's SHAs, series, PATCHES.md and a shipped
patches/fork.bundle. If a later row no longer applies, nothing is changed (the work tree and its
index included) and the row, file and hunk are named. All or nothing: the branch moves only with the
files; a refresh cut short (killed) is undone by the next row command. Uncommitted changes to other
rows' patch files are refused, named, never overwritten. The work tree's files are read byte for
byte: the fork's own filters (filter.*, text, ident) do not run. --close removes the work tree.
"""

REFRESH_EPILOG = exit_codes_help(
    ok="refreshed (or nothing to refresh)",
    finding="a later row does not apply (nothing changed)",
    usage="no edit open, bad input",
)
EDIT_EPILOG = exit_codes_help(
    ok="the work tree is open (its path is the last line), or --abort dropped it",
    usage="no such row, another row's edit is open, another row command is running",
)
NEW_EPILOG = exit_codes_help(ok="the row is added and open for editing (its path is the last line)")


def edit_command(
    row: Annotated[
        str | None,
        typer.Argument(
            metavar="ROW", help="The row to edit: its name, 1-based number or patch file name."
        ),
    ] = None,
    abort: Annotated[
        bool,
        typer.Option(
            "--abort",
            help="Drop the open edit: remove its work tree and its changes; the fork and the "
            "series stay as the last refresh left them.",
        ),
    ] = False,
    fork: Annotated[Path | None, typer.Option("--fork", help=FORK_HELP, file_okay=False)] = None,
    repo: Annotated[Path | None, typer.Option("--repo", help=REPO_HELP, file_okay=False)] = None,
) -> None:
    from hyperqwen_patches.console import err, out
    from hyperqwen_patches.errors import UsageError
    from hyperqwen_patches.fork.rowedit import close_edit, start_edit
    from hyperqwen_patches.series.manifest import load_manifest
    from hyperqwen_patches.series.reporoot import resolve_repo

    manifest = load_manifest(resolve_repo(repo))
    if abort:
        if row is not None:
            raise UsageError("edit --abort takes no ROW: it drops the one open edit")
        dropped = close_edit(manifest, fork=fork)
        out.print(
            f"edit: dropped the edit of row {dropped}" if dropped else "edit: no edit is open"
        )
        return
    if row is None:
        raise UsageError("edit needs ROW (or --abort)", hint="hyperqwen-patches edit --help")
    result = start_edit(manifest, row, fork=fork)
    if result.imported:
        err.print(f"edit: built the fork from the series in {result.fork}")
    err.print(
        f"edit: row {result.row} ({result.commit[:12]}) is checked out below; change it there, then run "
        "refresh"
    )
    out.print(str(result.worktree))


def refresh_command(
    fork: Annotated[Path | None, typer.Option("--fork", help=FORK_HELP, file_okay=False)] = None,
    repo: Annotated[Path | None, typer.Option("--repo", help=REPO_HELP, file_okay=False)] = None,
    close: Annotated[
        bool, typer.Option("--close", help="Remove the edit's work tree after refreshing.")
    ] = False,
) -> None:
    from hyperqwen_patches.console import err, out
    from hyperqwen_patches.fork.rowedit import close_edit, refresh
    from hyperqwen_patches.series.manifest import load_manifest
    from hyperqwen_patches.series.reporoot import resolve_repo

    manifest = load_manifest(resolve_repo(repo))
    result = refresh(manifest, fork=fork)
    if result.recovered:
        err.print(f"refresh: {result.recovered}")
    if result.new is None:
        out.print(f"refresh: row {result.row} is unchanged in its work tree; nothing to do")
    else:
        out.print(f"refresh: row {result.row} {result.old[:12]} -> {result.new[:12]}")
        for name, commit in result.rebased:
            out.print(f"  re-applied {name} -> {commit[:12]}")
        shown = ", ".join(result.written) or "nothing (already up to date)"
        out.print(f"  exported: {shown}", soft_wrap=True)
        if result.removed:
            out.print(f"  removed: {', '.join(result.removed)}", soft_wrap=True)
    if close:
        close_edit(manifest, fork=fork)
        out.print(f"refresh: closed the edit of row {result.row}")


NEW_HELP = """Add a row after ROW and open it for editing (quilt's `new`, placed where you say).

An empty commit for the row goes into the fork right after ROW's (the later rows keep their content,
on the new parent), its entry goes into patches/manifest.yaml right after ROW's (kind, what,
patches/NAME.patch, cut against the pin, retires_when TODO: check flags it until you describe it),
and an edit of it is opened as `edit` opens one. Change the work tree, then `refresh`.

  cd "$(hyperqwen-patches new kv-fix --after kvarn-modules --what 'Fix the KV block size' | tail -1)"
"""


def new_command(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The new row's name.")],
    after: Annotated[str, typer.Option("--after", metavar="ROW", help="The row it follows.")],
    what: Annotated[
        str, typer.Option("--what", help="One line: what the row does (the ledger's column).")
    ] = "TODO: describe",
    kind: Annotated[
        str, typer.Option("--kind", help="backport, fix, feature, local or own.")
    ] = "local",
    fork: Annotated[Path | None, typer.Option("--fork", help=FORK_HELP, file_okay=False)] = None,
    repo: Annotated[Path | None, typer.Option("--repo", help=REPO_HELP, file_okay=False)] = None,
) -> None:
    from hyperqwen_patches.console import err, out
    from hyperqwen_patches.fork.rowedit import new_row
    from hyperqwen_patches.series.manifest import load_manifest
    from hyperqwen_patches.series.reporoot import resolve_repo

    manifest = load_manifest(resolve_repo(repo))
    result = new_row(manifest, name, after=after, what=what, kind=kind, fork=fork)
    err.print(
        f"new: row {name} ({result.commit[:12]}) added after {after}; change it below, then run "
        "refresh"
    )
    out.print(str(result.worktree))


ROWOP_EPILOG = exit_codes_help(
    ok="done: fork, manifest, patch files, series, PATCHES.md and bundle updated together",
    finding="a later row no longer applies in its new place (nothing changed)",
    usage="no such row, an edit is open, another row command is running, bad input",
)
RENAME_EPILOG = exit_codes_help(
    ok="renamed: fork, manifest, patch file, series, PATCHES.md and bundle updated together",
    usage="no such row, NEW taken or not a row name, an edit is open, another row command is "
    "running",
)
ROW_REF_HELP = "A row: its name, its 1-based number in the manifest, or its patch file name."

DROP_HELP = """Take ROW out of the series (quilt's `delete`), through the fork.

Its commit leaves the fork's branch, every later row is re-applied on top at fuzz 0, its entry
leaves patches/manifest.yaml and its patch file (or module files) the repository; numbered patch
files (0003-x.patch) are renumbered to the new order; series, PATCHES.md and a shipped bundle are
written anew. With --retired-by VERSION the manifest records it under `retirements:` (the release
that carries it). If a later row no longer applies without it, nothing is changed.

  hyperqwen-patches drop old-fix --retired-by 0.30.0
"""

MOVE_HELP = """Move ROW right after (--after) or before (--before) another row of its export point.

The fork's commits are put in the new order and re-applied at fuzz 0 from the first that moved; the
manifest's entries follow (comments kept), numbered patch files are renumbered, and everything is
exported together. A row that no longer applies in its new place stops it with nothing written.

  hyperqwen-patches move 3 --after 1
"""

RENAME_HELP = """Rename row OLD to NEW: its manifest entry, its commit's Hqp-Row trailer (the later
commits re-parented), and its patch file when the file is named after the row (0002-old.patch
becomes 0002-new.patch). Everything is exported together; `import` reproduces every SHA.
"""


def drop_command(
    row: Annotated[str, typer.Argument(metavar="ROW", help=ROW_REF_HELP)],
    retired_by: Annotated[
        str | None,
        typer.Option(
            "--retired-by", metavar="VERSION",
            help="Record the drop as a retirement: the release that carries the row.",
        ),
    ] = None,
    fork: Annotated[Path | None, typer.Option("--fork", help=FORK_HELP, file_okay=False)] = None,
    repo: Annotated[Path | None, typer.Option("--repo", help=REPO_HELP, file_okay=False)] = None,
) -> None:  # fmt: skip
    from hyperqwen_patches.fork.rowops import drop_row
    from hyperqwen_patches.series.manifest import load_manifest
    from hyperqwen_patches.series.reporoot import resolve_repo

    manifest = load_manifest(resolve_repo(repo))
    _show(drop_row(manifest, row, retired_by=retired_by, fork=fork))


def move_command(
    row: Annotated[str, typer.Argument(metavar="ROW", help=ROW_REF_HELP)],
    after: Annotated[
        str | None, typer.Option("--after", metavar="OTHER", help="Put ROW right after OTHER.")
    ] = None,
    before: Annotated[
        str | None, typer.Option("--before", metavar="OTHER", help="Put ROW right before OTHER.")
    ] = None,
    fork: Annotated[Path | None, typer.Option("--fork", help=FORK_HELP, file_okay=False)] = None,
    repo: Annotated[Path | None, typer.Option("--repo", help=REPO_HELP, file_okay=False)] = None,
) -> None:
    from hyperqwen_patches.fork.rowops import move_row
    from hyperqwen_patches.series.manifest import load_manifest
    from hyperqwen_patches.series.reporoot import resolve_repo

    manifest = load_manifest(resolve_repo(repo))
    _show(move_row(manifest, row, after=after, before=before, fork=fork))


def rename_command(
    old: Annotated[str, typer.Argument(metavar="OLD", help=ROW_REF_HELP)],
    new: Annotated[str, typer.Argument(metavar="NEW", help="The row's new name.")],
    fork: Annotated[Path | None, typer.Option("--fork", help=FORK_HELP, file_okay=False)] = None,
    repo: Annotated[Path | None, typer.Option("--repo", help=REPO_HELP, file_okay=False)] = None,
) -> None:
    from hyperqwen_patches.fork.rowops import rename_row
    from hyperqwen_patches.series.manifest import load_manifest
    from hyperqwen_patches.series.reporoot import resolve_repo

    manifest = load_manifest(resolve_repo(repo))
    _show(rename_row(manifest, old, new, fork=fork))


def _show(result) -> None:  # type: ignore[no-untyped-def]
    from hyperqwen_patches.console import err, out

    if result.recovered:
        err.print(f"{result.op}: {result.recovered}")
    out.print(f"{result.op}: row {result.row} {result.detail}")
    for name, commit in result.rebased:
        out.print(f"  re-applied {name} -> {commit[:12]}")
    out.print(f"  exported: {', '.join(result.written) or 'nothing'}", soft_wrap=True)
    if result.removed:
        out.print(f"  removed: {', '.join(result.removed)}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("edit", help=EDIT_HELP, epilog=EDIT_EPILOG)(edit_command)
    app.command("refresh", help=REFRESH_HELP, epilog=REFRESH_EPILOG)(refresh_command)
    app.command("new", help=NEW_HELP, epilog=NEW_EPILOG)(new_command)
    app.command("drop", help=DROP_HELP, epilog=ROWOP_EPILOG)(drop_command)
    app.command("move", help=MOVE_HELP, epilog=ROWOP_EPILOG)(move_command)
    app.command("rename", help=RENAME_HELP, epilog=RENAME_EPILOG)(rename_command)
