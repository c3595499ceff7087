"""Reading a fork: its commits between the base and an export point, and a scratch view of its objects.

Shared by ``exporting``, ``importing`` and ``replay``. Everything here is read-only on the user's
repository: commands that must write (format-patch reads attributes, a fetch writes objects) run in a
*scratch* bare repository of our own whose object store borrows the user's through
``objects/info/alternates``. The scratch repository has no config, no ``info/attributes``, no hooks and no
work tree, so nothing the user's repository carries can leak into what we print or compare.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from hyperqwen_patches import gitrun
from hyperqwen_patches.display import show
from hyperqwen_patches.errors import GitError, UsageError
from hyperqwen_patches.records import record

# The trailer that names a fork commit's manifest row (docs/fork.md, "Matching rows to commits").
ROW_TRAILER = b"Hqp-Row"
_TRAILER_RE = re.compile(rb"^Hqp-Row:[ \t]*(?P<name>\S+)[ \t]*$", re.IGNORECASE)


@record(frozen=True)
class Change:
    """One path changed by a commit (``git diff-tree -r -M`` raw record)."""

    status: str  # A, M, D, R (rename), T (type change)
    old_path: bytes | None
    new_path: bytes | None
    old_mode: str
    new_mode: str
    old_sha: str
    new_sha: str


@record(frozen=True)
class ForkCommit:
    """A commit on an export point, with what export, import and replay need to know about it."""

    sha: str
    parents: tuple[str, ...]
    tree: str
    message: bytes  # the raw commit message (after the header)
    subject: str
    row: str | None  # the Hqp-Row trailer, when present
    changes: tuple[Change, ...]


@contextlib.contextmanager
def scratch_repo(borrow: Path | None = None, *, also: Sequence[Path] = ()) -> Iterator[Path]:
    """A temporary bare repository; it reads the objects of ``borrow`` and ``also`` (read-only)."""
    tmp = Path(tempfile.mkdtemp(prefix="hqp-scratch-"))
    try:
        git_dir = gitrun.init_bare(tmp / "repo.git")
        lenders = [b for b in (borrow, *also) if b is not None]
        if lenders:
            lines = b"".join(bytes(common_objects_dir(b)) + b"\n" for b in lenders)
            (git_dir / "objects" / "info" / "alternates").write_bytes(lines)
        yield git_dir
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def lazy_scratch_repo() -> Iterator[Callable[[], Path]]:
    """:func:`scratch_repo`, made on the first call of what this yields (most runs need none)."""
    with contextlib.ExitStack() as stack:
        made: list[Path] = []

        def get() -> Path:
            if not made:
                made.append(stack.enter_context(scratch_repo()))
            return made[0]

        yield get


def lend(git_dir: Path, objects: Path) -> None:
    """Let ``git_dir`` (a scratch repository) read the objects in ``objects`` (a bare repository's
    ``objects`` directory) too."""
    alternates = git_dir / "objects" / "info" / "alternates"
    existing = alternates.read_bytes() if alternates.exists() else b""
    alternates.write_bytes(existing + os.fsencode(objects.resolve()) + b"\n")


def common_objects_dir(git_dir: Path) -> Path:
    """The object directory of a repository (its common dir's, for a linked work tree)."""
    out = gitrun.check(
        ["rev-parse", "--git-common-dir"], git_dir=git_dir, what=f"reading {git_dir}"
    )
    common = Path(out.decode().strip())
    if not common.is_absolute():
        common = (git_dir / common).resolve()
    return common / "objects"


def resolve(git_dir: Path, rev: str, *, what: str) -> str | None:
    """The commit SHA of ``rev`` in ``git_dir``, or None when it does not exist."""
    result = gitrun.run(
        ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"],
        git_dir=git_dir,
    )
    if not result.ok:
        return None
    return result.stdout.decode().strip()


def require(git_dir: Path, rev: str, *, what: str) -> str:
    sha = resolve(git_dir, rev, what=what)
    if sha is None:
        raise GitError(f"{what}: {rev!r} is not a commit in {git_dir}")
    return sha


def fetch_branch(git_dir: Path, fork: str, branch: str) -> str:
    """Fetch ``branch`` of a URL or bundle into the scratch repository ``git_dir``; return its tip."""
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
        git_dir=git_dir,
    )
    if not result.ok:
        raise GitError(
            f"fetching {branch!r} from {fork} failed: {show(result.stderr).strip()}",
            hint="a bundle needs the pin's base commit as its prerequisite (docs/fork.md)",
        )
    return require(git_dir, ref, what="fork")


def is_ancestor(git_dir: Path, ancestor: str, descendant: str) -> bool:
    result = gitrun.run(["merge-base", "--is-ancestor", ancestor, descendant], git_dir=git_dir)
    if result.code not in (0, 1):
        raise GitError(f"git merge-base failed: {show(result.stderr).strip()}")
    return result.code == 0


def commit_exists(git_dir: Path, sha: str) -> bool:
    return sha in commits_existing(git_dir, [sha])


