"""A generated port scenario: two releases of a small package, a layered series on the older one, and
the series re-cut for the newer one as a maintainer would write it (the ground truth).

Shaped after one real release bump of a 50-row series (issue #37, DESIGN.md "Real series"): most rows
only move; a few change only their preamble; nine keep every +/- line while their context changes
(three with an unchanged line between the two changes, six where the changes touch: the adjacency
cases); five need a rewrite (three edit a line upstream edited too; one uses attributes upstream
renamed; one overrides a method with a copy of a base body upstream then changed); rows layer on
earlier rows; two rows upstream took, and one it took in part. Everything is written here, seeded;
nothing is copied from anywhere.

Each row is a list of edits anchored on whole lines (insert after or before a unique block, replace
a unique block, create a file). The series is the edits applied in order on the old release (one
unified diff per row); the ground truth is each row's edits for the new release (the same edits
where its +/- lines survive, rewritten ones where a maintainer would rewrite) applied in order on
the new release: per row, the content of every file it touches after it.

Run:  python benchmarks/port_scenario.py OUT [--seed 37]
      (writes OUT/old, OUT/new, OUT/repo with patches/manifest.yaml, OUT/truth.json)
``benchmarks/port_bench.py`` runs it; this file only writes it.
"""

from __future__ import annotations

import argparse
import difflib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OLD_VERSION = "0.30.0"
NEW_VERSION = "0.31.0"
PACKAGE = "vllm"

# The kinds of row, as the real bump had them (issue #37's counts for 50 rows: 33, 4, 9, 5).
KINDS = {
    "moved": "only moved: every +/- line and every context line kept",
    "preamble": "only moved, and the maintainer rewrote its message",
    "context": "kept every +/- line; upstream changed a line one unchanged line away",
    "adjacent": "kept every +/- line; upstream changed a line right next to the row's change",
    "anchor-gone": "kept every +/- line, but the line next to it was deleted or moved upstream",
    "rewrite": "rewritten by the maintainer (its +/- lines differ)",
    "upstream": "taken upstream: retired in the re-cut",
    "partly-upstream": "one hunk taken upstream, dropped in the re-cut",
}

Lines = list[str]


@dataclass(frozen=True)
class Edit:
    """One whole-line edit: ``lines`` after, before or instead of the unique block ``anchor``, or a
    new file (``anchor`` empty, ``how`` "create")."""

    path: str
    how: str  # "after" | "before" | "replace" | "create"
    anchor: tuple[str, ...]
    lines: tuple[str, ...]


def after(path: str, anchor: str | Sequence[str], *lines: str) -> Edit:
    return Edit(path, "after", _block(anchor), lines)


def before(path: str, anchor: str | Sequence[str], *lines: str) -> Edit:
    return Edit(path, "before", _block(anchor), lines)


def replace(path: str, anchor: str | Sequence[str], *lines: str) -> Edit:
    return Edit(path, "replace", _block(anchor), lines)


def create(path: str, text: str) -> Edit:
    return Edit(path, "create", (), tuple(text.splitlines()))


def _block(anchor: str | Sequence[str]) -> tuple[str, ...]:
    return (anchor,) if isinstance(anchor, str) else tuple(anchor)


@dataclass
class Row:
    name: str
    kind: str
    what: str
    old: list[Edit]  # the row as cut for the old release
    new: list[Edit] | None = None  # as re-cut for the new release; None: the same edits
    after_row: str | None = None  # a row it builds on (layering): it must come later


@dataclass
class Scenario:
    old: dict[str, Lines]
    new: dict[str, Lines]
    rows: list[Row] = field(default_factory=list)


def apply_edit(files: dict[str, Lines], edit: Edit) -> None:
    if edit.how == "create":
        assert edit.path not in files, f"{edit.path} exists"
        files[edit.path] = list(edit.lines)
        return
    lines = files[edit.path]
    n = len(edit.anchor)
    found = [i for i in range(len(lines) - n + 1) if tuple(lines[i : i + n]) == edit.anchor]
    assert len(found) == 1, f"{edit.path}: anchor {edit.anchor[0]!r} found {len(found)} times"
    at = found[0]
    if edit.how == "after":
        lines[at + n : at + n] = edit.lines
    elif edit.how == "before":
        lines[at:at] = edit.lines
    else:
        lines[at : at + n] = edit.lines


def text(lines: Lines) -> str:
    return "".join(line + "\n" for line in lines)


# --- filler modules: the bulk of the package, where most rows only move ------------------------------

