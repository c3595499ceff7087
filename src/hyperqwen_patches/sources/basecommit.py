"""The pristine tree as a git commit whose SHA is the same on every machine.

The fork's branches start from this commit, and the shipped bundle names it as its prerequisite, so its
SHA must depend on nothing but the tree's bytes and the pin. Everything else a commit carries is fixed
here, in one place:

- author and committer: ``hyperqwen-patches <pristine@hyperqwen-patches.invalid>``;
- both dates: 2000-01-01T00:00:00Z (``946684800 +0000``);
- message: ``<package> <version> pristine tree`` (no source label: a ``dir:`` source's path would make
  the SHA machine-dependent, and the same bytes from a wheel, an sdist or a checkout are the same tree);
- every file mode ``100644`` (wheels and checkouts disagree about executable bits; a row that needs one
  changes the mode itself);
- no signature (``commit.gpgSign`` is pinned off in the git runner), no parents, no encoding header.

Objects are written into the target repository's object store with ``git fast-import`` (blobs), a
temporary index (``update-index`` + ``write-tree``) and ``commit-tree``: the repository's work tree,
index, HEAD, refs and config are not touched.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from hyperqwen_patches import gitrun
from hyperqwen_patches.cachedir import entry_lock, entry_shared_lock, staging_dir
from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.records import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hyperqwen_patches.sources.pristinetree import Progress

BASE_NAME = "hyperqwen-patches"
BASE_EMAIL = "pristine@hyperqwen-patches.invalid"
BASE_DATE = "946684800 +0000"  # 2000-01-01T00:00:00Z
BASE_MODE = b"100644"


class TreeSource(Protocol):
    """What the base commit needs of a pristine tree (``pristine.PristineTree`` satisfies it)."""

    def paths(self) -> list[bytes]: ...

    def read(self, path: bytes) -> bytes | None: ...


@record(frozen=True)
class BaseCommit:
    """The base commit written into a repository."""

    commit: str
    tree: str
    files: int


def base_message(package: str, version: str) -> bytes:
    return f"{package} {version} pristine tree\n".encode()


def fixed_identity_env(date: str = BASE_DATE) -> dict[str, str]:
    """Author and committer pinned for commits this tool creates (the base; import's committer)."""
    return {
        "GIT_AUTHOR_NAME": BASE_NAME,
        "GIT_AUTHOR_EMAIL": BASE_EMAIL,
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_NAME": BASE_NAME,
        "GIT_COMMITTER_EMAIL": BASE_EMAIL,
        "GIT_COMMITTER_DATE": date,
    }


def check_tree_path(path: bytes) -> None:
    """A path that can be a git tree entry: relative, no empty, ``.`` or ``..`` component, no NUL."""
    parts = path.split(b"/")
    if (
        not path
        or path.startswith(b"/")
        or b"\0" in path
        or b"\n" in path
        or any(p in (b"", b".", b"..", b".git") for p in parts)
    ):
        raise UsageError(f"{path!r}: not a valid path inside the pristine tree")


def write_blobs(git_dir: Path, contents: Iterable[bytes], *, compression: int = 1) -> list[str]:
    """Write blobs with one ``git fast-import`` and return their SHAs in order.

    The stream is written to git blob by blob, never built whole (vLLM's text files are 97 MB; the
    whole stream and its copy were two thirds of a cold ``check``'s peak memory). ``compression`` is
    zlib's level for the pack fast-import writes (it does not change any SHA): git's default takes
    11 s for those 97 MB here, level 1 5 s, level 0 3.6 s (a scratch repository that lives for one
    check); a later ``git gc`` recompresses as the user likes."""
    count = [0]

    def stream() -> Iterable[bytes]:
        for count[0], data in enumerate(contents, start=1):
            yield b"blob\nmark :%d\ndata %d\n" % (count[0], len(data))
            yield data
            yield b"\n"
        yield b"done\n"

    with tempfile.TemporaryDirectory(prefix="hqp-marks-") as tmp:
        marks = Path(tmp) / "marks"
        gitrun.check(
            ["fast-import", "--quiet", "--done", f"--export-marks={marks}"],
            git_dir=git_dir,
            config=(("core.compression", str(compression)), ("pack.compression", str(compression))),
            input=stream(),
            what="writing blobs",
        )
        if count[0] == 0:
            return []
        by_mark: dict[int, str] = {}
        for line in marks.read_bytes().splitlines():
            mark, sha = line.split(b" ")
            by_mark[int(mark[1:])] = sha.decode()
    return [by_mark[i] for i in range(1, count[0] + 1)]


def write_tree(git_dir: Path, entries: Iterable[tuple[bytes, bytes, str]]) -> str:
    """Write a tree from ``(path, mode, blob sha)`` entries through a temporary index; return its SHA."""
    info = bytearray()
    for path, mode, sha in entries:
        info += mode + b" " + sha.encode() + b"\t" + path + b"\0"
    with tempfile.TemporaryDirectory(prefix="hqp-index-") as tmp:
        index = Path(tmp) / "index"
        gitrun.check(
            ["update-index", "--add", "-z", "--index-info"],
            git_dir=git_dir,
            index=index,
            input=bytes(info),
            what="building the tree",
        )
        out = gitrun.check(["write-tree"], git_dir=git_dir, index=index, what="writing the tree")
    return out.decode().strip()


def commit_tree(
    git_dir: Path,
    tree: str,
    *,
    parents: Iterable[str] = (),
    message: bytes,
    env: dict[str, str],
) -> str:
    """``git commit-tree`` with a pinned identity and dates given in ``env``; return the commit SHA."""
    args = ["commit-tree", "--no-gpg-sign", tree]
    for parent in parents:
        args += ["-p", parent]
    out = gitrun.check(args, git_dir=git_dir, input=message, env=env, what="writing a commit")
    return out.decode().strip()


def write_base_commit(
    git_dir: Path, tree: TreeSource, *, package: str, version: str, compression: int = 1
) -> BaseCommit:
    """Write the deterministic base commit of ``tree`` into ``git_dir``'s object store."""
    paths = sorted(tree.paths())
    for path in paths:
        check_tree_path(path)
    if not paths:
        raise UsageError(f"the pristine tree of {package} {version} has no files")

    def contents() -> Iterable[bytes]:
        for path in paths:
            data = tree.read(path)
            if data is None:
                raise UsageError(f"{path!r}: listed by the pristine tree but unreadable")
            yield data

    shas = write_blobs(git_dir, contents(), compression=compression)
    tree_sha = write_tree(git_dir, ((p, BASE_MODE, s) for p, s in zip(paths, shas, strict=True)))
    commit = commit_tree(
        git_dir, tree_sha, message=base_message(package, version), env=fixed_identity_env()
    )
    return BaseCommit(commit=commit, tree=tree_sha, files=len(paths))


def base_commit_in(
    git_dir: Path,
    tree: TreeSource,
    *,
    label: str | None,
    package: str,
    version: str,
    cache_root: Path | None = None,
) -> str:
    """The base commit of ``tree`` in ``git_dir``'s object store (``import``, ``port --rebase``).

    Where the source's base commit is cached (a release, a large directory: :func:`cached_base`) its
    objects are linked into ``git_dir`` from the cache entry: its packs hard-linked (copied across
    file systems), its few loose objects copied. A pack never changes once written, so the fork keeps
    its own link when the cache is pruned. 97 MB of vLLM blobs were ~2.5 s to write again per run.
    Else the objects are written here (:func:`write_base_commit`)."""
    from hyperqwen_patches.cachedir import cache_dir

    cached = (
        cached_base(cache_root or cache_dir(), label, tree, package=package, version=version)
        if label is not None
        else None
    )
    if cached is None:
        return write_base_commit(git_dir, tree, package=package, version=version).commit
    entry, commit = cached
    if not gitrun.run(["cat-file", "-e", f"{commit}^{{tree}}"], git_dir=git_dir).ok:
        with entry_lock(cache_root or cache_dir(), entry.name):  # not pruned while we link
            _link_objects(entry / "objects", _objects_dir(git_dir))
    return commit


def _objects_dir(git_dir: Path) -> Path:
    out = gitrun.check(
        ["rev-parse", "--git-path", "objects"], git_dir=git_dir, what="locating the object store"
    )
    path = Path(os.fsdecode(out.strip()))
    return path if path.is_absolute() else git_dir / path


def _link_objects(source: Path, target: Path) -> None:
    """Every object file of ``source`` into ``target``; a pack's ``.idx`` last, so git never sees an
    index without its pack. Existing files are kept (the same name is the same content)."""
    files = sorted(
        (p for p in source.rglob("*") if p.is_file() and p.parent.name != "info"),
        key=lambda p: (p.suffix == ".idx", str(p)),
    )
    for path in files:
        dest = target / path.relative_to(source)
        if dest.exists():
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".hqp-{os.getpid()}-{dest.name}")
        try:
            os.link(path, tmp)
        except OSError:
            shutil.copyfile(path, tmp)
        os.replace(tmp, dest)


