"""A copied body that went stale (port/stalecopy.py).

Issue #37: a row overrode a sampler method with a copy of the base class's body; the next release
added a call to that body and renamed an argument in it; the three-way merge carried the old copy
over without a conflict, and the port was wrong without a word. The trees below are a small package
shaped like that one: the row's override, the base it copies, and unrelated modules around them.
"""

from __future__ import annotations

import ast

from hyperqwen_patches.port.linediff import changed_lines
from hyperqwen_patches.port.stalecopy import CopyIndex, StaleCopy, stale_copies

Tree = dict[bytes, bytes]

BASE = b'''"""Speculative token selection."""

import torch


class TokenSelector:
    def __init__(self, top_k):
        self.top_k = top_k

    def select(self, logits, temperature):
        if temperature == 0.0:
            return logits.argmax(dim=-1)
        probs = torch.softmax(logits / temperature, dim=-1)
        top_probs, top_ids = torch.topk(probs, self.top_k, dim=-1)
        top_probs = top_probs / top_probs.sum(dim=-1, keepdim=True)
        choice = torch.multinomial(top_probs, num_samples=1)
        return top_ids.gather(-1, choice).squeeze(-1)
'''

# Upstream's next release: a call added to the body, an argument renamed (dim -> axis).
BASE_NEW = BASE.replace(
    b"        probs = torch.softmax(logits / temperature, dim=-1)\n",
    b"        logits = self.apply_penalties(logits)\n"
    b"        probs = torch.softmax(logits / temperature, dim=-1)\n",
).replace(
    b"        choice = torch.multinomial(top_probs, num_samples=1)\n",
    b"        choice = torch.multinomial(top_probs, num_samples=1, generator=self.generator)\n",
)

# The row: an override copying the base's body, with its own change (a floor on the temperature).
OVERRIDE = b"""

class ClampedTokenSelector(TokenSelector):
    def select(self, logits, temperature):
        if temperature == 0.0:
            return logits.argmax(dim=-1)
        temperature = max(temperature, 0.05)
        probs = torch.softmax(logits / temperature, dim=-1)
        top_probs, top_ids = torch.topk(probs, self.top_k, dim=-1)
        top_probs = top_probs / top_probs.sum(dim=-1, keepdim=True)
        choice = torch.multinomial(top_probs, num_samples=1)
        return top_ids.gather(-1, choice).squeeze(-1)
"""

OTHER = b"""def merge_logits(a, b, weight):
    out = a * weight
    out += b * (1 - weight)
    return out
"""

PATH = b"vllm/spec/selector.py"


def tree(base: bytes) -> Tree:
    files = {b"vllm/__init__.py": b"", b"vllm/spec/__init__.py": b"", PATH: base}
    # Unrelated modules the search has to pass over without parsing them.
    for n in range(20):
        files[b"vllm/other/m%d.py" % n] = OTHER.replace(b"merge_logits", b"merge_%d" % n)
    return files


def run(old: Tree, new: Tree, row_file: bytes, path: bytes = PATH) -> tuple[list[StaleCopy], int]:
    """The row adds its lines to ``path`` on the old release; what is stale on ``new``?"""
    added = changed_lines(old.get(path), row_file).added
    index = CopyIndex(old.get, old)
    found = stale_copies({path: (row_file, added)}, index, new.get)
    return found, index.parsed


def line_of(data: bytes, needle: bytes) -> int:
    return data[: data.index(needle)].count(b"\n") + 1


