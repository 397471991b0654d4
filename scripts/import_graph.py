"""Print the package-level import graph of ``kiln/`` and the imports that go up its layering.

Usage (from the repository root, or with the package directory as argument)::

    .venv/bin/python scripts/import_graph.py [path/to/kiln]

Each top-level sub-package or module of ``kiln`` is one *package* of the graph (``kiln/target``
counts as one package whether it is a module or a directory); autotvm's relay integration
(``autotvm/task/relay_integration.py``, ``autotvm/graph_tuning.py``) is its own package,
``autotvm.relay``, because it sits above ``relay`` while the rest of autotvm sits below;
so is auto_scheduler's (``auto_scheduler/relay_integration.py``, ``auto_scheduler.relay``).
``kiln`` is the root ``__init__.py``. Imports are read with :mod:`ast` (nothing is imported):
absolute and relative, module-level and function-local (*lazy*: paid for only when the
function runs). :data:`LAYERS` is the layering, low to high; a package may import packages of
its own layer or below. ``tests/test_layering.py`` holds the justified exceptions.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

#: kiln's layers, low to high; docs/index.md says what each one is for
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("target",),
    ("ir",),
    ("runtime",),
    ("rpc",),
    ("arith",),
    ("tir",),
    ("te",),
    ("cost",),
    ("codegen",),
    ("driver",),
    ("autotvm", "auto_scheduler"),
    ("topi",),
    ("relay",),
    ("autotvm.relay", "auto_scheduler.relay"),
    ("contrib", "cli", "demo", "alias", "as_tvm", "exec", "transform", "testing", "nd", "_ffi",
     "vta", "kiln"),
)

#: the modules of autotvm's relay integration (the package ``autotvm.relay``)
AUTOTVM_RELAY_MODULES = ("kiln.autotvm.task.relay_integration", "kiln.autotvm.graph_tuning")
#: the module of auto_scheduler's relay integration (the package ``auto_scheduler.relay``)
AUTO_SCHEDULER_RELAY_MODULE = "kiln.auto_scheduler.relay_integration"

LAYER_OF: dict[str, int] = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


@dataclass(frozen=True)
class Import:
    """One import statement of a kiln module that names another kiln package."""

    path: str  # the importing file, relative to the directory above kiln/
    line: int
    importer: str  # package of the importing file
    imported: str  # package of the imported module
    module: str  # the imported module, absolute
    lazy: bool  # inside a function: runs on the first call, not at import time

    @property
    def goes_up(self) -> bool:
        """True when the imported package sits in a higher layer than the importer."""
        return LAYER_OF.get(self.imported, -1) > LAYER_OF.get(self.importer, len(LAYERS))

    def __str__(self) -> str:
        kind = "lazy" if self.lazy else "eager"
        return (f"{self.importer} -> {self.imported}  {self.path}:{self.line}  "
                f"{self.module} ({kind})")


def package_of(module: str) -> str | None:
    """The graph package of an absolute module name, or None outside kiln."""
    parts = module.split(".")
    if parts[0] != "kiln":
        return None
    if len(parts) == 1:
        return "kiln"
    if any(module == m or module.startswith(m + ".") for m in AUTOTVM_RELAY_MODULES):
        return "autotvm.relay"
    if module == AUTO_SCHEDULER_RELAY_MODULE:
        return "auto_scheduler.relay"
    return parts[1]


def module_name(path: Path, root: Path) -> str:
    """``kiln/relay/executor.py`` -> ``kiln.relay.executor`` (``__init__`` names the package)."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str, root: Path) -> bool:
    rel = Path(*name.split(".")[1:]) if "." in name else Path()
    return (root / rel).with_suffix(".py").is_file() or (root / rel / "__init__.py").is_file()


def _imported_modules(node: ast.Import | ast.ImportFrom, current: str, is_package: bool,
                      root: Path) -> list[str]:
    """Absolute names of the modules an import statement loads (``from p import m`` loads the
    submodule ``p.m`` when ``m`` is one, else ``p``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = current.split(".")
        if not is_package:
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    names = []
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        names.append(sub if target.startswith("kiln") and _is_module(sub, root) else target)
    return names


def _walk(tree: ast.AST, in_function: bool = False):
    """Yield (import node, inside a function?) for every import statement of a module."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function
        nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
        yield from _walk(child, nested)


def collect(root: Path) -> list[Import]:
    """Every import between two different kiln packages, in file and line order."""
    found = []
    for path in sorted(root.rglob("*.py")):
        current = module_name(path, root)
        importer = package_of(current)
        tree = ast.parse(path.read_text(), filename=str(path))
        for node, lazy in _walk(tree):
            for module in dict.fromkeys(
                    _imported_modules(node, current, path.name == "__init__.py", root)):
                imported = package_of(module)
                if imported is not None and imported != importer:
                    found.append(Import(str(path.relative_to(root.parent)), node.lineno,
                                        importer, imported, module, lazy))
    return found


def adjacency(imports: list[Import]) -> dict[str, dict[str, tuple[int, int]]]:
    """package -> imported package -> (eager import statements, lazy import statements)."""
    table: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for imp in imports:
        table[imp.importer][imp.imported][int(imp.lazy)] += 1
    return {a: {b: (n[0], n[1]) for b, n in row.items()} for a, row in table.items()}


def _order(pkg: str) -> tuple[int, str]:
    return (LAYER_OF.get(pkg, len(LAYERS)), pkg)


def report(imports: list[Import]) -> str:
    """The adjacency table by layer, then the unlayered packages and the imports going up."""
    table = adjacency(imports)
    packages = sorted({i.importer for i in imports} | {i.imported for i in imports}, key=_order)
    lines = ["layer package          imports: package(eager statements[+lazy ones])"]
    for pkg in packages:
        row = table.get(pkg, {})
        cells = []
        for dep in sorted(row, key=_order):
            eager, lazy = row[dep]
            arrow = "^" if LAYER_OF.get(dep, -1) > LAYER_OF.get(pkg, len(LAYERS)) else ""
            cells.append(f"{arrow}{dep}({eager}{f'+{lazy}L' if lazy else ''})")
        layer = LAYER_OF.get(pkg)
        lines.append(f"{'?' if layer is None else layer + 1:>5} {pkg:<16} {' '.join(cells) or '-'}")
    unlayered = [p for p in packages if p not in LAYER_OF]
    if unlayered:
        lines += ["", f"packages in no layer: {', '.join(unlayered)}"]
    up = [i for i in imports if i.goes_up]
    lines += ["", f"imports up the layering ({len(up)}; ^ above, L = function-local):"]
    lines += [f"  {imp}" for imp in up]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "kiln"
    print(report(collect(root)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
