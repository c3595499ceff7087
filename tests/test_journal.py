"""The write journal's hand-written JSON is what ``json.dumps(sort_keys=True)`` writes, and reads back."""

from __future__ import annotations

import base64
import json
import os
import random
from pathlib import Path

import pytest

from hyperqwen_patches.sources import journal


def reference(root: bytes, entries: list[journal.Entry], made: list[bytes]) -> bytes:
    """The format as it was first written: json and base64 from the standard library."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    doc = {
        "format": journal.FORMAT,
        "entries": [
            {
                "path": b64(e.path),
                "original": None if e.original is None else b64(e.original),
                "mode": e.mode,
            }
            for e in entries
        ],
        "made_dirs": [b64(os.path.relpath(d, root)) for d in made],
    }
    return json.dumps(doc, sort_keys=True).encode("ascii")


@pytest.mark.parametrize("seed", range(8))
def test_the_journal_is_the_json_the_standard_library_writes(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    root = os.fsencode(tmp_path)
    entries = [
        journal.Entry(
            bytes(rng.randrange(1, 256) for _ in range(rng.randrange(1, 40))).replace(b"/", b"_"),
            None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 3000)),
            None if rng.random() < 0.2 else rng.choice([0o644, 0o755, 0o600]),
        )
        for _ in range(rng.randrange(0, 12))
    ]
    made = [os.path.join(root, b"d%d" % i, b"\xff\xfe") for i in range(rng.randrange(0, 3))]
    journal.write(root, entries, made)
    data = Path(os.fsdecode(journal.path_of(root))).read_bytes()
    assert data == reference(root, entries, made)
    got, dirs = journal.read(root)
    assert got == entries and dirs == made


def test_a_damaged_base64_string_is_a_journal_error(tmp_path: Path) -> None:
    root = os.fsencode(tmp_path)
    journal.write(root, [journal.Entry(b"a.py", b"x", 0o644)], [])
    path = Path(os.fsdecode(journal.path_of(root)))
    path.write_bytes(path.read_bytes().replace(b'"path": "', b'"path": "*'))
    with pytest.raises(journal.JournalError, match="damaged"):
        journal.read(root)
