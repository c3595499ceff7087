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

from hyperqwen_patches.fork import importing
from hyperqwen_patches.port.model import RebaseRequest
from hyperqwen_patches.port.run import port
from hyperqwen_patches.series.manifest import load_manifest
from hyperqwen_patches.sources.pristine import open_pristine
from tests.test_port import make_patch, make_repo, release
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
    repo = make_repo(tmp_path, [("chunked", patch)])
    manifest_path = repo / "patches/manifest.yaml"
    manifest_path.write_text(
        manifest_path.read_text().replace(
            "rows:\n", "export_points:\n  - name: qwen\n    branch: qwen/0.29\nrows:\n"
        )
    )
    fork = tmp_path / "fork"
    importing.import_series(
        load_manifest(repo), fork, tree=open_pristine(f"dir:{old}", version="0.29.0"), create=True
    )
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
