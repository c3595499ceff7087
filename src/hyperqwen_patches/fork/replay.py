"""Replay identity (invariant 4) and fork membership (invariant 7), on git objects only.

    pristine + rows 1..k == the k-th fork commit, for every k, and pristine + all rows == the tip.

The pristine side is the engine applying each row at fuzz 0 (the same code ``apply`` and the Docker image
use), in memory. The fork side is read from git objects (``ls-tree``, ``diff-tree``, ``cat-file``); the
two are compared by blob SHA and mode, so nothing is checked out and nothing is written: not into the
user's work tree, index, refs or config. The one repository written to is a scratch bare repository of
our own (the base commit is built there; a URL or bundle fork is fetched there); a local fork is read
through ``objects/info/alternates``.

Rows are matched to fork commits by the ``Hqp-Row: <name>`` trailer (docs/fork.md), else by the row's
recorded ``commit:`` SHA. What cannot be matched is named: a fork commit whose trailer names a row the
manifest does not have (a missing row), a fork commit with neither (an extra commit), a row with no
commit on its export point (its commit vanished).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from hyperqwen_patches import gitrun
from hyperqwen_patches.console import show
from hyperqwen_patches.errors import FindingError, GitError
from hyperqwen_patches.fork import reading as forkgit
from hyperqwen_patches.records import field, record

if TYPE_CHECKING:
    from hyperqwen_patches.engine.applying import SeriesResult
    from hyperqwen_patches.engine.patchset import Patch
    from hyperqwen_patches.series.manifest import Manifest

Severity = Literal["error", "warning", "info", "unverified"]
Reader = Callable[[bytes], bytes | None]

DEFAULT_MODE = 0o100644
SHORT_DIFF_LINES = 20


@record(frozen=True)
class Problem:
    """One replay or membership finding (``check`` turns these into its ``Finding`` records)."""

    check: str  # "replay-identity" | "fork-commits"
    severity: Severity
    subject: str  # the row, commit or export point it is about
    message: str
    detail: str = ""


# --- the state of a tree while rows are applied ------------------------------------------------------


Entry = tuple[int, str]  # (mode, blob sha)


class BaseEntries:
    """The base commit's tree entries, computed on demand from the pristine tree it was built from.

    The base commit is the pristine tree's text files, every mode 100644 (basecommit.py), so the entry
    of a path is ``(0o100644, blob sha of pristine.read(path))``: replay needs it only for the paths the
    rows or the fork commits touch, and computing those few costs nothing like listing the whole tree
    (``ls-tree -r`` of 30,000 files and parsing it). ``full()`` lists it when a caller needs every path.
    Only valid for a base built from ``read`` (check's fork session builds it so).
    """

    def __init__(self, read: Reader, full: Callable[[], dict[bytes, Entry]]) -> None:
        self._read = read
        self._full = full
        self._memo: dict[bytes, Entry | None] = {}

    def get(self, path: bytes) -> Entry | None:
        if path not in self._memo:
            data = self._read(path)
            self._memo[path] = None if data is None else (DEFAULT_MODE, forkgit.blob_sha(data))
        return self._memo[path]

    def full(self) -> dict[bytes, Entry]:
        return self._full()


class LazyEntries(MutableMapping[bytes, Entry]):
    """A tree's entries as changes over :class:`BaseEntries`; iterating lists the base (rarely needed)."""

    def __init__(self, base: BaseEntries) -> None:
        self._base = base
        self._over: dict[bytes, Entry | None] = {}  # None: deleted

    def __getitem__(self, path: bytes) -> Entry:
        entry = self._over[path] if path in self._over else self._base.get(path)
        if entry is None:
            raise KeyError(path)
        return entry

    def __contains__(self, path: object) -> bool:
        if not isinstance(path, bytes):
            return False
        if path in self._over:
            return self._over[path] is not None
        return self._base.get(path) is not None

    def __setitem__(self, path: bytes, entry: Entry) -> None:
        self._over[path] = entry

    def __delitem__(self, path: bytes) -> None:
        if path not in self:
            raise KeyError(path)
        self._over[path] = None

    def _all(self) -> dict[bytes, Entry]:
        merged = dict(self._base.full())
        for path, entry in self._over.items():
            if entry is None:
                merged.pop(path, None)
            else:
                merged[path] = entry
        return merged

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


class TreeState:
    """A tree as ``path -> (mode, content or blob sha)`` on top of a base, updated one row at a time."""

    def __init__(
        self, base_entries: Mapping[bytes, Entry] | LazyEntries, read_base: Reader
    ) -> None:
        self.entries: MutableMapping[bytes, Entry] = (
            base_entries if isinstance(base_entries, LazyEntries) else dict(base_entries)
        )
        self.content: dict[bytes, bytes] = {}
        self._read_base = read_base
        # Paths whose entry may have changed since the last take_dirty() (what a comparison rechecks).
        self.dirty: set[bytes] = set()
        # Paths whose entry may have changed since the last commit written (take_changes()).
        self.uncommitted: set[bytes] = set()

    def take_dirty(self) -> set[bytes]:
        dirty, self.dirty = self.dirty, set()
        return dirty

    def take_changes(self) -> list[tuple[bytes, int | None, bytes | str | None]]:
        """What changed since the last call, as ``commitstream.Change``: (path, mode, content or
        blob SHA) for a path the tree has, (path, None, None) for one it no longer has."""
        out: list[tuple[bytes, int | None, bytes | str | None]] = []
        for path in sorted(self.uncommitted):
            if path in self.entries:
                mode, sha = self.entries[path]
                out.append((path, mode, self.content.get(path, sha)))
            else:
                out.append((path, None, None))
        self.uncommitted = set()
        return out

    def read(self, path: bytes) -> bytes | None:
        if path in self.content:
            return self.content[path]
        if path not in self.entries:
            return None
        return self._read_base(path)

    def apply_changes(
        self, patch: Patch, changes: Mapping[bytes, bytes | None], modes: Mapping[bytes, int]
    ) -> None:
        """Fold one row's engine result into the state (renames keep the old file's mode)."""
        carried: dict[bytes, int] = {}
        for fp in patch.files:
            if (
                fp.rename
                and fp.old_path is not None
                and fp.old_path in self.entries
                and fp.new_path is not None
            ):
                carried[fp.new_path] = self.entries[fp.old_path][0]
        self.dirty.update(changes)
        self.dirty.update(modes)
        self.uncommitted.update(changes)
        self.uncommitted.update(modes)
        for path, data in changes.items():
            if data is None:
                self.entries.pop(path, None)
                self.content.pop(path, None)
                continue
            mode = modes.get(path) or carried.get(path)
            if mode is None:
                mode = self.entries[path][0] if path in self.entries else DEFAULT_MODE
            self.entries[path] = (mode, forkgit.blob_sha(data))
            self.content[path] = data
        for path, mode in modes.items():
            if path in self.entries and path not in changes:
                self.entries[path] = (mode, self.entries[path][1])


def tree_entries(git_dir: Path, treeish: str) -> dict[bytes, tuple[int, str]]:
    return {p: (int(m, 8), s) for p, (m, s) in forkgit.ls_tree(git_dir, treeish).items()}


def state_of_commit(
    git_dir: Path, commit: str, known: Reader | None = None, *, base: str | None = None
) -> TreeState:
    """The tree of ``commit`` as a state rows can be applied to. Blobs are read from git when asked
    for, except where ``known`` (a pristine tree the commit was built on) has the same bytes. With
    ``base`` (the commit of ``known``), every blob that differs from it is read up front in one git
    call (a rebase's rows change tens of files; one git process each was most of a --continue)."""
    entries = tree_entries(git_dir, commit)
    fetched: dict[str, bytes] = {}
    if base is not None:
        out = gitrun.check(
            [*forkgit.DIFF_TREE_ARGS, "--no-renames", base, commit],
            git_dir=git_dir,
            what=f"listing the files {commit[:12]} changed",
        )
        fields = out.split(b"\0")
        shas = {
            meta.split(b" ")[3].decode()
            for meta in fields[0::2]
            if meta.startswith(b":") and not meta.endswith(b"D")
        }
        fetched = forkgit.read_objects(git_dir, sorted(shas), kind="blob")

    def read(path: bytes) -> bytes | None:
        sha = entries[path][1]
        if sha in fetched:
            return fetched[sha]
        data = known(path) if known is not None else None
        if data is not None and forkgit.blob_sha(data) == sha:
            return data
        return forkgit.read_blob(git_dir, sha)

    return TreeState(entries, read)


def row_result(patch: Patch, read: Reader, *, row: str) -> SeriesResult:
    """One row's engine patch applied at fuzz 0 on ``read``; a failure raises naming the row, file
    and hunk."""
    from hyperqwen_patches.engine.applying import Policy, apply_series

    result = apply_series([patch], read, Policy())
    if not result.ok:
        raise RowDoesNotApply(row, _failure_text(result))
    return result


def apply_row(state: TreeState, patch: Patch, *, row: str) -> None:
    """Apply one row's engine patch on the state; a failure raises naming the row, file and hunk."""
    result = row_result(patch, state.read, row=row)
    state.apply_changes(patch, result.changes, result.modes)


class RowDoesNotApply(FindingError):
    def __init__(self, row: str, detail: str) -> None:
        super().__init__(f"row {row} does not apply at fuzz 0: {detail}")
        self.row = row
        self.detail = detail


def _failure_text(result: SeriesResult) -> str:
    parts = []
    for patch in result.patches:
        for file in patch.files:
            if file.status == "failed" or file.error:
                bad = [h.number for h in file.hunks if h.status in ("failed", "ambiguous")]
                where = f" hunk(s) {', '.join(map(str, bad))}" if bad else ""
                parts.append(f"{show(file.path)}{where}: {file.error or 'failed'}")
        if patch.error:
            parts.append(patch.error)
    return "; ".join(parts) or "failed"


# --- matching rows to fork commits -------------------------------------------------------------------


@record
class Matching:
    pairs: list[tuple[str, forkgit.ForkCommit]] = field(default_factory=list)  # (row name, commit)
    missing_rows: list[tuple[str, forkgit.ForkCommit]] = field(
        default_factory=list
    )  # trailer, no row
    extra_commits: list[forkgit.ForkCommit] = field(default_factory=list)  # no trailer, no row
    vanished_rows: list[str] = field(default_factory=list)  # row with no commit
    duplicate: list[tuple[str, forkgit.ForkCommit]] = field(default_factory=list)
    # A trailer naming a row the manifest has but not here (skipped, or on another export point).
    misplaced: list[tuple[str, forkgit.ForkCommit, str]] = field(default_factory=list)


def match_rows(
    rows: Sequence[tuple[str, str | None]],
    commits: Sequence[forkgit.ForkCommit],
    others: Mapping[str, str] | None = None,
) -> Matching:
    """Pair ``(row name, recorded commit)`` rows with fork commits: trailer first, recorded SHA second.

    ``others`` maps the manifest's other row names to why they are not among ``rows`` ("skipped",
    "on export point X"), so such a commit is named as misplaced, not as a row the manifest lacks."""
    others = others or {}
    names = {name for name, _ in rows}
    by_sha = {sha: name for name, sha in rows if sha}
    out = Matching()
    taken: set[str] = set()
    for commit in commits:
        name = commit.row
        if name is None and commit.sha in by_sha:
            name = by_sha[commit.sha]
        if name is None:
            out.extra_commits.append(commit)
        elif name not in names and name in others:
            out.misplaced.append((name, commit, others[name]))
        elif name not in names:
            out.missing_rows.append((name, commit))
        elif name in taken:
            out.duplicate.append((name, commit))
        else:
            taken.add(name)
            out.pairs.append((name, commit))
    out.vanished_rows = [name for name, _ in rows if name not in taken]
    return out


# --- opening a fork without writing to it -------------------------------------------------------------


@record(frozen=True)
class ForkView:
    """A scratch repository that can read the fork's objects, and the fork's export point tip there."""

    git_dir: Path  # the scratch repository
    tip: str
    label: str


def fetch_branch(view: ForkView, fork: str, branch: str) -> ForkView:
    """Fetch ``branch`` of a URL or bundle into the scratch repository; return the view with its tip."""
    ref = f"refs/hqp/fork/{branch}"
    result = gitrun.run(
        [
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            fork,
            f"+refs/heads/{branch}:{ref}",
        ],
        git_dir=view.git_dir,
    )
    if not result.ok:
        raise GitError(
            f"fetching {branch!r} from {fork} failed: {show(result.stderr).strip()}",
            hint="a bundle needs the pin's base commit as its prerequisite (docs/fork.md)",
        )
    tip = forkgit.require(view.git_dir, ref, what="fork")
    return ForkView(view.git_dir, tip, f"{fork}@{branch}")


# --- the identity check ------------------------------------------------------------------------------


@record(frozen=True)
class StepResult:
    row: str
    commit: str | None
    differing: tuple[bytes, ...]


@record
class ReplayReport:
    export_point: str
    base: str
    tip: str
    steps: list[StepResult] = field(default_factory=list)
    tip_differing: tuple[bytes, ...] = ()
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)


