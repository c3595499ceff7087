#!/usr/bin/env bash
# Install torch 2.13.0 for the CPU into the environment of PYTHON, for the tests and CI (never for the
# image, which wants the CUDA build). Used by scripts/vllm-env and docker/install.sh --cpu-torch.
#
# Which build, in this order:
#   1. the torch 2.13.0 already installed there (any build): kept, nothing downloaded;
#   2. the CPU build `torch==2.13.0+cpu`, where pip finds one: a local wheel folder (PIP_FIND_LINKS),
#      pip's own configuration, or HQP_TORCH_INDEX (e.g. https://download.pytorch.org/whl/cpu);
#   3. otherwise PyPI's `torch==2.13.0`: the CUDA build, which runs on a CPU as well. PyPI has no
#      `+cpu` build, so this is what a fresh machine with only the public index gets. It is said in one
#      line before the download, with its size.
#
# Usage: docker/cpu-torch.sh PYTHON [LABEL]   (LABEL prefixes the messages; default "cpu-torch")
# Prints the requirement it settled on (`torch==2.13.0+cpu` or `torch==2.13.0`) on stdout, so the
# caller can hold pip to the same build when it installs the rest. Exit 0, or 2 when neither installs.
set -euo pipefail

py="${1:?usage: docker/cpu-torch.sh PYTHON [LABEL]}"
label="${2:-cpu-torch}"
torch_version="2.13.0"
# Measured with no pip configuration on 2026-12-04: torch and its 26 nvidia-* wheels.
cuda_download="about 3.7 GB"
pip=("$py" -m pip --disable-pip-version-check)
if [ -t 2 ]; then quiet=(); else quiet=(-q); fi

installed="$("$py" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)"
case "$installed" in
  "$torch_version" | "$torch_version"+*)
    echo "$label: torch $installed already installed; kept" >&2
    if [ "$installed" = "$torch_version" ]; then echo "torch==$torch_version"; else echo "torch==$installed"; fi
    exit 0 ;;
esac

# An explicit local version: pip takes a CPU wheel where one is reachable and otherwise fails at once
# ("No matching distribution"), never silently falling back to the CUDA build on its own.
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if "${pip[@]}" install "${quiet[@]}" ${HQP_TORCH_INDEX:+--extra-index-url "$HQP_TORCH_INDEX"} \
    "torch==$torch_version+cpu" 2>"$log"; then
  echo "torch==$torch_version+cpu"
  exit 0
fi
if ! grep -q -e "No matching distribution" -e "Could not find a version" "$log"; then
  cat "$log" >&2
  echo "$label: installing torch==$torch_version+cpu failed (not for want of a CPU wheel: see above)" >&2
  exit 2
fi
echo "$label: no CPU build of torch $torch_version on pip's index; installing PyPI's torch==$torch_version" \
  "(the CUDA build, which runs on the CPU too): $cuda_download to download" \
  "(HQP_TORCH_INDEX=https://download.pytorch.org/whl/cpu takes the 0.2 GB CPU build instead)" >&2
if ! "${pip[@]}" install "${quiet[@]}" "torch==$torch_version" >&2; then
  echo "$label: installing torch==$torch_version failed (see above)" >&2
  exit 2
fi
echo "torch==$torch_version"
