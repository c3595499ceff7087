"""``port --rebase`` pauses on a row that applies cleanly and is still wrong (issue #37).

The row overrides ``TopKSelector.select`` with a copy of its body that reads two attributes the new
release renamed; upstream also changed the body it copies. The row applies at fuzz 0 on the new
release (it appends a class at the end of the file), as ``git cherry-pick`` would take it, without a
word. The rebase must check the row as written (``port/verify.py``: ``RebaseChecks``) and pause on
it, naming both attributes and the stale copy, with the row's files in the worktree (no markers);
``--continue`` then takes the person's fix.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperqwen_patches.engine.patchscan import parse_patch
from hyperqwen_patches.port import copyindexcache
from hyperqwen_patches.port.model import RebaseRequest
from hyperqwen_patches.port.run import port
from hyperqwen_patches.port.stalecopy import LineIndex, may_add_functions
from hyperqwen_patches.sources import basecommit
from tests.test_port import forked_series, make_patch, release
from tests.test_port_verify import NEW_SELECTOR, OLD_SELECTOR, RUNNER

COPY = """

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
SELECTOR = "vllm/sample/selector.py"
CONF = "vllm/conf.py"


def test_a_clean_row_that_adds_static_errors_and_a_stale_copy_pauses(tmp_path: Path) -> None:
    common = {
        "vllm/__init__.py": "",
        "vllm/sample/__init__.py": "",
        "vllm/worker/__init__.py": "",
        "vllm/worker/runner.py": RUNNER.decode(),
    }
    old = release(tmp_path, "old", {**common, SELECTOR: OLD_SELECTOR.decode()})
    new = release(tmp_path, "new", {**common, SELECTOR: NEW_SELECTOR.decode()})
    patch = make_patch(
        SELECTOR, OLD_SELECTOR.decode(), OLD_SELECTOR.decode() + COPY, tmp_path / "w"
    )
    repo, fork = forked_series(tmp_path, [("chunked", patch)], old)
    sources = {"from_source": f"dir:{old}", "to_source": f"dir:{new}"}
    _, rebased = port(repo, "0.30.0", rebase=RebaseRequest(fork=fork), **sources)
    assert rebased is not None and rebased.paused is not None
    found = rebased.paused.findings
    assert [line.split(": ", 2)[1].split(":")[0] for line in found[:2]] == [
        "self._cached_candidate_ids",
        "self.selector_top_k",
    ]
    assert "overrides and copies TopKSelector.select" in found[2]
    written = (rebased.paused.worktree / SELECTOR).read_text()
    assert "class ChunkedTopKSelector" in written and "<<<<<<<" not in written
    fixed = written.replace(
        "self._cached_candidate_ids", "self.candidate_sampler.cached_candidate_ids"
    ).replace("self.selector_top_k", "self.top_k")
    (rebased.paused.worktree / SELECTOR).write_text(fixed)
    _, done = port(repo, "0.30.0", rebase=RebaseRequest(fork=fork, action="continue"), **sources)
    assert done is not None and done.state == "done"
    assert [(row, how) for row, _, how in done.commits] == [("chunked", "resolved")]


def test_the_run_that_pauses_keeps_the_copy_index_a_later_row_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``--continue`` a person waits on reads the old release's copy index from the cache: the
    run that paused built and kept it, because a later row adds a function (issue #37: the first
    continue on the shipped series spent ~1 s reading the whole release)."""
    monkeypatch.setenv("HQP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(basecommit, "RACY_SECONDS", 0.0)  # the trees count as unpacked long ago
    padding = {f"vllm/pad/m{i}.py": f"PAD_{i} = {i}\n" for i in range(basecommit.DIR_MIN_FILES)}
    common = {
        **padding,
        "vllm/__init__.py": "",
        "vllm/sample/__init__.py": "",
        "vllm/worker/__init__.py": "",
        "vllm/worker/runner.py": RUNNER.decode(),
    }
    old = release(tmp_path, "old", {**common, SELECTOR: OLD_SELECTOR.decode(), CONF: "LIMIT = 1\n"})
    new = release(tmp_path, "new", {**common, SELECTOR: NEW_SELECTOR.decode(), CONF: "LIMIT = 2\n"})
    first = make_patch(CONF, "LIMIT = 1\n", "LIMIT = 3\n", tmp_path / "w1")  # upstream edits it too
    copy = make_patch(
        SELECTOR, OLD_SELECTOR.decode(), OLD_SELECTOR.decode() + COPY, tmp_path / "w2"
    )
    repo, fork = forked_series(tmp_path, [("limit", first), ("chunked", copy)], old)
    sources = {"from_source": f"dir:{old}", "to_source": f"dir:{new}"}
    _, rebased = port(repo, "0.30.0", rebase=RebaseRequest(fork=fork), **sources)
    assert rebased is not None and rebased.paused is not None and rebased.paused.row == "limit"
    store = copyindexcache.store_for(f"dir:{old}", "vllm")
    assert store is not None and store.path.is_file()

    def no_build(*_: object) -> None:
        raise AssertionError("the --continue read the whole old release again")

    monkeypatch.setattr(LineIndex, "build", no_build)
    (rebased.paused.worktree / CONF).write_text("LIMIT = 3\n")
    _, resumed = port(repo, "0.30.0", rebase=RebaseRequest(fork=fork, action="continue"), **sources)
    assert resumed is not None and resumed.paused is not None and resumed.paused.row == "chunked"
    assert any("overrides and copies TopKSelector.select" in f for f in resumed.paused.findings)


def test_no_copy_index_is_built_when_no_later_row_adds_a_function(tmp_path: Path) -> None:
    """The over-estimate the pausing run reads: a def line added (or a whole module) counts; a
    changed assignment does not."""
    adds = parse_patch(
        make_patch_bytes(
            SELECTOR, "X = 1\n", "X = 1\n\n\nasync def f():\n    pass\n", tmp_path / "a"
        ),
        name="a",
    )
    edits = parse_patch(
        make_patch_bytes(CONF, "LIMIT = 1\n", "LIMIT = 3\n", tmp_path / "b"), name="b"
    )
    keeps = parse_patch(
        make_patch_bytes("vllm/x.txt", "a\n", "def f():\n", tmp_path / "c"), name="c"
    )
    assert may_add_functions(adds) and not may_add_functions(edits) and not may_add_functions(keeps)


def make_patch_bytes(path: str, before: str, after: str, work: Path) -> bytes:
    return make_patch(path, before, after, work).encode()
