"""The pristine tree: the unmodified release, from PyPI (cached), a git checkout, or a directory.

Sources (``parse_source``):

- ``pypi:vllm==0.29.0`` — the wheel, fetched with ``pip download --no-deps --only-binary=:all:`` into the
  cache and read straight from the zip: the entry's member table (``wheelmembers.py``) keeps each text
  member's offset, so a read is one lookup, two ``pread`` calls and an inflate (under 1 ms) and no run
  parses the central directory again (~30 ms for the 316 MB wheel's ~4,900 members, 0.13 s for 30,000:
  a cost that grew with the tree; measured here 2026-11-30). Nothing is extracted.
  ``pypi:vllm==0.29.0#sdist``
  takes the source distribution instead (extracted once into the cache: a tar.gz has no random access).
  ``pypi`` alone means ``pypi:<package>==<version>`` of the caller.
- ``git:PATH@REF`` — the ``vllm/`` subtree of a checkout at REF (a tag, branch or commit).
- ``dir:PATH`` — any directory holding ``vllm/`` (an installed ``site-packages``, an unpacked sdist).

The tree is the package's *text* files, paths relative to the directory that holds the package
(``b"vllm/envs.py"``). Binaries (``.so`` files, images, the ``vllm-rs`` executable: anything with a NUL
byte in its first 8,000 bytes, git's own rule) are left out and listed by ``binaries()``.

The cache (``$HQP_CACHE``, else ``$XDG_CACHE_HOME/hyperqwen-patches``, else ``~/.cache/hyperqwen-patches``):
``pypi/<package>-<version>-<wheel|sdist>/`` holds the downloaded file and ``index.json``. An entry is
built under a temporary name and renamed into place only when complete and verified (every member's
sha256 against the wheel's RECORD), so an interrupted run leaves nothing a later run trusts. A file lock
per entry makes concurrent runs wait for the one that downloads. A warm open checks the file's size and
mtime against the index; every member read is compared with its RECORD hash (sha256), and a mismatch,
a bad local header or a short read discards the entry and fetches it again. ``port`` reads other
releases' wheels through the same cache.
"""

from __future__ import annotations

import collections
import contextlib
import csv
import hashlib
import io
import json
import logging
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import time
import uuid
import zlib
from base64 import urlsafe_b64encode
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from hyperqwen_patches.cachedir import cache_dir
from hyperqwen_patches.errors import EnvironmentProblem, UsageError
from hyperqwen_patches.sources.spec import parse_source

if TYPE_CHECKING:
    import zipfile

    from hyperqwen_patches.sources.wheelmembers import Member

log = logging.getLogger(__name__)

# 2: the members' hashes and offsets in the member table (wheelmembers.py); 1: every member's hash in
# index.json (upgraded in place on first use, no download).
INDEX_FORMAT = 2
_READABLE_FORMATS = (1, 2)
SNIFF_BYTES = 8000  # git's buffer for its binary heuristic (a NUL byte in the first 8,000 bytes)


class CorruptCacheError(EnvironmentProblem):
    """A cached file failed its integrity check (it is discarded and fetched again)."""


class Progress(Protocol):
    """How a long step reports itself; the CLI passes a rich implementation, library callers none."""

    def waiting(self, label: str) -> AbstractContextManager[None]: ...

    def download(self, label: str) -> AbstractContextManager[Callable[[int, int | None], None]]: ...


class _Quiet:
    def waiting(self, label: str) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def download(self, label: str) -> AbstractContextManager[Callable[[int, int | None], None]]:
        return contextlib.nullcontext(lambda done, total: None)


