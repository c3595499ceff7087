"""The adjacency-aware merge (port/adjacent.py), on small real files and against ``git merge-file``.

The incident: porting a 50-row series from 0.30.0 to 0.31.0, six rows that kept every +/- line paused
because their change merely touched an upstream change (issue #37), and a person wrote by hand what
a machine could have. Each of those shapes is a case below, and so is each shape where combining the
two changes would be a guess and the merge must still pause. The differential tests hold the merge
to git's bytes wherever git merges cleanly.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest

from hyperqwen_patches.port.adjacent import AdjacentMerge, merge, split_lines
from hyperqwen_patches.port.threeway import merge_text

LABELS = ("upstream", "base", "row")


def git_merge(base: bytes, upstream: bytes, row: bytes) -> tuple[bytes, int]:
    return merge_text(upstream, base, row, LABELS)


def adjacent(base: str, upstream: str, row: str) -> AdjacentMerge:
    """The merge of three texts; asserts first that git's merge pauses on them (else the case
    shows nothing git does not already do)."""
    b, u, r = base.encode(), upstream.encode(), row.encode()
    assert git_merge(b, u, r)[1] > 0, "git merge-file merges this cleanly: not an adjacency case"
    return merge(b, u, r)


# --- 1: the row inserts right before or after a line upstream reworded ------------------------------

PROFILE = """\
def determine_available_memory(self):
    torch.cuda.empty_cache()
    # Profile the model with dummy inputs to find the peak memory usage
    self.profile_run()
    return self.peak_memory
"""


def test_insertion_before_a_comment_upstream_split_in_two() -> None:
    upstream = PROFILE.replace(
        "    # Profile the model with dummy inputs to find the peak memory usage\n",
        "    # Profile the model with dummy inputs\n    # to find the peak memory usage.\n",
    )
    row = PROFILE.replace(
        "    # Profile", "    self.warm_up_allocator()  # the first step's pools\n    # Profile"
    )
    result = adjacent(PROFILE, upstream, row)
    assert (
        result.content
        == upstream.replace(
            "    # Profile", "    self.warm_up_allocator()  # the first step's pools\n    # Profile"
        ).encode()
    )
    (site,) = result.adjacent
    assert (site.line, site.count, site.base_line) == (3, 3, 3)
    assert "the row inserts next to lines upstream changed" in site.what
    assert site.describe().startswith("line 3: merged next to an upstream change")


RUNNER = """\
import torch


def helper(n):
    return n + 1


def _dummy_run(self, num_tokens: int) -> None:
    return self.model(num_tokens)
"""

NEW_FUNCTION = """\
def warm_up(self, sizes):
    for n in sizes:
        helper(n)


"""


def test_new_function_above_a_def_upstream_renamed() -> None:
    upstream = RUNNER.replace("def _dummy_run(", "def _dummy_forward(")
    row = RUNNER.replace("def _dummy_run(", NEW_FUNCTION + "def _dummy_run(")
    result = adjacent(RUNNER, upstream, row)
    expected = upstream.replace("def _dummy_forward(", NEW_FUNCTION + "def _dummy_forward(")
    assert result.content == expected.encode()
    assert [s.line for s in result.adjacent] == [8]


# --- 2: the row appends after a line whose call upstream changed -------------------------------------


def test_block_appended_after_a_call_whose_arguments_upstream_changed() -> None:
    upstream = PROFILE.replace(
        "self.profile_run()",
        "self.profile_run(randomize_inputs=self.model_config.randomize_dummy_inputs)",
    )
    block = (
        "    if envs.VLLM_PROFILE_AFTER_WARMUP:\n"
        "        self.compile_or_warm_up_model()\n"
        "        self.profile_run()\n"
    )
    row = PROFILE.replace("    return self.peak", block + "    return self.peak")
    result = adjacent(PROFILE, upstream, row)
    assert (
        result.content
        == upstream.replace("    return self.peak", block + "    return self.peak").encode()
    )
    assert [(s.line, s.count) for s in result.adjacent] == [(4, 4)]


# --- 3: both insert a block at the same place: upstream's first, then the row's ----------------------

LOOP = """\
def step(self, batch):
    outputs = self.model(batch)
    return outputs
