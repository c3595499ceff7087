#!/usr/bin/env bash
# Copies of the KVarN package with an experiment applied, for probe_ab.py / probe_timeline.py on the
# GPU machine (which gets them as `carry: ["build/v"]`): build/v/NAME = the tree's package folder
# (as committed at HEAD) patched with gpu/kvarn/experiments/NAME.diff. A diff that no longer
# applies stops the script with patch's message, leaving no half-patched copy.
#
#   bash gpu/kvarn/experiments/build.sh early min1_pool2 [timeline ...]
#   then on the GPU machine, from gpu/kvarn:
#   python3 probe_ab.py --pkg early=../../build/v/early --pkg min1_pool2=../../build/v/min1_pool2 --out $OUT
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
P=kvarn/files/vllm/v1/attention/ops/kvarn
mkdir -p build/v
for name in "$@"; do
  diff="gpu/kvarn/experiments/$name.diff"
  [ -f "$diff" ] || { echo "build.sh: no experiment $diff" >&2; exit 2; }
  tmp=$(mktemp -d build/v/.tmp.XXXXXX)
  git archive HEAD "$P" | tar -x -C "$tmp"
  if ! patch -s -p1 -d "$tmp/$P" <"$diff"; then
    rm -rf "$tmp"
    echo "build.sh: $diff does not apply to HEAD's $P" >&2
    exit 1
  fi
  rm -rf "build/v/$name"
  mv "$tmp/$P" "build/v/$name"
  rm -rf "$tmp"
  echo "build/v/$name"
done