def compare(
    git_dir: Path, state: TreeState, commit: str
) -> tuple[tuple[bytes, ...], dict[bytes, tuple[int, str]]]:
    """Paths whose (mode, blob) differ between the state and ``commit``'s tree."""
    actual = tree_entries(git_dir, commit)
    expected = state.entries
    differing = tuple(
        sorted(p for p in set(actual) | set(expected) if actual.get(p) != expected.get(p))
    )
    return differing, actual


class ForkWalk:
    """The fork's tree at successive commits of a linear ``base..tip``, from each commit's changes.

    Replay compares the series with the fork at every step. Listing the whole tree at each step
    (``ls-tree -r``) made that cost (rows x files in the tree); the commits' changes are already known
    (``forkgit.list_commits``), so the fork is walked forward instead: the tree at commit k is the base
    plus the changes of commits 1..k, and a comparison rechecks only the paths either side changed since
    the last one. The walk applies only to a linear chain on the base; :func:`check_replay` falls back to
    listing the commit's tree otherwise.
    """

    def __init__(self, base_entries: Mapping[bytes, Entry] | BaseEntries) -> None:
        self._base = base_entries
        self._over: dict[bytes, Entry | None] = {}  # path -> entry, None when deleted
        self.position = 0  # commits applied so far

    def get(self, path: bytes) -> tuple[int, str] | None:
        if path in self._over:
            return self._over[path]
        return self._base.get(path)

    def advance(self, commit: forkgit.ForkCommit) -> set[bytes]:
        """Apply one commit's changes; return the paths it changed."""
        changed: set[bytes] = set()
        for c in commit.changes:
            if c.old_path is not None and c.status in ("D", "R"):
                self._over[c.old_path] = None
                changed.add(c.old_path)
            if c.new_path is not None and c.status != "D":
                self._over[c.new_path] = (int(c.new_mode, 8), c.new_sha)
                changed.add(c.new_path)
        self.position += 1
        return changed


