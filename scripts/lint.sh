#!/usr/bin/env bash
# Set up, then the linters: ruff (lint + format check) on the whole tree, mypy on the package.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
