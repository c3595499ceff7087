"""Check docker/entrypoint.sh against the installed vLLM's own `vllm serve` parser.

`vllm serve --help` shows that a flag exists; this shows that the arguments the entry point builds
from its knobs parse, and land in vLLM's engine arguments with the values meant. Run it with the
serving environment's Python (on a machine without a GPU, with VLLM_TARGET_DEVICE=cpu):

    VLLM_TARGET_DEVICE=cpu python docker/check_serve_args.py docker/entrypoint.sh

Exit status 0 when every case holds, 1 otherwise (each mismatch is printed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

# (knobs, expected engine arguments); "UNSET" is vLLM 0.29's sentinel for "the flag was not given".
CASES: list[tuple[dict[str, str], dict[str, Any]]] = [
    (
        {},
        {
            "gpu_memory_utilization": 0.95,
            "per_request_spec_decode_metrics": "none",
            "prefix_cache_retention_interval": "UNSET",
        },
    ),
    (
        {"GPU_UTIL": "0.9", "REQ_METRICS": "1", "VLLM_PREFIX_CACHE_RETENTION_INTERVAL": "64"},
        {
            "gpu_memory_utilization": 0.9,
            "per_request_spec_decode_metrics": "summary",
            "prefix_cache_retention_interval": 64,
        },
    ),
    (
        {"REQ_METRICS_DETAILED": "1", "VLLM_PREFIX_CACHE_RETENTION_INTERVAL": "0"},
        {
            "gpu_memory_utilization": 0.95,
            "per_request_spec_decode_metrics": "detailed",
            "prefix_cache_retention_interval": 0,
        },
    ),
]
KNOBS = ("GPU_UTIL", "REQ_METRICS", "REQ_METRICS_DETAILED", "VLLM_PREFIX_CACHE_RETENTION_INTERVAL")


def entrypoint_argv(entrypoint: str, knobs: dict[str, str]) -> list[str]:
    """The `vllm serve` arguments the entry point would run with these knobs (after `vllm serve`)."""
    env = {k: v for k, v in os.environ.items() if k not in KNOBS}
    env.update(knobs, HQP_DRY_RUN="1", HQP_SKIP_PREFLIGHT="1")
    out = subprocess.run(
        ["bash", entrypoint, "the-model"], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    if out[:2] != ["vllm", "serve"]:
        raise SystemExit(f"the entry point's dry run printed {out!r}, not a `vllm serve` command")
    return out[2:]


def engine_args(argv: list[str]) -> Any:
    """Parse like `vllm serve` does and build the engine arguments."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    namespace = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    if namespace.model_tag != "the-model":
        raise SystemExit(f"the model argument parsed as {namespace.model_tag!r}")
    return AsyncEngineArgs.from_cli_args(namespace)


def main() -> int:
    entrypoint = sys.argv[1] if len(sys.argv) > 1 else "docker/entrypoint.sh"
    failures = 0
    for knobs, expected in CASES:
        argv = entrypoint_argv(entrypoint, knobs)
        args = engine_args(argv)
        for field, want in expected.items():
            got = getattr(args, field)
            shown = repr(got) if not type(got).__name__.startswith("_Unset") else "UNSET"
            if (want == "UNSET" and shown != "UNSET") or (want != "UNSET" and got != want):
                failures += 1
                print(f"FAIL {knobs or 'defaults'}: {field} = {shown}, want {want!r} (argv {argv})")
        print(f"ok   {knobs or 'defaults'}: {' '.join(argv)}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
