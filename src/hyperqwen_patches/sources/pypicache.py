"""PyPI releases in the cache: wheels and sdists fetched once, verified, shared by every command.

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

import csv
import hashlib
import io
import json
import logging
import os
import shutil
import uuid
from base64 import urlsafe_b64encode
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hyperqwen_patches.cachedir import entry_lock
from hyperqwen_patches.sources.dirtree import DirTree
from hyperqwen_patches.sources.download import fetch_sdist, pip_download
from hyperqwen_patches.sources.pristinetree import (
    SNIFF_BYTES,
    CorruptCacheError,
    Progress,
    is_binary,
)
from hyperqwen_patches.sources.wheeltree import WheelTree

if TYPE_CHECKING:
    import zipfile

    from hyperqwen_patches.sources.wheelmembers import Member

log = logging.getLogger(__name__)

# 2: the members' hashes and offsets in the member table (wheelmembers.py); 1: every member's hash in
# index.json (upgraded in place on first use, no download).
INDEX_FORMAT = 2
_READABLE_FORMATS = (1, 2)


def _release_key(version: str) -> str:
    """One spelling per release for the cache: ``0.30`` and ``0.30.0`` are the same version
    (PEP 440 pads the release with zeros), so they share one entry, named as the three-part form
    (the existing entries' names). Other versions are kept as written."""
    parts = version.split(".")
    if 0 < len(parts) < 3 and all(p.isdigit() for p in parts):
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


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


class PypiCache:
    """Wheels and sdists of PyPI releases, fetched once, verified, shared by every command."""

    def __init__(self, root: Path, progress: Progress) -> None:
        self.root = root
        self.progress = progress

    def _locked(self, entry: Path, label: str) -> AbstractContextManager[None]:
        """The entry's lock (shared with ``cache --prune`` and every other run), waited for with a
        line saying so."""
        return entry_lock(
            self.root,
            entry.name,
            waiting=lambda: self.progress.waiting(f"waiting for another process fetching {label}"),
        )

    def _entry(self, package: str, version: str, form: str) -> Path:
        return self.root / "pypi" / f"{package.lower()}-{_release_key(version)}-{form}"

    def wheel_tree(self, package: str, version: str) -> WheelTree:
        entry = self._entry(package, version, "wheel")
        label = f"pypi:{package}=={version}"
        index = self._valid_wheel_index(entry)
        if index is None:
            with self._locked(entry, label):
                # another process may have filled it meanwhile
                index = self._valid_wheel_index(entry)
                if index is None:
                    self._fill_wheel(entry, package, version, label)
                    index = self._valid_wheel_index(entry)
                    if index is None:
                        raise CorruptCacheError(
                            f"cache entry {entry} is not usable right after filling it"
                        )

        def refetch() -> WheelTree:
            with self._locked(entry, label):
                self._fill_wheel(entry, package, version, label)
            fresh = self._valid_wheel_index(entry)
            if fresh is None:
                raise CorruptCacheError(f"cache entry {entry} is not usable right after filling it")
            return WheelTree(entry, fresh, on_corrupt=None)

        try:
            if index["format"] != INDEX_FORMAT:
                with self._locked(entry, label):
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

    def _fill_wheel(self, entry: Path, package: str, version: str, label: str) -> None:
        """Download, verify and index the wheel under a temporary name, then rename it into place."""
        work = _work_dir(entry)
        try:
            wheel = pip_download(
                work, package, version, label, progress=self.progress, cache_root=self.root
            )
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
            with self._locked(entry, label):
                if not (entry / "complete").is_file():
                    self._fill_sdist(entry, package, version, label)
        tree = DirTree(entry / "tree", package=package)
        tree.label = label
        return tree

    def _fill_sdist(self, entry: Path, package: str, version: str, label: str) -> None:
        import tarfile

        work = _work_dir(entry)
        try:
            archive = fetch_sdist(
                work, package, version, label, progress=self.progress, cache_root=self.root
            )
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
                if is_binary(head):
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
