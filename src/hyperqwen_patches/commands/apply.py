"""``apply DIR``: apply patches to a directory, all or nothing; ``--check-applied`` verifies instead."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hyperqwen_patches.errors import FindingError, UsageError, exit_codes_help
from hyperqwen_patches.records import record

TYPE_CHECKING = False  # not typing's: a plain run never imports typing (a few ms of every start)

if TYPE_CHECKING:
    from typing import Annotated, Any

    import typer

    from hyperqwen_patches.engine.applying import (
        FileResult,
        HunkResult,
        Policy,
        PresenceResult,
        SeriesResult,
    )
    from hyperqwen_patches.engine.expected import Divergence
    from hyperqwen_patches.engine.patchmodel import Patch
    from hyperqwen_patches.engine.placement import NearMiss
    from hyperqwen_patches.series.expected import Reference
    from hyperqwen_patches.sources.tree import TreeApplyResult, TreeCheckResult


HELP = """Apply patches to DIR at fuzz 0, all or nothing.

Every hunk of every patch is placed in memory first, exactly as GNU patch 2.7.6 places it with
`-p1 --fuzz 0 --forward` (offsets reported per hunk, the same lines GNU prints). Files are written only
when all of them applied, each through a temporary file and a rename; on any failure DIR is left byte
for byte unchanged.

One run writes to DIR at a time: a second waits for the first (HQP_LOCK_WAIT seconds, default 10),
then reads what it left. Every write goes through directories opened from DIR down with no symbolic
link followed; a killed run leaves a journal, signed with a key in the user's cache, that the next run
puts DIR back from (and refuses, writing nothing, when it is not ours).

Applying twice is safe. A DIR that carries the whole series (layered rows included: a later row may
edit lines an earlier one added) is left alone, exit 0; one that carries rows 1..k gets rows k+1..n.
Any other state (a middle row missing under a later one, a row partly there) is refused with the rows
named, exit 1, nothing written. `--check-applied` answers the same question without writing; on a
manifest's series it also compares every file the series touches with the release plus the series
and names a file that "carries an earlier or foreign change".

