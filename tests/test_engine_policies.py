"""The engine's policies beyond GNU patch, reversed detection, near misses and failure collection.

Where a behaviour is GNU patch's own, the test also runs the binary (``run_gnu``), so these tests show
both what we add and that the base under it is still GNU's.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_differential_gnu import run_gnu

from hyperqwen_patches.engine import (
    Policy,
    apply_series,
    parse_patch,
    patch_from_files,
    verify_applied,
)


def numbered(count: int, start: int = 1) -> bytes:
    return b"".join(b"%d\n" % i for i in range(start, start + count))


class Reader:
    """The engine's ``read`` callback over a mapping, recording every path it was asked for."""

    def __init__(self, files: Mapping[bytes, bytes]) -> None:
        self.files = files
        self.reads: list[bytes] = []

    def __call__(self, path: bytes) -> bytes | None:
        self.reads.append(path)
        return self.files.get(path)


SHIFTED = {b"f": b"up\n" * 7 + numbered(30)}
HUNK_AT_10 = b"--- a/f\n+++ b/f\n@@ -9,3 +9,3 @@\n 9\n-10\n+ten\n 11\n"


def test_default_policy_reports_offsets_as_gnu_patch_does() -> None:
    result = apply_series([parse_patch(HUNK_AT_10, name="p")], Reader(SHIFTED))
    (hunk,) = result.patches[0].files[0].hunks
    assert (hunk.status, hunk.applied_line, hunk.offset) == ("offset", 16, 7)
    assert hunk.gnu_message() == "Hunk #1 succeeded at 16 (offset 7 lines)."
    assert run_gnu(SHIFTED, HUNK_AT_10).files["f"].messages == [hunk.gnu_message()]


def test_max_offset_fails_a_hunk_beyond_it() -> None:
    patch = parse_patch(HUNK_AT_10, name="p")
    assert apply_series([patch], Reader(SHIFTED), Policy(max_offset=7)).ok
    result = apply_series([patch], Reader(SHIFTED), Policy(max_offset=6))
    assert not result.ok and result.changes == {}
    (hunk,) = result.patches[0].files[0].hunks
    assert hunk.status == "failed"
    assert hunk.reason == "offset 7 exceeds the allowed maximum of 6"


def test_exact_allows_no_offset() -> None:
    patch = parse_patch(HUNK_AT_10, name="p")
    result = apply_series([patch], Reader(SHIFTED), Policy(exact=True))
    assert not result.ok
    unshifted = {b"f": numbered(30)}
    assert apply_series([patch], Reader(unshifted), Policy(exact=True)).ok


DECOY = {b"f": numbered(20) + b"x\ny\nz\n" + numbered(10, 100) + b"x\ny\nz\n" + numbered(10, 200)}
DECOY_PATCH = b"--- a/f\n+++ b/f\n@@ -36,3 +36,3 @@\n x\n-y\n+Y\n z\n"


def test_ambiguity_is_reported_by_default_and_gnu_patch_takes_the_nearest_copy() -> None:
    patch = parse_patch(DECOY_PATCH, name="p")
    result = apply_series([patch], Reader(DECOY))
    assert result.ok
    (hunk,) = result.patches[0].files[0].hunks
    assert hunk.applied_line == 34 and hunk.other_matches == (21,)
    gnu = run_gnu(DECOY, DECOY_PATCH)
    assert gnu.files["f"].messages == ["Hunk #1 succeeded at 34 (offset -2 lines)."]
    assert result.changes[b"f"] == gnu.tree[b"f"]


def test_ambiguity_is_an_error_under_the_strict_policy() -> None:
    """The deliberate difference from GNU patch (docs/engine.md): a decoy makes the hunk fail."""
    patch = parse_patch(DECOY_PATCH, name="p")
    result = apply_series([patch], Reader(DECOY), Policy(ambiguity="error"))
    assert not result.ok and result.changes == {}
    (hunk,) = result.patches[0].files[0].hunks
    assert hunk.status == "ambiguous"
    assert hunk.other_matches == (21,)
    assert "also matches at line(s) 21" in (hunk.reason or "")
    assert run_gnu(DECOY, DECOY_PATCH).rc == 0  # GNU patch applied it silently


def test_ambiguity_off_does_not_look() -> None:
    patch = parse_patch(DECOY_PATCH, name="p")
    result = apply_series([patch], Reader(DECOY), Policy(ambiguity="off"))
    assert result.patches[0].files[0].hunks[0].other_matches == ()


