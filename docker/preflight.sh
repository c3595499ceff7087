# shellcheck shell=bash
# Preflight for serving the patched vLLM 0.29 line: make sure FlashInfer's JIT will find an nvcc from
# CUDA 13 or newer. Sourced by docker/entrypoint.sh; `bash docker/preflight.sh` runs it alone.
#
# Why: FlashInfer 0.6.18 (vLLM 0.29.0's pin) compiles its kernels on first use and always passes
# `--compress-mode=size` to nvcc (flashinfer/jit/core.py), an option CUDA 12's nvcc does not know, so
# on a machine whose system nvcc is older than 13 the first JIT compile dies with
#   nvcc fatal   : Unknown option '--compress-mode=size'
# long after the server started loading. vLLM 0.29's dependencies install the CUDA 13 compiler as
# wheels (nvidia-cuda-nvcc, nvidia-cuda-crt, nvidia-nvvm, nvidia-cuda-runtime, all under
# site-packages/nvidia/cu13/), so when the system one is too old we point CUDA_HOME there instead.
#
# FlashInfer picks its toolkit as: $CUDA_HOME, else $CUDA_PATH, else the directory above `nvcc` on
# PATH, else /usr/local/cuda; it runs $FLASHINFER_NVCC if set, else <toolkit>/bin/nvcc, and links
# with `-L<toolkit>/lib64 -L<toolkit>/lib64/stubs -lcudart -lcuda` (flashinfer/jit/cpp_ext.py). The
# wheel layout has lib/ and only libcudart.so.13, so CUDA_HOME cannot be the wheel directory itself:
# we build a small toolkit directory of symlinks (bin, include, nvvm, lib; lib64/libcudart.so) in a
# writable cache and point CUDA_HOME at that.
#
# Env:
#   HQP_SKIP_PREFLIGHT=1   skip it (you know your toolkit is fine)
#   HQP_PYTHON             the Python whose site-packages hold vLLM (default: python3 on PATH)
#   HQP_CUDA_SHIM_DIR      where the symlinked toolkit goes
#                          (default: ${XDG_CACHE_HOME:-$HOME/.cache}/hyperqwen-patches/cuda-home)
# Exit status when run alone (or the return status of hqp_preflight): 0 ok (CUDA_HOME and PATH may
# have been exported), 2 no usable CUDA 13 compiler where one is needed.

HQP_MIN_CUDA_MAJOR=13

_hqp_log() { printf 'preflight: %s\n' "$*" >&2; }

# Print "MAJOR.MINOR" of an nvcc binary, or nothing when it does not run or says no release.
_hqp_nvcc_release() {
  local out
  out="$("$1" --version 2>/dev/null)" || return 0
  # nvcc prints "Cuda compilation tools, release 13.0, V13.0.88"; FlashInfer reads the same field.
  if [[ "$out" =~ release\ ([0-9]+)\.([0-9]+), ]]; then
    printf '%s.%s\n' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
  fi
}

# The toolkit directory FlashInfer would use, by its own rules (get_cuda_path in cpp_ext.py).
_hqp_flashinfer_cuda_home() {
  if [ -n "${CUDA_HOME:-}" ]; then printf '%s\n' "$CUDA_HOME"; return; fi
  if [ -n "${CUDA_PATH:-}" ]; then printf '%s\n' "$CUDA_PATH"; return; fi
  local nvcc
  if nvcc="$(command -v nvcc 2>/dev/null)"; then
    # FlashInfer takes dirname(dirname(which nvcc)) without resolving links; so do we.
    dirname "$(dirname "$nvcc")"
    return
  fi
  printf '%s\n' /usr/local/cuda
}

# The cu13 directories that pip's CUDA wheels created, one per line (usually one).
_hqp_pip_cuda_dirs() {
  "${HQP_PYTHON:-python3}" - <<'EOF' 2>/dev/null || true
import importlib.util
import os

# "nvidia" is a namespace package spread over every site-packages that has NVIDIA wheels.
spec = importlib.util.find_spec("nvidia")
for location in (spec.submodule_search_locations if spec else None) or []:
    candidate = os.path.join(location, "cu13")
    if os.path.isfile(os.path.join(candidate, "bin", "nvcc")):
        print(candidate)
EOF
}