def linear_on(base: str, commits: Sequence[forkgit.ForkCommit]) -> bool:
    """Whether ``commits`` are one chain of single-parent commits starting on ``base``."""
    parent = base
    for commit in commits:
        if commit.parents != (parent,):
            return False
        parent = commit.sha
    return True


def short_diff(
    git_dir: Path, state: TreeState, actual: Mapping[bytes, tuple[int, str]], paths: Sequence[bytes]
) -> str:
    """A short unified diff, replay (pristine + series) → fork, for the first differing files."""
    out: list[str] = []
    for path in paths[:3]:
        exp = state.entries.get(path)
        act = actual.get(path)
        if exp and act and exp[1] == act[1]:
            out.append(f"{show(path)}: mode {exp[0]:o} in the series, {act[0]:o} in the fork")
            continue
        old = state.read(path) if exp else b""
        new = forkgit.read_blob(git_dir, act[1]) if act else b""
        lines = list(
            difflib.unified_diff(
                show(old or b"").splitlines(keepends=True),
                show(new).splitlines(keepends=True),
                f"series/{show(path)}" if exp else "/dev/null",
                f"fork/{show(path)}" if act else "/dev/null",
                n=1,
            )
        )
        if len(lines) > SHORT_DIFF_LINES:
            lines = [
                *lines[:SHORT_DIFF_LINES],
                f"... ({len(lines) - SHORT_DIFF_LINES} more lines)\n",
            ]
        out.append("".join(line if line.endswith("\n") else line + "\n" for line in lines).rstrip())
    if len(paths) > 3:
        out.append(f"... and {len(paths) - 3} more file(s)")
    return "\n".join(out)


