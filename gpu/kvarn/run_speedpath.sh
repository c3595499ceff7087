#!/usr/bin/env bash
# On the GPU machine (device tool), from the repository root:  bash gpu/kvarn/run_speedpath.sh
# 1) the before/after decode benchmark (bench_speedpath.py: run-5 kernel vs current, SDPA fp16, copy
#    floor, register-cap variants), 2) the GPU-side tests of tests_vllm/kvarn, in three processes at
#    once so their Triton compiles overlap. Each step has a time cap (BENCH_S, TEST_S seconds) so a
#    single device call stays within its limit; a capped step shows as rc 124 in its log's last line.
# With TEST_N set, the tests run as one pytest with TEST_N xdist workers instead (pytest_all.log).
# BENCH_S=0 skips the benchmark (the tests alone).
# Results in $OUT: device.txt, bench.log, speedpath.json/.md, pytest_*.log, gpu_cases.jsonl.
set -uo pipefail
OUT="${OUT:-/tmp/kvarn-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KVARN_OUT="$OUT"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} >"$OUT/device.txt" 2>&1
rc=0
# 200 s: 130 stopped the benchmark on a fresh machine in run 68 (Triton compiles first)
if [ "${BENCH_S:-200}" != 0 ]; then
  # shellcheck disable=SC2086  # BENCH_ARGS: extra bench_speedpath.py options, word-split on purpose
  timeout "${BENCH_S:-200}" python3 gpu/kvarn/bench_speedpath.py --out "$OUT" ${BENCH_ARGS:-} >"$OUT/bench.log" 2>&1
  r=$?; echo "rc $r" >>"$OUT/bench.log"; [ $r = 0 ] || rc=1
fi
# 330 s: the whole directory under TEST_N=8 takes 284 s on a fresh machine (run 69, Triton's compiles
# included; its slowest test 103 s alone); 170 and 280 s stopped it at 99% (runs 67-68)
T="${TEST_S:-330}"
# -v: each test's name and result as it ends, so a run stopped by its cap shows what was left;
# --timeout (pytest-timeout): a test past it fails with its stack instead of holding the run
P=(python3 -m pytest -v -p no:cacheprovider -rs --durations=12 --timeout "${TEST_TIMEOUT:-400}")
if [ -n "${TEST_N:-}" ]; then
  # one pytest over the whole directory, TEST_N xdist workers (their Triton compiles overlap)
  # worksteal: idle workers take queued tests from busy ones (the compiles are uneven)
  timeout "$T" "${P[@]}" -n "$TEST_N" --dist worksteal tests_vllm/kvarn >"$OUT/pytest_all.log" 2>&1 || rc=1
  tail -n 12 "$OUT/pytest_all.log"
  cat "$OUT/speedpath.md" 2>/dev/null || tail -n 5 "$OUT/bench.log"
  exit $rc
fi
timeout "$T" "${P[@]}" tests_vllm/kvarn/test_gpu.py >"$OUT/pytest_gpu.log" 2>&1 &
p1=$!
timeout "$T" "${P[@]}" tests_vllm/kvarn/test_triton_kernels.py tests_vllm/kvarn/test_decode_speedpath.py \
  >"$OUT/pytest_kernels.log" 2>&1 &
p2=$!
timeout "$T" "${P[@]}" tests_vllm/kvarn/test_reference.py tests_vllm/kvarn/test_layout_config_tiers.py \
  >"$OUT/pytest_cpu_side.log" 2>&1 &
p3=$!
for p in $p1 $p2 $p3; do
  wait "$p" || rc=1
done
for f in pytest_gpu pytest_kernels pytest_cpu_side; do
  echo "== $f"
  tail -n 6 "$OUT/$f.log"
done
cat "$OUT/speedpath.md" 2>/dev/null || tail -n 5 "$OUT/bench.log"
exit $rc
