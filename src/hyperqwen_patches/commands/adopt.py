"""``adopt SERIES_FILE``: write a manifest for a series kept with shell scripts (series/adopt.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from hyperqwen_patches.errors import exit_codes_help

if TYPE_CHECKING:
    import typer

    from hyperqwen_patches.series.adopt import AdoptPlan

HELP = """Adopt an existing series: write patches/manifest.yaml for it, then render.

SERIES_FILE is a quilt-style series file (one patch per line, relative to the file; `#` comments,
blank lines and `-p1` allowed, and kept: the rendered file writes them back). It may live in a folder
of its own (patches/vllm-0.29/series) beside another release's series: the manifest then names it
(`series:`), PATCHES.md is written beside it, and no other series' file is touched.

Each row's metadata comes from its patch's header block: the last run of `Kind:`, `What:`,
`Upstream:`, `Cut-against:`, `Retires-when:` lines (any case; indented lines continue a value) before
the export marker (`--- exported from SHA (row) ---`, `exported from BRANCH SHA`) or the diff. Prose
elsewhere is ignored, even `kind: fix.` in a sentence. A field without its header line gets a default
and is listed in the row's `unset`, which `check` reports as a warning. Markers naming a branch become
export points (else one named after the pin), so `import` builds the fork right away.

The pin: --pin, else docker/requirements.txt's, else the rows' Cut-against: version. A series in its
own folder may sit beside another build's pin: that file is recorded as not this series'
(`requirements: null`) and never taken as its pin.

Kept guarantees: a SHA256SUMS beside the series (verified now; render rewrites it, check verifies
it); a script beside it running `git apply --check` (every row gets `git_apply: true`, or the
flags that line passes, such as `git_apply: [--ignore-whitespace]`); a comment a row writes above
the knobs it adds to compile_factors' ignore list (copied into runtime_knobs). The series file's
comments (above an entry, after it on its line, after the last) are rendered back where they were.
Patch files are never written.

Refused, naming file and line, with nothing written: a missing file, a file listed twice, a file that
is not a patch, a header value that cannot be read, a duplicate header inside the block, a sum that
already differs, an existing manifest (unless --force).

Examples:

  hyperqwen-patches adopt patches/series --pin 0.31.0

  hyperqwen-patches adopt patches/series --append kvarn/apply-order --modules kvarn/modules

  hyperqwen-patches adopt patches/series --append kvarn/0001-a.patch --append kvarn/0002-b.patch

  hyperqwen-patches adopt patches/vllm-0.29/series --modules patches/vllm-0.29/modules

  hyperqwen-patches adopt patches/series --dry-run --json     # what it would write

