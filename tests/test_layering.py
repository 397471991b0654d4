"""kiln's layers only look down (docs/index.md, "Layers").

The import graph comes from ``scripts/import_graph.py`` (the tool that prints it): a module
may import packages of its own layer or below; :data:`ALLOWED` lists the imports that go up,
each with its reason. A new package must be placed in ``LAYERS`` first.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_tool():
    path = ROOT / "scripts" / "import_graph.py"
    spec = importlib.util.spec_from_file_location("import_graph", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


graph = _load_tool()

#: (importer, imported) -> why that import may go up the layering
ALLOWED: dict[tuple[str, str], str] = {
    ("te", "topi"): "Tensor arithmetic (A + B on tensors) builds topi's broadcast operators, as "
                    "TVM's Tensor does; imported on first use",
    ("autotvm", "autotvm.relay"): "autotvm and autotvm.task re-export TVM's public names "
                                  "tune_graph/extract_from_program; those modules import relay "
                                  "only inside their functions",
    ("relay", "autotvm.relay"): "relay.build's op strategy asks autotvm for a tuned config of a "
                                "fused group (schedule_group), which imports relay only inside "
                                "its functions",
    ("auto_scheduler", "auto_scheduler.relay"): "auto_scheduler re-exports TVM's public name "
                                                "extract_tasks; its module imports relay only "
                                                "inside its functions",
}

#: packages ``import kiln`` must not load (``kiln.relay`` ... are imported on first use)
LAZY_PACKAGES = ("autotvm", "auto_scheduler", "topi", "relay", "rpc", "contrib", "testing")


@pytest.fixture(scope="module")
def imports():
    return graph.collect(ROOT / "kiln")


def test_every_package_has_a_layer(imports):
    packages = {i.importer for i in imports} | {i.imported for i in imports}
    assert sorted(p for p in packages if p not in graph.LAYER_OF) == []


def test_imports_go_down_the_layers(imports):
    up = [i for i in imports if i.goes_up and (i.importer, i.imported) not in ALLOWED]
    assert up == [], "imports up the layering:\n" + "\n".join(map(str, up))


def test_allowed_exceptions_are_still_needed(imports):
    used = {(i.importer, i.imported) for i in imports if i.goes_up}
    assert sorted(set(ALLOWED) - used) == []


def test_target_imports_only_errors(imports):
    assert {i.imported for i in imports if i.importer == "target"} <= {"errors"}


def test_runtime_side_imports_no_graph_compiler(imports):
    """The graph executor lives in the runtime: an RPC server and tvm.contrib.graph_executor
    run compiled graphs without the graph compiler."""
    bad = [i for i in imports if i.importer in ("runtime", "rpc", "contrib")
           and i.imported == "relay"]
    assert bad == []


def test_tool_reports_the_up_imports(imports):
    text = graph.report(imports)
    assert "imports up the layering" in text
    assert all(str(i) in text for i in imports if i.goes_up)


def _loaded_after(statement: str) -> set[str]:
    code = (f"{statement}; import sys; "
            "print(' '.join(sorted({m.split('.')[1] for m in sys.modules "
            "if m.startswith('kiln.')})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    return set(out.stdout.split())


def test_import_kiln_loads_no_lazy_package():
    assert _loaded_after("import kiln") & set(LAZY_PACKAGES) == set()


def test_lazy_packages_load_on_first_use():
    loaded = _loaded_after("import kiln; kiln.autotvm.get_config; kiln.topi")
    assert {"autotvm", "topi"} <= loaded
    assert "relay" not in loaded  # autotvm's relay integration imports relay in its functions


def test_graph_executor_and_rpc_load_no_relay():
    assert "relay" not in _loaded_after("import kiln.contrib.graph_executor, kiln.rpc")