# Build the symlinked toolkit for a wheel directory; prints its path.
_hqp_make_shim() {
  local src="$1" shim="$2" tmp name lib
  tmp="$(mktemp -d "${shim}.tmp.XXXXXX")" || return 1
  for name in bin include nvvm lib; do
    [ -e "$src/$name" ] && ln -s "$src/$name" "$tmp/$name"
  done
  mkdir -p "$tmp/lib64/stubs"
  for lib in "$src"/lib/*; do
    [ -e "$lib" ] && ln -s "$lib" "$tmp/lib64/$(basename "$lib")"
  done
  # The linker's -lcudart wants the unversioned name, which the wheel does not ship.
  [ -e "$src/lib/libcudart.so.13" ] && ln -s "$src/lib/libcudart.so.13" "$tmp/lib64/libcudart.so"
  # -lcuda: the driver's library (present on a GPU host, mounted by the NVIDIA container runtime).
  local libcuda
  libcuda="$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 .*x86-64|libcuda\.so\.1 .*AArch64/ {print $NF; exit}')"
  [ -n "$libcuda" ] && ln -s "$libcuda" "$tmp/lib64/stubs/libcuda.so"
  rm -rf "$shim"
  mv "$tmp" "$shim"
  printf '%s\n' "$shim"
}

hqp_preflight() {
  if [ "${HQP_SKIP_PREFLIGHT:-}" = "1" ]; then
    _hqp_log "skipped (HQP_SKIP_PREFLIGHT=1)"
    return 0
  fi
  local home nvcc release="" major reason
  home="$(_hqp_flashinfer_cuda_home)"
  nvcc="${FLASHINFER_NVCC:-$home/bin/nvcc}"
  if [ -x "$nvcc" ]; then
    release="$(_hqp_nvcc_release "$nvcc")"
  fi
  if [ -n "$release" ]; then
    major="${release%%.*}"
    if [ "$major" -ge "$HQP_MIN_CUDA_MAJOR" ]; then
      _hqp_log "FlashInfer JIT uses nvcc $release at $nvcc: ok"
      return 0
    fi
    reason="nvcc $release at $nvcc is older than CUDA $HQP_MIN_CUDA_MAJOR"
  elif [ -e "$nvcc" ]; then
    reason="$nvcc does not report a CUDA release"
  else
    reason="no nvcc at $nvcc"
  fi

  if [ -n "${FLASHINFER_NVCC:-}" ]; then
    _hqp_log "error: FLASHINFER_NVCC=$FLASHINFER_NVCC: $reason;" \
      "FlashInfer's first JIT compile would die with" \
      "\"nvcc fatal: Unknown option '--compress-mode=size'\". Unset it or point it at CUDA $HQP_MIN_CUDA_MAJOR+."
    return 2
  fi

  local pip_dir pip_release shim
  while IFS= read -r pip_dir; do
    [ -n "$pip_dir" ] || continue
    pip_release="$(_hqp_nvcc_release "$pip_dir/bin/nvcc")"
    [ -n "$pip_release" ] && [ "${pip_release%%.*}" -ge "$HQP_MIN_CUDA_MAJOR" ] || continue
    shim="${HQP_CUDA_SHIM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hyperqwen-patches/cuda-home}"
    mkdir -p "$(dirname "$shim")" || return 2
    shim="$(_hqp_make_shim "$pip_dir" "$shim")" || {
      _hqp_log "error: cannot build a toolkit directory at $shim for $pip_dir"
      return 2
    }
    export CUDA_HOME="$shim"
    export PATH="$shim/bin:$PATH"
    _hqp_log "$reason; FlashInfer's JIT would die with \"nvcc fatal: Unknown option '--compress-mode=size'\"." \
      "Using pip's CUDA toolchain instead: nvcc $pip_release from $pip_dir (CUDA_HOME=$shim)"
    return 0
  done < <(_hqp_pip_cuda_dirs)

  if [ -z "$release" ]; then
    # No compiler at all is a different situation: FlashInfer then only runs kernels it does not have
    # to compile. Say so and let the server start.
    _hqp_log "warning: $reason and no pip CUDA toolchain (site-packages/nvidia/cu13/bin/nvcc) found;" \
      "FlashInfer kernels that need a JIT compile will fail. Install CUDA $HQP_MIN_CUDA_MAJOR+ or" \
      "pip install nvidia-cuda-nvcc nvidia-cuda-crt nvidia-nvvm nvidia-cuda-runtime."
    return 0
  fi
  _hqp_log "error: $reason. FlashInfer's first JIT compile would die with" \
    "\"nvcc fatal: Unknown option '--compress-mode=size'\" (it needs CUDA $HQP_MIN_CUDA_MAJOR+)," \
    "and no pip CUDA toolchain (site-packages/nvidia/cu13/bin/nvcc) was found next to vLLM." \
    "Fix: install CUDA $HQP_MIN_CUDA_MAJOR+ and set CUDA_HOME, or pip install nvidia-cuda-nvcc" \
    "nvidia-cuda-crt nvidia-nvvm nvidia-cuda-runtime into vLLM's environment," \
    "or set HQP_SKIP_PREFLIGHT=1 to start anyway."
  return 2
}

# Run alone: `bash docker/preflight.sh` prints the exports it would make.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -uo pipefail
  hqp_preflight || exit $?
  printf 'CUDA_HOME=%s\n' "${CUDA_HOME:-}"
fi