NAMES = [
    "block_pool", "cache_engine", "kv_manager", "prefix_cache", "sampler", "logits", "tokenizer",
    "detokenizer", "scheduler_queue", "request_state", "metrics", "tracing", "lora_manager",
    "spec_decode", "rotary", "layernorm", "attention_meta", "flash_backend", "triton_backend",
    "moe_router", "quant_fp8", "weight_loader", "distributed", "output_processor",
]  # fmt: skip
VERBS = ["prepare", "update", "compute", "collect", "merge", "reset"]
ROW_METHODS = (0, 2, 4)  # rows edit these methods; upstream the odd ones (apart by 8+ lines)
STATEMENTS = 8


def filler(rng: random.Random, name: str) -> Lines:
    cls = "".join(part.title() for part in name.split("_"))
    lines = [
        f'"""{cls}: a module of the synthetic package that the port benchmark generates."""',
        "",
        "import logging",
        "import os",
        "",
        "logger = logging.getLogger(__name__)",
        "",
        f"{name.upper()}_LIMIT = {rng.randint(2, 4096)}",
        "",
        "",
        f"class {cls}:",
        f'    """The {name.replace("_", " ")} of the benchmark package."""',
        "",
        "    def __init__(self, config) -> None:",
        "        self.config = config",
    ]
    lines += [f"        self.{name}_f{k} = config.{name}_f{k}" for k in range(4)]
    for m in range(6):
        lines += ["", f"    def {VERBS[m]}_{name}(self, arg{m}):", f"        # {VERBS[m]} step {m}"]
        for s in range(STATEMENTS):
            src = f"arg{m}" if s == 0 else f"v{m}_{s - 1}"
            op = rng.choice(["+", "*", "-", "//"])
            lines.append(f"        v{m}_{s} = {src} {op} self.{name}_f{rng.randrange(4)}")
        lines.append(f"        return v{m}_{STATEMENTS - 1}")
    return lines


def statement(lines: Lines, method: int, s: int) -> str:
    prefix = f"        v{method}_{s} = "
    (line,) = [x for x in lines if x.startswith(prefix)]
    return line


# --- the hand-shaped modules: where the interesting rows live -----------------------------------------

WORKER = '''\
"""The GPU worker of the synthetic package: owns one device, sizes the cache, runs steps."""

import gc
import logging

import torch

from vllm import envs
from vllm.config import VllmConfig

logger = logging.getLogger(__name__)


class Worker:
    """Runs the model on one device, one step at a time.
    Owns the cache engine and the model runner."""
    def __init__(self, vllm_config: VllmConfig, local_rank: int) -> None:
        self.vllm_config = vllm_config
        self.local_rank = local_rank
        self.model_runner = None
        self.cache_engine = None
        self.peak_memory = 0
        self.steps = 0

    def init_device(self) -> None:
        torch.cuda.set_device(self.local_rank)
        # Release what an earlier engine left behind before measuring free memory
        gc.collect()
        torch.cuda.empty_cache()
        self.init_free_memory = torch.cuda.mem_get_info()[0]

    def determine_available_memory(self) -> int:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        self.model_runner.profile_run()
        free, total = torch.cuda.mem_get_info()
        self.peak_memory = total - free
        budget = total * self.vllm_config.cache_config.gpu_memory_utilization
        return int(budget) - self.peak_memory

    def compile_or_warm_up_model(self) -> None:
        sizes = self.vllm_config.compilation_config.cudagraph_capture_sizes
        for size in sorted(sizes, reverse=True):
            self.model_runner.dummy_run(size)
        self.model_runner.capture_model()

    def execute_model(self, scheduler_output):
        self.steps += 1
        output = self.model_runner.execute_model(scheduler_output)
        if output is None:
            return None
        return output

    def shutdown(self) -> None:
        self.model_runner = None
        self.cache_engine = None
        gc.collect()
'''

RUNNER = '''\
"""The model runner of the synthetic package: builds inputs, runs the model, picks candidates."""

import logging

import torch

logger = logging.getLogger(__name__)


class CandidateSampler:
    """Keeps the candidate ids between steps."""

    def __init__(self, top_k: int) -> None:
        self.top_k = top_k
        self.cached_candidate_ids = None


class GPUModelRunner:
    """Runs the model for the worker."""

    def __init__(self, config) -> None:
        self.config = config
        self.model = None
        self.selector_top_k = config.top_k
        self._cached_candidate_ids = None
        self.max_num_tokens = config.max_num_tokens
        self.attn_metadata = None

    def load_model(self) -> None:
        self.model = self.config.model_class(self.config)
        self.model.eval()
        logger.info("loaded %s", type(self.model).__name__)

    def prepare_inputs(self, batch):
        positions = torch.arange(batch.num_tokens, device=batch.device)
        input_ids = batch.token_ids[: batch.num_tokens]
        self.attn_metadata = self.build_metadata(batch, positions)
        return input_ids, positions

    def build_metadata(self, batch, positions):
        return {"positions": positions, "seq_lens": batch.seq_lens}

    def get_model(self):
        return self.model

    def select_candidates(self, logits):
        if self._cached_candidate_ids is not None:
            return self._cached_candidate_ids
        ids = torch.topk(logits, self.selector_top_k).indices
        self._cached_candidate_ids = ids
        return ids

    def dummy_run(self, num_tokens: int) -> torch.Tensor:
        input_ids = torch.zeros(num_tokens, dtype=torch.long)
        return self.model(input_ids)

    def profile_run(self) -> None:
        self.dummy_run(self.max_num_tokens)
        torch.cuda.synchronize()

    def capture_model(self) -> None:
        logger.info("capturing graphs")

    def execute_model(self, scheduler_output):
        input_ids, positions = self.prepare_inputs(scheduler_output)
        return self.model(input_ids, positions)
'''

