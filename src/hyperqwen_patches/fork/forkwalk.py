"""The fork's side of replay: its tree at successive commits, compared with a :class:`TreeState`.

Replay compares the series with the fork at every step. Listing the whole tree at each step
(``ls-tree -r``) made that cost (rows x files in the tree); the commits' changes are already known
(``forkgit.list_commits``), so the fork is walked forward instead: the tree at commit k is the base plus
the changes of commits 1..k, and a comparison rechecks only the paths either side changed since the
last one. The walk applies only to a linear chain on the base; :class:`ForkComparer` falls back to
listing the commit's tree otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from hyperqwen_patches.fork import reading as forkgit
from hyperqwen_patches.fork.treestate import BaseEntries, Entry, TreeState, tree_entries

# Paths that differ between the series and the fork, and the fork's entries for them.
Difference = tuple[tuple[bytes, ...], Mapping[bytes, Entry]]


def compare(
    git_dir: Path, state: TreeState, commit: str
) -> tuple[tuple[bytes, ...], dict[bytes, Entry]]:
    """Paths whose (mode, blob) differ between the state and ``commit``'s tree."""
    actual = tree_entries(git_dir, commit)
    expected = state.entries
    differing = tuple(
        sorted(p for p in set(actual) | set(expected) if actual.get(p) != expected.get(p))
    )
    return differing, actual


class ForkWalk:
    """The fork's tree at successive commits of a linear ``base..tip``, from each commit's changes."""

    def __init__(self, base_entries: Mapping[bytes, Entry] | BaseEntries) -> None:
        self._base = base_entries
        self._over: dict[bytes, Entry | None] = {}  # path -> entry, None when deleted
        self.position = 0  # commits applied so far

    def get(self, path: bytes) -> Entry | None:
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


class ForkComparer:
    """A replay's state compared with the fork at its commits, in order: through a :class:`ForkWalk`
    when the commits are a linear chain on the base and each comparison goes forward, else by listing
    the commit's tree (:func:`compare`)."""

    def __init__(
        self,
        git_dir: Path,
        state: TreeState,
        base: str,
        commits: Sequence[forkgit.ForkCommit],
        entries: Mapping[bytes, Entry] | BaseEntries,
    ) -> None:
        self._git_dir = git_dir
        self._state = state
        self._base = base
        self._commits = commits
        self._walk = ForkWalk(entries) if linear_on(base, commits) else None
        self._index = {c.sha: i for i, c in enumerate(commits)}
        self._differ: set[bytes] = set()  # paths where the state and the walk's fork tree differ

    def at(self, sha: str) -> Difference:
        """compare(), through the walk when it can reach ``sha`` going forward."""
        walk = self._walk
        target = self._index.get(sha, -1) + 1 if sha != self._base else 0
        if walk is None or target < walk.position or (target == 0 and sha != self._base):
            return compare(self._git_dir, self._state, sha)
        self._recheck(walk, self._state.take_dirty())
        while walk.position < target:
            self._recheck(walk, walk.advance(self._commits[walk.position]))
        found = tuple(sorted(self._differ))
        actual = {p: e for p in found if (e := walk.get(p)) is not None}
        return found, actual

    def _recheck(self, walk: ForkWalk, paths: set[bytes]) -> None:
        for path in paths:
            if self._state.entries.get(path) != walk.get(path):
                self._differ.add(path)
            else:
                self._differ.discard(path)