class PristineTree:
    """Read-only view of a pristine tree: text files by path, binaries listed."""

    label: str

    def read(self, path: bytes) -> bytes | None:
        """The bytes of a text file, or ``None`` when the tree has no such text file."""
        raise NotImplementedError

    def paths(self) -> list[bytes]:
        """Every text file, sorted."""
        raise NotImplementedError

    def binaries(self) -> list[bytes]:
        """The files left out of the tree because they are binary, sorted."""
        raise NotImplementedError

    def close(self) -> None:
        """Release open files (idempotent)."""

    def __enter__(self) -> PristineTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_pristine(
    source: str,
    *,
    package: str = "vllm",
    version: str,
    cache: Path | None = None,
    progress: Progress | None = None,
) -> PristineTree:
    """Open the pristine tree named by ``source`` (fetching it into the cache if needed)."""
    spec = parse_source(source)
    if spec.kind == "dir":
        assert spec.path is not None
        return DirTree(Path(spec.path), package=package)
    if spec.kind == "git":
        assert spec.path is not None and spec.ref is not None
        return GitTree(Path(spec.path), spec.ref, package=package)
    pkg = spec.package or package
    ver = spec.version or version
    store = PypiCache(cache or cache_dir(), progress or _Quiet())
    if spec.sdist:
        return store.sdist_tree(pkg, ver)
    return store.wheel_tree(pkg, ver)


# --- directory and git sources ----------------------------------------------------------------------


def _is_binary(head: bytes) -> bool:
    return b"\0" in head[:SNIFF_BYTES]


class DirTree(PristineTree):
    """A directory holding ``<package>/`` on disk; text-ness is sniffed per file."""

    def __init__(self, base: Path, *, package: str) -> None:
        if not (base / package).is_dir():
            hint = None
            if base.name == package and (base / "__init__.py").is_file():
                hint = f"give the directory that holds {package}/: dir:{base.parent}"
            raise UsageError(f"source dir:{base}: no {package}/ directory in it", hint=hint)
        self.base = base
        self.package = package
        self.label = f"dir:{base}"
        self._listing: tuple[list[bytes], list[bytes]] | None = None

    def _file(self, path: bytes) -> Path | None:
        if not path.startswith(self.package.encode() + b"/") or b"/../" in b"/" + path + b"/":
            return None
        return self.base / os.fsdecode(path)

    def read(self, path: bytes) -> bytes | None:
        file = self._file(path)
        if file is None or not file.is_file():
            return None
        data = file.read_bytes()
        return None if _is_binary(data) else data

    def _list(self) -> tuple[list[bytes], list[bytes]]:
        if self._listing is None:
            text: list[bytes] = []
            binary: list[bytes] = []
            top = os.fsencode(self.base)
            for dirpath, dirnames, filenames in os.walk(os.path.join(top, self.package.encode())):
                dirnames[:] = [d for d in dirnames if d != b"__pycache__"]
                for name in filenames:
                    full = os.path.join(dirpath, name)
                    rel = os.path.relpath(full, top)
                    with open(full, "rb") as fh:
                        (binary if _is_binary(fh.read(SNIFF_BYTES)) else text).append(rel)
            self._listing = (sorted(text), sorted(binary))
        return self._listing

    def paths(self) -> list[bytes]:
        return list(self._list()[0])

    def binaries(self) -> list[bytes]:
        return list(self._list()[1])


def _git(args: list[str], git_dir: Path) -> tuple[int, bytes, bytes]:
    """A read of the source repository through the one git runner: the same isolation as the fork's
    reads (no user or repository config that changes output, no GIT_DIR from the environment)."""
    from hyperqwen_patches import gitrun

    result = gitrun.run(args, git_dir=git_dir)
    return result.code, result.stdout, result.stderr