CORE = '''\
"""The engine core of the synthetic package: schedules, executes, updates."""

import logging

logger = logging.getLogger(__name__)


class EngineCore:
    def __init__(self, scheduler, executor) -> None:
        self.scheduler = scheduler
        self.executor = executor
        self.step_count = 0

    def step(self):
        scheduler_output = self.scheduler.schedule()
        model_output = self.executor.execute_model(scheduler_output)
        outputs = self.scheduler.update_from_output(scheduler_output, model_output)
        self.step_count += 1
        return outputs, scheduler_output.total_num_scheduled_tokens > 0

    def abort_requests(self, request_ids):
        self.scheduler.finish_requests(request_ids)

    def shutdown(self) -> None:
        self.executor.shutdown()
'''

KNOBS = [
    ("VLLM_HOST_IP", 'os.getenv("VLLM_HOST_IP", "")'),
    ("VLLM_PORT", 'int(os.getenv("VLLM_PORT", "0"))'),
    ("VLLM_CACHE_ROOT", 'os.path.expanduser(os.getenv("VLLM_CACHE_ROOT", "~/.cache/vllm"))'),
    ("VLLM_USE_MODELSCOPE", 'os.getenv("VLLM_USE_MODELSCOPE", "0") == "1"'),
    (
        "VLLM_RINGBUFFER_WARNING_INTERVAL",
        'int(os.getenv("VLLM_RINGBUFFER_WARNING_INTERVAL", "60"))',
    ),
    ("VLLM_ENGINE_ITERATION_TIMEOUT_S", 'int(os.getenv("VLLM_ENGINE_ITERATION_TIMEOUT_S", "60"))'),
    ("VLLM_ATTENTION_BACKEND", 'os.getenv("VLLM_ATTENTION_BACKEND")'),
    ("VLLM_USE_TRITON_FLASH_ATTN", 'os.getenv("VLLM_USE_TRITON_FLASH_ATTN", "1") == "1"'),
    ("VLLM_TRACE_FUNCTION", 'int(os.getenv("VLLM_TRACE_FUNCTION", "0"))'),
    ("VLLM_LOG_STATS_INTERVAL", 'float(os.getenv("VLLM_LOG_STATS_INTERVAL", "10."))'),
    ("VLLM_WORKER_MULTIPROC_METHOD", 'os.getenv("VLLM_WORKER_MULTIPROC_METHOD", "fork")'),
    ("VLLM_LOGGING_LEVEL", 'os.getenv("VLLM_LOGGING_LEVEL", "INFO")'),
]


def knob(name: str, value: str) -> str:
    return f'    "{name}": lambda: {value},'


ENVS = (
    '"""Environment knobs of the synthetic package."""\n\nimport os\n\nenvironment_variables = {\n'
    + "".join(knob(n, v) + "\n" for n, v in KNOBS)
    + "}\n\n\n"
    "def __getattr__(name: str):\n"
    "    if name in environment_variables:\n"
    "        return environment_variables[name]()\n"
    '    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")\n'
)

CONFIG = '''\
"""Configuration of the synthetic package."""

from dataclasses import dataclass, field


@dataclass
class SchedulerConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 4096
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    policy: str = "fcfs"


@dataclass
class CacheConfig:
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    swap_space: int = 4
    cache_dtype: str = "auto"
    enable_prefix_caching: bool = True
    prefix_caching_hash_algo: str = "sha256"
    sliding_window: int | None = None


@dataclass
class CompilationConfig:
    level: int = 3
    cudagraph_capture_sizes: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    use_inductor: bool = True
    custom_ops: list[str] = field(default_factory=list)
    splitting_ops: list[str] = field(default_factory=list)
'''