"""


def test_both_insert_at_one_place_upstream_block_first() -> None:
    theirs = "    if batch.is_empty():\n        return None\n"
    ours = '    logger.info("kvarn: step of %d tokens", len(batch))\n'
    upstream = LOOP.replace("    outputs", theirs + "    outputs")
    row = LOOP.replace("    outputs", ours + "    outputs")
    result = adjacent(LOOP, upstream, row)
    assert result.content == LOOP.replace("    outputs", theirs + ours + "    outputs").encode()
    assert "upstream's lines first" in result.adjacent[0].what


KNOBS = """\
environment_variables = {
    "VLLM_HOST_IP": lambda: os.getenv("VLLM_HOST_IP", ""),
}
"""


def test_both_add_a_knob_at_the_end_of_one_dict() -> None:
    theirs = '    "VLLM_NEW_UPSTREAM": lambda: int(os.getenv("VLLM_NEW_UPSTREAM", "0")),\n'
    ours = '    "VLLM_KVARN_BITS": lambda: int(os.getenv("VLLM_KVARN_BITS", "4")),\n'
    upstream = KNOBS.replace("}\n", theirs + "}\n")
    row = KNOBS.replace("}\n", ours + "}\n")
    result = adjacent(KNOBS, upstream, row)
    assert result.content == KNOBS.replace("}\n", theirs + ours + "}\n").encode()


# --- 4: the row rewrites two lines, upstream adds a blank line right after them ----------------------

DOC = '''\
class Worker:
    """Runs the model on one device.
    Owns the cache engine."""
    def __init__(self):
        self.cache = None
'''


def test_rewrite_next_to_a_blank_line_upstream_added() -> None:
    upstream = DOC.replace('"""\n    def', '"""\n\n    def')
    row = DOC.replace(
        '    """Runs the model on one device.\n    Owns the cache engine."""\n',
        '    """Runs the model on one device, KVarN caches included.\n'
        '    Owns the cache engine and its compressed pools."""\n',
    )
    result = adjacent(DOC, upstream, row)
    expected = row.replace('"""\n    def', '"""\n\n    def')
    assert result.content == expected.encode()
    assert "upstream inserts next to lines the row changed" in result.adjacent[0].what


# --- where combining would be a guess: the merge pauses -----------------------------------------------


def clash(base: str, upstream: str, row: str) -> str:
    result = adjacent(base, upstream, row)
    assert result.content is None and not result.clean
    assert result.clashes
    return result.clashes[0].reason


def test_overlapping_edits_pause() -> None:
    upstream = PROFILE.replace("self.profile_run()", "self.profile_run(randomize_inputs=True)")
    row = PROFILE.replace("self.profile_run()", "self.profile_run(warmup=True)")
    assert clash(PROFILE, upstream, row) == "both sides change the same base line"


def test_an_insertion_inside_lines_upstream_replaced_pauses() -> None:
    upstream = PROFILE.replace(
        "    self.profile_run()\n    return self.peak_memory\n",
        "    return self.measure_peak()\n",
    )
    row = PROFILE.replace("    return self.peak", "    self.synchronize()\n    return self.peak")
    assert clash(PROFILE, upstream, row) == "the row inserts inside lines upstream replaced"


def test_a_deleted_anchor_pauses() -> None:
    upstream = PROFILE.replace("    self.profile_run()\n", "")
    row = PROFILE.replace("    return self.peak", "    self.synchronize()\n    return self.peak")
    assert clash(PROFILE, upstream, row) == "upstream deletes the line next to the row's insertion"


def test_an_anchor_replaced_by_other_code_pauses() -> None:
    upstream = PROFILE.replace("    self.profile_run()\n", "    raise NotImplementedError\n")
    row = PROFILE.replace("    return self.peak", "    self.synchronize()\n    return self.peak")
    reason = clash(PROFILE, upstream, row)
    assert reason == "upstream replaced the line next to the row's insertion with other code"


def test_replacements_that_touch_pause() -> None:
    upstream = PROFILE.replace("torch.cuda.empty_cache()", "torch.accelerator.empty_cache()")
    row = PROFILE.replace(
        "    # Profile the model with dummy inputs to find the peak memory usage\n",
        "    # Profile the model with KVarN's pools allocated\n",
    )
    assert clash(PROFILE, upstream, row) == "both sides replace lines that touch"


SETUP = """\
alpha = compute_alpha(config)
beta = compute_beta(config)
gamma = compute_gamma(config)
"""


def test_a_block_upstream_moved_next_to_the_rows_insertion_pauses() -> None:
    # Upstream moved gamma to the top; the row inserts at the top. Whether delta goes before or after
    # gamma is a guess: diff3's two insertions at one place, but one of them is a move.
    upstream = "gamma = compute_gamma(config)\nalpha = compute_alpha(config)\nbeta = compute_beta(config)\n"
    row = "delta = compute_delta(config)\n" + SETUP
    reason = clash(SETUP, upstream, row)
    assert "moved lines" in reason