class GitTree(PristineTree):
    """The ``<package>/`` subtree of a git checkout at a ref; files read with ``git cat-file``."""

    def __init__(self, repo: Path, ref: str, *, package: str) -> None:
        self.repo = repo
        self.package = package
        self.label = f"git:{repo}@{ref}"
        if not repo.exists():
            raise UsageError(f"source {self.label}: {repo} does not exist")
        from hyperqwen_patches import gitrun

        self.git_dir = gitrun.git_dir_of(repo)
        code, out, err = _git(
            ["rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}"], self.git_dir
        )
        if code != 0:
            raise UsageError(
                f"source {self.label}: {ref!r} is not a commit in {repo} "
                f"({err.decode(errors='replace').strip().splitlines()[-1] if err.strip() else 'git failed'})"
            )
        self.commit = out.strip().decode()
        self._listing: tuple[list[bytes], list[bytes]] | None = None

    def read(self, path: bytes) -> bytes | None:
        if not path.startswith(self.package.encode() + b"/"):
            return None
        code, out, _ = _git(
            ["cat-file", "blob", f"{self.commit}:{os.fsdecode(path)}"], self.git_dir
        )
        if code != 0 or _is_binary(out):
            return None
        return out

    def _list(self) -> tuple[list[bytes], list[bytes]]:
        if self._listing is None:
            code, out, err = _git(
                ["ls-tree", "-r", "-z", "-l", "--full-tree", self.commit, "--", self.package],
                self.git_dir,
            )
            if code != 0:
                raise UsageError(
                    f"source {self.label}: git ls-tree failed: {err.decode(errors='replace').strip()}"
                )
            every: list[bytes] = []
            empty: set[bytes] = set()
            for entry in filter(None, out.split(b"\0")):  # "<mode> blob <sha> <size>\t<path>"
                meta, _, path = entry.partition(b"\t")
                if meta.split()[1] != b"blob":
                    continue  # a gitlink (submodule) has no content here
                every.append(path)
                if meta.split()[3] == b"0":
                    empty.add(path)
            # git grep -I lists the text files by git's own binary rule (NUL in the first 8,000 bytes);
            # an empty file has no line to match, so it is text by its size (a wheel lists it too).
            code, out, _ = _git(
                ["grep", "-I", "-z", "--name-only", "-e", "", self.commit, "--", self.package],
                self.git_dir,
            )
            prefix = self.commit.encode() + b":"
            text = {p.removeprefix(prefix) for p in out.split(b"\0") if p} | empty
            self._listing = (sorted(text), sorted(p for p in every if p not in text))
        return self._listing

    def paths(self) -> list[bytes]:
        return list(self._list()[0])

    def binaries(self) -> list[bytes]:
        return list(self._list()[1])


# --- the PyPI cache -----------------------------------------------------------------------------------


def _record_hash(data: bytes) -> str:
    return "sha256=" + urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


class _BadMember(Exception):
    """A member that cannot be read from where the index says it is (or reads to other bytes)."""


_LOCAL_HEADER = b"PK\x03\x04"
_RECENT_MEMBERS = 1024  # members kept in memory per open wheel (text files: tens of KB each)
_LOCAL_HEADER_SIZE = 30


