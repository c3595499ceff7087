"""``drop``, ``move`` and ``rename``: one command each changes a row's place or name in the fork,
the manifest, the patch files (renumbered to their new order), ``patches/series``, PATCHES.md and a
shipped bundle together, so that ``import`` of the result reproduces every SHA.

Each works as ``refresh`` does (``fork/rowedit.py``): the fork's later commits are re-applied at
fuzz 0 on their new parent (the engine, as ``check`` replays them), the committer pinned as
``import`` pins it; a row that no longer applies stops the command before anything is written. The
new commits, the manifest's new text and the export plan are all computed first; only then is the
journal written (``fork/rowjournal.py``) and the files, the branch and the bundle changed, so a kill
at any point is undone by the next row command.
"""

from __future__ import annotations

import re
from pathlib import Path

from hyperqwen_patches import gitrun
from hyperqwen_patches.errors import FindingError, UsageError
from hyperqwen_patches.fork import reading as forkgit
from hyperqwen_patches.fork import rowjournal, treestate
from hyperqwen_patches.fork.matching import match_rows, other_rows
from hyperqwen_patches.fork.rowwrite import resolve_row, write_rewrite
from hyperqwen_patches.records import field, record
from hyperqwen_patches.series.manifestmodel import ExportPoint, Manifest, Row


@record
class RowOpResult:
    op: str
    row: str
    detail: str  # what was done, in words ("after crlf-latin1", "-> new-name", "retired by 0.30.0")
    rebased: list[tuple[str, str]] = field(default_factory=list)  # (row, new commit), in order
    written: list[str] = field(default_factory=list)  # repository files written
    removed: list[str] = field(default_factory=list)  # repository files removed
    recovered: str | None = None  # an interrupted row command undone first


def _no_open_edit(git_dir: Path, what: str) -> None:
    from hyperqwen_patches.fork.rowedit import EditState

    state = EditState.load(git_dir)
    if state is not None and Path(state.worktree).exists():
        raise UsageError(
            f"row {state.row} is being edited in {state.worktree}: refresh it (refresh --close) "
            f"or drop the edit (edit --abort) before {what}"
        )


def _chain(
    git_dir: Path,
    manifest: Manifest,
    point: ExportPoint,
) -> tuple[str, str, list[forkgit.ForkCommit], dict[str, str]]:
    """(tip, base, the commits base..tip, commit SHA -> row name) of the point's branch."""
    from hyperqwen_patches.fork.exporting import find_base

    tip = forkgit.require(git_dir, f"refs/heads/{point.branch}", what="reading the fork")
    base = find_base(git_dir, tip, package=manifest.package, pin=manifest.pin, branch=point.branch)
    commits = forkgit.list_commits(git_dir, base, tip)
    rows = manifest.rows_on(point.name)
    matching = match_rows(
        [(r.name, r.commit) for r in rows], commits, other_rows(manifest, point.name)
    )
    if matching.extra_commits or matching.missing_rows or matching.vanished_rows:
        raise FindingError(
            f"the fork's branch {point.branch} and the manifest's rows differ (run export or import "
            "first, so that each row has its commit)"
        )
    return tip, base, commits, {c.sha: name for name, c in matching.pairs}


def rebuild(
    git_dir: Path,
    parent: str,
    commits: list[forkgit.ForkCommit],
    names: dict[str, str],
    *,
    messages: dict[str, bytes] | None = None,
    what: str,
) -> tuple[str, list[tuple[str, str]]]:
    """``commits`` re-applied in this order on ``parent`` at fuzz 0 (messages replaced where given,
    the author kept, the committer pinned); the new tip and each (row, new commit)."""
    from hyperqwen_patches.fork.importing import with_trailer, write_state_commit
    from hyperqwen_patches.fork.rowedit import _row_patch

    messages = messages or {}
    out: list[tuple[str, str]] = []
    if not commits:
        return parent, out
    state = treestate.state_of_commit(git_dir, parent)
    raws = forkgit.read_objects(git_dir, [c.sha for c in commits], kind="commit")
    for commit in commits:
        row = names.get(commit.sha) or commit.row or commit.sha[:12]
        patch = _row_patch(git_dir, commit.parents[0], commit.sha, row)
        try:
            treestate.apply_row(state, patch, row=row)
        except treestate.RowDoesNotApply as exc:
            raise FindingError(
                f"{what} stopped: {exc.message}; nothing was changed",
                hint=f"change row {row} so that it applies in its new place (edit {row}), then try "
                "again",
            ) from None
        message = with_trailer(messages.get(commit.sha, commit.message), row)
        parent = write_state_commit(
            git_dir, state, parent, message, forkgit.author_env(raws[commit.sha])
        )
        out.append((row, parent))
    return parent, out


