#!/usr/bin/env bash
# kiln's main job: build and run the vector-add demo, compared with numpy.
# Usage: bash scripts/demo.sh   (from any directory; creates .venv on first use)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh" ""
exec "$PY" -m kiln.demo "$@"
