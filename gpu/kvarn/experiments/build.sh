#!/usr/bin/env bash
# Copies of the KVarN package with an experiment applied, for probe_ab.py / probe_timeline.py on the
# GPU machine (which gets them as `carry: ["build/v"]`): build/v/NAME = the tree's package folder
# (as committed at HEAD) patched with gpu/kvarn/experiments/NAME.diff; NAME may join several with
# "+" (early+min1_pool2: both diffs, in that order). A diff that does not apply stops the script
# with patch's message, leaving no half-patched copy.
#
#   bash gpu/kvarn/experiments/build.sh early min1_pool2 early+min1_pool2 [timeline ...]
#   then on the GPU machine, from gpu/kvarn:
#   python3 probe_ab.py --pkg early=../../build/v/early --pkg min1_pool2=../../build/v/min1_pool2 --out $OUT
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
P=kvarn/files/vllm/v1/attention/ops/kvarn
mkdir -p build/v
for name in "$@"; do
  IFS=+ read -r -a parts <<<"$name"
  for part in "${parts[@]}"; do
    [ -f "gpu/kvarn/experiments/$part.diff" ] || {
      echo "build.sh: no experiment gpu/kvarn/experiments/$part.diff" >&2
      exit 2
    }
  done
  tmp=$(mktemp -d build/v/.tmp.XXXXXX)
  git archive HEAD "$P" | tar -x -C "$tmp"
  for part in "${parts[@]}"; do
    diff="gpu/kvarn/experiments/$part.diff"
    if ! patch -s -N -p1 -d "$tmp/$P" <"$diff"; then
      rm -rf "$tmp"
      echo "build.sh: $diff does not apply to HEAD's $P${parts[1]:+ with the diffs before it in $name}" >&2
      exit 1
    fi
  done
  rm -rf "build/v/$name"
  mv "$tmp/$P" "build/v/$name"
  rm -rf "$tmp"
  echo "build/v/$name"
done
