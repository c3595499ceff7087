"""The check pipeline, composed above every stage it runs: ``check`` runs these, in this order.

Each entry is the check function itself, imported here, so the layering test follows every one of
them (``tests/test_layers.py``); the runner (``checks/pipeline.py``) sits below and takes the list.
**Adding an invariant is adding one line to** :data:`PIPELINE` (DESIGN.md numbers the invariants).
"""

from __future__ import annotations

from hyperqwen_patches.checks.context import CheckFunction
from hyperqwen_patches.checks.invariants import check_apply, check_pin, check_render, check_series
from hyperqwen_patches.fork.checks import (
    check_export,
    check_fork_commits,
    check_replay_identity,
    check_unfilled_rows,
)
from hyperqwen_patches.port.retirements import check_retirements
from hyperqwen_patches.statics.compiles import check_compiles
from hyperqwen_patches.statics.gitapply import check_git_apply
from hyperqwen_patches.statics.knobs import check_knobs
from hyperqwen_patches.statics.names import check_names
from hyperqwen_patches.statics.signatures import check_signatures
from hyperqwen_patches.statics.whitespace import check_whitespace

# The invariants, in the order they run and are reported. One line per check.
PIPELINE: tuple[CheckFunction, ...] = (
    check_pin,  # 1. one pin: manifest == docker/requirements.txt
    check_series,  # 2. series file ⇔ files on disk ⇔ manifest rows
    check_apply,  # 3. every hunk applies at fuzz 0 onto the pristine tree
    check_render,  # 6. PATCHES.md and patches/series == what render writes
    check_replay_identity,  # 4. pristine + rows 1..k == k-th fork commit
    check_export,  # 5. every row's file == what export writes from the fork
    check_fork_commits,  # 7. manifest commits on their export points
    check_unfilled_rows,  # rows export added, metadata still TODO
    check_retirements,  # 8. a retirement reverse-applies on its pin
    check_compiles,  # touched .py files compile after the series
    check_knobs,  # knobs read through vllm.envs, registered, keyed
    check_names,  # names a row's cut_against had, gone at the pin
    check_signatures,  # calls whose callee changed by the pin
    check_whitespace,  # added lines pass git diff --check
    check_git_apply,  # git_apply rows pass git apply --check
)

# Checks whose time is mostly spent waiting on git processes (opening the fork bundle, export's git
# runs). run_check runs them, in this order, on one worker thread while the others run on the calling
# thread: the GIL is free while a child process runs, so the two overlap. They share nothing with the
# others but the context's locked properties (series, pristine), and the report keeps PIPELINE order.
BACKGROUND: frozenset[CheckFunction] = frozenset(
    {check_replay_identity, check_export, check_fork_commits}
)