class WheelTree(PristineTree):
    """A cached wheel read in place: each member found through the member table, checked against RECORD."""

    def __init__(
        self, entry: Path, index: dict[str, Any], *, on_corrupt: Callable[[], WheelTree] | None
    ) -> None:
        from hyperqwen_patches.sources import wheelmembers

        self.entry = entry
        self.index = index
        self.label = index["label"]
        self._members = wheelmembers.Members(entry / wheelmembers.FILE)
        self._on_corrupt = on_corrupt
        self._replacement: WheelTree | None = None
        self._recover_lock = threading.Lock()
        # The files the series touches are read by several checks of one run (a 200-patch check read
        # 362 members 1,067 times, each decompressed and hashed): the last few hundred are kept.
        self._recent: collections.OrderedDict[bytes, bytes | None] = collections.OrderedDict()
        self._recent_lock = threading.Lock()
        self._recorded: frozenset[bytes] | None = None  # RECORD's text members, read on demand
        try:
            self._fd: int | None = os.open(entry / index["file"], os.O_RDONLY)
        except OSError:
            self._members.close()
            raise

    def _expected_paths(self) -> frozenset[bytes]:
        """The text members the table must hold: the package's files the wheel's RECORD lists, less
        the binaries. Read from the wheel itself (its central directory: ~30 ms for vLLM's), once per
        open tree and only when a read misses or the whole listing is wanted, so a warm run that finds
        every member pays nothing."""
        if self._recorded is None:
            import zipfile

            package = self.label.removeprefix("pypi:").split("==")[0]
            binaries = set(self.index["binaries"])
            try:
                with zipfile.ZipFile(self.entry / self.index["file"]) as zf:
                    names = zf.namelist()
                    name = next((n for n in names if n.endswith(".dist-info/RECORD")), None)
                    if name is None:
                        raise _BadMember("the wheel has no RECORD")
                    rows = list(csv.reader(io.StringIO(zf.read(name).decode())))
            except (zipfile.BadZipFile, UnicodeDecodeError, csv.Error) as exc:
                raise _BadMember(f"the wheel's RECORD does not read: {exc}") from None
            self._recorded = frozenset(
                row[0].encode("utf-8", errors="surrogateescape")
                for row in rows
                if row
                and row[0].startswith(f"{package}/")
                and not row[0].endswith("/")
                and row[0] not in binaries
            )
        return self._recorded

    def _member(self, path: bytes) -> bytes | None:
        member = self._members.get(path)
        if member is None:
            # Not in the table: absent from the release, or a row lost from the table (a release
            # file would then silently "not exist", and a base commit built from it lack the file).
            if path in self._expected_paths():
                raise _BadMember(
                    f"{_show_path(path)}: listed in the wheel's RECORD but missing from the member "
                    f"table {self.entry / 'members.sqlite'}"
                )
            return None
        assert self._fd is not None
        head = os.pread(self._fd, _LOCAL_HEADER_SIZE + len(path), member.header)
        if len(head) != _LOCAL_HEADER_SIZE + len(path) or not head.startswith(_LOCAL_HEADER):
            raise _BadMember(f"{_show_path(path)}: no local file header at offset {member.header}")
        name_len, extra_len = struct.unpack_from("<HH", head, 26)
        # The member at that offset must be the one asked for: a damaged table (two rows' offsets
        # swapped) would otherwise hand one file's bytes, matching their own hash, out as another's.
        if head[_LOCAL_HEADER_SIZE:] != path or name_len != len(path):
            raise _BadMember(
                f"{_show_path(path)}: the member at offset {member.header} is another file"
            )
        start = member.header + _LOCAL_HEADER_SIZE + name_len + extra_len
        raw = os.pread(self._fd, member.size, start)
        if len(raw) != member.size:
            raise _BadMember(f"{_show_path(path)}: truncated ({len(raw)} of {member.size} bytes)")
        if member.method == 0:  # stored
            data = raw
        elif member.method == 8:  # deflated, a raw stream
            data = zlib.decompress(raw, -15)
        else:
            raise _BadMember(f"{_show_path(path)}: compression method {member.method}")
        if _record_hash(data) != member.hash:
            raise _BadMember(f"{_show_path(path)}: hash differs from the wheel's RECORD")
        return data

    def read(self, path: bytes) -> bytes | None:
        if self._replacement is not None:
            return self._replacement.read(path)
        with self._recent_lock:
            if path in self._recent:
                self._recent.move_to_end(path)
                return self._recent[path]
        data = self._read_checked(path)
        with self._recent_lock:
            self._recent[path] = data
            while len(self._recent) > _RECENT_MEMBERS:
                self._recent.popitem(last=False)
        return data

    def _read_checked(self, path: bytes) -> bytes | None:
        """One member, verified against RECORD; a damaged cache entry is fetched again."""
        if self._replacement is not None:
            return self._replacement.read(path)
        import sqlite3  # loaded already by the member table; imported here to keep dir: runs lean

        try:
            return self._member(path)
        except (_BadMember, OSError, zlib.error, sqlite3.Error) as exc:
            self._recover(exc)
            assert self._replacement is not None
            return self._replacement.read(path)

    def paths(self) -> list[bytes]:
        if self._replacement is not None:
            return self._replacement.paths()
        import sqlite3

        try:
            listed = self._members.paths()
            # The listing builds base commits (cached): verified against RECORD first, so a lost
            # or an extra row never becomes a cached tree without that file (or with another).
            expected = self._expected_paths()
            if len(listed) != len(expected) or not expected.issuperset(listed):
                lost = sorted(expected.difference(listed))
                extra = sorted(set(listed).difference(expected))
                what = (
                    f"{len(lost)} RECORD file(s) missing from it (first: {_show_path(lost[0])})"
                    if lost
                    else f"{len(extra)} row(s) RECORD does not list (first: {_show_path(extra[0])})"
                )
                raise _BadMember(f"member table {self.entry / 'members.sqlite'}: {what}")
            return listed
        except (sqlite3.Error, _BadMember, OSError) as exc:
            # a damaged member table: fetched again, as a bad member is
            self._recover(exc)
            return self.paths()

    def _recover(self, exc: Exception) -> None:
        """Fetch the wheel again, once however many threads saw the damage. The old handles stay
        open until :meth:`close`: another thread may still be reading through them (its read is
        still checked against RECORD, and a bad one lands here and finds the replacement)."""
        with self._recover_lock:
            if self._replacement is not None:
                return
            log.warning("cached wheel %s is corrupt (%s); fetching it again", self.entry, exc)
            if self._on_corrupt is None:
                raise CorruptCacheError(f"cached wheel {self.entry} is corrupt: {exc}") from None
            self._replacement = self._on_corrupt()

    def binaries(self) -> list[bytes]:
        return sorted(p.encode("utf-8", errors="surrogateescape") for p in self.index["binaries"])

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._members.close()
        if self._replacement is not None:
            self._replacement.close()


