"""What every row command (``refresh``, ``drop``, ``move``, ``rename``) shares: naming a row, and
writing a rewritten branch together with its export, journalled (``fork/rowjournal.py``)."""

from __future__ import annotations

from pathlib import Path

from hyperqwen_patches import gitrun
from hyperqwen_patches.atomicfile import write_atomic
from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.fork import rowjournal
from hyperqwen_patches.series.manifestmodel import ExportPoint, Manifest, Row


def resolve_row(manifest: Manifest, ref: str) -> Row:
    """A row by name, 1-based number in the manifest, or patch file name (``0002-x.patch``)."""
    row = manifest.row(ref)
    if row is not None:
        return row
    if ref.isdigit():
        n = int(ref)
        if 1 <= n <= len(manifest.rows):
            return manifest.rows[n - 1]
        raise UsageError(f"row number {n}: the manifest has rows 1 to {len(manifest.rows)}")
    for row in manifest.rows:
        if row.patch is not None and (row.patch == ref or Path(row.patch).name == ref):
            return row
    names = ", ".join(r.name for r in manifest.rows[:8])
    raise UsageError(
        f"no row {ref!r} in the manifest (by name, number or patch file): "
        f"{names}{' ...' * (len(manifest.rows) > 8)}"
    )


def write_rewrite(
    manifest: Manifest,
    fork_path: Path,
    point: ExportPoint,
    old_tip: str,
    new_tip: str,
    *,
    op: str,
    manifest_text: bytes | None = None,
    removed: tuple[str, ...] = (),
    edit_state: object | None = None,
    only: str | None = None,
) -> tuple[list[str], list[str]]:
    """Export ``new_tip`` (with the manifest's new text) and move the branch to it, journalled;
    the repository files written, and those removed.

    ``only``: the one row whose content changes (``refresh``); a change of content in another row's
    files can then only be an uncommitted hand edit the export would overwrite: refused, named."""
    from hyperqwen_patches.fork.bundlewriter import BUNDLE_RELPATH, write_bundle
    from hyperqwen_patches.fork.exporting import plan_export_at
    from hyperqwen_patches.fork.exportplan import FileChange
    from hyperqwen_patches.series.manifest import parse_manifest

    root = manifest.root
    git_dir = gitrun.git_dir_of(fork_path)
    parsed = manifest
    if manifest_text is not None:
        parsed = parse_manifest(manifest_text, path=manifest.path, root=root)
    plan = plan_export_at(parsed, git_dir, {point.name: new_tip}, manifest_text=manifest_text)
    if only is not None:
        edited = sorted(
            c.path for c in plan.changes if c.row not in ("", only) and c.drift != "positional"
        )
        if edited:
            raise UsageError(
                f"{op} would overwrite changes to other rows' files: {', '.join(edited)}; nothing "
                "was changed",
                hint="keep them in a commit of their rows (edit ROW), or revert them "
                "(git checkout -- FILES), then try again",
            )
    else:
        _refuse_hand_edits(manifest, git_dir, point, old_tip, op)
    planned = {c.path for c in plan.changes}
    for rel in removed:
        target = root / rel
        if rel not in planned and target.is_file():
            plan.changes.append(FileChange(rel, "", target.read_bytes(), None, "removed"))
    bundle = root / BUNDLE_RELPATH
    shipped = bundle.is_file()
    before: dict[str, bytes | None] = {c.path: c.old for c in plan.changes}
    if shipped:
        before[BUNDLE_RELPATH] = bundle.read_bytes()
    rowjournal.begin(git_dir, op=op, root=root, files=before, branch=point.branch, old_tip=old_tip)
    rowjournal.step("journal")
    written: list[str] = []
    deleted: list[str] = []
    for i, change in enumerate(plan.changes):  # write_export's way, a kill point after each file
        target = root / change.path
        if change.new is None:
            target.unlink(missing_ok=True)
            deleted.append(change.path)
        else:
            write_atomic(target, change.new)
            written.append(change.path)
        rowjournal.step(f"file{i}")
    rowjournal.step("files")
    gitrun.check(
        ["update-ref", "-m", f"hyperqwen-patches {op}", f"refs/heads/{point.branch}", new_tip,
         old_tip],
        git_dir=git_dir,
        what=f"moving {point.branch}",
    )  # fmt: skip
    rowjournal.step("branch")
    if shipped:  # a shipped bundle must match the new patches
        write_bundle(plan, fork_path, parsed)
        written.append(BUNDLE_RELPATH)
    rowjournal.step("bundle")
    if edit_state is not None:
        edit_state.save(git_dir)  # type: ignore[attr-defined]
    rowjournal.step("state")
    rowjournal.end(git_dir)
    return written, deleted


def _refuse_hand_edits(
    manifest: Manifest, git_dir: Path, point: ExportPoint, old_tip: str, op: str
) -> None:
    """Files of rows that differ in content from what the fork exports now are hand edits the
    rewrite would overwrite (``drop``, ``move``, ``rename`` rewrite every later row's file)."""
    from hyperqwen_patches.errors import HqpError
    from hyperqwen_patches.fork.exporting import plan_export_at

    try:
        current = plan_export_at(manifest, git_dir, {point.name: old_tip})
    except HqpError:
        return  # not exportable as it is (an empty row `new` made): nothing exported to compare
    edited = sorted(c.path for c in current.changes if c.row and c.drift != "positional")
    if edited:
        raise UsageError(
            f"{op} would overwrite changes to rows' files that the fork does not hold: "
            f"{', '.join(edited)}; nothing was changed",
            hint="keep them in a commit of their rows (edit ROW), or revert them "
            "(git checkout -- FILES), then try again",
        )
