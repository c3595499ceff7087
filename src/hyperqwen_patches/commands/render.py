"""``render``: write PATCHES.md and patches/series from the manifest (``--check``: write nothing)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from hyperqwen_patches.errors import exit_codes_help

if TYPE_CHECKING:
    import typer

    from hyperqwen_patches.series.manifestmodel import Manifest


HELP = """Write PATCHES.md (the ledger) and patches/series (the apply order) from patches/manifest.yaml.

With --check nothing is written: the command prints a unified diff of what it would change and fails.

Examples:

  hyperqwen-patches render

  hyperqwen-patches render --check      # CI: is the ledger up to date?

  hyperqwen-patches render --check --json | jq -r '.differ[]'
"""

EPILOG = exit_codes_help(
    ok="written (or, with --check, already up to date)",
    finding="--check found a difference",
    usage="usage or an invalid manifest (every problem listed with file, line and field)",
)

REPO_HELP = (
    "The repository (the directory holding patches/manifest.yaml); default: found upward from the "
    "current directory."
)


def render_command(
    repo: Annotated[Path | None, typer.Option("--repo", help=REPO_HELP, file_okay=False)] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Write nothing; print a unified diff of what would change and exit 1."
        ),
    ] = False,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json", help="Print what was written (or, with --check, what differs) as JSON."
        ),
    ] = False,
) -> None:
    from hyperqwen_patches.console import emit_json, err, out
    from hyperqwen_patches.errors import FindingError
    from hyperqwen_patches.series import render
    from hyperqwen_patches.series.manifest import load_manifest
    from hyperqwen_patches.series.reporoot import resolve_repo

    manifest = load_manifest(resolve_repo(repo))
    if check:
        drifts = render.drift(manifest)
        if json_output:
            emit_json(
                {
                    "ok": not drifts,
                    "check": True,
                    "differ": [d.path for d in drifts],
                    "diffs": {d.path: d.diff for d in drifts},
                    "written": [],
                }
            )
        else:
            for d in drifts:
                out.file.write(d.diff)
            out.file.flush()
        if drifts:
            names = ", ".join(d.path for d in drifts)
            raise FindingError(
                f"render --check: {names} differ from what render writes",
                hint="run: hyperqwen-patches render",
            )
        err.print(f"render --check: {_outputs(manifest)} are up to date", soft_wrap=True)
        return
    changed = render.write(manifest)
    if json_output:
        emit_json({"ok": True, "check": False, "differ": [], "diffs": {}, "written": list(changed)})
    if changed:
        err.print(f"render: wrote {', '.join(changed)}", soft_wrap=True)
    else:
        err.print(f"render: {_outputs(manifest)} were already up to date", soft_wrap=True)


def _outputs(manifest: Manifest) -> str:
    """The files render writes for this manifest, as a person reads them in one line."""
    from hyperqwen_patches.series.render import render

    names = sorted(render(manifest))
    return ", ".join(names[:-1]) + " and " + names[-1]


def register(app: typer.Typer) -> None:
    app.command("render", help=HELP, epilog=EPILOG)(render_command)
