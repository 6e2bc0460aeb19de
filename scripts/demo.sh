#!/usr/bin/env bash
# The main job: set up, then run the offline demo (`carag demo`; extra arguments are passed on,
# e.g. --no-llm, --out DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
exec .venv/bin/carag demo "$@"