W, R, C, E, CFG = (
    "vllm/worker/gpu_worker.py",
    "vllm/worker/model_runner.py",
    "vllm/engine/core.py",
    "vllm/envs.py",
    "vllm/config.py",
)
KV = "vllm/kvarn/runner.py"

OVERRIDE_OLD = '''\
"""KVarN's model runner: the base runner with compressed-cache metadata."""

import torch

from vllm.worker.model_runner import GPUModelRunner


class KVarNModelRunner(GPUModelRunner):
    def prepare_inputs(self, batch):
        # GPUModelRunner.prepare_inputs, plus the KVarN scales in the metadata.
        positions = torch.arange(batch.num_tokens, device=batch.device)
        input_ids = batch.token_ids[: batch.num_tokens]
        self.attn_metadata = self.build_metadata(batch, positions)
        self.attn_metadata["kvarn_scales"] = self.kvarn_scales(batch)
        return input_ids, positions

    def kvarn_scales(self, batch):
        return torch.ones(batch.num_tokens, device=batch.device)
'''
# The maintainer's re-cut: the copy follows the base body of the new release.
OVERRIDE_NEW = OVERRIDE_OLD.replace("batch.num_tokens", "batch.total_num_tokens").replace(
    "        # GPUModelRunner.prepare_inputs, plus the KVarN scales in the metadata.\n",
    "        # GPUModelRunner.prepare_inputs, plus the KVarN scales in the metadata.\n"
    "        self.input_batch.refresh(batch)\n",
)

UPSTREAM_KNOB = knob(
    "VLLM_RANDOMIZE_DUMMY_INPUTS", 'os.getenv("VLLM_RANDOMIZE_DUMMY_INPUTS", "0") == "1"'
)


def upstream_special() -> list[Edit]:
    """What the new release changed in the hand-shaped modules."""
    return [
        # gpu_worker: a blank line after the class docstring (adjacency case 4), a comment split in
        # two (case 1), profile_run's new argument (case 2), a step count one line from a row's
        # change (context), the renamed dummy run, a call added at shutdown.
        after(W, '    Owns the cache engine and the model runner."""', ""),
        replace(
            W,
            "        # Release what an earlier engine left behind before measuring free memory",
            "        # Release what an earlier engine left behind",
            "        # before measuring the free memory.",
        ),
        replace(
            W,
            "        self.model_runner.profile_run()",
            "        self.model_runner.profile_run(randomize_inputs=envs.VLLM_RANDOMIZE_DUMMY_INPUTS)",
        ),
        replace(W, "        self.steps += 1", "        self.steps += scheduler_output.num_steps"),
        replace(
            W,
            "            self.model_runner.dummy_run(size)",
            "            self.model_runner.dummy_forward(size)",
        ),
        after(
            W,
            ["        self.cache_engine = None", "        gc.collect()"],
            "        torch.cuda.empty_cache()",
        ),
        # model_runner: two attributes renamed (a row uses them), prepare_inputs changed (a row
        # copied it), dummy_run renamed (case 1, a row adds a method above it).
        replace(
            R,
            [
                "        self.selector_top_k = config.top_k",
                "        self._cached_candidate_ids = None",
            ],
            "        self.top_k = config.top_k",
            "        self.candidate_sampler = CandidateSampler(config.top_k)",
        ),
        replace(
            R,
            [
                "        positions = torch.arange(batch.num_tokens, device=batch.device)",
                "        input_ids = batch.token_ids[: batch.num_tokens]",
            ],
            "        self.input_batch.refresh(batch)",
            "        positions = torch.arange(batch.total_num_tokens, device=batch.device)",
            "        input_ids = batch.token_ids[: batch.total_num_tokens]",
        ),
        replace(
            R,
            [
                "        if self._cached_candidate_ids is not None:",
                "            return self._cached_candidate_ids",
                "        ids = torch.topk(logits, self.selector_top_k).indices",
                "        self._cached_candidate_ids = ids",
            ],
            "        sampler = self.candidate_sampler",
            "        if sampler.cached_candidate_ids is not None:",
            "            return sampler.cached_candidate_ids",
            "        ids = torch.topk(logits, self.top_k).indices",
            "        sampler.cached_candidate_ids = ids",
        ),
        replace(
            R,
            "    def dummy_run(self, num_tokens: int) -> torch.Tensor:",
            "    def dummy_forward(self, num_tokens: int) -> torch.Tensor:",
        ),
        replace(
            R,
            "        self.dummy_run(self.max_num_tokens)",
            "        self.dummy_forward(self.max_num_tokens)",
        ),
        after(R, "        self.model.eval()", "        self.model.requires_grad_(False)"),
        # core: an early return where a row logs (case 3).
        after(
            C,
            "        scheduler_output = self.scheduler.schedule()",
            "        if not scheduler_output.total_num_scheduled_tokens:",
            "            return {}, False",
        ),
        # core: abort_requests moved below shutdown (a row adds a method right above it).
        replace(
            C,
            [
                "    def abort_requests(self, request_ids):",
                "        self.scheduler.finish_requests(request_ids)",
                "",
                "    def shutdown(self) -> None:",
                "        self.executor.shutdown()",
            ],
            "    def shutdown(self) -> None:",
            "        self.executor.shutdown()",
            "",
            "    def abort_requests(self, request_ids):",
            "        self.scheduler.finish_requests(request_ids)",
        ),
        # gpu_worker: graph capture leaves the warm-up (a row logs right after it).
        replace(
            W,
            [
                "            self.model_runner.dummy_forward(size)",
                "        self.model_runner.capture_model()",
            ],
            "            self.model_runner.dummy_forward(size)",
        ),
        # envs: a knob at the end of the dict where a row adds its own (case 3), a default changed.
        after(E, knob(*KNOBS[-1]), UPSTREAM_KNOB),
        replace(E, knob(*KNOBS[5]), knob(KNOBS[5][0], KNOBS[5][1].replace('"60"', '"120"'))),
        # config: three lines a row edits too (rewrite), two one line away from a row's (context).
        replace(
            CFG,
            ["    max_num_seqs: int = 256", "    max_num_batched_tokens: int = 8192"],
            "    max_num_seqs: int | None = 256",
            "    max_num_batched_tokens: int = 16384",
        ),
        replace(
            CFG,
            ["    block_size: int = 16", "    gpu_memory_utilization: float = 0.9"],
            "    block_size: int | None = None",
            "    gpu_memory_utilization: float = 0.9  # of the whole device, not of what is free",
        ),
        replace(CFG, '    cache_dtype: str = "auto"', '    cache_dtype: str = "auto"  # or "fp8"'),
        after(CFG, "    use_inductor: bool = True", "    use_cudagraph: bool = True"),
    ]


