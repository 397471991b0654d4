#!/usr/bin/env bash
# Run kiln's test suite. Usage: bash scripts/test.sh [pytest args ...]
# From any directory; creates .venv and installs kiln with its [test] extra on first use.
# Runs on 2 worker processes when pytest-xdist is installed (it is in the test extra); an idle
# worker takes queued tests from the other (--dist worksteal), as a few tests run much longer.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh" "test"
args=(-q)
if "$PY" -c "import xdist" 2>/dev/null; then
  args+=(-n 2 --dist worksteal)
fi
exec "$PY" -m pytest "${args[@]}" "$@"
