#!/usr/bin/env bash
# Build the patched vLLM into a virtual environment: the image's build steps, in one script that the
# Dockerfile runs and that CI runs too (scripts/docker-ci, on CPU torch), so everything but the base
# image is tested on every submission.
#
# Usage: docker/install.sh --venv DIR [--tool-venv DIR] [--steps LIST] [--cpu-torch]
#
#   --venv DIR       the serving environment (created with the python3 on PATH if it does not exist)
#   --tool-venv DIR  where hyperqwen-patches is installed (default: DIR-of-venv/../hqp-tool). It gets
#                    an environment of its own so that its dependencies never change what pip resolved
#                    for vLLM.
#   --steps LIST     comma-separated, in this order (default: all but serve-help):
#                      requirements  pip install -r docker/requirements.txt (the slow layer)
#                      tool          install hyperqwen-patches from this repository
#                      apply         apply the whole series (manifest order, KVarN module files too)
#                                    onto the site-packages that holds vllm, at fuzz 0, all or nothing
#                      verify        apply --check-applied: the installed tree carries every row
#                      smoke         byte-compile vllm/, import vLLM's core modules and every KVarN module
#                      serve-help    `vllm serve --help=all` lists every flag docker/entrypoint.sh passes,
#                                    and vLLM's own parser reads the entry point's arguments as meant
#   --cpu-torch      CI: install torch 2.13.0 for the CPU before the requirements (docker/cpu-torch.sh:
#                    the one already there, else torch==2.13.0+cpu where pip finds it, else PyPI's CUDA
#                    build, said with its size), and remove torchvision and torchaudio afterwards: both
#                    fail to load beside the CPU torch ("operator torchvision::nms does not exist").
#                    HQP_TORCH_INDEX names an extra index for the CPU wheel if pip's own config lacks one.
#
# Each step prints "install: <step>" and fails the script on any error (a hunk that does not apply, a
# row missing from the installed tree, an import that fails). Re-running a step is safe: apply reports
# rows the tree already carries as already-applied and writes nothing for them.
set -euo pipefail

repo="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)"
venv=""
tool_venv=""
steps="requirements,tool,apply,verify,smoke"
cpu_torch=0

die() { printf 'install: error: %s\n' "$*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --venv) venv="${2:?--venv needs a directory}"; shift 2 ;;
    --tool-venv) tool_venv="${2:?--tool-venv needs a directory}"; shift 2 ;;
    --steps) steps="${2:?--steps needs a list}"; shift 2 ;;
    --cpu-torch) cpu_torch=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[ -n "$venv" ] || die "--venv DIR is required"
known="requirements tool apply verify smoke serve-help"
IFS=',' read -r -a wanted <<<"$steps"
for step in "${wanted[@]}"; do
  [[ " $known " == *" $step "* ]] || die "unknown step '$step' (steps: ${known// /, })"
done
venv="$(mkdir -p "$venv" && cd "$venv" && pwd)"
tool_venv="${tool_venv:-$(dirname "$venv")/hqp-tool}"
want() { [[ ",$steps," == *",$1,"* ]]; }

py="$venv/bin/python"
pip=("$py" -m pip --disable-pip-version-check)
hqp="$tool_venv/bin/hyperqwen-patches"

if [ ! -x "$py" ]; then
  python3 -m venv "$venv"
fi

# The directory that holds the vllm package; found without importing vLLM (which is slow and, before
# the series is applied, not what we want to import).
site_packages() {
  "$py" -c 'import importlib.util, pathlib, sys
spec = importlib.util.find_spec("vllm")
if spec is None or spec.origin is None:
    sys.exit("vllm is not installed in " + sys.prefix)
print(pathlib.Path(spec.origin).resolve().parent.parent)'
}

if want requirements; then
  echo "install: requirements (docker/requirements.txt)" >&2
  if [ "$cpu_torch" = 1 ]; then
    # The CPU build where pip finds one, else PyPI's CUDA build (said in one line, with its size);
    # a torch 2.13.0 already there (scripts/docker-ci's copy of the test environment) is kept.
    "$repo/docker/cpu-torch.sh" "$py" install >/dev/null
  fi
  "${pip[@]}" install -q -r "$repo/docker/requirements.txt"
  if [ "$cpu_torch" = 1 ]; then
    "${pip[@]}" uninstall -q -y torchvision torchaudio
  fi
  # What pip resolved must hang together (pip warns about conflicts but installs anyway). On CPU
  # torch the only accepted complaints are the two packages removed on purpose above.
  if ! check_out="$("${pip[@]}" check 2>&1)"; then
    rest="$(grep -v -E '^vllm [^ ]+ requires (torchvision|torchaudio), which is not installed\.$' \
      <<<"$check_out" || true)"
    if [ "$cpu_torch" != 1 ] || [ -n "$rest" ]; then
      printf '%s\n' "$check_out" >&2
      die "pip check failed in $venv"
    fi
  fi