def special_rows() -> list[Row]:
    profile_block = (
        "        if envs.VLLM_PROFILE_AFTER_WARMUP:",
        "            self.compile_or_warm_up_model()",
        "            self.model_runner.profile_run()",
    )
    dummy_sizes = (
        "    def dummy_sizes(self) -> list[int]:",
        "        sizes = self.config.cudagraph_capture_sizes",
        "        return sorted(set(sizes) | {1, self.max_num_tokens})",
        "",
    )
    step_log = '        logger.debug("kvarn: %d requests scheduled", len(scheduler_output.num_scheduled_tokens))'
    kvarn_knobs = (
        knob("VLLM_KVARN_BITS", 'int(os.getenv("VLLM_KVARN_BITS", "4"))'),
        knob("VLLM_PROFILE_AFTER_WARMUP", 'os.getenv("VLLM_PROFILE_AFTER_WARMUP", "0") == "1"'),
    )
    candidates_old = (
        "",
        "    def kvarn_candidates(self, logits, bits: int):",
        "        if self._cached_candidate_ids is None:",
        "            self._cached_candidate_ids = torch.topk(logits, self.selector_top_k).indices",
        "        return self._cached_candidate_ids[:, : 1 << bits]",
    )
    candidates_new = (
        "",
        "    def kvarn_candidates(self, logits, bits: int):",
        "        sampler = self.candidate_sampler",
        "        if sampler.cached_candidate_ids is None:",
        "            sampler.cached_candidate_ids = torch.topk(logits, self.top_k).indices",
        "        return sampler.cached_candidate_ids[:, : 1 << bits]",
    )
    core_stats = (
        "    def stats(self) -> dict[str, int]:",
        '        return {"steps": self.step_count}',
        "",
    )
    docstring = (
        '    """Runs the model on one device, one step at a time.',
        '    Owns the cache engine and the model runner."""',
    )
    return [
        Row("worker-docstring", "adjacent", "the worker's docstring names the KVarN pools",
            [replace(W, docstring,
                     '    """Runs the model on one device, one step at a time, KVarN caches included.',
                     '    Owns the cache engine (and its compressed pools) and the model runner."""')]),
        Row("sync-before-measure", "adjacent", "synchronize before measuring free memory",
            [after(W, "        torch.cuda.set_device(self.local_rank)",
                   "        torch.cuda.synchronize(self.local_rank)")]),
        Row("profile-after-warmup", "adjacent", "profile again after the warm-up when asked",
            [after(W, "        self.model_runner.profile_run()", *profile_block)],
            [after(W, "        self.model_runner.profile_run(randomize_inputs=envs.VLLM_RANDOMIZE_DUMMY_INPUTS)",
                   *profile_block)]),
        Row("step-output-check", "context", "a step without sampled tokens returns nothing",
            [replace(W, "        if output is None:",
                     "        if output is None or not output.sampled_token_ids:")]),
        Row("dummy-sizes", "adjacent", "the runner lists its warm-up sizes",
            [before(R, "    def dummy_run(self, num_tokens: int) -> torch.Tensor:", *dummy_sizes)],
            [before(R, "    def dummy_forward(self, num_tokens: int) -> torch.Tensor:", *dummy_sizes)]),
        Row("kvarn-candidates", "rewrite", "KVarN reads the candidate ids at its bit width",
            [after(R, "        return self.model", *candidates_old)],
            [after(R, "        return self.model", *candidates_new)]),
        Row("kvarn-runner", "rewrite", "KVarN's model runner",
            [create(KV, OVERRIDE_OLD)], [create(KV, OVERRIDE_NEW)]),
        Row("kvarn-runner-stats", "moved", "KVarN's runner counts its scales",
            [after(KV, '        self.attn_metadata["kvarn_scales"] = self.kvarn_scales(batch)',
                   "        self.kvarn_stats.observe(batch)")], after_row="kvarn-runner"),
        Row("step-log", "adjacent", "log how many requests each step schedules",
            [after(C, "        scheduler_output = self.scheduler.schedule()", step_log)],
            [after(C, "            return {}, False", step_log)]),
        Row("step-log-level", "moved", "the step log at info level",
            [replace(C, step_log, step_log.replace("logger.debug", "logger.info"))],
            after_row="step-log"),
        Row("kvarn-knobs", "adjacent", "KVarN's knobs",
            [after(E, knob(*KNOBS[-1]), *kvarn_knobs)], [after(E, UPSTREAM_KNOB, *kvarn_knobs)]),
        Row("warmup-log", "anchor-gone", "log when the warm-up is done",
            [after(W, "        self.model_runner.capture_model()", '        logger.info("warm-up done")')],
            [after(W, "            self.model_runner.dummy_forward(size)", '        logger.info("warm-up done")')]),
        Row("core-stats", "anchor-gone", "the engine core reports its step count",
            [before(C, "    def abort_requests(self, request_ids):", *core_stats)],
            [before(C, "    def shutdown(self) -> None:", *core_stats)]),
        Row("host-knob", "moved", "a knob for the advertised host",
            [after(E, knob(*KNOBS[0]), knob("VLLM_ADVERTISED_HOST", 'os.getenv("VLLM_ADVERTISED_HOST", "")'))]),
        Row("seqs-512", "rewrite", "512 sequences by default",
            [replace(CFG, "    max_num_seqs: int = 256", "    max_num_seqs: int = 512")],
            [replace(CFG, "    max_num_seqs: int | None = 256", "    max_num_seqs: int | None = 512")]),
        Row("block-32", "rewrite", "blocks of 32 tokens",
            [replace(CFG, "    block_size: int = 16", "    block_size: int = 32")],
            [replace(CFG, "    block_size: int | None = None", "    block_size: int | None = 32")]),
        Row("mem-util", "rewrite", "use 92% of the device",
            [replace(CFG, "    gpu_memory_utilization: float = 0.9", "    gpu_memory_utilization: float = 0.92")],
            [replace(CFG, "    gpu_memory_utilization: float = 0.9  # of the whole device, not of what is free",
                     "    gpu_memory_utilization: float = 0.92  # of the whole device, not of what is free")]),
        Row("chunked-off", "context", "no chunked prefill by default",
            [replace(CFG, "    enable_chunked_prefill: bool = True", "    enable_chunked_prefill: bool = False")]),
        Row("prefix-algo", "context", "a faster prefix hash",
            [replace(CFG, '    prefix_caching_hash_algo: str = "sha256"', '    prefix_caching_hash_algo: str = "xxhash"')]),
    ]  # fmt: skip


