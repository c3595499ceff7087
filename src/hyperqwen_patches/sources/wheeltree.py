"""A cached wheel read in place (``pypi:vllm==0.29.0``): each member found through the entry's member
table (``wheelmembers.py``) and read by ``zipmember.read_member``, checked against RECORD on every read.
Nothing is extracted. A damaged entry (a bad member, a lost table row) is fetched again once, through
the callback the cache (``pypicache.py``) gives."""

from __future__ import annotations

import collections
import csv
import io
import logging
import os
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hyperqwen_patches.display import show
from hyperqwen_patches.sources.pristinetree import CorruptCacheError, PristineTree
from hyperqwen_patches.sources.zipmember import BadMember, read_member

log = logging.getLogger(__name__)

_RECENT_MEMBERS = 1024  # members kept in memory per open wheel (text files: tens of KB each)


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
                        raise BadMember("the wheel has no RECORD")
                    rows = list(csv.reader(io.StringIO(zf.read(name).decode())))
            except (zipfile.BadZipFile, UnicodeDecodeError, csv.Error) as exc:
                raise BadMember(f"the wheel's RECORD does not read: {exc}") from None
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
                raise BadMember(
                    f"{show(path)}: listed in the wheel's RECORD but missing from the member "
                    f"table {self.entry / 'members.sqlite'}"
                )
            return None
        assert self._fd is not None
        return read_member(self._fd, path, member)

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
        except (BadMember, OSError, zlib.error, sqlite3.Error) as exc:
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
                    f"{len(lost)} RECORD file(s) missing from it (first: {show(lost[0])})"
                    if lost
                    else f"{len(extra)} row(s) RECORD does not list (first: {show(extra[0])})"
                )
                raise BadMember(f"member table {self.entry / 'members.sqlite'}: {what}")
            return listed
        except (sqlite3.Error, BadMember, OSError) as exc:
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
