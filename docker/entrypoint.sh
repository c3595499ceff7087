#!/usr/bin/env bash
# The image's entry point: the preflight (docker/preflight.sh), then `vllm serve` with the vLLM 0.29
# line's defaults and the knobs below. Arguments are passed to `vllm serve` after the knobs' flags, so
# an explicit flag on the command line wins over a knob (argparse keeps the last value).
#
#   docker run --gpus all IMAGE Qwen/Qwen3-8B --max-model-len 32768
#
# Knobs (environment):
#   GPU_UTIL=0.95              --gpu-memory-utilization (0 < x <= 1). 0.95 on 0.29: 0.972 boots on
#                              0.28 but runs out of memory in warmup on 0.29 (docs/docker.md says why).
#   REQ_METRICS=1              --per-request-spec-decode-metrics summary
#   REQ_METRICS_DETAILED=1     --per-request-spec-decode-metrics detailed (wins over REQ_METRICS)
#   VLLM_PREFIX_CACHE_RETENTION_INTERVAL=N
#                              --prefix-cache-retention-interval N. vLLM 0.29 deprecated the variable
#                              and on the `vllm serve` path the flag's unset default wins over it, so
#                              exported alone it does nothing: we pass it as the flag.
#   HQP_SKIP_PREFLIGHT=1       skip the CUDA toolchain preflight
#   HQP_DRY_RUN=1              print the command (one argument per line) instead of running it
# Exit status: vllm's; 2 for a bad knob value or a failed preflight.
set -euo pipefail

here="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
# shellcheck source=docker/preflight.sh
. "$here/preflight.sh"

die() { printf 'entrypoint: error: %s\n' "$*" >&2; exit 2; }

# A switch knob: unset, empty or 0 is off, 1 is on; anything else is a mistake worth stopping for.
switch_on() {
  local name="$1" value="${!1:-}"
  case "$value" in
    "" | 0) return 1 ;;
    1) return 0 ;;
    *) die "$name=$value: use 1 (on) or 0 (off)" ;;
  esac
}

gpu_util="${GPU_UTIL:-0.95}"
# A decimal in (0, 1]; vLLM itself accepts any float and fails later, far from the cause.
if ! [[ "$gpu_util" =~ ^(0?\.[0-9]*[1-9][0-9]*|1|1\.0*)$ ]]; then
  die "GPU_UTIL=$gpu_util: want a fraction of GPU memory in (0, 1], e.g. 0.95"
fi

args=(serve --gpu-memory-utilization "$gpu_util")

if switch_on REQ_METRICS_DETAILED; then
  args+=(--per-request-spec-decode-metrics detailed)
elif switch_on REQ_METRICS; then
  args+=(--per-request-spec-decode-metrics summary)
fi

# An empty value counts as unset (`docker run -e VAR=` is how people clear a variable).
if [ -n "${VLLM_PREFIX_CACHE_RETENTION_INTERVAL:-}" ]; then
  interval="$VLLM_PREFIX_CACHE_RETENTION_INTERVAL"
  [[ "$interval" =~ ^[0-9]+$ ]] \
    || die "VLLM_PREFIX_CACHE_RETENTION_INTERVAL=$interval: want a whole number of tokens >= 0"
  args+=(--prefix-cache-retention-interval "$interval")
fi

args+=("$@")

hqp_preflight || exit 2

if [ "${HQP_DRY_RUN:-}" = "1" ]; then
  printf '%s\n' vllm "${args[@]}"
  exit 0
fi
exec vllm "${args[@]}"