# --- the scenario --------------------------------------------------------------------------------------


def build(seed: int = 37) -> Scenario:
    rng = random.Random(seed)
    old: dict[str, Lines] = {
        W: WORKER.splitlines(),
        R: RUNNER.splitlines(),
        C: CORE.splitlines(),
        E: ENVS.splitlines(),
        CFG: CONFIG.splitlines(),
    }
    fillers = {
        f"vllm/{'layers' if i % 2 else 'core'}/{n}.py": filler(rng, n) for i, n in enumerate(NAMES)
    }
    old.update(fillers)
    ups = upstream_special()
    rows = special_rows()
    free = {(p, m, s) for p in fillers for m in ROW_METHODS for s in range(2, 6)}

    def take(path: str | None = None) -> tuple[str, int, int]:
        choices = sorted(x for x in free if path is None or x[0] == path)
        assert choices, f"no method left for a row in {path}"
        pick = rng.choice(choices)
        # One row per method, so that no two rows' hunks share context (layering is explicit).
        free.difference_update({x for x in free if x[:2] == pick[:2]})
        return pick

    # Upstream's changes to the filler modules: new imports and constants at the top (offsets), edits
    # and new statements in the methods rows leave alone, new methods at the end of the class.
    for path, lines in sorted(fillers.items()):
        name = path.rsplit("/", 1)[1][:-3]
        if rng.random() < 0.7:
            ups.append(after(path, "import os", "import time"))
            ups.append(after(path, lines[7], f"{name.upper()}_TIMEOUT_S = {rng.randint(5, 600)}"))
        for m in rng.sample((1, 3, 5), rng.randint(0, 2)):
            s = rng.randrange(2, 6)
            line = statement(lines, m, s)
            if rng.random() < 0.5:
                ups.append(replace(path, line, line + " + 1"))
            else:
                ups.append(after(path, line, f"        v{m}_{s} = max(v{m}_{s}, 0)"))
        if rng.random() < 0.3:
            ups.append(after(path, f"        return v5_{STATEMENTS - 1}", "",
                             f"    def close_{name}(self) -> None:",
                             f"        self.{name}_f0 = None"))  # fmt: skip

    def moved_edit(path: str, m: int, s: int, tag: str) -> list[Edit]:
        line = statement(old[path], m, s)
        var = f"v{m}_{s}"
        choice = rng.randrange(3)
        if choice == 0:
            return [after(path, line, f'        logger.debug("{tag}: {var}=%s", {var})')]
        if choice == 1:
            return [replace(path, line, line + f" + {rng.randint(1, 9)}  # {tag}")]
        return [after(path, line, f"        if {var} < 0:  # {tag}", f"            {var} = 0")]

    moved: list[Row] = []
    for n in range(28):
        path, m, s = take()
        kind = "preamble" if n < 4 else "moved"
        edits = moved_edit(path, m, s, f"row-{n:02d}")
        if rng.random() < 0.3:  # a second hunk in another module
            p2, m2, s2 = take()
            edits += moved_edit(p2, m2, s2, f"row-{n:02d}")
        moved.append(Row(f"row-{n:02d}", kind, f"synthetic change {n}", edits))
    # Layered rows: each edits a line an earlier row added.
    for n, parent in enumerate(rng.sample(moved[4:], 3)):
        added = parent.old[0].lines[0]
        moved.append(
            Row(
                f"layer-{n}",
                "moved",
                f"builds on {parent.name}",
                [before(parent.old[0].path, added, f"        pass  # layer-{n} on {parent.name}")],
                after_row=parent.name,
            )
        )
    # Rows upstream took (the re-cut retires them), and one it took half of.
    for n in range(2):
        path, m, s = take()
        line = statement(old[path], m, s)
        change = replace(path, line, line.replace(" = ", " = abs(", 1) + ")")
        ups.append(change)
        moved.append(Row(f"fix-{n}", "upstream", f"a fix upstream made too ({n})", [change], []))
    roomy = sorted({x[0] for x in free if len({y[1] for y in free if y[0] == x[0]}) >= 2})
    path, m, s = take(rng.choice(roomy))
    p2, m2, s2 = take(path)
    first = replace(path, statement(old[path], m, s), statement(old[path], m, s) + "  # checked")
    second = replace(p2, statement(old[p2], m2, s2), statement(old[p2], m2, s2) + "  # checked")
    ups.append(first)
    moved.append(
        Row(
            "half-fix",
            "partly-upstream",
            "two fixes; upstream made the first",
            [first, second],
            [second],
        )
    )

    rows += moved
    rng.shuffle(rows)
    # A layered row goes after the row it builds on.
    for row in [r for r in rows if r.after_row]:
        rows.remove(row)
        at = next(i for i, r in enumerate(rows) if r.name == row.after_row)
        rows.insert(at + 1 + rng.randint(0, 3), row)

    new = {p: list(lines) for p, lines in old.items()}
    for edit in ups:
        apply_edit(new, edit)
    return Scenario(old, new, rows)