def test_already_applied_patch_is_not_a_failure_under_forward() -> None:
    data = b"--- a/f\n+++ b/f\n@@ -2,3 +2,3 @@\n 2\n-3\n+three\n 4\n"
    tree = {b"f": b"1\n2\nthree\n4\n5\n"}
    result = apply_series([parse_patch(data, name="p")], Reader(tree))
    assert result.ok
    assert result.patches[0].status == "already-applied"
    assert result.changes == {}
    assert run_gnu(tree, data).files["f"].verdict == "reversed"
    backwards = apply_series([parse_patch(data, name="p")], Reader(tree), Policy(forward=False))
    assert not backwards.ok


def test_partly_applied_file_is_a_failure_not_already_applied() -> None:
    """Deliberate difference: GNU patch checks only hunk 1's reverse and skips the whole file; we
    require every hunk to reverse-apply, so a file carrying half the change fails loudly."""
    data = (
        b"--- a/f\n+++ b/f\n@@ -2,3 +2,3 @@\n 2\n-3\n+three\n 4\n"
        b"@@ -12,3 +12,3 @@\n 12\n-13\n+thirteen\n 14\n"
    )
    tree = {b"f": numbered(20).replace(b"\n3\n", b"\nthree\n")}
    result = apply_series([parse_patch(data, name="p")], Reader(tree))
    assert not result.ok
    file = result.patches[0].files[0]
    assert file.status == "failed"
    assert [h.status for h in file.hunks] == ["failed", "exact"]
    assert run_gnu(tree, data).files["f"].verdict == "reversed"


def test_near_miss_shows_the_differing_lines() -> None:
    data = b"--- a/f\n+++ b/f\n@@ -4,5 +4,5 @@\n 4\n 5\n-6\n+six\n 7\n 8\n"
    tree = {b"f": b"0\n" * 3 + numbered(30).replace(b"\n7\n", b"\nseven\n")}
    result = apply_series([parse_patch(data, name="p")], Reader(tree))
    (hunk,) = result.patches[0].files[0].hunks
    assert hunk.status == "failed" and hunk.applied_line is None
    miss = hunk.near_miss
    assert miss is not None
    assert (miss.line, miss.matched, miss.total) == (7, 4, 5)
    assert [(d.line, d.expected, d.actual) for d in miss.differences] == [(10, b"7\n", b"seven\n")]


def test_every_failure_is_collected_across_files_and_patches() -> None:
    one = parse_patch(
        b"--- a/a\n+++ b/a\n@@ -1 +1 @@\n-nope\n+x\n--- a/b\n+++ b/b\n@@ -1 +1 @@\n-b\n+B\n"
        b"@@ -3 +3 @@\n-nope\n+x\n",
        name="one",
    )
    two = parse_patch(b"--- a/c\n+++ b/c\n@@ -1 +1 @@\n-c\n+C\n", name="two")
    three = parse_patch(b"--- a/missing\n+++ b/missing\n@@ -1 +1 @@\n-c\n+C\n", name="three")
    tree = {b"a": b"a\n", b"b": b"b\nb2\nb3\n", b"c": b"c\n"}
    result = apply_series([one, two, three], Reader(tree))
    assert [p.status for p in result.patches] == ["failed", "applied", "failed"]
    files = result.patches[0].files
    assert [[h.status for h in f.hunks] for f in files] == [["failed"], ["exact", "failed"]]
    assert result.patches[2].files[0].error == "missing does not exist: nothing to modify"
    assert result.changes == {b"c": b"C\n"}  # only the patch that applied
    assert result.hunk_totals == {"exact": 2, "offset": 0, "failed": 3, "ambiguous": 0}


def test_only_touched_files_are_read_each_once() -> None:
    tree = {b"f": numbered(10), b"g": numbered(10)} | {b"other%d" % i: b"x\n" for i in range(50)}
    patch = parse_patch(
        b"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-1\n+one\n@@ -5 +5 @@\n-5\n+five\n"
        b"--- a/g\n+++ b/g\n@@ -2 +2 @@\n-2\n+two\n",
        name="p",
    )
    read = Reader(tree)
    assert apply_series([patch, patch.reversed(), patch], read).ok
    assert sorted(read.reads) == [b"f", b"g"]


