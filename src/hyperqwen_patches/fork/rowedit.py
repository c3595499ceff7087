"""Row commands over the fork: ``edit`` a row in a work tree, ``refresh`` the change into the series.

The fork is the source of truth for a row's content (docs/fork.md), so editing a row means changing
its commit and re-exporting. Done by hand that is a checkout, a fixup commit, an interactive rebase
and four tool commands, and the rebased commits then carry the maintainer's committer name and date,
so ``import`` no longer reproduces the manifest's SHAs. Here:

- ``edit ROW`` gives a work tree of the fork at the row's commit (``git worktree add --detach``, in
  the repository's ``.hqp/edit/<row>``), after building the fork from the series when the repository
  has none of its own (``.hqp/fork``, made by ``import``);
- ``refresh`` takes that work tree's files as the row's new content, writes the row's commit anew
  (same message and trailers, same author and author date, the committer pinned as ``import`` pins
  it), re-applies every later row on top at fuzz 0 (the engine, as ``check`` replays them), moves the
  branch, and exports: patch files, manifest SHAs, series, PATCHES.md and a shipped bundle.

A later row that no longer applies stops the refresh before anything is written: the branch, the
series and the work tree are as they were, and the message names the row, file and hunk.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hyperqwen_patches import gitrun, records
from hyperqwen_patches.errors import FindingError, GitError, UsageError
from hyperqwen_patches.fork import reading as forkgit
from hyperqwen_patches.fork import rowjournal, treestate
from hyperqwen_patches.fork.worktrees import checkout_bytes, run_in, snapshot_tree
from hyperqwen_patches.records import field, record
from hyperqwen_patches.series.manifestmodel import ExportPoint, Manifest
from hyperqwen_patches.sources import basecommit

STATE_FILE = rowjournal.EDIT_STATE  # in the fork's git directory: the row being edited, where
WORK_DIR = ".hqp"  # in the series repository: the fork the tool keeps, and the edit work trees


@record(frozen=True)
class EditState:
    """The edit in progress: ``row`` at ``commit`` on ``branch``, checked out in ``worktree``."""

    row: str
    point: str
    branch: str
    commit: str
    worktree: str

    def save(self, git_dir: Path) -> None:
        from hyperqwen_patches.atomicfile import write_atomic

        write_atomic(git_dir / STATE_FILE, (json.dumps(self.__dict__, indent=2) + "\n").encode())

    @staticmethod
    def load(git_dir: Path) -> EditState | None:
        try:
            doc = json.loads((git_dir / STATE_FILE).read_text())
            return EditState(**{k: str(doc[k]) for k in records.fields(EditState)})
        except (OSError, ValueError, KeyError, TypeError):
            return None


@record(frozen=True)
class EditResult:
    row: str
    commit: str
    worktree: Path
    fork: Path
    imported: bool  # the fork was built (or brought up to date) from the series first


@record
class RefreshResult:
    row: str
    old: str
    new: str | None  # None: the work tree holds the row as it was (nothing to do)
    rebased: list[tuple[str, str]] = field(default_factory=list)  # (row, new commit) after it
    written: list[str] = field(default_factory=list)  # files export wrote in the repository
    removed: list[str] = field(default_factory=list)  # files export removed
    recovered: str | None = None  # an interrupted row command undone first


def kept_fork(manifest: Manifest) -> Path:
    """The fork the tool keeps for a repository that names none (``.hqp/fork``, ignored by git)."""
    from hyperqwen_patches.series.reporoot import inside_repo

    return inside_repo(manifest.root, WORK_DIR) / "fork"


def _work_dir(manifest: Manifest) -> Path:
    from hyperqwen_patches.series.reporoot import inside_repo

    work = inside_repo(manifest.root, WORK_DIR)
    work.mkdir(exist_ok=True)
    ignore = work / ".gitignore"
    if not ignore.exists():
        ignore.write_text(
            "# made by hyperqwen-patches (edit, refresh): nothing here is tracked\n*\n"
        )
    return work


def point_of(manifest: Manifest, row_name: str) -> ExportPoint:
    row = manifest.row(row_name)
    if row is None:
        names = ", ".join(r.name for r in manifest.rows[:8])
        raise UsageError(
            f"no row {row_name!r} in the manifest ({names}{' ...' * (len(manifest.rows) > 8)})"
        )
    if row.skip is not None:
        raise UsageError(f"row {row_name} is skipped ({row.skip}); it has no commit to edit")
    if not manifest.export_points:
        raise UsageError(
            f"{manifest.path}: the manifest names no export point, so the rows have no fork to edit",
            hint="add export_points: [{name: ..., branch: ...}] (docs/manifest.md)",
        )
    name = manifest.point_of(row)
    point = manifest.export_point(name) if name is not None else None
    assert point is not None  # the manifest validates export point names
    return point


def ensure_fork(manifest: Manifest, fork: Path | None) -> tuple[Path, bool]:
    """The fork to edit, and whether it was (re)built from the series. A fork given by the user is
    used as it is; the kept one is brought to what ``import`` builds from the series (it is the
    tool's own, so it never holds work of the user's that this could lose)."""
    if fork is not None:
        if not fork.exists():
            raise UsageError(f"--fork {fork}: no such repository")
        return fork, False
    from hyperqwen_patches.fork.importing import import_series
    from hyperqwen_patches.sources.pristine import open_pristine

    path = kept_fork(manifest)
    _work_dir(manifest)
    tree = open_pristine(manifest.source, package=manifest.package, version=manifest.pin)
    try:
        results = import_series(manifest, path, tree=tree, force=True, create=not path.exists())
    finally:
        tree.close()
    return path, any(r.changed for r in results)


def row_commit(git_dir: Path, manifest: Manifest, point: ExportPoint, row: str) -> tuple[str, str]:
    """(base, the row's commit) on the export point's branch, found by its Hqp-Row trailer."""
    tip = forkgit.resolve(git_dir, f"refs/heads/{point.branch}", what="edit")
    if tip is None:
        raise GitError(f"the fork has no branch {point.branch!r} (export point {point.name})")
    from hyperqwen_patches.fork.exporting import find_base

    base = find_base(git_dir, tip, package=manifest.package, pin=manifest.pin, branch=point.branch)
    for commit in forkgit.list_commits(git_dir, base, tip):
        if commit.row == row:
            return base, commit.sha
    raise GitError(
        f"no commit on {point.branch} carries row {row} (no Hqp-Row: {row} trailer)",
        hint="export the fork first, or import the series into it (hyperqwen-patches import)",
    )


def open_edit(manifest: Manifest, fork: Path | None) -> tuple[Path, EditState | None]:
    """The fork an edit would use, and the edit open in it (None: none, or its work tree is gone).
    Looked at before the fork is brought up to date: re-importing under an open edit would move the
    branch from under it."""
    existing = fork if fork is not None else kept_fork(manifest)
    state = EditState.load(gitrun.git_dir_of(existing)) if existing.exists() else None
    if state is not None and not Path(state.worktree).exists():
        state = None
    return existing, state


def start_edit(manifest: Manifest, row: str, *, fork: Path | None = None) -> EditResult:
    """A work tree of the fork at ``row``'s commit (an edit already open for the row is reused).
    ``row``: a name, a 1-based number or a patch file name."""
    existing = fork if fork is not None else kept_fork(manifest)
    if not existing.exists():
        return _start_edit(manifest, row, fork)
    with rowjournal.locked(gitrun.git_dir_of(existing)):
        if rowjournal.recover(gitrun.git_dir_of(existing)) is not None:
            from hyperqwen_patches.series.manifest import load_manifest

            manifest = load_manifest(manifest.root)
        return _start_edit(manifest, row, fork)


def _start_edit(manifest: Manifest, ref: str, fork: Path | None) -> EditResult:
    from hyperqwen_patches.fork.rowwrite import resolve_row

    # Named here, after an interrupted row command was undone: its manifest is the one that counts.
    row = resolve_row(manifest, ref).name
    point = point_of(manifest, row)
    existing, current = open_edit(manifest, fork)
    if current is not None:
        if current.row != row:
            # One line: a script running two edits sees at once which one holds the fork.
            raise UsageError(
                f"row {current.row} is being edited in {current.worktree}: one edit at a time; "
                "refresh it (refresh --close) or drop it (edit --abort) first"
            )
        return EditResult(row, current.commit, Path(current.worktree), existing, False)
    locked_already = existing.exists()  # start_edit holds the lock of a fork that existed
    fork_path, imported = ensure_fork(manifest, fork)
    git_dir = gitrun.git_dir_of(fork_path)
    with _nothing() if locked_already else rowjournal.locked(git_dir):
        _, commit = row_commit(git_dir, manifest, point, row)
        worktree = _work_dir(manifest) / "edit" / row
        if worktree.exists():
            raise UsageError(
                f"{worktree} exists but is not the open edit of row {row}; remove it first"
            )
        gitrun.run(["worktree", "prune"], git_dir=git_dir)
        worktree.parent.mkdir(parents=True, exist_ok=True)
        # --no-checkout: the checkout is done in the work tree's own environment below (the
        # runner's pinned index would otherwise be the one git writes).
        gitrun.check(
            ["worktree", "add", "--no-checkout", "--detach", str(worktree), commit],
            git_dir=git_dir,
            what=f"making a work tree for row {row}",
        )
        checkout_bytes(worktree, commit)
        EditState(row, point.name, point.branch, commit, str(worktree)).save(git_dir)
    return EditResult(row, commit, worktree, fork_path, imported)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _move_branch(git_dir: Path, branch: str, new: str, old: str, *, why: str) -> None:
    """``update-ref`` from the value we read: a branch someone moved meanwhile is not overwritten."""
    gitrun.check(
        ["update-ref", "-m", f"hyperqwen-patches {why}", f"refs/heads/{branch}", new, old],
        git_dir=git_dir,
        what=f"moving {branch}",
    )


def _row_patch(git_dir: Path, parent: str, commit: str, row: str):  # type: ignore[no-untyped-def]
    """The change a fork commit makes, as an engine patch (git's own diff, pinned options)."""
    from hyperqwen_patches.engine.patchscan import parse_patch

    data = gitrun.check(
        ["diff-tree", "-p", "-M", "--full-index", "--no-color", "--no-ext-diff", "--no-textconv",
         "--no-relative", parent, commit],
        git_dir=git_dir,
        what=f"reading row {row}",
    )  # fmt: skip
    return parse_patch(data, name=row, strip=1)


def refresh(manifest: Manifest, *, fork: Path | None = None) -> RefreshResult:
    """Fold the open edit's work tree into its row, re-apply the later rows, export: all or nothing.

    Every new commit and the whole export are computed before anything is written; then the
    journal (``fork/rowjournal.py``) records the old state, the files are written, the branch moves,
    the bundle and the edit's state follow. A kill anywhere is undone by the next row command."""
    fork_path = fork if fork is not None else kept_fork(manifest)
    if not fork_path.exists():
        raise UsageError("no edit is open (no fork)", hint="start one: hyperqwen-patches edit ROW")
    git_dir = gitrun.git_dir_of(fork_path)
    with rowjournal.locked(git_dir):
        recovered = rowjournal.recover(git_dir)
        if recovered is not None:
            from hyperqwen_patches.series.manifest import load_manifest

            manifest = load_manifest(manifest.root)
        result = _refresh(manifest, fork_path, git_dir)
        result.recovered = recovered
        return result


def _refresh(manifest: Manifest, fork_path: Path, git_dir: Path) -> RefreshResult:
    from hyperqwen_patches.fork.importing import write_state_commit
    from hyperqwen_patches.fork.rowwrite import write_rewrite

    state = EditState.load(git_dir)
    if state is None or not Path(state.worktree).exists():
        raise UsageError(
            f"no edit is open in {fork_path}", hint="start one: hyperqwen-patches edit ROW"
        )
    point = manifest.export_point(state.point)
    if point is None:
        raise UsageError(f"export point {state.point} of the open edit is not in the manifest")
    tip = forkgit.resolve(git_dir, f"refs/heads/{state.branch}", what="refresh")
    if tip is None or not forkgit.is_ancestor(git_dir, state.commit, tip):
        raise GitError(
            f"branch {state.branch} no longer holds {state.commit[:12]} (row {state.row}): it moved "
            "since the edit began",
            hint="drop the edit (hyperqwen-patches edit --abort) and edit the row again",
        )
    worktree = Path(state.worktree)
    new_tree = snapshot_tree(worktree, state.commit)
    raw = gitrun.check(
        ["cat-file", "commit", state.commit], git_dir=git_dir, what="reading the row"
    )
    old_tree, parents, message = forkgit.parse_commit(raw)
    result = RefreshResult(state.row, state.commit, None)
    if new_tree == old_tree:
        from hyperqwen_patches.fork.exporting import plan_export_at

        if plan_export_at(manifest, git_dir, {point.name: tip}).up_to_date:
            return result
        # The row is as it was but the series is behind the branch (a fork changed by hand, or
        # an export refused earlier): export it now, as the refresh would have.
        result.new = state.commit
        result.written, result.removed = write_rewrite(
            manifest, fork_path, point, tip, tip, op=f"refresh {state.row}", only=state.row
        )
        return result
    new = basecommit.commit_tree(
        git_dir, new_tree, parents=parents, message=message, env=forkgit.author_env(raw)
    )
    # The branch is linear from the base (export refuses merges), so what follows the row in
    # parent..tip is every later row, in order.
    later = forkgit.list_commits(git_dir, parents[0], tip)[1:] if parents else []
    parent = new
    if later:
        tree_state = treestate.state_of_commit(git_dir, new)
        raws = forkgit.read_objects(git_dir, [c.sha for c in later], kind="commit")  # one git call
        for commit in later:
            row = commit.row or commit.sha[:12]
            patch = _row_patch(git_dir, commit.parents[0], commit.sha, row)
            try:
                treestate.apply_row(tree_state, patch, row=row)
            except treestate.RowDoesNotApply as exc:
                raise FindingError(
                    f"refresh stopped: {exc.message}; nothing was changed (branch {state.branch}, "
                    f"the series, and {worktree} with its index are as they were)",
                    hint=f"change the work tree so that row {row} applies on it, then refresh "
                    "again; or drop the change with hyperqwen-patches edit --abort",
                ) from None
            parent = write_state_commit(
                git_dir, tree_state, parent, commit.message, forkgit.author_env(raws[commit.sha])
            )
            result.rebased.append((row, parent))
    result.new = new
    result.written, result.removed = write_rewrite(
        manifest, fork_path, point, tip, parent, op=f"refresh {state.row}",
        edit_state=EditState(state.row, state.point, state.branch, new, state.worktree),
        only=state.row,
    )  # fmt: skip
    # The work tree's HEAD and index follow the row (its files are what the row now holds).
    run_in(worktree, ["reset", "--quiet", "--mixed", new], what="moving the work tree")
    return result


# Who adds a row when nobody says: the tool itself, as ``import`` commits (a fresh CI runner has no
# git identity, and the tool never writes the user's git config to get one).
TOOL_AUTHOR = (basecommit.BASE_NAME, basecommit.BASE_EMAIL)


def _user_identity(manifest: Manifest) -> tuple[str, str]:
    """Who adds a row: ``GIT_AUTHOR_NAME``/``EMAIL``, else the user's git identity (``user.name``,
    ``user.email``, read as ``git commit`` reads them: this is the one place the user's config is
    asked, and only for these two values), else the tool's own identity."""
    import subprocess

    def config(key: str) -> str:
        proc = subprocess.run(
            ["git", "config", "--get", key], cwd=manifest.root, capture_output=True, check=False
        )
        return proc.stdout.decode("utf-8", "surrogateescape").strip()

    name = os.environ.get("GIT_AUTHOR_NAME") or config("user.name") or TOOL_AUTHOR[0]
    email = os.environ.get("GIT_AUTHOR_EMAIL") or config("user.email") or TOOL_AUTHOR[1]
    return name, email


def new_row(
    manifest: Manifest,
    name: str,
    *,
    after: str,
    what: str,
    kind: str = "local",
    fork: Path | None = None,
) -> EditResult:
    """Add row ``name`` after ``after``: an empty commit in the fork (the later rows re-parented on
    it, their trees unchanged), its manifest entry right after ``after``'s, then an edit of it.
    Holds the fork's lock; the branch and the manifest change under the row commands' journal."""
    existing = fork if fork is not None else kept_fork(manifest)
    if not existing.exists():
        return _new_row(manifest, name, after=after, what=what, kind=kind, fork=fork)
    git_dir = gitrun.git_dir_of(existing)
    with rowjournal.locked(git_dir):
        if rowjournal.recover(git_dir) is not None:
            from hyperqwen_patches.series.manifest import load_manifest

            manifest = load_manifest(manifest.root)
        return _new_row(manifest, name, after=after, what=what, kind=kind, fork=fork)


def _new_row(
    manifest: Manifest, name: str, *, after: str, what: str, kind: str, fork: Path | None
) -> EditResult:
    import time

    from hyperqwen_patches.fork.manifestedit import insert_row
    from hyperqwen_patches.series.manifest import load_manifest
    from hyperqwen_patches.series.manifestmodel import KINDS, NAME_RE

    if not NAME_RE.match(name):
        raise UsageError(f"row name {name!r}: use lowercase letters, digits, '.', '_' and '-'")
    if manifest.row(name) is not None:
        raise UsageError(f"row {name} exists already")
    if kind not in KINDS:
        raise UsageError(f"--kind {kind!r}: one of {', '.join(KINDS)}")
    point = point_of(manifest, after)
    _, current = open_edit(manifest, fork)
    if current is not None:
        raise UsageError(
            f"row {current.row} is being edited in {current.worktree}",
            hint="refresh it first (hyperqwen-patches refresh --close)",
        )
    fork_path, _ = ensure_fork(manifest, fork)
    git_dir = gitrun.git_dir_of(fork_path)
    _, anchor = row_commit(git_dir, manifest, point, after)
    tip = forkgit.resolve(git_dir, f"refs/heads/{point.branch}", what="new")
    assert tip is not None
    later = forkgit.list_commits(git_dir, anchor, tip) if tip != anchor else []
    author_name, author_email = _user_identity(manifest)
    date = os.environ.get("GIT_AUTHOR_DATE") or f"{int(time.time())} +0000"
    env = basecommit.fixed_identity_env(date)
    env.update(GIT_AUTHOR_NAME=author_name, GIT_AUTHOR_EMAIL=author_email, GIT_AUTHOR_DATE=date)
    if os.environ.get("GIT_AUTHOR_DATE"):
        env["GIT_COMMITTER_DATE"] = _git_stamp(git_dir, env)
    tree = forkgit.parse_commit(
        gitrun.check(["cat-file", "commit", anchor], git_dir=git_dir, what="reading")
    )[0]
    message = f"{name}: {what}\n\n{forkgit.ROW_TRAILER.decode()}: {name}\n".encode()
    parent = basecommit.commit_tree(git_dir, tree, parents=[anchor], message=message, env=env)
    new = parent
    raws = forkgit.read_objects(git_dir, [c.sha for c in later], kind="commit")
    for commit in later:  # the same trees on a new parent: nothing to re-apply
        parent = basecommit.commit_tree(
            git_dir, commit.tree, parents=[parent], message=commit.message,
            env=forkgit.author_env(raws[commit.sha]),
        )  # fmt: skip
    text = manifest.path.read_bytes()
    fields = {
        "name": name,
        "kind": kind,
        "what": what,
        "patch": f"patches/{name}.patch",
        "cut_against": manifest.pin,
        "retires_when": "TODO",
    }
    after_row = manifest.row(after)
    if after_row is not None and after_row.export_point is not None:
        fields["export_point"] = after_row.export_point
    edited = insert_row(text, after, fields)
    from hyperqwen_patches.series.manifest import parse_manifest

    parse_manifest(edited, path=manifest.path, root=manifest.root)  # valid before anything moves
    from hyperqwen_patches.atomicfile import write_atomic

    rel = Path(os.path.relpath(manifest.path, manifest.root)).as_posix()
    rowjournal.begin(
        git_dir, op=f"new {name}", root=manifest.root, files={rel: text},
        branch=point.branch, old_tip=tip,
    )  # fmt: skip
    _move_branch(git_dir, point.branch, parent, tip, why=f"new {name}")
    rowjournal.step("branch")
    write_atomic(manifest.path, edited)
    rowjournal.end(git_dir)
    # No export yet: an empty commit is not a row export can write (it carries no change); the
    # refresh that gives the row its content exports everything.
    opened = _start_edit(load_manifest(manifest.root), name, fork_path)
    return EditResult(name, new, opened.worktree, fork_path, opened.imported)


def _git_stamp(git_dir: Path, env: dict[str, str]) -> str:
    """GIT_AUTHOR_DATE in any form git reads, as git's ``<unix> <tz>`` (the committer's date)."""
    out = gitrun.check(["var", "GIT_AUTHOR_IDENT"], git_dir=git_dir, env=env, what="reading a date")
    return out.strip().rsplit(b"> ", 1)[-1].decode()


def close_edit(manifest: Manifest, *, fork: Path | None = None) -> str | None:
    """Remove the open edit's work tree (after a refresh, or to drop it); the row it was."""
    fork_path = fork if fork is not None else kept_fork(manifest)
    if not fork_path.exists():
        return None
    git_dir = gitrun.git_dir_of(fork_path)
    state = EditState.load(git_dir)
    if state is None:
        return None
    with rowjournal.locked(git_dir):
        rowjournal.recover(git_dir)
        gitrun.run(["worktree", "remove", "--force", state.worktree], git_dir=git_dir)
        gitrun.run(["worktree", "prune"], git_dir=git_dir)
        (git_dir / STATE_FILE).unlink(missing_ok=True)
    return state.row
