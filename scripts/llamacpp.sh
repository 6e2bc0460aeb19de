#!/usr/bin/env bash
# Build llama-cpp-python portably (once per version and flag set), install it into the venv, and check
# in a subprocess that it generates. Usage: scripts/llamacpp.sh [VENV]  (default .venv).
#
# Why these flags: the source build's default (GGML_NATIVE=ON) compiles for the building CPU, and on CPUs
# that report AMX it enables llama.cpp's AMX kernels, which crash (segfault in ggml_backend_amx_mul_mat)
# where the process is not granted AMX tile state. GGML_NATIVE=OFF with AVX2/FMA/F16C runs on every x86-64
# CPU of the last decade. The wheel is built with --no-cache-dir into a folder keyed by version and flags,
# so a wheel cached from another flag set (pip keys its cache by source only) is never picked up.
# CARAG_LLAMACPP_CMAKE_ARGS replaces the flags (e.g. for a native build to compare against).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-${CARAG_VENV:-.venv}}
PY="$VENV/bin/python"
VERSION=${CARAG_LLAMACPP_VERSION:-0.3.36}
PORTABLE="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
-DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
FLAGS=${CARAG_LLAMACPP_CMAKE_ARGS:-$PORTABLE}
KEY=$(printf '%s %s' "$VERSION" "$FLAGS" | sha256sum | cut -c1-12)
CACHE=${CARAG_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llama_index_carag}
WHEELS="$CACHE/wheels/llama-cpp-python-$VERSION-$KEY"
PIP=("$PY" -m pip --disable-pip-version-check -q)
marker="$VENV/.carag-llamacpp-$KEY"

if [ ! -f "$marker" ] || ! "$PY" -c "import llama_cpp" 2>/dev/null; then
  if ! ls "$WHEELS"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $VERSION (portable: GGML_NATIVE=OFF, AVX2; about 7 min on 2 cores, once)..."
    mkdir -p "$WHEELS.tmp"
    start=$(date +%s)
    CMAKE_ARGS="$FLAGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "${PIP[@]}" wheel --no-deps --no-cache-dir \
      --no-binary llama-cpp-python -w "$WHEELS.tmp" "llama-cpp-python==$VERSION" 2>&1 | grep -v "^WARNING: Location" || true
    ls "$WHEELS.tmp"/llama_cpp_python-*.whl >/dev/null 2>&1 || { echo "warning: llama-cpp-python did not build" >&2; exit 1; }
    printf '%s\n' "$FLAGS" > "$WHEELS.tmp/CMAKE_ARGS"
    rm -rf "$WHEELS"; mv "$WHEELS.tmp" "$WHEELS"
    echo "built in $(( $(date +%s) - start )) s: $WHEELS"
  fi
  "${PIP[@]}" install --no-deps --force-reinstall "$WHEELS"/llama_cpp_python-*.whl 2>&1 | grep -v "^WARNING: Location" || true
  # its pure-Python dependencies and LlamaIndex's integration, from the index (never another llama-cpp-python)
  "${PIP[@]}" install "diskcache>=5.6.1" "jinja2>=2.11.3" "typing-extensions>=4.5.0" "llama-index-llms-llama-cpp>=0.4" \
    2>&1 | grep -v "^WARNING: Location" || true
  rm -f "$VENV"/.carag-llamacpp-*
  touch "$marker"
fi
# The smoke test: one short generation in a subprocess (cached per build next to the GGUF cache).
HF_HUB_OFFLINE=1 "$PY" -m llama_index_carag.models.llamacpp
