#!/usr/bin/env bash
# On the GPU machine (device tool), from the repository root:
#   bash gpu/kvarn/run_quality.sh MODEL [quality.py options]      MODEL: d128 | d256
# TurboQuant's two modules are read from gpu/kvarn/.tq-wheel (extracted from the vllm 0.29.0 wheel on
# a machine that has it; the GPU machine has no network and no vLLM):
#   unzip -o "$(ls ~/.cache/hyperqwen-patches/pypi/vllm-0.29.0-wheel/*.whl)" \
#     'vllm/model_executor/layers/quantization/turboquant/*' -d gpu/kvarn/.tq-wheel
# Results land in $OUT/quality-MODEL (quality.json, quality.md, train.log) and $OUT/device.txt.
set -uo pipefail
model="$1"; shift
OUT="${OUT:-/tmp/kvarn-out}"
mkdir -p "$OUT/quality-$model" /tmp/kvarn-quality
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import torch, triton, sys; print('torch', torch.__version__, 'triton', triton.__version__, 'python', sys.version.split()[0])"
} >"$OUT/device.txt" 2>&1
export PYTHONUNBUFFERED=1
python3 gpu/kvarn/quality.py --model "$model" --tq-from gpu/kvarn/.tq-wheel \
  --save "/tmp/kvarn-quality/$model.pt" --out "$OUT/quality-$model" "$@"