# --- a cache of base commits for immutable sources ----------------------------------------------------

BASE_MARKER = "hqp-base"
# The marker's second line. Entries without it were built before a release's listing was checked
# against the wheel's RECORD (wheeltree.WheelTree.paths), so one built from a member table that had
# lost a row would lack that file for good: such an entry is not trusted and is built again, once.
BASE_FORMAT = "listing-checked-against-record"
_KEY_RE = re.compile(r"[^A-Za-z0-9._=-]+")


def cached_base(
    cache_root: Path,
    label: str,
    tree: TreeSource,
    *,
    package: str,
    version: str,
    progress: Progress | None = None,
    hold: contextlib.ExitStack | None = None,
) -> tuple[Path, str] | None:
    """A bare repository in the cache holding the base commit of an immutable source, and its SHA.

    Only ``pypi:`` sources are cached: a release's files never change (pypicache.py verifies the wheel
    against its RECORD), while a ``dir:`` or ``git:`` source can. The entry is built under a temporary
    name and renamed into place complete, with the SHA written last (``hqp-base``), so an interrupted
    build leaves nothing a later run trusts; a concurrent run that loses the rename uses the winner's.
    ``check`` borrows the entry through alternates instead of writing 97 MB of blobs on every run.

    ``hold``: the entry is used (borrowed) until that stack closes, and a shared lock on it is kept
    in the stack that long, so ``cache --prune`` (which removes an entry only under its exclusive
    lock, without waiting) leaves it alone; warm runs share the entry, a build waits for them.
    """
    if label.startswith("dir:"):
        return _cached_dir_base(
            cache_root, label, tree, package=package, version=version, progress=progress, hold=hold
        )
    if not label.startswith("pypi:"):
        return None
    root = cache_root / "base"
    entry = root / f"{_KEY_RE.sub('_', label)}.git"
    for _ in range(3):  # a prune or a rebuild may come between the build and the shared lock
        found = _held_valid(cache_root, entry, hold)
        if found is not None:
            return entry, found
        commit, _ = _build_entry(cache_root, entry, tree, label, package, version, progress)
        if hold is None:
            return entry, commit
    raise UsageError(f"the cached base commit {entry} keeps disappearing while it is used")


