"""The member table of a cached wheel: where each text member lies in the zip and the hash it must have.

A run reads a handful of members (the files the series touches), so it should not load a record of
every member: a JSON index of them took 47 ms to parse at 30,000 members and 3 ms at 3,000, a cost that
grew with the tree and not with the series. The table lives in SQLite (in the standard library), keyed
by path, so a run pays one indexed lookup per member it reads. Built once when the wheel enters the cache
(``pypicache.PypiCache``), under a temporary name and renamed into place, and opened read-only and
immutable afterwards: no run writes to it, no lock or journal file is created beside it.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

FILE = "members.sqlite"

_SCHEMA = (
    "CREATE TABLE members ("
    " path BLOB PRIMARY KEY,"  # the member's name, UTF-8 bytes as the tree names paths
    " hash TEXT NOT NULL,"  # its RECORD hash, sha256=<urlsafe base64>
    " header INTEGER NOT NULL,"  # offset of its local file header
    " size INTEGER NOT NULL,"  # compressed size
    " method INTEGER NOT NULL"  # 0 stored, 8 deflated
    ") WITHOUT ROWID"
)


class Member(NamedTuple):
    hash: str
    header: int
    size: int
    method: int


def write(path: Path, rows: Iterable[tuple[bytes, Member]]) -> None:
    """Write the table to ``path``, whole or not at all (staged beside it, then renamed)."""
    staged = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    try:
        con = sqlite3.connect(staged)
        try:
            con.execute(_SCHEMA)
            con.executemany(
                "INSERT INTO members VALUES (?, ?, ?, ?, ?)", ((p, *m) for p, m in rows)
            )
            con.commit()
        finally:
            con.close()
        os.replace(staged, path)
    finally:
        staged.unlink(missing_ok=True)


class Members:
    """The table, read-only. Safe to share between the threads of one ``check``."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():  # connect() would create an empty database
            raise FileNotFoundError(f"{path} does not exist")
        uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"
        self._con: sqlite3.Connection | None = sqlite3.connect(
            uri, uri=True, check_same_thread=False
        )
        self._lock = threading.Lock()

    def get(self, path: bytes) -> Member | None:
        with self._lock:
            assert self._con is not None
            row = self._con.execute(
                "SELECT hash, header, size, method FROM members WHERE path = ?", (path,)
            ).fetchone()
        return None if row is None else Member(*row)

    def paths(self) -> list[bytes]:
        with self._lock:
            assert self._con is not None
            return [
                bytes(r[0]) for r in self._con.execute("SELECT path FROM members ORDER BY path")
            ]

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
