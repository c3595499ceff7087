"""The static checks of a written row (port/verify.py): what a row adds to the new branch as the
rebase wrote it, judged against the old release as the series left it.

Issue #37: a diff3 merge ported an override of ``TopKSelector.select`` cleanly onto a release that had
renamed ``self.selector_top_k`` to ``self.top_k`` and moved ``self._cached_candidate_ids`` to
``self.candidate_sampler.cached_candidate_ids``; the file compiled and raised ``AttributeError`` at
run time. The trees below are a small package shaped like that one.
"""

from __future__ import annotations

from collections.abc import Callable

from hyperqwen_patches.port.linediff import changed_lines
from hyperqwen_patches.port.verify import (
    ParseStore,
    RebaseChecks,
    RowVerdict,
    RowVerifier,
    verify_row,
)

Tree = dict[bytes, bytes]

OLD_SELECTOR = b'''"""Top-k candidate selection."""


class CandidateSampler:
    def __init__(self, k):
        self.k = k


class TopKSelector:
    def __init__(self, config):
        self.selector_top_k = config.top_k
        self._cached_candidate_ids = None

    def select(self, logits, temperature=1.0):
        if temperature == 0.0:
            return logits.argmax(dim=-1)
        scaled = logits / temperature
        probs = scaled.softmax(dim=-1)
        top = probs.topk(self.selector_top_k, dim=-1)
        return top.indices


def scale(x, factor):
    return x * factor
'''

NEW_SELECTOR = b'''"""Top-k candidate selection."""


class CandidateSampler:
    def __init__(self, k):
        self.k = k
        self.cached_candidate_ids = None


class TopKSelector:
    def __init__(self, config):
        self.top_k = config.top_k
        self.candidate_sampler = CandidateSampler(config.top_k)

    def select(self, logits, temperature=1.0, *, generator):
        if temperature == 0.0:
            return logits.argmax(dim=-1)
        scaled = logits / temperature
        scaled = self.candidate_sampler.mask(scaled)
        probs = scaled.softmax(dim=-1)
        top = probs.topk(self.top_k, dim=-1, generator=generator)
        return top.indices


def scale(x, factor):
    return x * factor
'''

RUNNER = b"""from vllm.sample.selector import TopKSelector, scale


class Runner:
    def __init__(self, config):
        self.selector = TopKSelector(config)

    def step(self, logits):
        out = self.selector.select(logits)
        return out
"""

OLD: Tree = {
    b"vllm/__init__.py": b"",
    b"vllm/sample/__init__.py": b"",
    b"vllm/sample/selector.py": OLD_SELECTOR,
    b"vllm/worker/__init__.py": b"",
    b"vllm/worker/runner.py": RUNNER,
}
NEW: Tree = {**OLD, b"vllm/sample/selector.py": NEW_SELECTOR}

# The row: an override that copies the base's body and reads two of its attributes.
OVERRIDE = b"""

class ChunkedTopKSelector(TopKSelector):
    def select(self, logits, temperature=1.0):
        ids = self._cached_candidate_ids
        scaled = logits[ids] / temperature
        return scaled.topk(self.selector_top_k)
"""


def reader(tree: Tree) -> Callable[[bytes], bytes | None]:
    return tree.get


def check(
    old_before: Tree,
    old_after: Tree,
    new_before: Tree,
    new_after: Tree,
    verifier: RowVerifier | None = None,
    row: str = "row",
) -> RowVerdict:
    paths = {p for p in {*new_before, *new_after} if new_before.get(p) != new_after.get(p)}
    paths |= {p for p in {*old_before, *old_after} if old_before.get(p) != old_after.get(p)}
    verifier = verifier or RowVerifier(old_label="0.30.0 + rows", new_label="0.31.0 + rows")
    return verifier.verify(
        row,
        sorted(paths),
        reader(old_before),
        reader(old_after),
        reader(new_before),
        reader(new_after),
    )


def with_file(tree: Tree, path: bytes, data: bytes) -> Tree:
    return {**tree, path: data}


def line_of(data: bytes, needle: bytes) -> int:
    return data[: data.index(needle)].count(b"\n") + 1