def _check_kept(row: Row) -> None:
    """Rows said to keep their +/- lines do: the re-cut adds the lines the old cut adds."""
    if row.kind in ("rewrite", "upstream", "partly-upstream") or row.new is None:
        return
    assert [e.lines for e in row.old] == [e.lines for e in row.new], row.name


def unified(path: str, before_text: str | None, after_text: str | None) -> str:
    a = (before_text or "").splitlines(keepends=True)
    b = (after_text or "").splitlines(keepends=True)
    old_name = f"a/{path}" if before_text is not None else "/dev/null"
    body = "".join(difflib.unified_diff(a, b, old_name, f"b/{path}", n=3))
    head = f"diff --git a/{path} b/{path}\n"
    if before_text is None:
        head += "new file mode 100644\n"
    return head + body


# vLLM 0.29.0's package as the wheel has it (DESIGN.md, facts): 4,886 files, 97 MB of text.
VLLM_FILES = 4886
VLLM_BYTES = 97_000_000


def write_padding(out: Path, files: int, seed: int) -> None:
    """``files`` more modules no row touches, in both releases, about as big on average as vLLM's,
    with a release bump's share of upstream churn (15% edited, 2% added, 1% removed): what makes a
    real tree slow to write, check out and list, which the rows alone do not show."""
    rng = random.Random(seed * 7919 + files)
    pool = [
        f"    {rng.choice(['x', 'y', 'self.n', 'out', 'k'])} = "
        f"{rng.choice(['compute', 'reduce', 'gather', 'merge'])}_{rng.randrange(10_000)}"
        f"({rng.randrange(100)}, {rng.choice(['True', 'None', 'cfg', 'dim'])})\n"
        for _ in range(5000)
    ]
    mean_lines = max(1, VLLM_BYTES // VLLM_FILES // 40)
    for number in range(files):
        path = f"{PACKAGE}/pad_{number % 97:02d}/mod_{number:05d}.py"
        lines = rng.choices(pool, k=rng.randint(mean_lines // 8, mean_lines * 15 // 8))
        body = f"def f_{number}():\n" + "".join(lines)
        fate = rng.random()
        for side in ("old", "new"):
            if (side == "old" and 0.98 <= fate < 0.99) or (side == "new" and fate >= 0.99):
                continue  # added upstream (old lacks it) / removed upstream (new lacks it)
            target = out / side / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if side == "new" and fate < 0.15:
                cut = rng.randrange(len(lines))
                body = body.replace(lines[cut], "    # reworded upstream\n" + lines[cut], 1)
            target.write_text(body)


def write(scenario: Scenario, out: Path, *, pad: int = 0, seed: int = 37) -> dict[str, Any]:
    """The two releases, the series repository and the truth; returns the truth. ``pad``: that many
    files no row touches added to both releases (``write_padding``)."""
    for name, files in (("old", scenario.old), ("new", scenario.new)):
        for path, lines in files.items():
            target = out / name / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text(lines))
    if pad:
        write_padding(out, pad, seed)
    repo = out / "repo"
    (repo / "patches").mkdir(parents=True)
    fork_state = {p: list(v) for p, v in scenario.old.items()}
    truth_state = {p: list(v) for p, v in scenario.new.items()}
    truth_rows = []
    entries = []
    for row in scenario.rows:
        _check_kept(row)
        paths = sorted({e.path for e in row.old} | {e.path for e in (row.new or [])})
        before_texts = {p: text(fork_state[p]) if p in fork_state else None for p in paths}
        for edit in row.old:
            apply_edit(fork_state, edit)
        patch = "".join(unified(p, before_texts[p], text(fork_state[p])) for p in paths)
        (repo / "patches" / f"{row.name}.patch").write_text(patch)
        for edit in row.old if row.new is None else row.new:
            apply_edit(truth_state, edit)
        truth_rows.append(
            {
                "row": row.name,
                "kind": row.kind,
                "files": {p: text(truth_state[p]) if p in truth_state else None for p in paths},
            }
        )
        entries.append(
            f"  - name: {row.name}\n    kind: local\n    what: {row.what}\n"
            f'    cut_against: "{OLD_VERSION}"\n    retires_when: never\n'
            f"    patch: patches/{row.name}.patch\n"
        )
    (repo / "patches/manifest.yaml").write_text(
        f'format: 1\npin: "{OLD_VERSION}"\npackage: {PACKAGE}\nsource: dir:{out / "old"}\n'
        "export_points:\n  - name: bench\n    branch: bench/0.30\nrows:\n" + "".join(entries)
    )
    truth = {"from": OLD_VERSION, "to": NEW_VERSION, "kinds": KINDS, "rows": truth_rows}
    (out / "truth.json").write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n")
    return truth


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--pad", type=int, default=0, help="untouched files to add (vLLM: 4,886)")
    args = parser.parse_args()
    truth = write(build(args.seed), args.out, pad=args.pad, seed=args.seed)
    counts: dict[str, int] = {}
    for row in truth["rows"]:
        counts[row["kind"]] = counts.get(row["kind"], 0) + 1
    print(f"{len(truth['rows'])} rows: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