def _held_valid(
    cache_root: Path, entry: Path, hold: contextlib.ExitStack | None, fingerprint: str | None = None
) -> str | None:
    """The entry's commit if it is valid (and, with ``fingerprint``, of that state); with ``hold``,
    checked under the entry's shared lock, which is then kept in ``hold``."""
    if hold is None:
        found = _valid_entry(entry)
        return found if fingerprint is None or _fingerprint_of(entry) == fingerprint else None
    with contextlib.ExitStack() as local:
        local.enter_context(entry_shared_lock(cache_root, entry.name))
        found = _valid_entry(entry)
        if found is not None and (fingerprint is None or _fingerprint_of(entry) == fingerprint):
            hold.push(local.pop_all())  # stays locked until the caller is done with the entry
            return found
    return None


def _fingerprint_of(entry: Path) -> str | None:
    try:
        return (entry / FINGERPRINT).read_text().strip()
    except OSError:
        return None


def _build_entry(
    cache_root: Path,
    entry: Path,
    tree: TreeSource,
    label: str,
    package: str,
    version: str,
    progress: Progress | None,
    fingerprint: str | None = None,
) -> tuple[str, bool]:
    """(commit, whether this process built it): the entry built under a temporary name and renamed
    into place complete, its marker written last; one another process built meanwhile (or renamed
    first) is taken as it is. A ``dir:`` entry carries the fingerprint of the files it was built from."""
    root = entry.parent
    root.mkdir(parents=True, exist_ok=True)
    with entry_lock(cache_root, entry.name):
        found = _valid_entry(entry)  # built by the process we waited for
        if found is not None and (fingerprint is None or _fingerprint_of(entry) == fingerprint):
            return found, False
        tmp = staging_dir(root, entry.name)
        try:
            gitrun.init_bare(tmp)
            commit = _build(tmp, tree, label, package=package, version=version, progress=progress)
            if fingerprint is not None:
                (tmp / FINGERPRINT).write_text(fingerprint + "\n")
            (tmp / BASE_MARKER).write_text(f"{commit}\n{BASE_FORMAT}\n")
            if entry.exists():  # unusable (no marker, or a missing object): replace it
                shutil.rmtree(entry, ignore_errors=True)
            try:
                os.rename(tmp, entry)
            except OSError:
                found = _valid_entry(entry)  # another process renamed first
                if found is None:
                    raise
                return found, False
            return commit, True
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