def commits_existing(git_dir: Path, shas: Sequence[str]) -> set[str]:
    """Which of ``shas`` name commits in the fork: one ``cat-file --batch-check`` for all of them (a
    process per SHA cost 105 s for a manifest of 10,000 rows)."""
    if not shas:
        return set()
    out = gitrun.check(
        ["cat-file", "--batch-check=%(objectname) %(objecttype)"],
        git_dir=git_dir,
        input="".join(f"{sha}\n" for sha in shas).encode(),
        what=f"looking up {len(shas)} commits",
    )
    found: set[str] = set()
    for sha, line in zip(shas, out.decode("ascii", "replace").splitlines(), strict=False):
        # "<sha> commit", or "<sha> missing" / "<name> ambiguous" for what is not one
        if line.split(" ")[-1] == "commit" and line.split(" ")[0].startswith(sha.lower()):
            found.add(sha)
    return found


def row_trailer(message: bytes) -> str | None:
    """The ``Hqp-Row:`` trailer of a commit message (its last paragraph), or None."""
    paragraphs = [p for p in message.rstrip(b"\n").split(b"\n\n") if p.strip()]
    if len(paragraphs) < 2:
        return None
    names = []
    for line in paragraphs[-1].split(b"\n"):
        match = _TRAILER_RE.match(line)
        if match:
            names.append(match.group("name").decode("utf-8", "backslashreplace"))
    if len(names) > 1:
        raise UsageError(f"a commit names more than one row: Hqp-Row {', '.join(names)}")
    return names[0] if names else None


def read_commit(git_dir: Path, sha: str) -> tuple[str, tuple[str, ...], bytes]:
    """(tree, parents, message) of a commit, from its raw object."""
    raw = gitrun.check(["cat-file", "commit", sha], git_dir=git_dir, what=f"reading commit {sha}")
    return parse_commit(raw)


def parse_commit(raw: bytes) -> tuple[str, tuple[str, ...], bytes]:
    """(tree, parents, message) of a raw commit object."""
    header, _, message = raw.partition(b"\n\n")
    tree = ""
    parents: list[str] = []
    for line in header.split(b"\n"):
        if line.startswith(b"tree "):
            tree = line[5:].decode()
        elif line.startswith(b"parent "):
            parents.append(line[7:].decode())
    return tree, tuple(parents), message


DIFF_TREE_ARGS = ("diff-tree", "-r", "-z", "--raw", "--no-abbrev", "--no-ext-diff", "--no-textconv")


def diff_tree(git_dir: Path, old: str, new: str, *, renames: bool = True) -> tuple[Change, ...]:
    """The raw changes between two trees or commits (``-r``, renames found at git's default 50%)."""
    args = [*DIFF_TREE_ARGS, "--find-renames" if renames else "--no-renames", old, new]
    out = gitrun.check(
        args, git_dir=git_dir, what=f"comparing {old[:12]}..{new[:12]}", config=DIFF_CONFIG
    )
    changes, _ = _raw_records(out.split(b"\0"), 0)
    return changes


def diff_commits(git_dir: Path, shas: Sequence[str]) -> dict[str, tuple[Change, ...]]:
    """:func:`diff_tree` of each single-parent commit against its parent, in one ``diff-tree --stdin``.

    One git process for the whole export point instead of one per commit (a 1,000-row series spent
    seconds starting processes). ``--always`` prints each commit's header even when it changes nothing.
    """
    if not shas:
        return {}
    args = [*DIFF_TREE_ARGS, "--find-renames", "--stdin", "--always"]
    out = gitrun.check(
        args,
        git_dir=git_dir,
        input="".join(f"{sha}\n" for sha in shas).encode(),
        what=f"comparing {len(shas)} commits with their parents",
        config=DIFF_CONFIG,
    )
    fields = out.split(b"\0")
    result: dict[str, tuple[Change, ...]] = {}
    i = 0
    # Each commit's output is its SHA (a field not starting with ':'), then its raw records.
    while i < len(fields) - 1:
        sha = fields[i].decode()
        result[sha], i = _raw_records(fields, i + 1)
    missing = set(shas) - set(result)
    if missing:
        raise GitError(f"git diff-tree --stdin did not report {sorted(missing)[0][:12]}")
    return result


def _raw_records(fields: Sequence[bytes], i: int) -> tuple[tuple[Change, ...], int]:
    """Parse ``-z --raw`` records from ``fields[i]`` up to the first field that is not a record."""
    changes: list[Change] = []
    while i < len(fields) - 1 and fields[i].startswith(b":"):
        old_mode, new_mode, old_sha, new_sha, status = fields[i][1:].decode().split(" ")
        letter = status[0]
        old_path: bytes | None
        new_path: bytes | None
        if letter in "RC":
            old_path, new_path = fields[i + 1], fields[i + 2]
            i += 3
        else:
            path = fields[i + 1]
            old_path = None if letter == "A" else path
            new_path = None if letter == "D" else path
            i += 2
        changes.append(Change(letter, old_path, new_path, old_mode, new_mode, old_sha, new_sha))
    return tuple(changes), i