def _release_key(version: str) -> str:
    """One spelling per release for the cache: ``0.30`` and ``0.30.0`` are the same version
    (PEP 440 pads the release with zeros), so they share one entry, named as the three-part form
    (the existing entries' names). Other versions are kept as written."""
    parts = version.split(".")
    if 0 < len(parts) < 3 and all(p.isdigit() for p in parts):
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _show_path(path: bytes) -> str:
    return path.decode("utf-8", errors="backslashreplace")


def _member_table(zf: zipfile.ZipFile, text: dict[str, str]) -> Iterator[tuple[bytes, Member]]:
    """The member table's rows for the text members ``text`` (name → RECORD hash) of the open zip."""
    from hyperqwen_patches.sources.wheelmembers import Member

    for info in zf.infolist():
        expected = text.get(info.filename)
        if expected is not None:
            yield (
                info.filename.encode("utf-8", errors="surrogateescape"),
                Member(expected, info.header_offset, info.compress_size, info.compress_type),
            )


@contextlib.contextmanager
def _locked(lock_path: Path, progress: Progress, label: str) -> Iterator[None]:
    import fcntl

    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+b") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            with progress.waiting(f"waiting for another process fetching {label}"):
                fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


_NET_ERRORS = re.compile(
    rb"connection error|NewConnectionError|ConnectTimeout|ReadTimeout|Connection refused|Network is unreachable|"
    rb"Temporary failure in name resolution|Name or service not known|No route to host|"
    rb"ProxyError|SSLError|Max retries exceeded|Could not fetch URL"
)
_NOT_FOUND = re.compile(rb"No matching distribution found|Could not find a version that satisfies")
_SIZE_LINE = re.compile(rb"\(([0-9.]+) (kB|MB|GB)\)")


