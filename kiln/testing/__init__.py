"""Test helpers and TVM's pytest plugin, available as ``tvm.testing`` under the alias.

- :mod:`.targets` — which targets tests run on here (``TVM_TEST_TARGETS``), the
  ``requires_*``/``uses_gpu`` marks, ``parametrize_targets`` and
  ``exclude_targets``/``known_failing_targets``;
- :mod:`.params` — module-level ``parameter``/``parameters``/``fixture``;
- :mod:`.compare` — ``assert_allclose`` (NDArrays accepted) and IR equality;
- :mod:`.gradients` — ``check_numerical_grads``, gradients against finite differences;
- :mod:`.run` — ``main()``, running pytest on the calling file;
- :mod:`.plugin` — the pytest plugin (markers, ``target``/``dev``, grouped parameters), loaded
  with ``pytest_plugins = ["tvm.testing.plugin"]``; importing this package does not load it.

pytest is imported only when a mark or fixture is made, so ``import tvm.testing`` never needs it.
"""

from .compare import assert_allclose, assert_prim_func_equal
from .gradients import check_numerical_grads
from .params import fixture, parameter, parameters
from .run import main
from .targets import (
    device_enabled,
    enabled_targets,
    exclude_targets,
    has_c_compiler,
    has_gpu,
    known_failing_targets,
    parametrize_targets,
    requires_cuda,
    requires_gpu,
    requires_llvm,
    targets_under_test,
    uses_gpu,
)

__all__ = [
    "assert_allclose",
    "assert_prim_func_equal",
    "check_numerical_grads",
    "has_gpu",
    "has_c_compiler",
    "targets_under_test",
    "enabled_targets",
    "device_enabled",
    "parametrize_targets",
    "exclude_targets",
    "known_failing_targets",
    "requires_gpu",
    "requires_cuda",
    "requires_llvm",
    "uses_gpu",
    "parameter",
    "parameters",
    "fixture",
    "main",
]