def _session(manifest: Manifest, fork: Path | None) -> tuple[Path, Path]:
    """The fork (the kept one built or brought up to date from the series) and its git dir."""
    from hyperqwen_patches.fork.rowedit import ensure_fork

    fork_path, _ = ensure_fork(manifest, fork)
    return fork_path, gitrun.git_dir_of(fork_path)


def _renumber(text: bytes, manifest: Manifest) -> tuple[bytes, list[str]]:
    """The text with numbered patch files renumbered to the rows' order; the old paths."""
    from hyperqwen_patches.series import rowtext
    from hyperqwen_patches.series.manifest import parse_manifest

    parsed = parse_manifest(text, path=manifest.path, root=manifest.root)
    moves = rowtext.renumbered([(r.name, r.patch) for r in parsed.rows])
    old = [r.patch for r in parsed.rows if r.name in moves and r.patch is not None]
    for name, path in moves.items():
        text = rowtext.set_row_keys(text, name, {"patch": path})
    return text, old


def _row_files(manifest: Manifest, row: Row) -> list[str]:
    if row.patch is not None:
        return [row.patch]
    from hyperqwen_patches.fork.exporting import _module_files_on_disk

    return sorted(_module_files_on_disk(manifest.root, row)) if row.files else []


def _guarded(manifest: Manifest, fork: Path | None, run):  # type: ignore[no-untyped-def]
    """Run ``run(fork_path, git_dir)`` holding the fork's lock, after undoing an interrupted
    row command."""
    from hyperqwen_patches.fork.rowedit import kept_fork

    existing = fork if fork is not None else kept_fork(manifest)
    recovered = None
    if existing.exists():
        git_dir = gitrun.git_dir_of(existing)
        with rowjournal.locked(git_dir):
            recovered = rowjournal.recover(git_dir)
            if recovered is not None:
                from hyperqwen_patches.series.manifest import load_manifest

                manifest = load_manifest(manifest.root)
            _no_open_edit(git_dir, "changing the rows")
            fork_path, git_dir = _session(manifest, fork)
            result = run(manifest, fork_path, git_dir)
    else:
        fork_path, git_dir = _session(manifest, fork)
        with rowjournal.locked(git_dir):
            result = run(manifest, fork_path, git_dir)
    result.recovered = recovered
    return result


def drop_row(
    manifest: Manifest, ref: str, *, retired_by: str | None = None, fork: Path | None = None
) -> RowOpResult:
    """Take row ``ref`` out of the series (a retirement at ``retired_by`` when given)."""
    from hyperqwen_patches.fork.rowedit import point_of
    from hyperqwen_patches.series import rowtext
    from hyperqwen_patches.series.manifestmodel import VERSION_RE

    if retired_by is not None and not VERSION_RE.match(retired_by):
        raise UsageError(f"--retired-by {retired_by!r}: a release version such as 0.30.0")

    def run(manifest: Manifest, fork_path: Path, git_dir: Path) -> RowOpResult:
        # Named here, after an interrupted command was undone: its manifest is the one that counts.
        row = resolve_row(manifest, ref)
        name = row.name
        point = point_of(manifest, name)
        tip, _, commits, names = _chain(git_dir, manifest, point)
        at = next(i for i, c in enumerate(commits) if names.get(c.sha) == name)
        new_tip, rebased = rebuild(
            git_dir, commits[at].parents[0], commits[at + 1 :], names, what="drop"
        )
        text = manifest.path.read_bytes()
        removed = _row_files(manifest, row)
        if retired_by is None:
            order = [r.name for r in manifest.rows if r.name != name]
            text = rowtext.reorder_rows(text, order, drop=[name])
            detail = "dropped"
        else:
            # check verifies a retirement by reverse-applying the row on the release that carries
            # it, so the row stays (skipped, its patch file kept) and leaves only the fork.
            removed = []
            text = rowtext.add_row_key(
                text, name, "skip", f"retired by {retired_by} (see retirements)"
            )
            text = rowtext.append_retirement(
                text,
                {
                    "row": name,
                    "pin": retired_by,
                    "upstream": row.upstream or "unknown",
                    "reason": f"carried by {retired_by}",
                    "evidence": "dropped with hyperqwen-patches drop --retired-by",
                },
            )
            detail = f"retired by {retired_by} (kept in the manifest, skipped)"
        text, renamed = _renumber(text, manifest)
        written, gone = write_rewrite(
            manifest, fork_path, point, tip, new_tip, op=f"drop {name}", manifest_text=text,
            removed=(*removed, *renamed),
        )  # fmt: skip
        return RowOpResult("drop", name, detail, rebased, written, gone)

    return _guarded(manifest, fork, run)  # type: ignore[no-any-return]