class PypiCache:
    """Wheels and sdists of PyPI releases, fetched once, verified, shared by every command."""

    def __init__(self, root: Path, progress: Progress) -> None:
        self.root = root
        self.progress = progress

    def _entry(self, package: str, version: str, form: str) -> Path:
        return self.root / "pypi" / f"{package.lower()}-{_release_key(version)}-{form}"

    def wheel_tree(self, package: str, version: str) -> WheelTree:
        entry = self._entry(package, version, "wheel")
        label = f"pypi:{package}=={version}"
        index = self._valid_wheel_index(entry)
        if index is None:
            with _locked(self.root / "locks" / f"{entry.name}.lock", self.progress, label):
                index = self._valid_wheel_index(
                    entry
                )  # another process may have filled it meanwhile
                if index is None:
                    self._fill_wheel(entry, package, version, label)
                    index = self._valid_wheel_index(entry)
                    if index is None:
                        raise CorruptCacheError(
                            f"cache entry {entry} is not usable right after filling it"
                        )

        def refetch() -> WheelTree:
            with _locked(self.root / "locks" / f"{entry.name}.lock", self.progress, label):
                self._fill_wheel(entry, package, version, label)
            fresh = self._valid_wheel_index(entry)
            if fresh is None:
                raise CorruptCacheError(f"cache entry {entry} is not usable right after filling it")
            return WheelTree(entry, fresh, on_corrupt=None)

        try:
            if index["format"] != INDEX_FORMAT:
                with _locked(self.root / "locks" / f"{entry.name}.lock", self.progress, label):
                    index = self._upgrade(entry, index)
            return WheelTree(entry, index, on_corrupt=refetch)
        except Exception as exc:  # a missing member table, a wheel that will not open or upgrade
            log.warning("cached wheel %s does not open (%s); fetching it again", entry, exc)
            return refetch()

    @staticmethod
    def _upgrade(entry: Path, index: dict[str, Any]) -> dict[str, Any]:
        """An entry of format 1 (every member's hash in index.json) gets its member table, once,
        from the index and the wheel's central directory: no download, and the members are still
        checked against RECORD on every read."""
        import zipfile

        from hyperqwen_patches.sources import wheelmembers

        if index["format"] == INDEX_FORMAT:  # another process upgraded it while we waited
            return index
        with zipfile.ZipFile(entry / index["file"]) as zf:
            wheelmembers.write(entry / wheelmembers.FILE, _member_table(zf, index["text"]))
        index = {k: v for k, v in index.items() if k != "text"}
        index["format"] = INDEX_FORMAT
        _write_index(entry, index)
        return index

    @staticmethod
    def _valid_wheel_index(entry: Path) -> dict[str, Any] | None:
        """The entry's index when the entry is complete and its wheel unchanged since it was verified."""
        try:
            index: dict[str, Any] = json.loads((entry / "index.json").read_bytes())
            st = (entry / index["file"]).stat()
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if index.get("format") not in _READABLE_FORMATS:
            return None
        if st.st_size != index.get("size") or st.st_mtime_ns != index.get("mtime_ns"):
            log.warning(
                "cached wheel in %s changed since it was verified; fetching it again", entry
            )
            return None
        return index

    def _pip_download(self, work: Path, package: str, version: str, label: str) -> Path:
        """Run ``pip download`` into ``work/dl``; return the downloaded file."""
        dl = work / "dl"
        piptmp = work / "piptmp"
        dl.mkdir(parents=True)
        piptmp.mkdir()
        argv = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            # -vv: an unreachable index is only logged at pip's debug level ("Could not fetch URL");
            # without it "no registry" and "no such version" print the same error.
            "-vv",
            "--progress-bar",
            "off",
            "-d",
            str(dl),
            f"{package}=={version}",
        ]
        # pip downloads into TMPDIR first: pointing it into our work dir lets us measure progress.
        env = {**os.environ, "TMPDIR": str(piptmp), "PIP_NO_INPUT": "1"}
        log.debug("running %s", " ".join(argv))
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        output = bytearray()
        total: list[int | None] = [None]

        def reader() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                output.extend(line)
                m = _SIZE_LINE.search(line)
                if m and total[0] is None:
                    total[0] = int(float(m[1]) * {b"kB": 1e3, b"MB": 1e6, b"GB": 1e9}[m[2]])

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        with self.progress.download(f"downloading {label}") as update:
            while proc.poll() is None:
                # pip writes into its TMPDIR, then copies into -d: the larger of the two is the progress
                # (their sum ran to twice the size). pip rounds the size it announces ("2.3 MB"), so
                # the count is held at it until the real size is known at the end.
                done = max(_tree_size(piptmp), _tree_size(dl))
                update(done if total[0] is None else min(done, total[0]), total[0])
                time.sleep(0.2)
            thread.join()
            size = _tree_size(dl)
            update(size, size)
            files = sorted(dl.iterdir())
            if proc.returncode == 0 and len(files) == 1:
                return files[0]
            out = bytes(output)
            tail = out.decode(errors="replace").strip().splitlines()
            # With -vv pip's last line is housekeeping ("Removed build tracker"); quote the line that says why.
            errors = [line for line in tail if line.startswith("ERROR:")]
            said = [line for line in errors if _NOT_FOUND.search(line.encode())] or errors
            last = (said or tail or [f"pip exited with {proc.returncode}"])[-1].strip()
            if _NOT_FOUND.search(out) and not _NET_ERRORS.search(out):
                raise UsageError(
                    f"{package}=={version} has no wheel on the package index ({last})",
                    hint="check the version (pip index versions vllm), or pass --source dir:PATH / git:PATH@REF",
                )
            if _NET_ERRORS.search(out) or _NOT_FOUND.search(out):
                raise EnvironmentProblem(
                    f"{label} is not in the cache ({self.root}) and the package index cannot be reached",
                    hint="connect to the index once (or set PIP_INDEX_URL / PIP_FIND_LINKS), or pass "
                    "--source dir:PATH or git:PATH@REF",
                )
            raise EnvironmentProblem(f"pip download of {package}=={version} failed: {last}")

    def _fill_wheel(self, entry: Path, package: str, version: str, label: str) -> None:
        """Download, verify and index the wheel under a temporary name, then rename it into place."""
        work = _work_dir(entry)
        try:
            wheel = self._pip_download(work, package, version, label)
            staged = work / "entry"
            staged.mkdir()
            with self.progress.waiting(f"verifying {wheel.name}"):
                index = _index_wheel(wheel, package, label, staged)
            final = staged / wheel.name
            wheel.rename(final)
            st = final.stat()
            index.update(size=st.st_size, mtime_ns=st.st_mtime_ns, file=wheel.name)
            _write_index(staged, index)
            _replace_dir(staged, entry)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def sdist_tree(self, package: str, version: str) -> DirTree:
        entry = self._entry(package, version, "sdist")
        label = f"pypi:{package}=={version}#sdist"
        if not (entry / "complete").is_file():
            with _locked(self.root / "locks" / f"{entry.name}.lock", self.progress, label):
                if not (entry / "complete").is_file():
                    self._fill_sdist(entry, package, version, label)
        tree = DirTree(entry / "tree", package=package)
        tree.label = label
        return tree

    def _fetch_sdist(self, work: Path, package: str, version: str, label: str) -> Path:
        """Fetch the sdist through the index's JSON simple API (PEP 691), sha256-verified.

        ``pip download --no-binary`` cannot be used: pip builds an sdist's metadata before saving it,
        and vLLM's build needs torch (measured: "metadata-generation-failed", nothing saved).
        """
        import urllib.error
        import urllib.request

        index_url = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
        project = re.sub(r"[-_.]+", "-", package).lower()
        request = urllib.request.Request(
            f"{index_url}/{project}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                listing = json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise EnvironmentProblem(
                f"{label} is not in the cache ({self.root}) and the package index cannot be reached ({exc})",
                hint="connect to the index once, or pass --source dir:PATH or git:PATH@REF",
            ) from None
        wanted = {f"{package}-{version}.tar.gz", f"{project.replace('-', '_')}-{version}.tar.gz"}
        found = [f for f in listing.get("files", []) if f.get("filename") in wanted]
        if not found:
            raise UsageError(
                f"{package}=={version} has no source distribution on the package index"
            )
        meta = found[0]
        target: Path = work / "dl" / meta["filename"]
        target.parent.mkdir(parents=True)
        digest = hashlib.sha256()
        with self.progress.download(f"downloading {label}") as update:
            try:
                with (
                    urllib.request.urlopen(meta["url"], timeout=60) as resp,
                    open(target, "wb") as fh,
                ):
                    total = int(resp.headers.get("Content-Length") or 0) or None
                    done = 0
                    while chunk := resp.read(1 << 20):
                        fh.write(chunk)
                        digest.update(chunk)
                        done += len(chunk)
                        update(done, total)
            except (urllib.error.URLError, OSError) as exc:
                raise EnvironmentProblem(f"download of {meta['url']} failed: {exc}") from None
        expected = meta.get("hashes", {}).get("sha256")
        if expected and digest.hexdigest() != expected:
            raise CorruptCacheError(f"{meta['filename']}: sha256 differs from the index's")
        return target

    def _fill_sdist(self, entry: Path, package: str, version: str, label: str) -> None:
        import tarfile

        work = _work_dir(entry)
        try:
            archive = self._fetch_sdist(work, package, version, label)
            staged = work / "entry"
            (staged / "tree").mkdir(parents=True)
            with tarfile.open(archive) as tar:
                members = []
                for m in tar.getmembers():
                    _top, _, rest = m.name.partition("/")
                    if m.isfile() and rest.startswith(f"{package}/"):
                        m.name = rest
                        members.append(m)
                tar.extractall(staged / "tree", members=members, filter="data")
            (staged / "complete").write_text(f"{archive.name}\n")
            _replace_dir(staged, entry)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _work_dir(entry: Path) -> Path:
    """A fresh temporary directory beside ``entry``; the caller holds the entry's lock.

    Holding the lock, no other process is filling this entry, so any earlier temporary directory of it
    is debris from an interrupted run: it is removed (it was never trusted, only untidy).
    """
    entry.parent.mkdir(parents=True, exist_ok=True)
    for stale in entry.parent.glob(f".tmp-{entry.name}-*"):
        log.debug("removing %s, left by an interrupted run", stale)
        shutil.rmtree(stale, ignore_errors=True)
    return entry.parent / f".tmp-{entry.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _tree_size(path: Path) -> int:
    from hyperqwen_patches.cachedir import tree_size

    return tree_size(path)[1]


