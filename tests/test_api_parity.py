"""docs/api_parity.md is current, and every API_PRIORITY tier 1-3 name of classic TVM is present
and tested under kiln, or has its reason in scripts/api_parity/reasons.txt.

The generator runs in a subprocess, since it installs the ``tvm`` alias. When this fails
because kiln gained (or lost) a name, regenerate: ``python scripts/api_parity.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_api_parity_doc_is_current():
    script = ROOT / "scripts" / "api_parity.py"
    done = subprocess.run([sys.executable, str(script), "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