def check_replay(
    view_dir: Path,
    *,
    export_point: str,
    base: str,
    tip: str,
    rows: Sequence[tuple[str, str | None, Patch | None]],
    read_base: Reader,
    others: Mapping[str, str] | None = None,
    base_entries: BaseEntries | None = None,
) -> ReplayReport:
    """Replay ``rows`` (name, recorded commit, engine patch or None when it cannot be built) on the base
    and compare every step with the fork's commits in ``view_dir``; collect every problem.

    ``base_entries``: the base's entries computed from ``read_base`` when the base commit was built from
    it (check's session); else the base's tree is listed."""
    report = ReplayReport(export_point, base, tip)
    add = report.problems.append
    if not forkgit.commit_exists(view_dir, base):
        add(
            Problem(
                "fork-commits", "error", export_point, f"the base commit {base} is not in the fork"
            )
        )
        return report
    try:
        commits = forkgit.list_commits(view_dir, base, tip)
    except GitError as exc:
        add(
            Problem(
                "fork-commits",
                "error",
                export_point,
                f"the export point is not built on the pin's base commit {base[:12]}: {exc.message}",
            )
        )
        return report
    for commit in commits:
        if len(commit.parents) != 1:
            add(
                Problem(
                    "fork-commits",
                    "error",
                    commit.sha[:12],
                    f"merge commit {commit.subject!r} on the export point",
                )
            )
    matching = match_rows([(n, c) for n, c, _ in rows], commits, others)
    for name, commit in matching.missing_rows:
        add(
            Problem(
                "fork-commits",
                "error",
                name,
                f"missing row: fork commit {commit.sha[:12]} {commit.subject!r} names row {name}, which "
                "the manifest does not have",
                "run export to add it, or drop the commit from the export point",
            )
        )
    for name, commit, why in matching.misplaced:
        add(
            Problem(
                "fork-commits",
                "error",
                name,
                f"fork commit {commit.sha[:12]} {commit.subject!r} carries row {name}, which is {why}",
                f"drop the commit from export point {export_point}, or change the row",
            )
        )
    for commit in matching.extra_commits:
        add(
            Problem(
                "fork-commits",
                "error",
                commit.sha[:12],
                f"extra fork commit {commit.sha[:12]} {commit.subject!r}: no Hqp-Row trailer and no row "
                "records it",
                "run export to add it as a row, or drop it from the export point",
            )
        )
    for name, commit in matching.duplicate:
        add(
            Problem(
                "fork-commits",
                "error",
                name,
                f"row {name} is named by more than one fork commit (also {commit.sha[:12]})",
            )
        )
    for name in matching.vanished_rows:
        add(
            Problem(
                "fork-commits",
                "error",
                name,
                f"row {name} has no commit on export point {export_point} (its commit vanished)",
            )
        )
    paired = dict(matching.pairs)
    order = [n for n, _ in matching.pairs]
    row_order = [n for n, _, _ in rows if n in paired]
    if order != row_order:
        add(
            Problem(
                "replay-identity",
                "error",
                export_point,
                "the fork's commits are in a different order than the manifest's rows",
                f"fork: {', '.join(order)}\nmanifest: {', '.join(row_order)}",
            )
        )
    unpaired = [r for n, r, _ in rows if r and paired.get(n) is None]
    existing = forkgit.commits_existing(view_dir, unpaired)
    for name, recorded, _ in rows:
        paired_commit = paired.get(name)
        if paired_commit is not None and recorded and recorded != paired_commit.sha:
            add(
                Problem(
                    "fork-commits",
                    "error",
                    name,
                    f"row {name} records commit {recorded[:12]}, but its commit on {export_point} is "
                    f"{paired_commit.sha[:12]} (run export to update the manifest)",
                )
            )
        elif recorded and paired_commit is None and recorded not in existing:
            add(
                Problem(
                    "fork-commits",
                    "error",
                    name,
                    f"row {name} records commit {recorded[:12]}, which is not in the fork",
                )
            )

    entries: dict[bytes, tuple[int, str]] | BaseEntries
    if base_entries is None:
        entries = tree_entries(view_dir, base)
        state = TreeState(entries, read_base)
    else:
        entries = base_entries
        state = TreeState(LazyEntries(base_entries), read_base)
    walk = ForkWalk(entries) if linear_on(base, commits) else None
    index = {c.sha: i for i, c in enumerate(commits)}
    differ: set[bytes] = set()  # paths where the state and the walk's fork tree differ

    def recheck(paths: set[bytes]) -> None:
        assert walk is not None
        for path in paths:
            if state.entries.get(path) != walk.get(path):
                differ.add(path)
            else:
                differ.discard(path)

    def compare_at(sha: str) -> tuple[tuple[bytes, ...], Mapping[bytes, tuple[int, str]]]:
        """compare(), through the walk when it can reach ``sha`` going forward."""
        target = index.get(sha, -1) + 1 if sha != base else 0
        if walk is None or target < walk.position or (target == 0 and sha != base):
            return compare(view_dir, state, sha)
        recheck(state.take_dirty())
        while walk.position < target:
            recheck(walk.advance(commits[walk.position]))
        found = tuple(sorted(differ))
        actual = {p: e for p in found if (e := walk.get(p)) is not None}
        return found, actual

    first_reported = False
    last_signature: tuple[tuple[bytes, ...], tuple[str, ...]] | None = None
    for name, _recorded, patch in rows:
        if patch is None:
            add(
                Problem(
                    "replay-identity",
                    "error",
                    name,
                    f"row {name} cannot be built; replay stops here",
                )
            )
            return report
        try:
            apply_row(state, patch, row=name)
        except RowDoesNotApply as exc:
            add(Problem("replay-identity", "error", name, exc.message))
            return report
        step_commit = paired.get(name)
        if step_commit is None:
            report.steps.append(StepResult(name, None, ()))
            continue
        differing, actual = compare_at(step_commit.sha)
        report.steps.append(StepResult(name, step_commit.sha, differing))
        if differing:
            diff = short_diff(view_dir, state, actual, differing)
            # One edit shows at its row's step and at every later step and the tip, the same
            # lines each time: said once, where it starts, with the command that fixes it.
            if _signature(differing, diff) == last_signature:
                continue
            last_signature = _signature(differing, diff)
            add(
                Problem(
                    "replay-identity",
                    "error",
                    name,
                    f"{'first divergent step' if not first_reported else 'step'}: pristine + rows up to "
                    f"{name} differs from fork commit {step_commit.sha[:12]} in {len(differing)} file(s): "
                    + ", ".join(show(p) for p in differing[:5]),
                    diff + "\n" + _fix_hint(name),
                )
            )
            first_reported = True
        else:
            last_signature = None
    differing, actual = compare_at(tip)
    report.tip_differing = differing
    if differing:
        diff = short_diff(view_dir, state, actual, differing)
        if _signature(differing, diff) != last_signature:
            add(
                Problem(
                    "replay-identity",
                    "error",
                    export_point,
                    f"tip: pristine + series differs from {tip[:12]} in {len(differing)} file(s): "
                    + ", ".join(show(p) for p in differing[:5]),
                    diff + "\nfix: run `hyperqwen-patches export` (the fork is the truth)",
                )
            )
    return report


def _signature(paths: Sequence[bytes], diff: str) -> tuple[tuple[bytes, ...], tuple[str, ...]]:
    """What a divergence is, whatever step shows it: the files and the changed lines (not the @@
    line numbers, which later rows move)."""
    changed = tuple(
        line
        for line in diff.splitlines()
        if line[:1] in ("+", "-") and not line.startswith(("+++ ", "--- "))
    )
    return tuple(paths), changed


def _fix_hint(row: str) -> str:
    return (
        f"fix: run `hyperqwen-patches export` to write row {row}'s patch file from the fork (a hand "
        f"edit of the patch file is dropped; to keep one, make it on the fork: "
        f"`hyperqwen-patches edit {row}`, then `hyperqwen-patches refresh`)"
    )


def other_rows(manifest: Manifest, point: str) -> dict[str, str]:
    """The manifest's rows that are not replayed on ``point``, with the reason."""
    first = manifest.export_points[0].name if manifest.export_points else None
    out: dict[str, str] = {}
    for row in manifest.rows:
        where = row.export_point or first
        if row.skip is not None:
            out[row.name] = f"skipped ({row.skip})"
        elif where != point:
            out[row.name] = f"a row of export point {where}"
    return out