def test_attributes_upstream_renamed_are_reported_with_file_line_and_their_new_names() -> None:
    path = b"vllm/sample/selector.py"
    old_after = with_file(OLD, path, OLD_SELECTOR + OVERRIDE)
    written = NEW_SELECTOR + OVERRIDE  # what a clean diff3 merge writes
    verdict = check(OLD, old_after, NEW, with_file(NEW, path, written))
    got = [(e.check, e.path, e.line, e.message) for e in verdict.errors]
    assert got == [
        (
            "names",
            path,
            line_of(written, b"ids = self._cached"),
            "self._cached_candidate_ids: vllm.sample.selector.ChunkedTopKSelector has no "
            "_cached_candidate_ids on 0.31.0 + rows",
        ),
        (
            "names",
            path,
            line_of(written, b"(self.selector_top_k)"),
            "self.selector_top_k: vllm.sample.selector.ChunkedTopKSelector has no "
            "selector_top_k on 0.31.0 + rows",
        ),
    ]
    # A name the manifest's accepted_names lists (a maintainer looked at it) is not an error.
    accepting = RowVerifier(accept=["vllm.sample.selector.ChunkedTopKSelector.selector_top_k"])
    still = check(OLD, old_after, NEW, with_file(NEW, path, written), accepting)
    assert [e.message.split(":")[0] for e in still.errors] == ["self._cached_candidate_ids"]
    assert still.stats["accepted"] == 1
    cached, top_k = verdict.errors
    # Which definition the verdict rests on (the old side's), and where the name went.
    assert (
        top_k.definition
        == f"vllm/sample/selector.py:{line_of(OLD_SELECTOR, b'self.selector_top_k =')} on 0.30.0 + rows"
    )
    assert top_k.detail.endswith("0.31.0 + rows has self.top_k")
    assert cached.detail.endswith("has self.candidate_sampler.cached_candidate_ids")
    assert not verdict.ok


def test_a_call_to_a_method_that_gained_a_required_parameter_is_reported() -> None:
    path = b"vllm/worker/runner.py"
    row = RUNNER.replace(
        b"        return out\n",
        b"        again = self.selector.select(logits, 0.5)\n        return out, again\n",
    )
    verdict = check(OLD, with_file(OLD, path, row), NEW, with_file(NEW, path, row))
    [error] = verdict.errors
    assert (error.check, error.path, error.line) == ("signatures", path, line_of(row, b"again ="))
    assert error.message == (
        "self.selector.select(...) does not bind on 0.31.0 + rows: missing required generator"
    )
    # The definition used: the new branch's, with its signature; the old one in the detail.
    new_line = line_of(NEW_SELECTOR, b"def select")
    assert error.definition == (
        f"vllm/sample/selector.py:{new_line} select(self, logits, temperature=1.0, *, generator)"
    )
    assert "select(self, logits, temperature=1.0)" in error.detail
    # The pristine call on the line above is upstream's, not the row's: it is not looked at.
    assert verdict.stats["calls"] == 1


def test_a_row_that_widens_a_signature_in_its_own_hunk_and_calls_it_is_not_reported() -> None:
    """Issue #38 item 9: the call binds against the definition the series itself gives it."""
    sel, run = b"vllm/sample/selector.py", b"vllm/worker/runner.py"
    widen = (b"def scale(x, factor):", b"def scale(x, factor, bias=0):")
    call = RUNNER.replace(b"        return out\n", b"        return scale(out, 2, bias=1)\n")
    old_after = {**OLD, sel: OLD_SELECTOR.replace(*widen), run: call}
    new_after = {**NEW, sel: NEW_SELECTOR.replace(*widen), run: call}
    verdict = check(OLD, old_after, NEW, new_after)
    assert verdict.errors == []
    assert verdict.stats["calls bound"] == 1
    # The same row where the branch lost the widening (a merge kept upstream's def line): reported.
    lost = check(OLD, old_after, NEW, {**new_after, sel: NEW_SELECTOR})
    assert [(e.check, e.message) for e in lost.errors] == [
        ("signatures", "scale(...) does not bind on 0.31.0 + rows: no parameter named bias")
    ]