def test_series_state_carries_between_patches() -> None:
    first = parse_patch(b"--- /dev/null\n+++ b/new.py\n@@ -0,0 +1,2 @@\n+a\n+b\n", name="1")
    second = parse_patch(b"--- a/new.py\n+++ b/new.py\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n", name="2")
    third = parse_patch(b"--- a/new.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a\n-B\n", name="3")
    assert apply_series([first, second], Reader({})).changes == {b"new.py": b"a\nB\n"}
    assert apply_series([first, second, third], Reader({})).changes == {b"new.py": None}


def test_module_files_create_already_applied_or_fail() -> None:
    module = patch_from_files("kvarn", {b"vllm/kvarn/a.py": b"A = 1\n", b"vllm/kvarn/b.py": b""})
    fresh = apply_series([module], Reader({}))
    assert fresh.ok and fresh.changes == {b"vllm/kvarn/a.py": b"A = 1\n", b"vllm/kvarn/b.py": b""}
    same = apply_series([module], Reader({b"vllm/kvarn/a.py": b"A = 1\n"}))
    assert not same.ok
    assert [f.status for f in same.patches[0].files] == ["already-applied", "applied"]
    assert same.patches[0].status == "failed"  # partly there: an unexpected state, said loudly
    both = apply_series([module], Reader({b"vllm/kvarn/a.py": b"A = 1\n", b"vllm/kvarn/b.py": b""}))
    # An empty file that exists is indistinguishable from one to create (GNU patch creates into it).
    assert both.ok
    other = apply_series([module], Reader({b"vllm/kvarn/a.py": b"A = 2\n"}))
    assert not other.ok
    assert "already exists with different content" in (other.patches[0].files[0].error or "")