def test_an_override_copying_a_base_method_upstream_changed_is_reported_with_both_diffs() -> None:
    row_file = BASE + OVERRIDE
    [stale], parsed = run(tree(BASE), tree(BASE_NEW), row_file)
    assert (stale.path, stale.qualname, stale.line) == (
        PATH,
        "ClampedTokenSelector.select",
        line_of(row_file, b"class Clamped") + 1,
    )
    assert (stale.original_path, stale.original_qualname) == (PATH, "TokenSelector.select")
    assert stale.original_line == line_of(BASE, b"    def select")
    assert stale.original_new_line == line_of(BASE_NEW, b"    def select")
    assert stale.overrides
    assert stale.message.startswith(
        "ClampedTokenSelector.select overrides and copies TokenSelector.select "
        "(vllm/spec/selector.py:10; 89% of the copy's lines are the original's), which the new release changed; "
        "the copy still has the old version of 2 of the changed lines"
    )
    # What upstream changed in the original, with the file's line numbers.
    assert stale.upstream_diff == (
        b"--- a/vllm/spec/selector.py\n"
        b"+++ b/vllm/spec/selector.py\n"
        b"@@ -10,8 +10,9 @@\n"
        b"     def select(self, logits, temperature):\n"
        b"         if temperature == 0.0:\n"
        b"             return logits.argmax(dim=-1)\n"
        b"+        logits = self.apply_penalties(logits)\n"
        b"         probs = torch.softmax(logits / temperature, dim=-1)\n"
        b"         top_probs, top_ids = torch.topk(probs, self.top_k, dim=-1)\n"
        b"         top_probs = top_probs / top_probs.sum(dim=-1, keepdim=True)\n"
        b"-        choice = torch.multinomial(top_probs, num_samples=1)\n"
        b"+        choice = torch.multinomial(top_probs, num_samples=1, generator=self.generator)\n"
        b"         return top_ids.gather(-1, choice).squeeze(-1)\n"
    )
    # Where the copy still has the old lines: the line upstream added a call after, and the call
    # upstream changed, each with what upstream has instead.
    assert [(s.line, s.kind, s.text, s.upstream) for s in stale.stale_lines] == [
        (
            line_of(row_file, b"            return logits.argmax(dim=-1)\n        temperature"),
            "missing",
            b"return logits.argmax(dim=-1)",
            (b"logits = self.apply_penalties(logits)",),
        ),
        (
            len(row_file.splitlines()) - 1,
            "changed",
            b"choice = torch.multinomial(top_probs, num_samples=1)",
            (b"choice = torch.multinomial(top_probs, num_samples=1, generator=self.generator)",),
        ),
    ]
    assert parsed == 1  # only the file holding the original was parsed, none of the 20 others
    assert stale.to_json()["original"]["new_line"] == stale.original_new_line


def test_the_same_copy_of_an_unchanged_base_is_not_reported() -> None:
    found, _ = run(tree(BASE), tree(BASE), BASE + OVERRIDE)
    assert found == []
    # Nor when upstream only re-indented the original or reworded a comment in it.
    cosmetic = BASE.replace(
        b"        if temperature == 0.0:\n", b"        # greedy\n        if temperature == 0.0:\n\n"
    )
    found, _ = run(tree(BASE), tree(cosmetic), BASE + OVERRIDE)
    assert found == []


def test_short_or_dissimilar_functions_are_not_copies() -> None:
    short = b"""

class ShortSelector(TokenSelector):
    def select(self, logits, temperature):
        if temperature == 0.0:
            return logits.argmax(dim=-1)
        return None
"""
    assert run(tree(BASE), tree(BASE_NEW), BASE + short)[0] == []
    dissimilar = b"""

class RandomSelector(TokenSelector):
    def select(self, logits, temperature):
        if temperature == 0.0:
            return logits.argmax(dim=-1)
        weights = logits.float().exp()
        weights = weights / weights.sum()
        picked = torch.multinomial(weights, num_samples=self.top_k)
        return picked[..., 0]
"""
    assert run(tree(BASE), tree(BASE_NEW), BASE + dissimilar)[0] == []
    # Six of the base's lines, and as many of its own: a function of its own that reuses some lines.
    mostly_own = b"""

class BeamSelector(TokenSelector):
    def select(self, logits, temperature):
        if temperature == 0.0:
            return logits.argmax(dim=-1)
        probs = torch.softmax(logits / temperature, dim=-1)
        top_probs, top_ids = torch.topk(probs, self.top_k, dim=-1)
        beams = self.expand_beams(top_ids, top_probs)
        scores = self.score_beams(beams, logits)
        best = scores.argmax(dim=-1, keepdim=True)
        self.record_beams(beams, scores)
        self.prune_beams(beams, best)
        return beams.gather(-1, best).squeeze(-1)
"""
    assert run(tree(BASE), tree(BASE_NEW), BASE + mostly_own)[0] == []