def test_an_error_the_branch_already_had_is_not_the_rows() -> None:
    """An earlier row wrote ``self.selector_top_k`` onto the branch (its error); a later row that only
    edits that line carries it on and is not blamed, but a new use of the name in it is its own."""
    path = b"vllm/sample/selector.py"
    earlier = OVERRIDE.replace(b"return scaled", b"k = self.selector_top_k\n        return scaled")
    later = earlier.replace(b"k = self.selector_top_k\n", b"k = self.selector_top_k + 1\n")
    old_before = with_file(OLD, path, OLD_SELECTOR + earlier)
    new_before = with_file(NEW, path, NEW_SELECTOR + earlier)
    verdict = check(
        old_before,
        with_file(OLD, path, OLD_SELECTOR + later),
        new_before,
        with_file(NEW, path, NEW_SELECTOR + later),
    )
    assert verdict.errors == []
    assert verdict.stats["pre-existing"] == 1
    more = later.replace(b"return scaled", b"j = self.selector_top_k\n        return scaled")
    verdict = check(
        old_before,
        with_file(OLD, path, OLD_SELECTOR + more),
        new_before,
        with_file(NEW, path, NEW_SELECTOR + more),
    )
    assert [(e.line, e.message.split(":")[0]) for e in verdict.errors] == [
        (line_of(NEW_SELECTOR + more, b"j = self"), "self.selector_top_k")
    ]


def test_a_file_that_stops_compiling_is_reported_at_the_rows_line() -> None:
    path = b"vllm/worker/runner.py"
    # A merge that left the row's line outside the method body: ``return`` outside a function is
    # only found by the compiler, not the parser.
    row = RUNNER + b"return None\n"
    verdict = check(OLD, with_file(OLD, path, row), NEW, with_file(NEW, path, row))
    [error] = verdict.errors
    assert (error.check, error.line) == ("compiles", line_of(row, b"return None"))
    assert error.message == "does not compile: 'return' outside function"
    # What the row's other files take from a file that no longer parses is not reported missing.
    user = b"vllm/worker/user.py"
    uses = b"from vllm.worker.runner import Runner\n"
    unparsable = RUNNER + b"def broken(:\n"
    verdict = check(OLD, {**OLD, path: row, user: uses}, NEW, {**NEW, path: unparsable, user: uses})
    assert [(e.check, e.line) for e in verdict.errors] == [
        ("compiles", line_of(unparsable, b"def broken"))
    ]
    assert verdict.stats["in a file that does not compile"] == 1
    # A file that already did not compile on the new branch is not the row's doing.
    broken = RUNNER.replace(b"def step(self, logits):", b"def step(self, logits:")
    verdict = check(
        OLD,
        with_file(OLD, path, RUNNER + b"# row\n"),
        with_file(NEW, path, broken),
        with_file(NEW, path, broken + b"# row\n"),
    )
    assert verdict.errors == []
    assert verdict.stats["pre-existing"] == 1


def test_names_that_are_unknown_statically_or_fine_on_the_branch_are_not_reported() -> None:
    path = b"vllm/worker/runner.py"
    row = RUNNER.replace(
        b"        return out\n",
        b"        import torch\n"
        b"        t = torch.zeros(1)\n"
        b"        n = len(logits) + self.selector.top_k\n"
        b"        return out, t, n\n",
    )
    # self.selector.top_k exists on the new release only: the old side lacks it, so it is no change.
    verdict = check(OLD, with_file(OLD, path, row), NEW, with_file(NEW, path, row))
    assert verdict.errors == []
    assert verdict.stats["outside the package"] >= 1
    assert verdict.stats["builtin"] >= 1


def test_untouched_modules_are_parsed_once_for_a_whole_rebase() -> None:
    """The store is shared by the four trees of every row: a rebase of many rows does not parse the
    modules its lookups reach again and again."""
    path = b"vllm/worker/runner.py"
    verifier = RowVerifier(store=ParseStore())
    new_before = NEW
    old_before = OLD
    for n in range(10):
        row = RUNNER.replace(
            b"        return out\n", b"        out = scale(out, %d)\n        return out\n" % n
        )
        old_after, new_after = with_file(old_before, path, row), with_file(new_before, path, row)
        assert check(old_before, old_after, new_before, new_after, verifier).errors == []
        old_before, new_before = old_after, new_after
    # selector.py twice (old and new), runner.py once per version written, plus the first.
    assert verifier.store.parses <= 2 + 10 + 1 + 2


