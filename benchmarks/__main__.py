"""``python -m benchmarks``: run the benchmark suites (see benchmarks/run.py)."""

import sys

from benchmarks.run import main

sys.exit(main())
