"""ResNet-50, the BERT-base encoder and the ViT-B/16-style transformer of
``kiln.relay.testing``: their graphs at full size, and small configurations compiled by kiln
and compared with onnxruntime (and run by ``onnx_to_torch`` where PyTorch is installed)."""

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from kiln.relay import testing  # noqa: E402
from kiln.relay.testing import compare  # noqa: E402

from .models import build_and_run  # noqa: E402

#: small configurations: the full graphs' operators with few, narrow layers (the
#: transformers' are test_head_layout's, so a session compiles their kernels once)
SMALL = {
    "bert_encoder": dict(batch=2, seq=16, layers=2, hidden=64, heads=2, ffn=128, vocab=50),
    "vit": dict(hw=32, patch=8, layers=2, hidden=64, heads=2, ffn=128, classes=10),
    "resnet50": dict(hw=32, classes=10),
}


def _dims(value_info) -> list[int]:
    return [d.dim_value for d in value_info.type.tensor_type.shape.dim]


def _reference(model) -> tuple[dict, np.ndarray]:
    name, x = testing.random_input(model)
    return {name: x}, compare.onnxruntime_session(model, 1).run(None, {name: x})[0]


def _assert_close(y: np.ndarray, ref: np.ndarray) -> None:
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(ref).max()))


def test_bert_base_graph():
    m = testing.bert_encoder(layers=1, vocab=1000)
    assert m.graph.input[0].name == "input_ids" and _dims(m.graph.input[0]) == [1, 128]
    assert _dims(m.graph.output[0]) == [1, 128, 768]
    ops = {n.op_type for n in m.graph.node}
    assert {"Gather", "MatMul", "LayerNormalization", "Erf", "Softmax", "Transpose"} <= ops
    name, ids = testing.random_input(m)
    assert ids.dtype == np.int64 and 0 <= ids.min() and ids.max() < 1000


def test_vit_b16_graph():
    m = testing.vit(layers=1)
    assert _dims(m.graph.input[0]) == [1, 3, 224, 224] and _dims(m.graph.output[0]) == [1, 1000]
    patch = next(n for n in m.graph.node if n.op_type == "Conv")
    assert [a.ints for a in patch.attribute if a.name == "strides"] == [[16, 16]]
    ops = {n.op_type for n in m.graph.node}
    assert {"Expand", "Concat", "LayerNormalization", "Erf", "Gemm"} <= ops


def test_same_seed_same_transformer():
    kw = SMALL["vit"]
    assert testing.vit(**kw).SerializeToString() == testing.vit(**kw).SerializeToString()
    assert testing.vit(**kw).SerializeToString() != testing.vit(seed=1, **kw).SerializeToString()


def test_heads_must_divide_hidden():
    with pytest.raises(ValueError, match="not a multiple of the 5 heads"):
        testing.bert_encoder(hidden=32, heads=5)


def test_resnet50_has_bottlenecks():
    m = testing.resnet50(hw=32, classes=10)
    assert sum(n.op_type == "Conv" for n in m.graph.node) == 53  # stem, 16 x 3, 4 projections
    assert _dims(m.graph.output[0]) == [1, 10]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SMALL))
def test_small_models_match_onnxruntime(name):
    m = testing.get_model(name, **SMALL[name])
    feed, ref = _reference(m)
    _, y = build_and_run(m, feed)
    _assert_close(y, ref)


@pytest.mark.slow  # imports PyTorch
@pytest.mark.parametrize("name", ["bert_encoder", "vit"])
def test_onnx_to_torch_runs_the_transformers(name):
    torch = pytest.importorskip("torch")
    m = testing.get_model(name, **SMALL[name])
    feed, ref = _reference(m)
    with torch.no_grad():
        y = testing.onnx_to_torch(m)(*(torch.from_numpy(v) for v in feed.values())).numpy()
    _assert_close(y, ref)
