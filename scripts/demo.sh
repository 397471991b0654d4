#!/usr/bin/env bash
# kiln's main job: build and run the vector-add demo, compared with numpy, then compile
# ResNet-18 (an ONNX model built by kiln.relay.testing) and compare it with onnxruntime.
# Usage: bash scripts/demo.sh [--model mobilenet_v2|none] [--hw N]
# From any directory; creates .venv on first use and installs kiln with its [onnx] extra.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh" "onnx"
exec "$PY" -m kiln.demo "$@"
