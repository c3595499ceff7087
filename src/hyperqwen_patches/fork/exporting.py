"""``export``: one patch file per fork commit, byte-stable, with the manifest, series and ledger updated.

The commits' bytes come from the pinned format-patch (``formatpatch.py``, a chain at once through
``batchformat.py``), after every refusal is collected (``refusals.py``, binary changes by
``binarypaths.py``). The plan (``exportplan.py``) lists what would change; the manifest is edited as
text (``manifestedit.py``); the bundle is written by ``bundlewriter.py``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from hyperqwen_patches import gitrun
from hyperqwen_patches.atomicfile import write_atomic
from hyperqwen_patches.display import show
from hyperqwen_patches.errors import FindingError, GitError, UsageError
from hyperqwen_patches.fork import reading as forkgit
from hyperqwen_patches.fork.batchformat import format_commits
from hyperqwen_patches.fork.binarypaths import binary_paths_of
from hyperqwen_patches.fork.exportplan import ExportPlan, FileChange, classify
from hyperqwen_patches.fork.manifestedit import edit_manifest
from hyperqwen_patches.fork.refusals import refusals
from hyperqwen_patches.series.manifestmodel import Manifest, Row
from hyperqwen_patches.sources import basecommit


def export_commits(
    git_dir: Path,
    commits: Sequence[forkgit.ForkCommit],
    *,
    module_rows: frozenset[str] = frozenset(),
    relative: str | None = None,
    package: str = "vllm",
) -> dict[str, bytes | dict[bytes, bytes]]:
    """sha -> patch bytes (or, for a module-file row's commit, path -> file bytes) for every commit.

    ``relative``: see :func:`format_patch_argv` (``patch_relative`` of the manifest); ``package``:
    the manifest's (a change outside it is refused).

    Every refusal of every commit is collected before anything is raised, so one run names them all.
    """
    result: dict[str, bytes | dict[bytes, bytes]] = {}
    # Everything runs in a scratch view of the fork's objects: the fork's attributes and config cannot
    # change binary detection or the bytes written.
    with forkgit.scratch_repo(borrow=git_dir) as view:
        problems: list[str] = []
        binary = binary_paths_of(view, commits, scratch=True)
        for commit in commits:
            refused = refusals(
                view,
                commit,
                module=commit.row in module_rows,
                binary=binary.get(commit.sha, []),
                package=package,
            )
            for problem in refused:
                problems.append(f"{commit.sha[:12]} {commit.subject!r}: {problem}")
        if problems:
            raise FindingError(
                f"{len(problems)} problem(s) make the export point unexportable:\n  "
                + "\n  ".join(problems),
                hint="fix the commits on the export point and run export again",
            )
        blobs = forkgit.read_objects(
            view,
            sorted(
                {
                    c.new_sha
                    for commit in commits
                    if commit.row in module_rows
                    for c in commit.changes
                    if c.new_path is not None
                }
            ),
            kind="blob",
        )
        formatted = format_commits(view, commits, scratch=True, relative=relative)
        for commit in commits:
            if commit.row in module_rows:
                result[commit.sha] = {
                    c.new_path: blobs[c.new_sha] for c in commit.changes if c.new_path is not None
                }
            else:
                result[commit.sha] = formatted[commit.sha]
    return result


def find_base(git_dir: Path, tip: str, *, package: str, pin: str, branch: str) -> str:
    """The export point's base: its one root commit, which must be the pristine commit of the pin."""
    out = gitrun.check(
        ["rev-list", "--max-parents=0", tip], git_dir=git_dir, what=f"finding the base of {branch}"
    )
    roots = out.decode().split()
    if len(roots) != 1:
        raise FindingError(
            f"export point {branch} has {len(roots)} root commits; it must grow from one base commit",
        )
    _tree, _parents, message = forkgit.read_commit(git_dir, roots[0])
    if message != basecommit.base_message(package, pin):
        first = show(message.split(b"\n", 1)[0])
        raise FindingError(
            f"export point {branch} is not built on the {package} {pin} base commit (its root "
            f"{roots[0][:12]} says {first!r})",
            hint="import the series to build the base (docs/fork.md), then rebase the fork onto it",
        )
    return roots[0]


_SLUG = re.compile(r"[^a-z0-9._-]+")


def slug(subject: str, taken: set[str]) -> str:
    base = _SLUG.sub("-", subject.lower()).strip("-._")[:48].rstrip("-._") or "commit"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name


def _module_target(row_files: str, tree_path: bytes, manifest: Manifest) -> str:
    rel = tree_path
    if manifest.paths == "package":
        rel = tree_path.removeprefix(manifest.package.encode() + b"/")
    return f"{row_files.rstrip('/')}/{os.fsdecode(rel)}"


def _read(root: Path, rel: str) -> bytes | None:
    try:
        return (root / rel).read_bytes()
    except FileNotFoundError:
        return None


def patch_relative(manifest: Manifest) -> str | None:
    """The directory patch paths are relative to inside the fork's tree: ``"vllm/"`` for a
    ``paths: package`` series, None (the tree's root) for ``paths: root``."""
    return f"{manifest.package}/" if manifest.paths == "package" else None


def plan_export(manifest: Manifest, fork: Path, *, export_points: Sequence[str] = ()) -> ExportPlan:
    """Everything export would change in the repository, computed without writing."""

    if not manifest.export_points:
        raise UsageError(
            f"{manifest.path}: the manifest names no export point",
            hint="add export_points: [{name: ..., branch: ...}] (docs/manifest.md)",
        )
    points = [p for p in manifest.export_points if not export_points or p.name in export_points]
    unknown = set(export_points) - {p.name for p in manifest.export_points}
    if unknown:
        raise UsageError(f"unknown export point(s): {', '.join(sorted(unknown))}")
    if not fork.exists():
        raise UsageError(f"--fork {fork}: no such repository")
    git_dir = gitrun.git_dir_of(fork)
    tips: dict[str, str] = {}
    for point in points:
        tip = forkgit.resolve(git_dir, f"refs/heads/{point.branch}", what="export")
        if tip is None:
            raise GitError(f"{fork}: the export point branch {point.branch!r} does not exist")
        tips[point.name] = tip
    return plan_export_at(manifest, git_dir, tips)


def plan_export_at(
    manifest: Manifest,
    git_dir: Path,
    tips: Mapping[str, str],
    *,
    manifest_text: bytes | None = None,
) -> ExportPlan:
    """:func:`plan_export` for export points already resolved to tips in ``git_dir`` (``check`` reads a
    bundle or URL fork from a scratch repository this way). ``manifest_text``: the manifest's new text
    when a row command (``drop``, ``move``, ``rename``) changed it; ``manifest`` is then its parse, and
    the plan writes it over the file on disk."""
    from hyperqwen_patches.fork.matching import match_rows, other_rows

    root = manifest.root
    plan = ExportPlan(root)
    taken = {r.name for r in manifest.rows}
    new_rows: list[dict[str, str]] = []
    for point in manifest.export_points:
        if point.name not in tips:
            continue
        tip = tips[point.name]
        base = find_base(
            git_dir, tip, package=manifest.package, pin=manifest.pin, branch=point.branch
        )
        plan.point_updates[point.name] = (base, tip)
        commits = forkgit.list_commits(git_dir, base, tip)
        rows = manifest.rows_on(point.name)
        matching = match_rows(
            [(r.name, r.commit) for r in rows], commits, other_rows(manifest, point.name)
        )
        if matching.misplaced:
            name, commit, why = matching.misplaced[0]
            raise FindingError(
                f"fork commit {commit.sha[:12]} {commit.subject!r} on {point.branch} carries row "
                f"{name}, which is {why}",
                hint="drop the commit from the export point, or change the row in the manifest",
            )
        if matching.duplicate:
            name, commit = matching.duplicate[0]
            raise FindingError(
                f"row {name} is named by more than one commit (also {commit.sha[:12]})"
            )
        plan.vanished_rows += matching.vanished_rows
        by_name = {r.name: r for r in rows}
        module_rows = frozenset(n for n in by_name if by_name[n].is_module)
        exported = export_commits(
            git_dir,
            commits,
            module_rows=module_rows,
            relative=patch_relative(manifest),
            package=manifest.package,
        )
        paired = {c.sha: n for n, c in matching.pairs}
        added = {c.sha: n for n, c in matching.missing_rows}
        for commit in commits:
            if commit.sha in paired:
                name = paired[commit.sha]
                row = by_name[name]
                if row.commit != commit.sha:
                    plan.commit_updates[name] = commit.sha
                if row.export_point is None:
                    plan.point_of[name] = point.name  # a row with a commit names its export point
            else:
                name = added.get(commit.sha) or slug(commit.subject, taken)
                taken.add(name)
                row = None
                plan.added_rows.append(name)
                new_rows.append(
                    {
                        "name": name,
                        "kind": "local",
                        "what": f"TODO: describe (added by export from {commit.subject})",
                        "patch": f"patches/{name}.patch",
                        "cut_against": manifest.pin,
                        "retires_when": "TODO",
                        "export_point": point.name,
                        "commit": commit.sha,
                    }
                )
            content = exported[commit.sha]
            if isinstance(content, dict):
                assert row is not None and row.files is not None
                wanted = {_module_target(row.files, p, manifest): d for p, d in content.items()}
                on_disk = _module_files_on_disk(root, row)
                for rel in sorted(set(wanted) | set(on_disk)):
                    old, new = on_disk.get(rel), wanted.get(rel)
                    drift = classify(old, new)
                    if drift != "unchanged":
                        plan.changes.append(FileChange(rel, name, old, new, drift))
            else:
                rel = row.patch if row is not None and row.patch else f"patches/{name}.patch"
                old = _read(root, rel)
                drift = classify(old, content)
                if drift != "unchanged":
                    plan.changes.append(FileChange(rel, name, old, content, drift))
    # The manifest (targeted text edits) and what render writes from the edited manifest.
    from hyperqwen_patches.series.manifest import parse_manifest
    from hyperqwen_patches.series.render import render

    disk_text = manifest.path.read_bytes()
    old_text = disk_text if manifest_text is None else manifest_text
    new_text = edit_manifest(old_text, plan, new_rows)
    if new_text != disk_text:
        plan.changes.append(
            FileChange(_rel(manifest.path, root), "", disk_text, new_text, "manifest")
        )
    edited = parse_manifest(new_text, path=manifest.path, root=root)
    pending = {c.path: c.new for c in plan.changes if c.new is not None}
    for rel, data in render(edited, pending).items():
        old = _read(root, rel)
        if old != data:
            plan.changes.append(FileChange(rel, "", old, data, "rendered"))
    return plan


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def _module_files_on_disk(root: Path, row: Row) -> dict[str, bytes]:
    """The files a module row's directory holds now, by repository path.

    The directory must be the repository's own (``rows.inside_repository``): one linked elsewhere
    was walked, and the outside files' names printed as "removed". Inside it, a link or a file that
    is not a regular file (a FIFO would wait forever) is refused by name, as building the row does."""
    from hyperqwen_patches.inputfile import read_repo_file
    from hyperqwen_patches.series.rows import (
        IGNORED_DIRS,
        IGNORED_SUFFIXES,
        RowError,
        inside_repository,
    )

    assert row.files is not None
    base = root / row.files
    out: dict[str, bytes] = {}
    if not base.is_dir():
        return out
    inside_repository(root, base, row)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if os.fsencode(d) not in IGNORED_DIRS]
        for name in [*dirnames, *filenames]:
            full = Path(dirpath) / name
            if full.is_symlink():
                raise RowError(
                    row,
                    f"{full.relative_to(root).as_posix()} is a symbolic link; module files "
                    "must be plain files",
                )
        for name in filenames:
            if os.fsencode(name).endswith(IGNORED_SUFFIXES):
                continue
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            try:
                out[rel] = read_repo_file(full, "module file", shown=rel)
            except (ValueError, FileNotFoundError) as exc:
                raise RowError(row, str(exc)) from None
    return out


def write_export(plan: ExportPlan) -> list[str]:
    """Write the plan: every file through a temporary file and a rename; return the paths written."""
    written: list[str] = []
    for change in plan.changes:
        target = plan.root / change.path
        if change.new is None:
            target.unlink(missing_ok=True)
        else:
            write_atomic(target, change.new)
        written.append(change.path)
    return written
