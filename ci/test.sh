#!/usr/bin/env bash
# Install dgvm with its test extra into a fresh virtual environment and run the suite.
# Usage: bash ci/test.sh [pytest args]     (GPU tests run with: bash ci/test.sh -m gpu)
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q -e ".[test]"
python -m pytest -q -p no:logging "$@"