def _replace_dir(staged: Path, entry: Path) -> None:
    """Put ``staged`` at ``entry`` atomically; an old entry is moved aside first, then removed."""
    if entry.exists():
        trash = entry.parent / f".old-{entry.name}-{uuid.uuid4().hex[:8]}"
        entry.rename(trash)
        shutil.rmtree(trash, ignore_errors=True)
    staged.rename(entry)


def _index_wheel(wheel: Path, package: str, label: str, staged: Path) -> dict[str, Any]:
    """Verify the package's text members against RECORD (and their CRCs), classify the package's
    files, and write the text members' table into ``staged``; return the index (without the members).

    Members are streamed, never read whole (vLLM's wheel holds 308 MB and 153 MB ``.so`` files). A
    binary member (a NUL byte in its first 8,000 bytes, git's rule) and a member outside the package
    (``*.dist-info``) are listed from their first bytes only and not hashed: no command ever reads
    one, so a damaged one cannot change any result. Every text member is hashed here, and again on
    every read (``WheelTree``)."""
    import zipfile

    try:
        zf = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile as exc:
        raise CorruptCacheError(f"downloaded {wheel.name} is not a zip file: {exc}") from None
    with zf:
        record_name = next((n for n in zf.namelist() if n.endswith(".dist-info/RECORD")), None)
        if record_name is None:
            raise CorruptCacheError(f"downloaded {wheel.name} has no RECORD")
        record: dict[str, str] = {}
        # RECORD is CSV: vLLM's fused-MoE config names contain commas and come quoted.
        for parts in csv.reader(io.StringIO(zf.read(record_name).decode())):
            if len(parts) == 3 and parts[1]:
                record[parts[0]] = parts[1]
        text: dict[str, str] = {}
        binaries: list[str] = []
        for info in zf.infolist():
            if info.is_dir() or not info.filename.startswith(f"{package}/"):
                continue
            with zf.open(info) as fh:
                head = fh.read(SNIFF_BYTES)
                if _is_binary(head):
                    binaries.append(info.filename)
                    continue
                digest = hashlib.sha256(head)
                while chunk := fh.read(1 << 20):  # raises BadZipFile on a CRC mismatch at the end
                    digest.update(chunk)
            got = "sha256=" + urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
            expected = record.get(info.filename)
            if expected != got:
                raise CorruptCacheError(
                    f"{wheel.name}: {info.filename} does not match the wheel's RECORD"
                )
            text[info.filename] = got
        from hyperqwen_patches.sources import wheelmembers

        wheelmembers.write(staged / wheelmembers.FILE, _member_table(zf, text))
    return {"format": INDEX_FORMAT, "label": label, "binaries": sorted(binaries)}


def _write_index(entry: Path, index: dict[str, Any]) -> None:
    staged = entry / f".index.json.{uuid.uuid4().hex}"
    staged.write_text(json.dumps(index, sort_keys=True) + "\n")
    os.replace(staged, entry / "index.json")