def _build(
    git_dir: Path,
    tree: TreeSource,
    label: str,
    *,
    package: str,
    version: str,
    progress: Progress | None,
) -> str:
    """Write the base commit into ``git_dir``, told through ``progress`` (seconds on a release)."""
    telling = (
        progress.waiting(f"building the base commit of {label}")
        if progress is not None
        else contextlib.nullcontext()
    )
    with telling:
        return write_base_commit(git_dir, tree, package=package, version=version).commit


def _valid_entry(entry: Path) -> str | None:
    marker = entry / BASE_MARKER
    try:
        lines = marker.read_text().split("\n")
    except (OSError, UnicodeDecodeError):
        return None
    if len(lines) < 2 or lines[1] != BASE_FORMAT:
        return None  # half written, or built before listings were checked against RECORD
    commit = lines[0].strip()
    probe = gitrun.run(["cat-file", "-e", f"{commit}^{{tree}}"], git_dir=entry)
    return commit if probe.ok else None


# --- directories: cached while their files' stat data is unchanged ------------------------------------

# Smaller trees are rebuilt at every run (well under a second), which also keeps the many small trees of
# tests out of the cache.
DIR_MIN_FILES = 1000
# A file changed this recently might change again within the same timestamp tick without its stat data
# showing it (git's "racily clean" entries): such a tree is not cached until it has been still this long.
RACY_SECONDS = 2.0
FINGERPRINT = "hqp-fingerprint"
STALE_SECONDS = 3600.0


@record(frozen=True)
class DirFingerprint:
    digest: str  # sha1 over (path, size, mtime, ctime, inode) of every file, in path order
    files: int
    newest: float  # the latest mtime or ctime of any file (seconds since the epoch)


def dir_fingerprint(top: Path) -> DirFingerprint:
    """The stat data of every file under ``top`` (``__pycache__`` left out, as the pristine tree does).

    What git's index relies on to know a file unchanged without reading it: any write changes the size,
    the mtime or (always) the ctime, and a replaced file changes the inode. Stat only, no reads: 0.1 s
    for 30,000 files where reading and hashing them took seconds.
    """
    digest = hashlib.sha1()
    files = 0
    newest = 0.0
    stack = [os.fsencode(top)]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        subdirs = []
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.name != b"__pycache__":
                    subdirs.append(entry.path)
                continue
            st = entry.stat(follow_symlinks=False)
            digest.update(
                b"%s\0%d %d %d %d\n"
                % (entry.path, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            )
            files += 1
            newest = max(newest, st.st_mtime, st.st_ctime)
        stack.extend(reversed(subdirs))
    return DirFingerprint(digest.hexdigest(), files, newest)


def _cached_dir_base(
    cache_root: Path,
    label: str,
    tree: TreeSource,
    *,
    package: str,
    version: str,
    progress: Progress | None = None,
    hold: contextlib.ExitStack | None = None,
) -> tuple[Path, str] | None:
    """:func:`cached_base` for a ``dir:`` source: an entry per state of the directory's files.

    The entry's name carries the fingerprint of the files' stat data, so a changed file (or an added,
    removed or replaced one) means a new entry, built once, and never a stale base; entries of the same
    directory built more than an hour earlier are removed when a new one is built.
    """
    top = Path(label.removeprefix("dir:")).resolve() / package
    fingerprint = dir_fingerprint(top)
    if fingerprint.files < DIR_MIN_FILES:
        return None
    key = hashlib.sha1(f"{top}\0{version}".encode()).hexdigest()[:16]
    root = cache_root / "base"
    entry = root / f"dir_{key}_{fingerprint.digest[:16]}.git"
    found = _held_valid(cache_root, entry, hold, fingerprint.digest)
    if found is not None:
        return entry, found
    if time.time() - fingerprint.newest < RACY_SECONDS:
        return None
    commit, built = _build_entry(
        cache_root, entry, tree, label, package, version, progress, fingerprint.digest
    )
    if built:  # entries of the same directory's earlier states, left an hour: gone
        for old in root.glob(f"dir_{key}_*.git"):
            if old != entry and time.time() - old.stat().st_mtime > STALE_SECONDS:
                shutil.rmtree(old, ignore_errors=True)
    if hold is None:
        return entry, commit
    found = _held_valid(cache_root, entry, hold, fingerprint.digest)
    return (entry, found) if found is not None else None  # pruned meanwhile: built per run instead