def test_lines_upstream_moved_away_from_the_rows_insertion_pause() -> None:
    upstream = "gamma = compute_gamma(config)\nalpha = compute_alpha(config)\nbeta = compute_beta(config)\n"
    row = SETUP.replace("gamma =", "delta = compute_delta(config)\ngamma =")
    result = merge(SETUP.encode(), upstream.encode(), row.encode())
    assert result.content is None


def test_part_of_the_row_already_upstream_next_to_it_pauses() -> None:
    knob = '    "VLLM_KVARN_BITS": lambda: int(os.getenv("VLLM_KVARN_BITS", "4")),\n'
    other = '    "VLLM_KVARN_GROUP": lambda: int(os.getenv("VLLM_KVARN_GROUP", "64")),\n'
    upstream = KNOBS.replace("}\n", knob + "}\n")
    row = KNOBS.replace("}\n", knob + other + "}\n")
    assert "part of the row may be upstream" in clash(KNOBS, upstream, row)


def test_two_files_filled_from_empty_pause() -> None:
    assert clash("", "import os\n", "import sys\n") == "both sides fill a file that was empty"


def test_the_same_change_on_both_sides_is_taken_once() -> None:
    upstream = PROFILE.replace("self.profile_run()", "self.profile_run(randomize_inputs=True)")
    assert (
        merge(PROFILE.encode(), upstream.encode(), upstream.encode()).content == upstream.encode()
    )


def test_crlf_lines_merge_with_their_endings() -> None:
    def crlf(text: str) -> str:
        return text.replace("\n", "\r\n")

    upstream = LOOP.replace(
        "    outputs", "    if batch.is_empty():\n        return None\n    outputs"
    )
    row = LOOP.replace("    outputs", "    logger.info('step')\n    outputs")
    result = adjacent(crlf(LOOP), crlf(upstream), crlf(row))
    assert result.content is not None and result.content.count(b"\r\n") == 6
    assert b"\n" not in result.content.replace(b"\r\n", b"")


def test_split_lines_keeps_a_lone_cr_inside_a_line() -> None:
    assert split_lines(b"a\rb\r\nc") == [b"a\rb\r\n", b"c"]
    assert split_lines(b"a\x0cb\nc\n") == [b"a\x0cb\n", b"c\n"]


# --- against git: the same bytes wherever git merges cleanly -----------------------------------------

Gen = Callable[[random.Random, int], list[bytes]]


def _edit(
    lines: list[bytes], rng: random.Random, fresh: Callable[[], bytes], pool: list[bytes]
) -> list[bytes]:
    out = list(lines)
    for _ in range(rng.randint(1, 3)):
        at = rng.randint(0, len(out))
        kind = rng.random()
        if kind < 0.35 or not out:
            out[at:at] = [fresh() if not pool or rng.random() < 0.7 else rng.choice(pool)
                          for _ in range(rng.randint(1, 3))]  # fmt: skip
        elif kind < 0.65:
            at = min(at, len(out) - 1)
            del out[at : at + rng.randint(1, 2)]
        else:
            at = min(at, len(out) - 1)
            out[at : at + rng.randint(1, 2)] = [fresh() for _ in range(rng.randint(1, 2))]
    return out


def _cases(seed: int, count: int, pool: list[bytes]) -> list[tuple[bytes, bytes, bytes]]:
    rng = random.Random(seed)
    counter = iter(range(10**9))

    def fresh() -> bytes:
        return b"new %d\n" % next(counter)

    cases = []
    for _ in range(count):
        size = rng.randint(0, 12)
        base = [rng.choice(pool) if pool and rng.random() < 0.4 else b"base %d\n" % i
                for i in range(size)]  # fmt: skip
        upstream, row = _edit(base, rng, fresh, pool), _edit(base, rng, fresh, pool)
        texts = [b"".join(x) for x in (base, upstream, row)]
        ending = rng.random()
        if ending < 0.15:
            texts = [t.replace(b"\n", b"\r\n") for t in texts]
        elif ending < 0.3:
            which = rng.randrange(3)
            texts[which] = texts[which].removesuffix(b"\n")
        cases.append((texts[0], texts[1], texts[2]))
    return cases


def test_distinct_lines_merge_to_gits_bytes_wherever_git_merges_cleanly() -> None:
    clean = 0
    for base, upstream, row in _cases(20261204, 600, pool=[]):
        expected, conflicts = git_merge(base, upstream, row)
        if conflicts:
            continue
        clean += 1
        assert merge(base, upstream, row).content == expected, (base, upstream, row)
    assert clean > 100