# diff-tree's rename detection and output must not follow the repository's config either.
DIFF_CONFIG: tuple[tuple[str, str], ...] = (
    ("diff.renames", "true"),
    ("diff.renameLimit", "1000"),
    ("diff.relative", "false"),
    ("diff.external", ""),
)


def list_commits(git_dir: Path, base: str, tip: str) -> list[ForkCommit]:
    """The commits of ``base..tip`` in apply order (oldest first), each with its changes.

    Refused: a ``base`` that is not an ancestor of ``tip`` (the export point is not built on this base).
    Merge commits are listed (with their parents) so that callers can refuse them with a clear message.
    Four git processes whatever the number of commits; the result is kept for the process's lifetime
    (commits named by SHA never change), so the replay and export checks of one ``check`` share it.
    """
    return list(_list_commits(git_dir, base, tip))


@functools.lru_cache(maxsize=16)
def _list_commits(git_dir: Path, base: str, tip: str) -> tuple[ForkCommit, ...]:
    if not is_ancestor(git_dir, base, tip):
        raise GitError(
            f"{tip[:12]} does not descend from the base commit {base[:12]}",
            hint="rebase the export point onto the pin's base commit (docs/fork.md)",
        )
    out = gitrun.check(
        ["rev-list", "--reverse", "--topo-order", f"{base}..{tip}"],
        git_dir=git_dir,
        what=f"listing {base[:12]}..{tip[:12]}",
    )
    shas = out.decode().split()
    raw = read_objects(git_dir, shas, kind="commit")
    parsed = {sha: parse_commit(raw[sha]) for sha in shas}
    changes = diff_commits(git_dir, [sha for sha in shas if len(parsed[sha][1]) == 1])
    commits: list[ForkCommit] = []
    for sha in shas:
        tree, parents, message = parsed[sha]
        subject = (
            message.split(b"\n\n", 1)[0].strip().replace(b"\n", b" ").decode("utf-8", "replace")
        )
        commits.append(
            ForkCommit(
                sha, parents, tree, message, subject, row_trailer(message), changes.get(sha, ())
            )
        )
    return tuple(commits)


def read_objects(git_dir: Path, shas: Sequence[str], *, kind: str) -> dict[str, bytes]:
    """The raw content of each object, by SHA, from one ``git cat-file --batch``; each must be ``kind``."""
    if not shas:
        return {}
    out = gitrun.check(
        ["cat-file", "--batch"],
        git_dir=git_dir,
        input="".join(f"{sha}\n" for sha in shas).encode(),
        what=f"reading {len(shas)} {kind} objects",
    )
    found: dict[str, bytes] = {}
    pos = 0
    for sha in shas:
        end = out.index(b"\n", pos)
        header = out[pos:end].split(b" ")
        if len(header) != 3 or header[1] != kind.encode():
            raise GitError(f"{sha}: not a {kind} object ({out[pos:end].decode(errors='replace')})")
        size = int(header[2])
        found[sha] = out[end + 1 : end + 1 + size]
        pos = end + 1 + size + 1  # the content is followed by a newline
    return found


def read_blob(git_dir: Path, sha: str) -> bytes:
    return gitrun.check(["cat-file", "blob", sha], git_dir=git_dir, what=f"reading blob {sha}")


def ls_tree(git_dir: Path, treeish: str) -> dict[bytes, tuple[str, str]]:
    """path -> (mode, blob sha) for every file of a tree (recursive)."""
    out = gitrun.check(
        ["ls-tree", "-r", "-z", "--full-tree", treeish],
        git_dir=git_dir,
        what=f"listing tree {treeish[:12]}",
    )
    entries: dict[bytes, tuple[str, str]] = {}
    for entry in out.split(b"\0"):
        if not entry:
            continue
        meta, _, path = entry.partition(b"\t")
        mode, _kind, sha = meta.decode().split(" ")
        entries[path] = (mode, sha)
    return entries


def blob_sha(data: bytes) -> str:
    """The git blob SHA-1 of ``data`` (what ``git hash-object`` prints), without writing anything."""
    import hashlib

    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def author_env(raw: bytes) -> dict[str, str]:
    """The identity env of a commit (its raw object, or just its header) as ``import`` writes one:
    its author kept, the committer pinned to the tool with the author's date, so the same content
    gives the same SHA on any machine."""
    from hyperqwen_patches.sources import basecommit

    header = raw.partition(b"\n\n")[0]
    for line in header.split(b"\n"):
        if line.startswith(b"author "):
            ident, _, stamp = line[len(b"author ") :].rpartition(b"> ")
            name, _, email = ident.partition(b" <")
            env = basecommit.fixed_identity_env(stamp.decode())
            env["GIT_AUTHOR_NAME"] = name.decode("utf-8", "surrogateescape")
            env["GIT_AUTHOR_EMAIL"] = email.decode("utf-8", "surrogateescape")
            return env
    raise GitError("a commit without an author line")
