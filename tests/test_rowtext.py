"""The manifest's text as drop/move/rename edit it: rows moved whole with the comments above them,
keys set in place (quoting kept), retirements appended; every other byte kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.series import rowtext
from hyperqwen_patches.series.manifest import parse_manifest

HEAD = b"""# top comment
format: 1
pin: "0.29.0"
package: vllm
rows:
"""
ROWS = b"""  # about a
  - name: a
    patch: patches/0001-a.patch
    kind: fix
    what: "A"
    cut_against: "0.29.0"
    retires_when: never
  - name: b
    patch: patches/0002-b.patch
    kind: fix
    what: B
    cut_against: "0.29.0"
    retires_when: never
  # about c
  - name: c
    files: kvarn/files
    kind: own
    what: |
      C, in a block
    cut_against: "0.29.0"
    retires_when: |
      never
"""
TAIL = b"""# after the rows
knob_prefixes: [KVARN_]
"""
TEXT = HEAD + ROWS + TAIL


def parsed(text: bytes):  # type: ignore[no-untyped-def]
    return parse_manifest(text, path=Path("/r/patches/manifest.yaml"), root=Path("/r"))


def names(text: bytes) -> list[str]:
    return [r.name for r in parsed(text).rows]


def test_rows_move_whole_with_their_comments_and_the_rest_is_kept() -> None:
    moved = rowtext.reorder_rows(TEXT, ["c", "a", "b"])
    assert names(moved) == ["c", "a", "b"]
    assert moved.startswith(HEAD + b"  # about c\n  - name: c\n")
    assert b"      never\n  # about a\n  - name: a\n" in moved and moved.endswith(TAIL)
    assert sorted(moved.splitlines()) == sorted(TEXT.splitlines())  # no line lost or added


def test_the_last_row_dropped_and_every_row_dropped() -> None:
    dropped = rowtext.reorder_rows(TEXT, ["a", "b"], drop=["c"])
    assert names(dropped) == ["a", "b"] and b"about c" not in dropped and dropped.endswith(TAIL)
    empty = rowtext.reorder_rows(TEXT, [], drop=["a", "b", "c"])
    assert names(empty) == [] and b"rows: []\n" in empty


def test_keys_set_in_place_with_their_quoting() -> None:
    text = rowtext.set_row_keys(TEXT, "a", {"name": "a2", "what": "A two"})
    assert b"  - name: a2\n" in text and b'    what: "A two"\n' in text
    with pytest.raises(UsageError, match="no 'commit' key"):
        rowtext.set_row_keys(TEXT, "a", {"commit": "x"})
    added = rowtext.add_row_key(TEXT, "c", "skip", "retired by 0.30.0")
    assert names(added) == ["a", "b", "c"] and b"      never\n    skip: " in added


def test_retirements_appended_to_a_list_or_made() -> None:
    entry = {"row": "a", "pin": "0.30.0", "upstream": "u", "reason": "r", "evidence": "e"}
    made = rowtext.append_retirement(TEXT, entry)
    assert made.startswith(TEXT) and made[len(TEXT) :].startswith(b"retirements:\n  - row: a\n")
    second = rowtext.append_retirement(made, {**entry, "row": "b"})
    assert second.startswith(made) and second[len(made) :].startswith(b"  - row: b\n")
    skipped = rowtext.add_row_key(rowtext.add_row_key(second, "a", "skip", "x"), "b", "skip", "x")
    assert [(t.row, t.pin) for t in parsed(skipped).retirements] == [
        ("a", "0.30.0"),
        ("b", "0.30.0"),
    ]
    flow = rowtext.append_retirement(TEXT + b"retirements: []\n", entry)
    assert b"retirements: []" not in flow and flow.count(b"retirements:") == 1


def test_numbered_files_renumbered_in_order() -> None:
    assert rowtext.renumbered(
        [("b", "patches/0002-b.patch"), ("m", None), ("a", "patches/0001-a.patch"),
         ("k", "kvarn/k.patch")]
    ) == {"b": "patches/0001-b.patch", "a": "patches/0002-a.patch"}  # fmt: skip