def test_repeated_lines_merge_to_gits_bytes_or_pause_never_differ() -> None:
    # Blank lines, `)` and `pass` recur: two diffs may align them differently. Where they do, the
    # merge may pause where git did not; it never gives other bytes than git's clean merge.
    pool = [b"\n", b")\n", b"pass\n", b"return None\n"]
    same = paused = 0
    for base, upstream, row in _cases(4242, 600, pool):
        expected, conflicts = git_merge(base, upstream, row)
        if conflicts:
            continue
        got = merge(base, upstream, row).content
        assert got is None or got == expected, (base, upstream, row)
        same += got is not None
        paused += got is None
    assert same > 100 and paused <= same // 20


def test_an_adjacency_merge_is_upstream_plus_exactly_the_rows_change() -> None:
    # With distinct lines, the merged file differs from upstream's by the row's added and removed
    # lines (less what upstream removed too), no more, no fewer: nothing of either side is lost or
    # doubled.
    merged = 0
    for base, upstream, row in _cases(77, 1500, pool=[]):
        result = merge(base, upstream, row)
        if not result.adjacent or result.content is None:
            continue
        merged += 1
        b, u, r, m = (Counter(split_lines(x)) for x in (base, upstream, row, result.content))
        assert m - u == r - b and u - m == (b - r) - (b - u), (base, upstream, row)
    assert merged > 20


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_adjacency_is_reported_at_its_line(seed: int) -> None:
    for base, upstream, row in _cases(seed, 300, pool=[]):
        result = merge(base, upstream, row)
        if result.content is None:
            continue
        lines = split_lines(result.content)
        for site in result.adjacent:
            assert 1 <= site.line <= len(lines) and site.count >= 1
            assert site.line + site.count - 1 <= len(lines)


# --- in threeway.merge_row: git first, the adjacency merge only where git pauses ---------------------


def test_merge_row_combines_touching_changes_and_keeps_real_conflicts() -> None:
    from hyperqwen_patches.port.threeway import fits_outside_conflicts, merge_row

    upstream = LOOP.replace(
        "    outputs", "    if batch.is_empty():\n        return None\n    outputs"
    )
    row = LOOP.replace("    outputs", "    logger.info('step')\n    outputs")
    clash_row = LOOP.replace("self.model(batch)", "self.model(batch, kv=self.kv)")
    clash_up = LOOP.replace("self.model(batch)", "self.model(batch, cache=None)")
    before = {b"a.py": LOOP.encode(), b"b.py": LOOP.encode(), b"c.py": None}
    after = {b"a.py": row.encode(), b"b.py": clash_row.encode(), b"c.py": b"x = 1\n"}
    current = {b"a.py": upstream.encode(), b"b.py": clash_up.encode(), b"c.py": b"y = 2\n"}
    merged = merge_row([b"a.py", b"b.py", b"c.py"], before.get, after.get, current.get, LABELS)
    hows = {f.path: (f.how, f.review) for f in merged.files}
    assert hows[b"a.py"][0] == "adjacent" and hows[b"a.py"][1][0][0] == 2
    assert hows[b"b.py"] == ("conflict", ())
    assert hows[b"c.py"] == ("conflict", ())  # both created it: nothing to be adjacent in
    why = {f.path: f.why for f in merged.files}
    assert why[b"b.py"] == ("both sides change the same base line (line 2 before the row)",)
    assert why[b"c.py"] == ("both sides created the file",)
    assert merged.adjacent == ((b"a.py", 2, hows[b"a.py"][1][0][1]),)
    assert merged.merged_paths == (b"a.py",) and not merged.clean

    marked, _ = git_merge(LOOP.encode(), upstream.encode(), row.encode())
    combined = merge(LOOP.encode(), upstream.encode(), row.encode()).content
    assert combined is not None and fits_outside_conflicts(combined, marked, LABELS)
    # A result that drops or reorders what git merged cleanly is not taken.
    assert not fits_outside_conflicts(combined.replace(b"def step", b"def stop"), marked, LABELS)
    assert not fits_outside_conflicts(combined + b"extra\n", marked, LABELS)
    assert not fits_outside_conflicts(combined, combined, LABELS)  # no conflict block at all


def test_a_name_upstream_renamed_next_to_the_rows_insertion_pauses() -> None:
    # `x = compute()` became `y = compute()`: the anchor is still there, reworded, but the row's
    # line logs `x`, which no longer exists. Merged, the file reads well and fails at run time.
    base = "def run(self):\n    x = self.compute()\n    return self.finish()\n"
    upstream = base.replace("    x = self.compute()", "    y = self.compute()")
    row = base.replace("    return", '    logger.info("computed %s", x)\n    return')
    assert (
        clash(base, upstream, row) == "upstream drops x next to the row's insertion, which uses it"
    )
    # Kept, the same name merges.
    widened = base.replace("self.compute()", "self.compute(strict=True)")
    assert adjacent(base, widened, row).clean


