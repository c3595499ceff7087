"""The write journal: its hand-written JSON is what ``json.dumps(sort_keys=True)`` writes, and reads
back; and only a journal this tool signed for this directory is read at all.

The incident behind the second half: any ``DIR/.hqp-journal`` was trusted, so a planted one plus a
symlink ``DIR/link -> /elsewhere`` made the next ``apply`` write its bytes through the link and delete
a file there as "created" (as root in an image build, with no race)."""

from __future__ import annotations

import base64
import json
import os
import random
from pathlib import Path

import pytest

from hyperqwen_patches.sources import journal
from hyperqwen_patches.sources.confined import Confined


def reference(entries: list[journal.Entry], made: list[bytes]) -> bytes:
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
        "made_dirs": [b64(d) for d in made],
    }
    return json.dumps(doc, sort_keys=True).encode("ascii")


def key() -> bytes:
    found = journal.signing_key(create=True)
    assert found is not None
    return found


@pytest.mark.parametrize("seed", range(8))
def test_the_journal_is_the_json_the_standard_library_writes(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    entries = [
        journal.Entry(
            bytes(rng.randrange(1, 256) for _ in range(rng.randrange(3, 40))).replace(b"/", b"_"),
            None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 3000)),
            None if rng.random() < 0.2 else rng.choice([0o644, 0o755, 0o600]),
        )
        for _ in range(rng.randrange(0, 12))
    ]
    made = [b"d%d/\xff\xfe" % i for i in range(rng.randrange(0, 3))]
    with Confined(os.fsencode(tmp_path)) as where:
        journal.write(where, key(), entries, made)
        data = Path(os.fsdecode(journal.path_of(where.root))).read_bytes()
        head, _, doc = data.partition(b"\n")
        assert head.startswith(journal.MAGIC)
        assert doc == reference(entries, made)
        got, dirs = journal.read(where)
    assert got == entries and dirs == made


def test_a_damaged_document_under_a_valid_signature_is_a_journal_error(tmp_path: Path) -> None:
    """Only a bug or a disk fault makes one: the signature is computed over what was written."""
    with Confined(os.fsencode(tmp_path)) as where:
        doc = b'{"entries": [{"mode": 420, "original": "*", "path": "YS5weQ=="}], "format": 2, "made_dirs": []}'
        data = journal.MAGIC + journal._mac(key(), where.root, doc) + b"\n" + doc
        Path(os.fsdecode(journal.path_of(where.root))).write_bytes(data)
        with pytest.raises(journal.JournalError, match="damaged"):
            journal.read(where)


def plant(root: Path, data: bytes) -> None:
    (root / ".hqp-journal").write_bytes(data)


def signed(root: Path, entries: list[journal.Entry], *, for_root: bytes | None = None) -> bytes:
    doc = journal._dumps(entries, [])
    mac = journal._mac(key(), for_root or os.fsencode(root), doc)
    return journal.MAGIC + mac + b"\n" + doc


ENTRY = [journal.Entry(b"a.py", b"evil\n", 0o4755)]


def refused(root: Path) -> str:
    with Confined(os.fsencode(root)) as where, pytest.raises(journal.UntrustedJournal) as err:
        journal.recover(where, refuse_links=True)
    return str(err.value)


def test_an_unsigned_journal_is_refused(tmp_path: Path) -> None:
    """The format every earlier version wrote, or anyone can: JSON alone."""
    plant(tmp_path, journal._dumps(ENTRY, []))
    assert "not signed" in refused(tmp_path)
    assert not (tmp_path / "a.py").exists()


def test_a_changed_byte_breaks_the_signature(tmp_path: Path) -> None:
    data = signed(tmp_path, ENTRY)
    plant(tmp_path, data.replace(b"ZXZpbAo=", b"ZXZpTAo="))
    assert "does not verify" in refused(tmp_path)


def test_a_journal_signed_for_another_directory_is_refused(tmp_path: Path) -> None:
    plant(tmp_path, signed(tmp_path, ENTRY, for_root=b"/somewhere/else"))
    assert "does not verify" in refused(tmp_path)


def test_a_journal_signed_with_another_key_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user's key (or one made after the cache was wiped)."""
    plant(tmp_path, signed(tmp_path, ENTRY))
    monkeypatch.setenv("HQP_CACHE", str(tmp_path / "other-cache"))
    assert "not in this user's cache" in refused(tmp_path)
    key()  # a new key in the new cache
    assert "does not verify" in refused(tmp_path)


def test_a_journal_that_is_a_link_or_a_fifo_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").write_bytes(signed(tmp_path, ENTRY))
    (tmp_path / ".hqp-journal").symlink_to(tmp_path / "elsewhere")
    assert "symbolic link" in refused(tmp_path)
    (tmp_path / ".hqp-journal").unlink()
    os.mkfifo(tmp_path / ".hqp-journal")
    assert "not a regular file" in refused(tmp_path)


def test_a_signed_journal_naming_a_path_through_a_link_is_refused_whole(tmp_path: Path) -> None:
    """Signed by us, but a directory on the way has become a link since: nothing is put back, not
    even the entries that could be (the next run refuses, a person looks)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.py").write_bytes(b"theirs\n")
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.py").write_bytes(b"changed\n")
    (root / "link").symlink_to(outside)
    entries = [
        journal.Entry(b"a.py", b"original\n", 0o644),
        journal.Entry(b"link/victim.py", b"original\n", 0o644),
        journal.Entry(b"link/created.py", None, None),
    ]
    (outside / "created.py").write_bytes(b"theirs too\n")
    plant(root, signed(root, entries))
    assert "the way to link passes link, a symbolic link" in refused(root)
    assert (root / "a.py").read_bytes() == b"changed\n"
    assert (outside / "victim.py").read_bytes() == b"theirs\n"
    assert (outside / "created.py").exists()
    assert (root / ".hqp-journal").exists()


@pytest.mark.parametrize("path", [b"../x.py", b"/etc/x", b"a//b", b"./a", b""])
def test_a_signed_journal_naming_a_path_outside_is_refused(tmp_path: Path, path: bytes) -> None:
    plant(tmp_path, signed(tmp_path, [journal.Entry(path, b"x", 0o644)]))
    assert "not a plain path" in refused(tmp_path)