`--upto ROW` (a row name, its 1-based number or its patch file) brings DIR to rows 1..ROW: it applies
up to ROW (quilt's push ROW), or, on a DIR carrying later rows, takes them out last first, all or
nothing (quilt's pop ROW; `--json` then prints unapply's document). `apply` alone brings them back.

A deletion whose file holds other content than the patch deletes fails (GNU patch exits 1 too).

Examples:

  hyperqwen-patches apply site-packages --patch patches/0001-fix.patch --patch patches/0002-knob.patch

  hyperqwen-patches apply site-packages --patch p.patch --dry-run --json

  hyperqwen-patches apply site-packages --patch p.patch --check-applied

  hyperqwen-patches apply site-packages --upto 3
"""

EPILOG = exit_codes_help(
    ok="every patch applied (or was already applied; with --check-applied: DIR carries every patch)",
    finding="a hunk did not apply, nothing was written (with --check-applied: a patch is missing, "
    "or a touched file carries an earlier or foreign change; with --upto: a later row could not be "
    "taken out, nothing written)",
    usage="bad input: an unreadable or malformed patch, an --upto ROW not in the series, a path escaping DIR, a DIR that does not hold "
    "the patched files (such as a venv root; where its parent or a subdirectory does, the message "
    "names it), a bad option; a write journal in DIR that this tool did "
    "not sign (refused, nothing written); another run holding DIR's lock longer than HQP_LOCK_WAIT "
    "seconds (default 10)",
    interrupted="interrupted (Ctrl-C): DIR was put back, or every file was written (the message "
    "says which)",
    terminated="terminated (SIGTERM): the same as for Ctrl-C",
)


def default_series(start: Path, *, repo: Path | None = None) -> list[Patch]:
    """The patches ``apply`` uses when no ``--patch`` is given: the manifest's series.

    The rows of ``patches/manifest.yaml`` in ``repo``, else in the repository at or above ``start``,
    built by ``series/rows.py`` (patch rows parsed, module-file rows as creations; skipped rows left
    out).
    """
    from hyperqwen_patches.series import rows as series
    from hyperqwen_patches.series.reporoot import find_repo_root, resolve_repo

    if repo is not None:
        return series.default_series(resolve_repo(repo))
    root = find_repo_root(start)
    if root is None:
        raise UsageError(
            "no --patch given and no manifest found",
            hint="pass --repo with the repository, or the patches with --patch FILE (repeatable)",
        )
    return series.default_series(root)


def release_reference(repo: Path | None, patches: Sequence[Patch], policy: Policy) -> Reference:
    """What DIR is compared with file by file: the manifest's release plus the series
    (``series/expected.py``, cached); none, with the reason, when there is no manifest."""
    from hyperqwen_patches.series.expected import Reference, reference_for
    from hyperqwen_patches.series.reporoot import find_repo_root, resolve_repo

    root = resolve_repo(repo) if repo is not None else find_repo_root(Path.cwd())
    if root is None:
        return Reference(None, "no manifest names the release")
    return reference_for(root, patches, policy)


def row_files(repo: Path | None) -> dict[str, str]:
    """Row name -> its patch file (repository-relative), from the manifest; {} without one."""
    from hyperqwen_patches.series.manifest import load_manifest
    from hyperqwen_patches.series.reporoot import find_repo_root, resolve_repo

    root = resolve_repo(repo) if repo is not None else find_repo_root(Path.cwd())
    if root is None:
        return {}
    return {r.name: r.patch for r in load_manifest(root).rows if r.patch is not None}


def row_index(
    patches: Sequence[Patch], row: str, option: str, files: dict[str, str] | None = None
) -> int:
    """The 0-based position of ``row`` in the series: a row name, a 1-based number, or a patch file
    (its path as the manifest or --patch gives it, or only its file name)."""
    names = [p.name for p in patches]
    if row in names:
        return names.index(row)
    if row.isdigit():
        number = int(row)
        if 1 <= number <= len(names):
            return number - 1
        raise UsageError(f"{option} {row}: the series has rows 1 to {len(names)}")
    files = files or {}
    wanted = Path(row)
    for i, name in enumerate(names):
        path = Path(files.get(name, name))
        if path == wanted or (len(wanted.parts) == 1 and path.name == wanted.name):
            return i
    shown = ", ".join(names[:8]) + (" ..." if len(names) > 8 else "")
    raise UsageError(
        f"{option} {row!r}: no such row in the series ({shown})",
        hint="name a row, its 1-based number, or its patch file",
    )


def up_to(patches: list[Patch], row: str, files: dict[str, str] | None = None) -> list[Patch]:
    """The series up to and including ``row`` (see ``row_index``)."""
    return patches[: row_index(patches, row, "--upto", files) + 1]


def refuse_misplaced(directory: Path, patches: list[Patch]) -> None:
    """Refuse a DIR the patches' paths do not fit, naming the directory beside it that they do fit
    (its parent or a subdirectory: package-relative patches given a release root, root-relative ones
    given the package directory). Never applied there silently: which directory a run writes to is
    the user's to say."""
    from hyperqwen_patches.sources.tree import misplaced

    wrong = misplaced(directory, patches)
    if wrong is None:
        return
    if wrong.instead is not None:
        raise UsageError(
            f"{directory} does not look like the directory the patches apply in: {wrong.reason}; "
            f"their paths fit {wrong.instead} ({wrong.found} of the {wrong.edited} files they edit "
            "are there)",
            hint=f"give {wrong.instead} as DIR",
        )
    raise UsageError(
        f"{directory} does not look like the directory the patches apply in: {wrong.reason}",
        hint="give the directory the patch paths are relative to: site-packages (or a release's "
        "root) for paths like vllm/v1/..., the package directory (site-packages/vllm) for paths "
        "like v1/...",
    )


def crlf_notes(patches: Sequence[Patch]) -> None:
    """One note on stderr per file whose hunks were read with their CRs stripped (engine/patchscan.py's
    ``strips_cr``): what GNU patch says as "Stripping trailing CRs", said where it is."""
    from hyperqwen_patches.console import err, show
    from hyperqwen_patches.engine.patchscan import CRLF_NOTE

    for patch in patches:
        for fp in patch.files:
            if fp.crlf_stripped:
                err.print(f"note: {patch.name}:{fp.header_line}: {show(fp.path)}: {CRLF_NOTE}")


def load_patch(path: Path, *, strip: int = 1) -> Patch:
    """Read and parse one patch file; an unreadable file is a usage error naming it."""
    from hyperqwen_patches.engine.patchscan import parse_patch
    from hyperqwen_patches.inputfile import read_input

    try:
        data = read_input(path, "patch file")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except FileNotFoundError:
        raise UsageError(f"patch file {path} does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"patch file {path} is a directory") from None
    except OSError as exc:
        raise UsageError(f"cannot read patch file {path}: {exc.strerror}") from None
    return parse_patch(data, name=str(path), strip=strip)


def apply_command(
    directory: Annotated[
        Path,
        typer.Argument(
            metavar="DIR",
            help="The directory to patch (holds the patched package, e.g. site-packages).",
        ),
    ],
    patch: Annotated[
        list[Path] | None,
        typer.Option(
            "--patch",
            metavar="FILE",
            help="A patch file to apply (repeatable; applied in the order given).",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Place every hunk and report, but write nothing.")
    ] = False,
    json_output: Annotated[
        bool,
        typer.Option("--json", help="Print the result as JSON (per patch, file and hunk; totals)."),
    ] = False,
    max_offset: Annotated[
        int | None,
        typer.Option(
            "--max-offset",
            min=0,
            metavar="N",
            help="Fail a hunk whose reported offset exceeds N lines.",
        ),
    ] = None,
    exact: Annotated[
        bool,
        typer.Option(
            "--exact", help="No offsets at all: every hunk must match at its stated line."
        ),
    ] = False,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="A hunk whose context also matches elsewhere in its search range is an error, not a report.",
        ),
    ] = False,
    repo: Annotated[
        Path | None,
        typer.Option(
            "--repo",
            file_okay=False,
            help="The repository whose series to apply (without --patch); default: found upward "
            "from the current directory.",
        ),
    ] = None,
    upto: Annotated[
        str | None,
        typer.Option(
            "--upto",
            metavar="ROW",
            help="Bring DIR to the series up to and including ROW (a row name, its 1-based number "
            "or its patch file): rows up to ROW are applied (quilt's push ROW); rows after it that "
            "DIR carries are taken out, last first, all or nothing (quilt's pop ROW).",
        ),
    ] = None,
    check_applied: Annotated[
        bool,
        typer.Option(
            "--check-applied",
            help="Write nothing; verify DIR already carries every patch (each reverse-applies).",
        ),
    ] = False,
) -> None:
    """Two commands behind one name: ``--check-applied`` verifies DIR, anything else writes it."""
    from hyperqwen_patches.engine.applying import Policy

    selected = select_series(directory, patch, repo, upto)
    policy = Policy(max_offset=max_offset, exact=exact, ambiguity="error" if strict else "report")
    if check_applied:
        check_applied_run(directory, selected, policy, repo, json_output)
    else:
        apply_run(directory, selected, policy, dry_run, json_output)


@record(frozen=True)
class Selected:
    """The patches a run works with: the whole series and the part of it up to ``--upto``."""

    series: list[Patch]
    patches: list[Patch]  # the series, or its rows up to --upto
    from_manifest: bool  # no --patch: the manifest's series (a release to compare with)


def select_series(
    directory: Path, patch: list[Path] | None, repo: Path | None, upto: str | None
) -> Selected:
    """--patch files, else the manifest's series; cut at --upto; refused when DIR does not fit."""
    if patch and repo is not None:
        raise UsageError("give --patch FILE or --repo DIR, not both")
    series = [load_patch(p) for p in patch] if patch else default_series(Path.cwd(), repo=repo)
    patches = series
    if upto is not None:
        patches = up_to(series, upto, {} if patch else row_files(repo))
    refuse_misplaced(directory, patches)
    crlf_notes(patches)
    return Selected(series, patches, from_manifest=not patch)


def check_applied_run(
    directory: Path, selected: Selected, policy: Policy, repo: Path | None, json_output: bool
) -> None:
    """``apply --check-applied``: whether DIR carries every patch, written nowhere."""
    from hyperqwen_patches.sources.tree import check_applied as check_tree

    patches = selected.patches
    # A manifest's series is compared with its release file by file; --patch files name none.
    reference = release_reference(repo, patches, policy) if selected.from_manifest else None
    expected = reference.expected if reference is not None else None
    checked = check_tree(directory, patches, policy, expected)
    if json_output:
        from hyperqwen_patches.console import emit_json

        emit_json(check_payload(checked))
    else:
        _render_check(checked)
    if reference is not None and reference.unavailable:
        from hyperqwen_patches.console import err

        err.print(f"note: not compared with the release file by file: {reference.unavailable}")
    missing = [p.name for p in checked.patches if p.status != "present"]
    if missing:
        raise FindingError(
            f"{directory} does not carry {len(missing)} of {len(checked.patches)} patches: "
            + ", ".join(missing)
        )
    if checked.divergent:
        from hyperqwen_patches.engine.expected import describe

        raise FindingError(
            f"{directory} carries every patch, and something else: " + describe(checked.divergent),
            hint="restore the pristine files (or re-install the package), then apply",
        )


def apply_run(
    directory: Path, selected: Selected, policy: Policy, dry_run: bool, json_output: bool
) -> None:
    """``apply``: bring DIR to the selected rows, all or nothing (rows after --upto taken out)."""
    from hyperqwen_patches.sources.tree import apply_to_tree

    series, patches = selected.series, selected.patches
    if len(patches) < len(series) and _pop(
        directory, series, len(patches), policy, dry_run, json_output
    ):
        return
    result = apply_to_tree(directory, patches, policy, dry_run=dry_run)
    if result.recovered is not None:
        from hyperqwen_patches.console import err

        done = result.recovered
        err.print(
            f"apply: {directory} held an interrupted write; undone first "
            f"({len(done.restored)} files put back, {len(done.removed)} created files removed)"
        )
    if json_output:
        from hyperqwen_patches.console import emit_json

        emit_json(apply_payload(result, patches))
    else:
        _render_apply(result, patches)
    if result.refused:
        raise FindingError(
            f"{directory} is in a state no run of this series leaves: {result.refused}; "
            "nothing was written",
            hint="restore the pristine files (or re-install the package) and apply again",
        )
    if not result.ok:
        failed = [p.name for p in result.series.patches if not p.ok]
        raise FindingError(
            f"{len(failed)} of {len(result.series.patches)} patches did not apply "
            f"({', '.join(failed)}); nothing was written to {directory}"
        )


def _pop(
    directory: Path,
    series: list[Patch],
    keep: int,
    policy: Policy,
    dry_run: bool,
    json_output: bool,
) -> bool:
    """``--upto`` on a DIR that carries rows after it: take them out, last first (quilt's pop ROW).

    True when DIR carried rows after ``keep`` (they were taken out, or the reason why not raised);
    False when it carries ``keep`` rows or fewer, and the rows up to ROW are to be applied instead."""
    from hyperqwen_patches.sources.tree import unapply_tree

    result = unapply_tree(directory, series, policy, dry_run=dry_run, keep=keep)
    if result.refused is None and result.carried <= keep:
        return False
    render_taken_out(result, series, keep, json_output, "apply --upto")
    return True


def render_taken_out(
    result: TreeApplyResult, series: Sequence[Patch], keep: int, json_output: bool, command: str
) -> None:
    """What ``unapply`` and ``apply --upto`` print after taking rows out (or refusing to)."""
    directory = result.root
    ok = result.ok and result.refused is None
    taken = [series[i].name for i in reversed(range(keep, result.carried))] if ok else []
    if json_output:
        from hyperqwen_patches.console import emit_json

        emit_json(
            {
                "directory": str(directory),
                "dry_run": result.dry_run,
                "ok": ok,
                "refused": result.refused,
                "taken_out": taken,
                "kept": keep,
                "divergent": divergent_records(result.divergent),
                "written": [_text(p) for p in result.written],
            }
        )
    if result.divergent:
        raise FindingError(
            f"{directory} carries rows 1-{result.carried} and something else; taking them out "
            f"would not give back {'the release' if keep == 0 else f'rows 1-{keep}'}: "
            f"{result.refused}; nothing was written",
            hint="restore the pristine files (or re-install the package), then apply",
        )
    if result.refused:
        raise FindingError(
            f"{directory} is in a state no run of this series leaves: {result.refused}; "
            "nothing was written"
        )
    if not result.ok:
        failed = [p.name for p in result.series.patches if not p.ok]
        raise FindingError(f"the reverse of {', '.join(failed)} did not apply; nothing was written")
    if not json_output:
        from hyperqwen_patches.console import out

        verb = "would take" if result.dry_run else "took"
        count = len(result.series.changes) if result.dry_run else len(result.written)
        rows = f"{len(taken)} rows" if len(taken) != 1 else "1 row"
        left = "row 1 stays" if keep == 1 else f"rows 1-{keep} stay" if keep else "none stays"
        out.print(
            f"ok: {command}: {verb} {rows} out of {directory}, last first "
            f"({', '.join(taken[:6])}{' ...' if len(taken) > 6 else ''}); {left} "
            f"({'would change' if result.dry_run else 'changed'} {count} files)"
        )


def register(app: typer.Typer) -> None:
    app.command("apply", help=HELP, epilog=EPILOG)(apply_command)


# --- records (the same ones the table is built from) -------------------------------------------------


def _text(data: bytes | None) -> str | None:
    from hyperqwen_patches.console import show

    return None if data is None else show(data)


def _near_miss_record(miss: NearMiss | None) -> dict[str, Any] | None:
    if miss is None:
        return None
    return {
        "line": miss.line,
        "matched": miss.matched,
        "total": miss.total,
        "differences": [
            {"line": d.line, "expected": _text(d.expected), "actual": _text(d.actual)}
            for d in miss.differences
        ],
        "aligned_line": miss.aligned_line,
        "aligned": _text(miss.aligned),
    }


PatchLines = dict[tuple[str, bytes, int], int]


def _patch_lines(patches: Sequence[Patch]) -> PatchLines:
    """(patch, file, hunk number) -> the hunk's ``@@`` line in its patch file, for messages."""
    return {
        (patch.name, fp.path, h.number): h.patch_line
        for patch in patches
        for fp in patch.files
        for h in fp.hunks
    }


def _hunk_record(hunk: HunkResult, patch_line: int | None = None) -> dict[str, Any]:
    return {
        "patch_line": patch_line,
        "number": hunk.number,
        "stated_line": hunk.stated_line,
        "applied_line": hunk.applied_line,
        "offset": hunk.offset,
        "status": hunk.status,
        "reported_line": hunk.reported_line,
        "other_matches": list(hunk.other_matches),
        "other_count": hunk.other_count,
        "reason": hunk.reason,
        "near_miss": _near_miss_record(hunk.near_miss),
    }


def _file_record(
    file: FileResult, patch: str = "", lines: PatchLines | None = None
) -> dict[str, Any]:
    lines = lines or {}
    return {
        "path": _text(file.path),
        "old_path": _text(file.old_path),
        "action": file.action,
        "status": file.status,
        "error": file.error,
        "hunks": [_hunk_record(h, lines.get((patch, file.path, h.number))) for h in file.hunks],
    }


def apply_payload(result: TreeApplyResult, patches: Sequence[Patch] = ()) -> dict[str, Any]:
    series = result.series
    lines = _patch_lines(patches)
    statuses = [p.status for p in series.patches]
    return {
        "directory": str(result.root),
        "dry_run": result.dry_run,
        "ok": result.ok,
        "written": [_text(p) for p in result.written],
        "carried": result.carried,
        "refused": result.refused,
        "recovered": None
        if result.recovered is None
        else {
            "restored": [_text(p) for p in result.recovered.restored],
            "removed": [_text(p) for p in result.recovered.removed],
        },
        "patches": [
            {
                "name": p.name,
                "status": p.status,
                "error": p.error,
                "files": [_file_record(f, p.name, lines) for f in p.files],
            }
            for p in series.patches
        ],
        "totals": {
            "patches": len(statuses),
            "applied": statuses.count("applied"),
            "already_applied": statuses.count("already-applied"),
            "failed": statuses.count("failed"),
            "hunks": _hunk_totals(series),
            "files_read": len(set(result.reads)),
            "files_written": len(result.written),
        },
    }


def divergent_records(found: Sequence[Divergence] | None) -> list[dict[str, Any]] | None:
    """The files unlike the release plus the rows carried, for --json (None: not compared)."""
    if found is None:
        return None
    return [{"path": d.path, "rows": list(d.rows)} for d in found]


def _hunk_totals(series: SeriesResult) -> dict[str, int]:
    """Hunks by what happened to them. A hunk of a file that already carried its change was not
    placed at all: it counts as "already_applied", never as "exact" (a re-apply applies nothing)."""
    totals = {"exact": 0, "offset": 0, "failed": 0, "ambiguous": 0, "already_applied": 0}
    for patch in series.patches:
        for file in patch.files:
            for hunk in file.hunks:
                key = "already_applied" if file.status == "already-applied" else hunk.status
                totals[key] += 1
    return totals


def _presence_record(presence: PresenceResult) -> dict[str, Any]:
    return {
        "name": presence.name,
        "status": presence.status,
        "files": [
            {
                "path": _text(f.path),
                "present": f.status == "applied",
                "error": f.error,
                "hunks": [_hunk_record(h) for h in f.hunks],
            }
            for f in presence.files
        ],
    }


def check_payload(result: TreeCheckResult) -> dict[str, Any]:
    statuses = [p.status for p in result.patches]
    return {
        "directory": str(result.root),
        "ok": result.ok,
        "patches": [_presence_record(p) for p in result.patches],
        "divergent": divergent_records(result.divergent),
        "totals": {
            "patches": len(statuses),
            "present": statuses.count("present"),
            "missing": statuses.count("missing"),
            "partial": statuses.count("partial"),
        },
    }


# --- presentation ----------------------------------------------------------------------------------


def _render_apply(result: TreeApplyResult, patches: Sequence[Patch] = ()) -> None:
    from hyperqwen_patches.console import out, show, table_lines

    columns = [
        ("patch", "left"),
        ("file", "left"),
        ("hunk", "right"),
        ("stated", "right"),
        ("applied", "right"),
        ("offset", "right"),
        ("status", "left"),
    ]
    rows: list[tuple[str, ...]] = []
    for patch in result.series.patches:
        for file in patch.files:
            label = show(file.path)
            if not file.hunks or file.status == "already-applied":
                hunks = f"{len(file.hunks)} hunks" if file.hunks else ""
                rows.append((patch.name, label, hunks, "", "", "", file.status))
                continue
            # Hunks that landed exactly where stated, with no other match, fold into one row: the
            # table is for what a maintainer must look at (offsets, ambiguity, failures).
            quiet = [h for h in file.hunks if h.status == "exact" and not h.other_matches]
            if len(quiet) == 1:
                (one,) = quiet
                line = str(one.applied_line)
                rows.append(
                    (patch.name, label, f"#{one.number}", str(one.stated_line), line, "0", "exact")
                )
            elif quiet:
                rows.append((patch.name, label, f"{len(quiet)} hunks", "", "", "0", "exact"))
            for hunk in file.hunks:
                if hunk.status == "exact" and not hunk.other_matches:
                    continue
                status: str = hunk.status
                if hunk.other_matches and hunk.ok:
                    status += f" (also at {hunk.others_text()})"
                rows.append(
                    (
                        patch.name,
                        label,
                        f"#{hunk.number}",
                        str(hunk.stated_line),
                        "" if hunk.applied_line is None else str(hunk.applied_line),
                        "" if not hunk.ok else f"{hunk.offset:+d}" if hunk.offset else "0",
                        status,
                    )
                )
    # One print for the whole block: rich's per-call overhead adds up over hundreds of rows.
    out.print("\n".join([f"apply → {result.root}", *table_lines(columns, rows)]), soft_wrap=True)
    lines = _patch_lines(patches)
    for patch in result.series.patches:
        if patch.ok:
            continue
        out.print(f"FAILED {patch.name}" + (f": {patch.error}" if patch.error else ""))
        for file in patch.files:
            if file.status != "failed":
                continue
            out.print(f"  {show(file.path)}: {file.error or 'failed'}")
            for hunk in file.hunks:
                if hunk.ok:
                    continue
                at = lines.get((patch.name, file.path, hunk.number))
                where = f", {patch.name}:{at}" if at else ""
                out.print(
                    f"    hunk #{hunk.number} (stated line {hunk.stated_line}{where}): {hunk.reason}"
                )
                _render_near_miss(hunk.near_miss)
    totals = apply_payload(result)["totals"]

    # A failure's summary is the error line the CLI prints on stderr; it is not repeated here.
    if result.ok:
        verb = "would change" if result.dry_run else "changed"
        count = len(result.series.changes) if result.dry_run else len(result.written)
        n = totals["patches"]
        if result.carried == n and n:
            out.print(f"ok: {result.root} already carries all {n} patches; nothing to write")
        elif result.carried:
            out.print(
                f"ok: {result.root} carried patches 1-{result.carried} already; applied "
                f"{totals['applied']} on top; {verb} {count} files"
            )
        else:
            out.print(
                f"ok: {totals['applied']} applied, {totals['already_applied']} already applied; "
                f"{verb} {count} files"
            )


def _render_near_miss(miss: NearMiss | None) -> None:
    from hyperqwen_patches.console import out, show

    if miss is None:
        return
    if not miss.differences:
        out.print(f"      its lines match at line {miss.line}: all {miss.total} equal")
        return
    # The aligned view (engine.placement.align): a line inserted upstream is one "+" line, where a
    # positional comparison would call every later line different.
    diff = show(miss.aligned).splitlines()
    from hyperqwen_patches.engine.placement import aligned_summary

    out.print(
        f"      closest match at line {miss.aligned_line or miss.line}: {aligned_summary(miss)}"
        " (- the patch expects, + the file has):"
    )
    for line in diff[:16]:
        out.print(f"        {line}")
    if len(diff) > 16:
        out.print(f"        ... and {len(diff) - 16} more lines")


def _render_check(result: TreeCheckResult) -> None:
    from hyperqwen_patches.console import out, show, table_lines

    columns = [("patch", "left"), ("status", "left"), ("files not carried", "left")]
    rows = [
        (p.name, p.status, ", ".join(show(f.path) for f in p.files if f.status != "applied"))
        for p in result.patches
    ]
    lines = [f"check-applied → {result.root}", *table_lines(columns, rows)]
    bad = [p.name for p in result.patches if p.status != "present"]
    if bad:
        lines.append(f"not carried: {', '.join(bad)}")
    elif result.divergent:
        shown = ", ".join(d.path for d in result.divergent)
        verb = "carries" if len(result.divergent) == 1 else "carry"
        lines.append(f"every patch is there, but {shown} also {verb} something else")
    else:
        lines.append(f"ok: {result.root} carries all {len(result.patches)} patches")
    out.print("\n".join(lines), soft_wrap=True)