def move_row(
    manifest: Manifest,
    ref: str,
    *,
    after: str | None = None,
    before: str | None = None,
    fork: Path | None = None,
) -> RowOpResult:
    """Put row ``ref`` right after (or before) another row of its export point."""
    from hyperqwen_patches.fork.rowedit import point_of
    from hyperqwen_patches.series import rowtext

    if (after is None) == (before is None):
        raise UsageError("give exactly one of --after ROW and --before ROW")
    other_ref = after if after is not None else before
    assert other_ref is not None

    def run(manifest: Manifest, fork_path: Path, git_dir: Path) -> RowOpResult:
        name = resolve_row(manifest, ref).name
        other = resolve_row(manifest, other_ref).name
        if other == name:
            raise UsageError(f"row {name} cannot move next to itself")
        point = point_of(manifest, name)
        if point_of(manifest, other).name != point.name:
            raise UsageError(f"rows {name} and {other} are on different export points")
        order = [r.name for r in manifest.rows if r.name != name]
        at = order.index(other) + (1 if after is not None else 0)
        order.insert(at, name)
        detail = f"{'after' if after is not None else 'before'} {other}"
        tip, _, commits, names = _chain(git_dir, manifest, point)
        rank = {n: i for i, n in enumerate(order)}
        wanted = sorted(commits, key=lambda c: rank[names[c.sha]])
        first = next(
            (i for i, (a, b) in enumerate(zip(commits, wanted, strict=True)) if a.sha != b.sha),
            None,
        )
        rebased: list[tuple[str, str]]
        if first is None:
            new_tip, rebased = tip, []
        else:
            new_tip, rebased = rebuild(
                git_dir, commits[first].parents[0], wanted[first:], names, what="move"
            )
        text = rowtext.reorder_rows(manifest.path.read_bytes(), order)
        text, renamed = _renumber(text, manifest)
        written, gone = write_rewrite(
            manifest, fork_path, point, tip, new_tip, op=f"move {name}", manifest_text=text,
            removed=tuple(renamed),
        )  # fmt: skip
        return RowOpResult("move", name, detail, rebased, written, gone)

    return _guarded(manifest, fork, run)  # type: ignore[no-any-return]


def rename_row(manifest: Manifest, ref: str, new: str, *, fork: Path | None = None) -> RowOpResult:
    """Give row ``ref`` the name ``new``: its entry, its commit's Hqp-Row trailer, its patch file."""
    from hyperqwen_patches.fork.rowedit import point_of
    from hyperqwen_patches.series import rowtext
    from hyperqwen_patches.series.manifestmodel import NAME_RE

    if not NAME_RE.match(new):
        raise UsageError(
            f"row name {new!r}: 1 to 100 of lowercase letters, digits, '.', '_' and '-', starting "
            "with a letter or digit"
        )

    def run(manifest: Manifest, fork_path: Path, git_dir: Path) -> RowOpResult:
        row = resolve_row(manifest, ref)
        name = row.name
        if manifest.row(new) is not None:
            raise UsageError(f"row {new} exists already")
        point = point_of(manifest, name)
        tip, _, commits, names = _chain(git_dir, manifest, point)
        at = next(i for i, c in enumerate(commits) if names.get(c.sha) == name)
        commit = commits[at]
        trailer = re.compile(
            rb"(?m)^" + forkgit.ROW_TRAILER + rb": " + re.escape(name.encode()) + rb"$"
        )
        message = trailer.sub(forkgit.ROW_TRAILER + b": " + new.encode(), commit.message)
        names = {**names, commit.sha: new}
        new_tip, rebased = rebuild(
            git_dir, commit.parents[0], commits[at:], names, messages={commit.sha: message},
            what="rename",
        )  # fmt: skip
        values = {"name": new}
        removed: tuple[str, ...] = ()
        if row.patch is not None:
            m = rowtext.NUMBERED.match(row.patch)
            stem = Path(m["rest"] if m else Path(row.patch).name)
            if stem.name == f"{name}.patch":
                values["patch"] = str(Path(row.patch).with_name(
                    Path(row.patch).name.replace(f"{name}.patch", f"{new}.patch")
                ))  # fmt: skip
                removed = (row.patch,)
        text = rowtext.set_row_keys(manifest.path.read_bytes(), name, values)
        written, gone = write_rewrite(
            manifest, fork_path, point, tip, new_tip, op=f"rename {name}", manifest_text=text,
            removed=removed,
        )  # fmt: skip
        return RowOpResult("rename", name, f"-> {new}", rebased, written, gone)

    return _guarded(manifest, fork, run)  # type: ignore[no-any-return]
