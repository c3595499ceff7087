"""The package's stages, lowest first, and the one rule between them: a module imports only from its
own stage, from a lower stage, or from the shared ground.

``tests/test_layers.py`` walks every import in the package (top level, inside functions and under
``TYPE_CHECKING`` alike) and fails on one that runs upward, so this table stays true. The check pipeline
is composed above every stage it runs (``checklist.py`` imports each check), so those dependencies are
imports the test follows too; no module names another by string.
"""

from __future__ import annotations

# Modules every stage may import; they import nothing of the package but each other.
SHARED: tuple[str, ...] = (
    "errors",
    "console",
    "cachedir",
    "gitrun",
    "resultcache",
    "atomicfile",
    "layers",
    "records",
    "inputfile",
    "lazypattern",
    "display",
    "flocks",
)

# Lowest first. Data flows the same way: a release and the series are read (sources, series), the
# engine applies them, the fork is compared against them, and the commands render the results.
STAGES: tuple[str, ...] = (
    "engine",  # pure functions on bytes: parse, place, apply, reverse
    "sources",  # pristine releases, wheel members, the base commit, a directory tree on disk
    "series",  # the manifest, rows as engine patches, PATCHES.md/series rendering, range-diff
    "checks",  # the check context, the core invariants, the pipeline
    "statics",  # static checks of what the rows add
    "fork",  # git reads of a fork, import, export, replay identity, the bundle cache
    "port",  # triage against another release, the rebase, retirements, the report
    "checklist",  # the check pipeline, composed from the checks of every stage above
    "commands",  # the Typer commands: parse options, call one function, render
    "cli",  # the entry point
)
