#!/usr/bin/env bash
# Install dgvm with its test extra into a fresh virtual environment, check the import
# rules and run the suite.
# Usage: bash ci/test.sh [pytest args]     (GPU tests run with: bash ci/test.sh -m gpu)
set -euo pipefail
cd "$(dirname "$0")/.."
# The dashboard test drives a headless Chromium: install Debian's chromium and its driver
# when they are missing and we may (root, or sudo without a password). Without them that
# one test is skipped, with its reason.
if ! { command -v chromium && command -v chromedriver; } >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then sudo=""; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; else sudo="no"; fi
    if [ "$sudo" != "no" ]; then
        { $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends chromium chromium-driver; } >/dev/null \
            || echo "ci/test.sh: could not install chromium; the browser test will be skipped" >&2
    fi
fi
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q -e ".[test]"
# The layout's import rules (pyproject.toml, [tool.importlinter]; docs/architecture.md).
lint-imports
python -m pytest -q -p no:logging "$@"
