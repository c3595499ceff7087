"""The adjacency merge on real release bumps: vLLM 0.29.0 -> 0.30.0 Python files from the wheels.

Real code repeats lines (blank lines, ``)``, ``return None``), so two diffs may align it differently;
this is where a merge of our own would drift from git's. For a seeded sample of the files 0.30.0
changed, a row line is inserted right next to one of upstream's changes (where diff3 pauses) or
anywhere; then, against the real ``git merge-file``: where git merges cleanly the bytes are git's,
and every adjacency merge is upstream plus exactly the row's line, placed where git's clean parts
allow.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from hyperqwen_patches.port.adjacent import diff_hunks, merge, split_lines
from hyperqwen_patches.port.threeway import fits_outside_conflicts, merge_text
from hyperqwen_patches.sources.pristine import open_pristine

pytestmark = [pytest.mark.network, pytest.mark.slow]

LABELS = ("upstream", "base", "row")


@pytest.fixture(scope="module")
def bumps() -> list[tuple[bytes, bytes, bytes]]:
    old = open_pristine("pypi:vllm==0.29.0", version="0.29.0")
    new = open_pristine("pypi:vllm==0.30.0", version="0.30.0")
    try:
        changed = sorted(
            p
            for p in old.paths()
            if p.endswith(b".py") and new.read(p) is not None and old.read(p) != new.read(p)
        )
        sample = random.Random(37).sample(changed, min(60, len(changed)))
        return [(p, old.read(p) or b"", new.read(p) or b"") for p in sample]
    finally:
        old.close()
        new.close()


def test_real_bumps_merge_to_gits_bytes_and_adjacency_keeps_both_sides(
    bumps: list[tuple[bytes, bytes, bytes]],
) -> None:
    rng = random.Random(29)
    clean = adjacent = 0
    for path, base, upstream in bumps:
        lines = split_lines(base)
        hunks = diff_hunks("upstream", lines, split_lines(upstream))
        for trial in range(3):
            h = rng.choice(hunks)
            at = rng.choice([h.start, h.end]) if trial else rng.randrange(len(lines) + 1)
            following = next((x for x in lines[at:] if x.strip()), b"")
            indent = following[: len(following) - len(following.lstrip())]
            added = indent + b"kvarn_hook_%d(self)\n" % trial
            row = b"".join([*lines[:at], added, *lines[at:]])
            expected, conflicts = merge_text(upstream, base, row, LABELS)
            result = merge(base, upstream, row)
            if not conflicts:
                clean += 1
                assert result.content in (None, expected), path
                continue
            if result.content is None or not result.adjacent:
                continue
            adjacent += 1
            got = Counter(split_lines(result.content))
            assert got - Counter(split_lines(upstream)) == Counter([added]), path
            assert Counter(split_lines(upstream)) - got == Counter(), path
            assert fits_outside_conflicts(result.content, expected, LABELS), path
    assert clean > 30 and adjacent > 10, (clean, adjacent)
