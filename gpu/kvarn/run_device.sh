#!/usr/bin/env bash
# On the GPU machine (device tool), from the repository root:
#   bash gpu/kvarn/run_device.sh [tests|bench|all]
# Results land in $OUT (device.txt, pytest.log, gpu_cases.jsonl, bench.log, bench.json, bench.md).
set -uo pipefail
what="${1:-all}"
OUT="${OUT:-/tmp/kvarn-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KVARN_OUT="$OUT"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} >"$OUT/device.txt" 2>&1
rc=0
if [ "$what" = tests ] || [ "$what" = all ]; then
  python3 -m pytest -q -p no:cacheprovider tests_vllm/kvarn 2>&1 | tee "$OUT/pytest.log" || rc=1
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  python3 gpu/kvarn/bench_decode.py --out "$OUT" "${@:2}" 2>&1 | tee "$OUT/bench.log" || rc=1
fi
exit $rc
