#!/usr/bin/env bash
# The main job: set up, then run the offline demo (extra arguments are passed on).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
exec .venv/bin/python examples/quickstart.py "$@"