Then run `hyperqwen-patches check`, and `hyperqwen-patches import --into ../fork --create`.
"""

EPILOG = exit_codes_help(
    ok="written (or, with --dry-run, planned)",
    usage="the series cannot be adopted as it is (the message names the file and line) or a "
    "manifest exists already",
)


def adopt_command(
    series_file: Annotated[
        Path,
        typer.Argument(metavar="SERIES_FILE", help="The series file (quilt format)."),
    ],
    pin: Annotated[
        str | None,
        typer.Option(
            "--pin",
            metavar="VERSION",
            help="The release the series is cut against; default: docker/requirements.txt's pin "
            "(where it fits the series), else the rows' Cut-against: version.",
        ),
    ] = None,
    append: Annotated[
        list[Path] | None,
        typer.Option(
            "--append",
            metavar="FILE",
            help="Another ordered list of patch files, or a patch file itself (one row; told by "
            "its diff header, not its name), applied after the series (repeatable).",
        ),
    ] = None,
    modules: Annotated[
        list[Path] | None,
        typer.Option(
            "--modules",
            metavar="DIR",
            help="A module directory copied into the tree, as a row after the patches (repeatable).",
        ),
    ] = None,
    into: Annotated[
        Path | None,
        typer.Option(
            "--into",
            metavar="DIR",
            file_okay=False,
            help="The repository to write into (every named file must lie inside it); default: "
            "the current directory.",
        ),
    ] = None,
    package: Annotated[
        str,
        typer.Option("--package", metavar="NAME", help="The upstream package the series patches."),
    ] = "vllm",
    source: Annotated[
        str | None,
        typer.Option(
            "--source",
            metavar="SOURCE",
            help="Record a default pristine source in the manifest (pypi:PKG==VER, git:PATH@REF, "
            "dir:PATH); default: none, so check reads pypi:<package>==<pin>.",
        ),
    ] = None,
    runtime_knob: Annotated[
        list[str] | None,
        typer.Option(
            "--runtime-knob",
            metavar="'NAME: REASON'",
            help="A knob a row keeps off compile_factors' key on purpose, with the reason "
            "(repeatable; written to runtime_knobs, docs/static-checks.md).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing patches/manifest.yaml.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Read everything and report; write nothing.")
    ] = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the plan as JSON (rows, writes, replaced files).")
    ] = False,
) -> None:
    from hyperqwen_patches.errors import UsageError
    from hyperqwen_patches.series.adopt import plan_adopt, write_adopt

    knobs: list[tuple[str, str]] = []
    for spec in runtime_knob or ():
        name, sep, reason = spec.partition(":")
        if not sep or not name.strip() or not reason.strip():
            raise UsageError(
                f"--runtime-knob {spec!r}: expected 'NAME: REASON'",
                hint="--runtime-knob 'VLLM_WATCHDOG_TIMEOUT_S: read by the watchdog thread only'",
            )
        knobs.append((name.strip(), reason.strip()))

    plan = plan_adopt(
        (into or Path.cwd()),
        series_file,
        pin=pin,
        appends=tuple(append or ()),
        modules=tuple(modules or ()),
        package=package,
        source=source,
        runtime_knobs=tuple(knobs),
        force=force,
    )
    written = [] if dry_run else write_adopt(plan)
    if json_output:
        from hyperqwen_patches.console import emit_json

        emit_json(plan.to_json() | {"dry_run": dry_run, "written": written})
        return
    _render(plan, dry_run, written)


def _render(plan: AdoptPlan, dry_run: bool, written: list[str]) -> None:
    from hyperqwen_patches.console import as_typed, err, out, table_lines
    from hyperqwen_patches.series.requirements import REQUIREMENTS

    columns = [
        ("#", "right"),
        ("row", "left"),
        ("kind", "left"),
        ("file", "left"),
        ("from", "left"),
        ("unset", "left"),
    ]
    rows = [
        (
            str(i),
            row.name,
            row.kind,
            row.patch if row.patch is not None else f"{row.files}/",
            row.origin,
            ", ".join(row.unset) or "-",
        )
        for i, row in enumerate(plan.rows, 1)
    ]
    out.print("\n".join([f"adopt → {plan.root}", *table_lines(columns, rows)]), soft_wrap=True)
    unset = sum(1 for r in plan.rows if r.unset)
    verb = "would write" if dry_run else "wrote"
    replaced = f" (replacing {', '.join(plan.replaced)})" if plan.replaced else ""
    shown = sorted(plan.files) if dry_run else written
    err.print(
        f"adopt: {len(plan.rows)} rows, pin {plan.pin} (from {plan.pin_from}), paths: {plan.paths}; "
        f"{verb} {', '.join(shown) or 'nothing new'}{replaced}",
    )
    points = ", ".join(f"{name} (branch {branch})" for name, branch, _ in plan.export_points)
    err.print(f"adopt: export point{'s' if len(plan.export_points) > 1 else ''} {points}")
    kept = [
        f"{plan.checksums} (render rewrites it, check verifies it)" if plan.checksums else "",
        f"git_apply on the series' rows ({plan.git_apply_from} runs git apply --check"
        f"{' ' + ' '.join(plan.git_apply_flags) if plan.git_apply_flags else ''})"
        if plan.git_apply_from
        else "",
        f"{plan.series} as the apply order (its folder's own: PATCHES.md beside it, other "
        "series untouched)"
        if plan.series != "patches/series"
        else "",
        f"{REQUIREMENTS} aside: it does not state this pin (requirements: null)"
        if plan.requirements is None
        else "",
    ]
    for line in kept:
        if line:
            err.print(f"adopt: kept {line}", soft_wrap=True)
    if plan.git_apply_unstated:
        err.print(
            f"adopt: warning: {plan.git_apply_from} also passes {' '.join(plan.git_apply_unstated)}"
            " to git apply, which a row may not state (docs/manifest.md): checked without it",
            soft_wrap=True,
        )
    if unset:
        err.print(f"adopt: {unset} rows have unset fields (no header line); check lists them")
    if not dry_run:
        err.print(
            as_typed("next: hyperqwen-patches check")
            + (f" --repo {plan.root}" if plan.root != Path.cwd().resolve() else "")
        )


def register(app: typer.Typer) -> None:
    app.command("adopt", help=HELP, epilog=EPILOG)(adopt_command)