def test_verify_applied_reports_patch_by_patch() -> None:
    p1 = parse_patch(b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n 1\n-2\n+two\n 3\n", name="p1")
    p2 = parse_patch(b"--- a/f\n+++ b/f\n@@ -8,3 +8,4 @@\n 8\n-9\n+nine\n+nine2\n 10\n", name="p2")
    p3 = patch_from_files("mod", {b"m.py": b"m\n"})
    pristine = {b"f": numbered(12)}
    patched = apply_series([p1, p2, p3], Reader(pristine))
    assert patched.ok
    full = dict(pristine) | {k: v for k, v in patched.changes.items() if v is not None}
    assert [r.status for r in verify_applied([p1, p2, p3], Reader(full))] == ["present"] * 3
    only_first = apply_series([p1], Reader(pristine)).changes
    partial = verify_applied([p1, p2, p3], Reader(only_first))
    assert [r.status for r in partial] == ["present", "missing", "missing"]
    assert [r.status for r in verify_applied([p1, p2, p3], Reader(pristine))] == ["missing"] * 3
    wrong_module = dict(full) | {b"m.py": b"edited\n"}
    assert [r.status for r in verify_applied([p1, p2, p3], Reader(wrong_module))] == [
        "present",
        "present",
        "missing",
    ]


def test_presence_without_details_answers_the_same_statuses_without_near_misses() -> None:
    """``details=False`` (what apply asks before it writes) gives every row the status the full
    check gives it, and stops a file at its first failed hunk without looking for a near miss."""
    p1 = parse_patch(b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n 1\n-2\n+two\n 3\n", name="p1")
    p2 = parse_patch(
        b"--- a/f\n+++ b/f\n@@ -8,3 +8,3 @@\n 8\n-9\n+nine\n 10\n"
        b"@@ -14,3 +14,3 @@\n 14\n-15\n+fifteen\n 16\n",
        name="p2",
    )
    pristine = {b"f": numbered(20)}
    full = apply_series([p1, p2], Reader(pristine)).changes
    only_second = apply_series([p2], Reader(pristine)).changes
    half = {b"f": full[b"f"].replace(b"fifteen\n", b"15\n")}  # p2 partly there: its file fails
    for tree in (pristine, full, only_second, half):
        detailed = verify_applied([p1, p2], Reader(tree))
        bare = verify_applied([p1, p2], Reader(tree), details=False)
        assert [r.status for r in bare] == [r.status for r in detailed]
        assert [[f.status for f in r.files] for r in bare] == [
            [f.status for f in r.files] for r in detailed
        ]
    bare = verify_applied([p1, p2], Reader(pristine), details=False)
    detailed = verify_applied([p1, p2], Reader(pristine))
    assert [len(h.hunks) for h in bare[1].files] == [1]  # stopped at the first failed hunk
    assert all(h.near_miss is None for r in bare for f in r.files for h in f.hunks)
    assert all(h.near_miss is not None for r in detailed for f in r.files for h in f.hunks)


def test_a_refused_tree_still_shows_the_near_misses_of_its_rows() -> None:
    """apply decides from statuses alone, but a refusal shows each missing row's hunks with the
    place its lines nearly are, as the full check finds them."""
    from hyperqwen_patches.engine.carried import apply_carried, unapply_carried

    p1 = parse_patch(b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n 1\n-2\n+two\n 3\n", name="p1")
    p2 = parse_patch(b"--- a/f\n+++ b/f\n@@ -8,3 +8,3 @@\n 8\n-9\n+nine\n 10\n", name="p2")
    only_second = apply_series([p2], Reader({b"f": numbered(20)})).changes
    for outcome in (
        apply_carried([p1, p2], Reader(only_second), Policy()),
        unapply_carried([p1, p2], Reader(only_second), Policy()),
    ):
        assert outcome.refused == "the tree carries p2 but not p1 before it"
        (hunk,) = outcome.series.patches[0].files[0].hunks
        assert hunk.status == "failed" and hunk.near_miss is not None
        assert hunk.near_miss.line == 1 and hunk.near_miss.matched == 2
        assert hunk.reason == "the preimage does not match exactly anywhere in the search range"


def test_unequal_context_anchors_like_gnu_patch() -> None:
    """Fewer leading than trailing context: made at the start of the file, matches only there."""
    data = b"--- a/f\n+++ b/f\n@@ -1,4 +1,4 @@\n-1\n+one\n 2\n 3\n 4\n"
    tree = {b"f": b"x\n" + numbered(10)}
    result = apply_series([parse_patch(data, name="p")], Reader(tree))
    assert not result.ok
    assert result.patches[0].files[0].hunks[0].gnu_message() == "Hunk #1 FAILED at 1."
    assert run_gnu(tree, data).files["f"].messages == ["Hunk #1 FAILED at 1."]


def test_a_line_inserted_upstream_is_one_inserted_line_in_the_near_miss() -> None:
    """A real series' report listed six "differing" lines for a hunk whose region had gained one line
    upstream (positional comparison at GNU's spot); the aligned view shows the one line."""
    from hyperqwen_patches.engine.applying import apply_patch
    from hyperqwen_patches.engine.patchscan import parse_patch
    from hyperqwen_patches.engine.placement import aligned_summary

    old = b"".join(b"line %d\n" % i for i in range(1, 21))
    new_file = old.replace(b"line 9\n", b"line 9\nupstream line\n")
    patch = parse_patch(
        b"--- a/f\n+++ b/f\n@@ -7,7 +7,7 @@\n line 7\n line 8\n line 9\n-line 10\n+ten\n"
        b" line 11\n line 12\n line 13\n",
        name="p",
    )
    [hunk] = apply_patch(patch, {b"f": new_file}.get).patches[0].files[0].hunks
    assert hunk.status == "failed" and hunk.near_miss is not None
    miss = hunk.near_miss
    assert len(miss.differences) == 3  # what the positional comparison says
    assert miss.aligned.count(b"\n+") + miss.aligned.startswith(b"+") == 1
    assert b"+upstream line\n" in miss.aligned
    assert aligned_summary(miss) == "7 of 7 preimage lines are there, with 1 other line among them"


# --- ambiguity over repeated lines: a few lines shown, all counted (issue 43, item 13) ------------

REPEATED = {b"f": b"pass\n" * 100}
IN_THE_MIDDLE = b"--- a/f\n+++ b/f\n@@ -50,3 +50,3 @@\n pass\n-pass\n+done\n pass\n"


def _all_other_matches(content: bytes, pattern: list[bytes], placed: int) -> list[int]:
    """Every other start of ``pattern`` in ``content`` (a brute-force scan, the reference)."""
    lines = content.splitlines(keepends=True)
    size = len(pattern)
    return [
        w
        for w in range(1, len(lines) - size + 2)
        if w != placed and lines[w - 1 : w - 1 + size] == pattern
    ]


def test_other_matches_show_the_three_nearest_and_count_them_all() -> None:
    result = apply_series([parse_patch(IN_THE_MIDDLE, name="p")], Reader(REPEATED))
    (hunk,) = result.patches[0].files[0].hunks
    assert hunk.applied_line == 50 and hunk.status == "exact"
    everywhere = _all_other_matches(REPEATED[b"f"], [b"pass\n"] * 3, 50)
    assert hunk.other_count == len(everywhere) == 97
    assert hunk.other_matches == (49, 51, 52)  # nearest first, the later one on a tie, ascending
    assert hunk.others_text() == "49, 51, 52 and 94 more"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([b"a\n", b"b\n", b"c\n"]), min_size=3, max_size=40),
    st.integers(0, 39),
    st.sampled_from([0, 1]),
    st.integers(-3, 3),
)
def test_other_matches_equal_a_brute_force_scan(
    lines: list[bytes], at: int, context: int, shift: int
) -> None:
    """One hunk replacing a line of the file, with as much context on both sides (the general
    case), stated a little off: the listed others are the SHOWN_OTHERS nearest of every other start
    (the later one on a tie, ascending) and the count is all of them, fewer than SHOWN_OTHERS or
    more."""
    from hyperqwen_patches.engine.placement import SHOWN_OTHERS

    size = 2 * context + 1
    at = at % (len(lines) - size + 1)
    pre = lines[at : at + size]
    stated = max(1, at + 1 + shift)
    body = b"".join(b" " + x for x in pre[:context]) + b"-" + pre[context] + b"+new\n"
    body += b"".join(b" " + x for x in pre[context + 1 :])
    data = b"--- a/f\n+++ b/f\n@@ -%d,%d +%d,%d @@\n" % (stated, size, stated, size) + body
    content = b"".join(lines)
    result = apply_series([parse_patch(data, name="p")], Reader({b"f": content}))
    (hunk,) = result.patches[0].files[0].hunks
    assert hunk.applied_line is not None
    everywhere = _all_other_matches(content, pre, hunk.applied_line)
    nearest = sorted(everywhere, key=lambda w: (abs(w - hunk.applied_line), w < hunk.applied_line))
    assert hunk.other_count == len(everywhere)
    assert hunk.other_matches == tuple(sorted(nearest[:SHOWN_OTHERS]))


def test_other_matches_through_the_index_equal_the_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past INDEXED_FROM hunks the window table and bisection answer; below it the scan does: both
    give the same placements, lists and counts (hunks stated off so ties and offsets occur)."""
    from hyperqwen_patches.engine import applying, placement

    data = b"--- a/f\n+++ b/f\n" + b"".join(
        b"@@ -%d,3 +%d,3 @@\n pass\n-pass\n+done %d\n pass\n" % (s + i % 3, s, i)
        for i, s in enumerate(range(3, 600, 30))
    )
    content = {b"f": (b"pass\n" * 6 + b"x\n") * 90}  # windows cut by x: offsets and ties
    patch = parse_patch(data, name="p")
    indexed = apply_series([patch], Reader(content)).patches[0].files[0].hunks
    assert len(indexed) > applying.INDEXED_FROM
    monkeypatch.setattr(applying, "INDEXED_FROM", 10**9)
    scanned = apply_series([patch], Reader(content)).patches[0].files[0].hunks
    assert indexed == scanned
    assert {h.status for h in scanned} == {"exact", "offset"}
    assert all(len(h.other_matches) == 3 and h.other_count > 3 for h in scanned[:-1])
    assert placement.WINDOW_FROM < 500  # the window table was used


def test_strict_ambiguity_names_a_few_lines_and_the_count() -> None:
    result = apply_series(
        [parse_patch(IN_THE_MIDDLE, name="p")], Reader(REPEATED), Policy(ambiguity="error")
    )
    (hunk,) = result.patches[0].files[0].hunks
    assert hunk.status == "ambiguous"
    assert hunk.reason == "the preimage also matches at line(s) 49, 51, 52 and 94 more"


def test_ten_thousand_repeated_hunks_keep_small_results() -> None:
    """Not a timing test: the O(N^2) of listing every other match shows as result size."""
    n = 10_000
    content = {b"f": b"pass\n" * (n * 4)}
    data = b"--- a/f\n+++ b/f\n" + b"".join(
        b"@@ -%d,3 +%d,3 @@\n pass\n-pass\n+x%d\n pass\n" % (i * 4 + 1, i * 4 + 1, i)
        for i in range(n)
    )
    result = apply_series([parse_patch(data, name="p")], Reader(content))
    hunks = result.patches[0].files[0].hunks
    assert result.ok and len(hunks) == n
    assert max(len(h.other_matches) for h in hunks) == 3
    # hunk i may start after the last change of hunk i-1: every later window counts
    assert hunks[0].other_count == n * 4 - 3
    # the last may start from the line after the previous change (39995) to the end (39998)
    assert hunks[-1].other_matches == (39995, 39996, 39998) and hunks[-1].other_count == 3