def test_a_copy_in_another_module_of_an_original_upstream_removed_is_reported() -> None:
    """The copy need not be an override: a function copied into the row's own module counts, and an
    original gone from the new release is as stale as a changed one."""
    copy_path = b"vllm/spec/clamped.py"
    row_file = b"import torch\n\nfrom vllm.spec.selector import TokenSelector\n" + OVERRIDE
    old = tree(BASE)
    gone = tree(BASE.split(b"    def select")[0])
    [stale], _ = run(old, gone, row_file, copy_path)
    assert (stale.path, stale.original_path, stale.original_new_line) == (copy_path, PATH, None)
    assert "which the new release removed" in stale.message
    assert stale.upstream_diff.startswith(
        b"--- a/vllm/spec/selector.py\n+++ b/vllm/spec/selector.py\n@@ -10,8 +0,0 @@\n"
    )
    assert {s.kind for s in stale.stale_lines} == {"removed"}


def test_a_function_the_row_only_edits_is_not_a_copy_of_itself() -> None:
    """A row that changes a line of the base method itself is a plain change: the merge and the
    static checks deal with it, not this report."""
    edited = BASE.replace(b"self.top_k, dim=-1", b"self.top_k + 1, dim=-1")
    assert run(tree(BASE), tree(BASE_NEW), edited)[0] == []


def test_a_file_whose_added_lines_cannot_hold_a_copy_is_not_parsed() -> None:
    """Most rows add a few lines inside existing functions: no function of copy size can be theirs,
    so their files are not parsed for this report (the rebase's static checks parse them anyway,
    and share that parse through ``parser``)."""
    asked: list[bytes] = []

    def parser(data: bytes, path: bytes) -> ast.Module | None:
        asked.append(path)
        return ast.parse(data)

    edited = BASE.replace(
        b"        self.top_k = top_k\n", b"        self.top_k = top_k\n        self.seen = 0\n"
    )
    added = changed_lines(BASE, edited).added
    index = CopyIndex(tree(BASE).get, tree(BASE))
    assert stale_copies({PATH: (edited, added)}, index, tree(BASE_NEW).get, parser) == []
    assert asked == []
    row_file = BASE + OVERRIDE
    added = changed_lines(BASE, row_file).added
    assert len(stale_copies({PATH: (row_file, added)}, index, tree(BASE_NEW).get, parser)) == 1
    assert asked == [PATH]


def test_an_override_holding_a_short_base_method_and_more_is_a_copy() -> None:
    """An override that keeps every line of a short base method and adds as many of its own is a copy
    of it (the port benchmark's runner row): the override's bar counts the base method's lines."""
    base = (
        BASE
        + b"""

class Runner:
    def prepare(self, batch):
        positions = torch.arange(batch.num_tokens, device=batch.device)
        input_ids = batch.token_ids[: batch.num_tokens]
        self.metadata = self.build_metadata(batch, positions)
        return input_ids, positions
"""
    )
    new = base.replace(b"batch.num_tokens", b"batch.total_num_tokens")
    override = b"""

class ScaledRunner(Runner):
    def prepare(self, batch):
        # Runner.prepare, plus the scales in the metadata.
        positions = torch.arange(batch.num_tokens, device=batch.device)
        input_ids = batch.token_ids[: batch.num_tokens]
        self.metadata = self.build_metadata(batch, positions)
        self.metadata["scales"] = self.scales(batch)
        self.metadata["extra"] = batch.extra
        return input_ids, positions
"""
    [stale], _ = run(tree(base), tree(new), base + override)
    assert (stale.qualname, stale.original_qualname) == ("ScaledRunner.prepare", "Runner.prepare")
    # The same lines in a function that overrides nothing stay below the general bar.
    loose = override.replace(b"class ScaledRunner(Runner):", b"class ScaledRunner:")
    assert run(tree(base), tree(new), base + loose)[0] == []
