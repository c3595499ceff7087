#!/usr/bin/env bash
# On the GPU machine: experiments' package copies (build/v/NAME, made by build.sh here and carried
# there) against the tree's, in one device call: every copy's kernels compiled in parallel first
# (probe_ab.py --warm, one process each, so Triton's cache serves the timed run), then one
# probe_ab.py over all of them; with TIMELINE=1 also probe_timeline.py over build/v/timeline.
#
#   here:  bash gpu/kvarn/experiments/build.sh early min1_pool2 timeline
#   there: ROWS=1x8192x256,... bash gpu/kvarn/experiments/ab.sh early min1_pool2    (carry build/v)
#
# Writes $OUT/ab.json and ab.log (probe_ab.py's), warm_NAME.log, and timeline.json with TIMELINE=1.
set -uo pipefail
OUT="${OUT:-/tmp/kvarn-out}"
ROWS="${ROWS:-1x8192x256,1x16384x256,1x32768x256,8x8192x256,1x131072x256,32x32768x256,1x8192x128,8x8192x128}"
V="$(pwd)/build/v"
cd gpu/kvarn || exit 2
mkdir -p "$OUT"
pkgs=()
for name in "$@"; do
  [ -d "$V/$name" ] || { echo "ab.sh: no $V/$name (build.sh $name, then carry build/v)" >&2; exit 2; }
  pkgs+=(--pkg "$name=$V/$name")
done
for name in "$@"; do
  python3 probe_ab.py --pkg "$name=$V/$name" --warm "$name" --rows "$ROWS" >"$OUT/warm_$name.log" 2>&1 &
done
python3 probe_ab.py --warm tree --rows "$ROWS" >"$OUT/warm_tree.log" 2>&1 &
wait
rc=0
if [ "${TIMELINE:-0}" = 1 ]; then
  python3 probe_timeline.py --pkg "$V/timeline" --out "$OUT" >"$OUT/timeline.log" 2>&1 || rc=1
  tail -n 4 "$OUT/timeline.log"
fi
python3 probe_ab.py "${pkgs[@]}" --rows "$ROWS" --out "$OUT" >"$OUT/ab.log" 2>&1 || rc=1
grep -v -i warn "$OUT/ab.log" | tail -n 12
exit $rc