fi

if want tool; then
  echo "install: tool (hyperqwen-patches from $repo into $tool_venv)" >&2
  [ -x "$tool_venv/bin/python" ] || python3 -m venv "$tool_venv"
  "$tool_venv/bin/python" -m pip install --disable-pip-version-check -q "$repo"
  "$hqp" --version
fi

if want apply; then
  sp="$(site_packages)"
  echo "install: apply (the series onto $sp)" >&2
  # Run from the repository so the tool finds patches/manifest.yaml (the series and its order).
  (cd "$repo" && "$hqp" apply "$sp")
fi

if want verify; then
  sp="$(site_packages)"
  echo "install: verify (the pin, and every row present in $sp)" >&2
  # The installed release must be the manifest's pin (`check` compares docker/requirements.txt with
  # it; this catches an image built from a requirements file that disagrees).
  installed="$("$py" -c 'import importlib.metadata as m; print(m.version("vllm"))')"
  pin="$("$tool_venv/bin/python" -c 'import sys
from pathlib import Path
from hyperqwen_patches.series.manifest import load_manifest
print(load_manifest(Path(sys.argv[1])).pin)' "$repo")"
  [ "$installed" = "$pin" ] \
    || die "vllm $installed is installed but patches/manifest.yaml pins $pin (docker/requirements.txt disagrees with the manifest; run hyperqwen-patches check)"
  (cd "$repo" && "$hqp" apply "$sp" --check-applied)
fi

if want smoke; then
  sp="$(site_packages)"
  echo "install: smoke (byte-compile vllm/, import the patched modules)" >&2
  # Byte-compiling catches a syntax error anywhere in the patched package and saves the non-root
  # server from compiling (or failing to write) .pyc files at start.
  "$py" -m compileall -q -j 0 "$sp/vllm" >/dev/null
  # vLLM's core modules the series touches, and every module the series' module-file rows copy in
  # (KVarN), as the manifest lists them.
  modules=(vllm vllm.envs vllm.v1.worker.gpu_worker vllm.v1.worker.gpu_model_runner
    vllm.v1.worker.gpu.model_runner vllm.v1.worker.gpu.cudagraph_utils vllm.utils.mem_utils)
  listing="$("$tool_venv/bin/python" "$repo/docker/series_modules.py" "$repo")"
  mapfile -t copied < <(cut -f2 <<<"$listing" | sed '/^$/d')
  modules+=("${copied[@]}")
  # Import from a neutral directory: the repository's own files must not shadow site-packages.
  # VLLM_TARGET_DEVICE=cpu: the build (docker build, CI) has no GPU, and without it vLLM cannot pick
  # a platform; the same setting in both keeps the two smokes identical.
  (cd / && VLLM_TARGET_DEVICE=cpu "$py" -c 'import importlib, sys
failed = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
if failed:
    sys.exit("import smoke failed:\n  " + "\n  ".join(failed))
print(f"import smoke: {len(sys.argv) - 1} modules imported", file=sys.stderr)' "${modules[@]}")
fi

if want serve-help; then
  echo "install: serve-help (vllm serve --help=all against docker/entrypoint.sh)" >&2
  # On a machine without a GPU vLLM cannot infer its device and dies before printing help.
  help="$(cd / && VLLM_TARGET_DEVICE=cpu "$venv/bin/vllm" serve --help=all 2>/dev/null)"
  # Every flag the entry point can pass, taken from the entry point itself with every knob on.
  mapfile -t flags < <(GPU_UTIL=0.95 REQ_METRICS_DETAILED=1 VLLM_PREFIX_CACHE_RETENTION_INTERVAL=0 \
    HQP_DRY_RUN=1 HQP_SKIP_PREFLIGHT=1 bash "$repo/docker/entrypoint.sh" 2>/dev/null | grep -- '^--')
  [ "${#flags[@]}" -ge 3 ] || die "the entry point's dry run printed ${#flags[@]} flags, expected 3"
  for flag in "${flags[@]}"; do
    grep -q -- "^ *${flag}[ =]" <<<"$help" || die "vllm serve --help=all does not list $flag"
    echo "install: vllm serve lists $flag" >&2
  done
  grep -q -- '--per-request-spec-decode-metrics {detailed,none,summary}' <<<"$help" \
    || die "vllm serve --help=all does not offer --per-request-spec-decode-metrics {detailed,none,summary}"
  (cd / && VLLM_TARGET_DEVICE=cpu "$py" "$repo/docker/check_serve_args.py" "$repo/docker/entrypoint.sh")
fi
echo "install: done ($steps)" >&2
