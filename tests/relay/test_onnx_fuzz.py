"""The ONNX importer's mutation fuzzer (``scripts/fuzz_onnx.py``), bounded: 40 mutants of
kiln.relay.testing's models, run in process, each a clear kiln error or onnxruntime's
output. The long run and its figures: docs/reliability.md."""

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fuzz_onnx.py"


def _fuzzer():
    spec = importlib.util.spec_from_file_location("fuzz_onnx", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fuzz_onnx", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_forty_mutants_give_clear_errors_or_onnxruntimes_output():
    fz = _fuzzer()
    results = [fz.check(fz.mutant(i, seed=0)) for i in range(40)]
    defects = [f"[{r.mutant.index}] {r.outcome}: {r.mutant.kind} {r.mutant.what}: {r.detail}"
               for r in results if fz.OUTCOMES[r.outcome]]
    assert not defects, "\n".join(defects)
    assert {r.outcome for r in results} >= {"match", "both reject (kiln clear)"}


#: what the 10,000-mutant runs of seed 2 found (docs/reliability.md), each now a clear error:
#: a node name that is not UTF-8, a Dropout ratio of many values, pads with auto_pad, pads
#: of 2^62; a Cast to STRING
FOUND_BY_THE_LONG_RUN = [1175, 3066, 3267, 3501, 1550]


@pytest.mark.parametrize("index", FOUND_BY_THE_LONG_RUN)
def test_what_the_long_run_found_is_rejected_clearly(index):
    fz = _fuzzer()
    result = fz.check(fz.mutant(index, seed=2))
    assert result.outcome in ("both reject (kiln clear)", "kiln rejects (clear), ort runs"), \
        f"{result.outcome}: {result.detail}"


def test_cast_to_bool_after_relu_matches_onnxruntime():
    """Mutant 3715 of seed 2 (the second long run): a Cast to BOOL appended after a Relu,
    whose vector conversion truncated values below 1 to false."""
    fz = _fuzzer()
    result = fz.check(fz.mutant(3715, seed=2))
    assert result.outcome == "match", result.detail


def test_max_pool_fed_nan_matches_the_nan_skipping_reference():
    """Mutant 318 of seed 0 feeds NaNs to a MaxPool: onnxruntime's answer depends on where
    the NaN is in the window, kiln's skips it; the reference is onnxruntime on the model
    whose MaxPool inputs have their NaNs replaced by the lowest float32."""
    fz = _fuzzer()
    mut = fz.mutant(318, seed=0)
    assert (mut.base, mut.kind) == ("maxpool_relu", "nan_input")
    result = fz.check(mut)
    assert result.outcome == "match", result.detail


def test_mutants_are_deterministic():
    fz = _fuzzer()
    a, b = fz.mutant(7, seed=3), fz.mutant(7, seed=3)
    assert (a.kind, a.what, a.data) == (b.kind, b.what, b.data)
    assert fz.mutant(8, seed=3).data != a.data


def test_error_classification():
    from kiln.relay.frontend import OnnxImportError

    fz = _fuzzer()
    assert fz.kiln_error_outcome(OnnxImportError("node 'conv0' (Conv): bad"), ["conv0"]) == \
        "clear"
    assert fz.kiln_error_outcome(OnnxImportError("node 'conv01': bad"), ["conv0"]) == "unclear"
    assert fz.kiln_error_outcome(ValueError("node 'conv0': not enough values to unpack"),
                                 ["conv0"]) == "internal"