def test_an_anchor_deleted_inside_a_reworded_block_pauses() -> None:
    # Upstream renamed the loop's call and deleted the capture right after it, in one block; the row
    # logs after the capture. The block's text still resembles the old one, its last line does not.
    base = (
        "def warm_up(self):\n"
        "    for size in self.sizes:\n"
        "        self.runner.dummy_run(size)\n"
        "    self.runner.capture_model()\n"
        "    return self.sizes\n"
    )
    upstream = base.replace(
        "        self.runner.dummy_run(size)\n    self.runner.capture_model()\n",
        "        self.runner.dummy_forward(size)\n",
    )
    row = base.replace("    return", '    logger.info("warm-up done")\n    return')
    reason = clash(base, upstream, row)
    assert reason == "upstream replaced the line next to the row's insertion with other code"


def test_a_call_wrapped_over_lines_still_anchors() -> None:
    upstream = PROFILE.replace(
        "    self.profile_run()\n",
        "    self.profile_run(\n        randomize_inputs=True,\n    )\n",
    )
    row = PROFILE.replace("    return self.peak", "    self.synchronize()\n    return self.peak")
    result = adjacent(PROFILE, upstream, row)
    assert (
        result.content
        == upstream.replace(
            "    return self.peak", "    self.synchronize()\n    return self.peak"
        ).encode()
    )


def test_both_insert_where_the_rows_lines_would_change_block_pauses() -> None:
    # The row logs at the end of the `if a` body; upstream adds a new `if c` block at the same
    # place. Upstream's lines first would put the row's call inside `if c`.
    base = "def f(a, b, c):\n    if a:\n        do_a()\n    if b:\n        do_b()\n"
    upstream = base.replace("    if b:", "    if c:\n        do_c()\n    if b:")
    row = base.replace("        do_a()\n", "        do_a()\n        log_a()\n")
    reason = clash(base, upstream, row)
    assert reason.startswith("the row's lines are indented deeper than upstream's")
    # Upstream's line at the body's depth, the row's at the `if` level: nothing changes block.
    deeper = base.replace("        do_a()\n", "        do_a()\n        cleanup_a()\n")
    outer = base.replace("    if b:", "    log_step()\n    if b:")
    merged = adjacent(base, deeper, outer)
    assert merged.content == deeper.replace("    if b:", "    log_step()\n    if b:").encode()


def test_blank_lines_in_both_insertions_are_not_taken_for_the_same_lines() -> None:
    # Both blocks open with a blank line: a blank line is no evidence that upstream has the row's.
    base = "def f():\n    a()\n\n    b()\n"
    upstream = base.replace("\n    b()", "\n    if done():\n        return\n\n    b()")
    row = base.replace("\n    b()", "\n    log()\n\n    b()")
    result = adjacent(base, upstream, row)
    assert (
        result.content
        == base.replace(
            "\n    b()", "\n    if done():\n        return\n\n    log()\n\n    b()"
        ).encode()
    )


def test_a_line_of_backslashes_does_not_stall_the_name_check() -> None:
    # An unterminated string of 60 backslashes took minutes with overlapping regex alternatives.
    import time

    from hyperqwen_patches.port.adjacent import _names

    start = time.perf_counter()
    assert _names([b'x = "' + b"\\" * 60 + b"a\n"]) == {b"x", b"a"}
    assert time.perf_counter() - start < 1.0


def test_a_row_editing_a_block_upstream_moved_pauses() -> None:
    # Upstream moved the method the row edits to the end of the class: the row's base lines are
    # deleted in one place and inserted in another. git pauses; so does the merge, never editing
    # one copy and leaving the other.
    base = (
        "class A:\n"
        "    def first(self):\n        return compute_first(self)\n\n"
        "    def second(self):\n        return compute_second(self)\n\n"
        "    def third(self):\n        return compute_third(self)\n"
    )
    upstream = (
        "class A:\n"
        "    def second(self):\n        return compute_second(self)\n\n"
        "    def third(self):\n        return compute_third(self)\n\n"
        "    def first(self):\n        return compute_first(self)\n"
    )
    row = base.replace("compute_first(self)", "compute_first(self, kvarn=True)")
    result = merge(base.encode(), upstream.encode(), row.encode())
    assert result.content is None
    assert git_merge(base.encode(), upstream.encode(), row.encode())[1] > 0