def test_verify_row_on_its_own_and_the_line_diff() -> None:
    path = b"vllm/worker/runner.py"
    row = RUNNER + b"x = scale(1)\n"
    verdict = verify_row(
        "r", [path], OLD.get, with_file(OLD, path, row).get, NEW.get, with_file(NEW, path, row).get
    )
    assert [e.check for e in verdict.errors] == []  # binds on neither side: not a change
    assert verdict.stats["call skipped: does not bind on the old side either"] == 1
    change = changed_lines(b"a\nb\nc\n", b"a\nB\nc\nd\n")
    assert (change.added, change.removed) == ((2, 4), (2,))
    assert changed_lines(None, b"x\n").added == (1,)
    assert changed_lines(b"x\n", None).removed == (1,)


def test_the_issue_37_override_that_diff3_merges_cleanly_is_caught_by_both_checks() -> None:
    """The whole story on the trees above: ``git merge-file`` carries the override onto the new
    release without a conflict; the static checks of the written row name both renamed attributes,
    and the stale-copy report names the base method upstream changed under the copy."""
    from hyperqwen_patches.port.stalecopy import CopyIndex, stale_copies
    from hyperqwen_patches.port.threeway import merge_row

    copying = b"""

class ChunkedTopKSelector(TopKSelector):
    def select(self, logits, temperature=1.0):
        if temperature == 0.0:
            return logits.argmax(dim=-1)
        logits = logits[self._cached_candidate_ids]
        scaled = logits / temperature
        probs = scaled.softmax(dim=-1)
        top = probs.topk(self.selector_top_k, dim=-1)
        return top.indices
"""
    path = b"vllm/sample/selector.py"
    old_after = with_file(OLD, path, OLD_SELECTOR + copying)
    merge = merge_row([path], OLD.get, old_after.get, NEW.get, ("new", "base", "row"))
    assert merge.clean and merge.merged_paths == (path,)  # git says nothing is wrong
    [written] = merge.files
    assert written.content is not None
    new_after = with_file(NEW, path, written.content)
    verdict = check(OLD, old_after, NEW, new_after)
    assert [e.message.split(":")[0] for e in verdict.errors] == [
        "self._cached_candidate_ids",
        "self.selector_top_k",
    ]
    added = changed_lines(NEW[path], written.content).added
    [stale] = stale_copies({path: (written.content, added)}, CopyIndex(OLD.get, OLD), NEW.get)
    assert (stale.qualname, stale.original_qualname) == (
        "ChunkedTopKSelector.select",
        "TopKSelector.select",
    )
    # Line numbers are the written file's, where the person will read them.
    assert [(s.line, s.kind) for s in stale.stale_lines] == [
        (line_of(written.content, b"class Chunked") + 1, "changed"),  # no generator parameter
        (line_of(written.content, b"scaled = logits / temperature\n        probs"), "missing"),
        (line_of(written.content, b"top = probs.topk(self.selector_top_k"), "changed"),
    ]
    assert stale.stale_lines[1].upstream == (b"scaled = self.candidate_sampler.mask(scaled)",)
    # The rebase's one call per row gives the same findings, each on one line for the pause.
    checks = RebaseChecks("vllm", OLD.get, lambda: OLD, NEW.get, "0.30.0 + rows", "0.31.0 + rows")
    written_row = checks.check("chunked", [path], OLD.get, old_after.get, NEW.get, new_after.get)
    assert not written_row.ok
    assert [line.split(": ", 1)[0] for line in written_row.lines()] == [
        f"vllm/sample/selector.py:{verdict.errors[0].line}",
        f"vllm/sample/selector.py:{verdict.errors[1].line}",
        f"vllm/sample/selector.py:{stale.line}",
    ]
    assert written_row.to_json()["stale_copies"][0]["original"]["qualname"] == "TopKSelector.select"


def test_the_new_name_is_suggested_as_the_row_would_spell_it() -> None:
    """Through a typed attribute (``self.selector = TopKSelector(...)``), not ``self`` itself."""
    path = b"vllm/worker/runner.py"
    row = RUNNER.replace(
        b"        return out\n",
        b"        k = self.selector.selector_top_k\n        return out, k\n",
    )
    [error] = check(OLD, with_file(OLD, path, row), NEW, with_file(NEW, path, row)).errors
    assert error.message == (
        "self.selector.selector_top_k: vllm.sample.selector.TopKSelector has no selector_top_k "
        "on 0.31.0 + rows"
    )
    assert error.detail.endswith("0.31.0 + rows has self.selector.top_k")
