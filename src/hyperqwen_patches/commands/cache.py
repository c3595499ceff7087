"""``cache``: what the cache holds and where; ``--prune`` what can be made again (pip's ``cache``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from hyperqwen_patches.errors import exit_codes_help

if TYPE_CHECKING:
    import typer

HELP = """Show what the cache holds (per area: entries, size), or prune it.

The cache is $HQP_CACHE, else $XDG_CACHE_HOME/hyperqwen-patches, else ~/.cache/hyperqwen-patches.
Deleting any of it is always safe: an entry is rebuilt when a command needs it (a release is then
downloaded again).

--prune removes the debris of killed runs, and the entries that are made again without the network
(result entries, base commits, fetched bundles) not written for --days days (default 30); releases
and test environments are kept. --dry-run lists what would go. An entry is removed only under its
lock, taken without waiting: what a running command is building is left for a later prune. An area
that is a link is never pruned through.

Examples:

  hyperqwen-patches cache

  hyperqwen-patches cache --prune --days 7 --dry-run
"""

EPILOG = exit_codes_help(
    ok="shown (or pruned)",
    finding="not used (cache checks nothing)",
    usage="usage, or a cache that is not a writable directory",
    git="not used (cache runs no git)",
)


def cache_command(
    prune: Annotated[bool, typer.Option("--prune", help="Remove what can be made again.")] = False,
    days: Annotated[
        int, typer.Option("--days", min=0, metavar="N", help="With --prune: older than N days.")
    ] = 30,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="With --prune: list, remove nothing.")
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    import contextlib
    import os
    import shutil
    import time

    from hyperqwen_patches.cachedir import (
        AREAS,
        cache_dir,
        entry_lock_if_free,
        entry_name,
        prunable,
        tree_size,
    )
    from hyperqwen_patches.console import emit_json, out, table_lines

    root = cache_dir()
    if prune:
        doomed = []
        freed = 0
        for path in prunable(root, older_than_days=days, now=time.time()):
            name = entry_name(path) if path.parent.name != "locks" else None
            # Under the entry's lock, taken without waiting: an entry a running build writes or a
            # running check uses (it holds the lock) is left for a later prune.
            held = entry_lock_if_free(root, name) if name else contextlib.nullcontext(True)
            with held as free:
                if not free or not os.path.lexists(path):
                    continue
                doomed.append(path)
                freed += tree_size(path)[1] if path.is_dir() else path.lstat().st_size
                if not dry_run:
                    if path.is_dir() and not path.is_symlink():
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        path.unlink(missing_ok=True)
        if json_output:
            emit_json({"cache": str(root), "dry_run": dry_run, "removed": [str(p) for p in doomed],
                       "bytes": freed})  # fmt: skip
            return
        for path in doomed:
            out.print(f"{'would remove' if dry_run else 'removed'} {path}", soft_wrap=True)
        verb = "would free" if dry_run else "freed"
        out.print(f"cache --prune: {len(doomed)} entries, {verb} {_size(freed)} in {root}")
        return
    areas: list[dict[str, Any]] = []
    for area, (what, rebuildable) in AREAS.items():
        top = root / area
        if top.exists():
            files, size = tree_size(top)
            areas.append({"area": area, "what": what, "files": files, "bytes": size,
                          "rebuilt_offline": rebuildable})  # fmt: skip
    known = set(AREAS)
    others = sorted(p.name for p in root.iterdir() if p.name not in known) if root.is_dir() else []
    if json_output:
        emit_json({"cache": str(root), "areas": areas, "other": others})
        return
    rows = [(a["area"], str(a["files"]), _size(a["bytes"]), a["what"]) for a in areas]
    cols = [("area", "left"), ("files", "right"), ("size", "right"), ("holds", "left")]
    lines = [f"cache {root}", *table_lines(cols, rows)]
    total = sum(a["bytes"] for a in areas)
    lines.append(f"{_size(total)} in all" + (f"; also: {', '.join(others)}" if others else ""))
    out.print("\n".join(lines), soft_wrap=True)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def register(app: typer.Typer) -> None:
    app.command("cache", help=HELP, epilog=EPILOG)(cache_command)
