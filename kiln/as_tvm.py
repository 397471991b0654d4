"""Run an unchanged classic-TVM program on kiln.

Usage::

    python -m kiln.as_tvm script.py [args ...]     # run a file as __main__
    python -m kiln.as_tvm -m module [args ...]     # run a module as __main__ (like python -m)
    python -m kiln.as_tvm -c "code" [args ...]     # run a string (like python -c)

The tvm alias (:func:`kiln.alias.install_as_tvm`) is installed first, so the program's
``import tvm``, ``from tvm import te`` and ``import d2ltvm`` give kiln's modules. ``sys.argv``
is what the program would see if started directly.
"""

from __future__ import annotations

import builtins
import os
import runpy
import sys

from kiln.alias import _target_name, install_as_tvm

USAGE = """usage: python -m kiln.as_tvm script.py [args ...]
       python -m kiln.as_tvm -m module [args ...]
       python -m kiln.as_tvm -c "code" [args ...]"""


def main(argv: list[str] | None = None) -> int:
    """Install the tvm alias and run the program named by ``argv``; return an exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    if argv[0] in ("-m", "-c") and len(argv) < 2:
        print(f"kiln.as_tvm: option {argv[0]} needs an argument\n{USAGE}", file=sys.stderr)
        return 2

    install_as_tvm()
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]  # runpy replaces argv[0] with the module's path
        # runpy needs the module's code, which the alias's loader does not give: run an
        # aliased name (``-m tvm.exec.rpc_server``) as the kiln module it stands for
        runpy.run_module(_target_name(argv[1]) or argv[1], run_name="__main__",
                         alter_sys=True)
    elif argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        code = compile(argv[1], "<string>", "exec")
        exec(code, {"__name__": "__main__", "__builtins__": builtins})
    else:
        script = argv[0]
        if not os.path.exists(script):
            print(f"kiln.as_tvm: can't open file {script!r}", file=sys.stderr)
            return 2
        sys.argv = argv
        # As `python script.py` does, let the script import modules that sit beside it.
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
        runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
