"""Attention's head transposes folded into the packed dense layers
(kiln.relay.head_layout): the kernels of small BERT and ViT layers (no copy kernel left for
the heads), their values against onnxruntime, and the cases the pass leaves alone."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from kiln.ir.transform import PassContext  # noqa: E402
from kiln.relay import frontend  # noqa: E402
from kiln.relay import transform as T  # noqa: E402
from kiln.relay.alter_layout import alter_op_layout  # noqa: E402
from kiln.relay.build_module import optimize_and_fuse  # noqa: E402
from kiln.relay.graph import Graph, call, const, input_node  # noqa: E402
from kiln.relay.head_layout import fold_head_transpose  # noqa: E402
from kiln.relay.testing import bert_encoder, random_input, vit  # noqa: E402
from kiln.target import Target  # noqa: E402

from .models import build_and_run  # noqa: E402

#: two layers (the second's input rewritten by the first's), head size 32: a whole number
#: of packed panels with AVX2 and AVX-512
BERT = dict(seq=16, layers=2, hidden=64, heads=2, ffn=128, vocab=50)
VIT = dict(hw=32, patch=8, layers=2, hidden=64, heads=2, ffn=128, classes=10)


def _kernels(model) -> list[str]:
    """The kernels ``relay.build`` compiles for the ONNX ``model`` (the front half only)."""
    with PassContext(opt_level=3):
        g, groups = optimize_and_fuse(*frontend.from_onnx(model), Target("llvm"))
    views = T.view_groups(groups, g)
    return [grp.describe() for grp in groups if grp.output.uid not in views]


@pytest.mark.parametrize("model, around", [(bert_encoder(batch=2, **BERT), 2), (vit(**VIT), 6)],
                         ids=["bert_batch2", "vit"])
def test_no_head_transpose_kernels(model, around):
    """Per layer: Q, K and V projections stored in the heads' layout (3), QK^T with its
    scale (1), softmax (1), PV (1), the output projection reading the heads (1), two layer
    norms (2) and the MLP (2): 11 kernels (15 with the four head transposes); ``around``
    the layers: BERT's embeddings (2), ViT's patch embedding (3) and head (3)."""
    kernels = _kernels(model)
    assert len(kernels) == 2 * 11 + around, kernels
    assert sum("transpose" in k for k in kernels) == (around == 6), kernels  # ViT's patches


def _attention_projection(units: int, heads: int) -> Graph:
    """``x [8, 64]`` -> dense + bias -> ``[1, 8, heads, units / heads]`` -> heads first."""
    rng = np.random.default_rng(0)
    x = input_node("x", (8, 64))
    y = call("add", [call("dense", [x, const(rng.standard_normal((units, 64), np.float32))]),
                     const(rng.standard_normal(units, np.float32))])
    split = call("reshape", [y], newshape=(1, 8, heads, units // heads))
    return Graph([x], [call("transpose", [split], axes=(0, 2, 1, 3))])


def test_a_head_size_off_the_panels_keeps_its_transpose():
    with Target("llvm"):
        g = fold_head_transpose(alter_op_layout(_attention_projection(64, 16)))  # head size 4
    assert [n.op for n in g.nodes if not (n.is_const or n.is_input)][-1] == "transpose"


def test_the_stored_epilogue_is_permuted():
    with Target("llvm"):
        g = fold_head_transpose(alter_op_layout(_attention_projection(64, 2)))
    dense, add = [n for n in g.nodes if not (n.is_const or n.is_input)]
    assert dense.attrs["out_layout"] == ((1, 8, 2, 32), (0, 2, 1, 3))
    assert add.shape == (1, 2, 8, 32) and add.inputs[1].shape == (1, 2, 1, 32)


@pytest.mark.slow  # compiles two small transformers
@pytest.mark.parametrize("model", [bert_encoder(batch=2, **BERT), vit(**VIT)],
                         ids=["bert_batch2", "vit"])
def test_small_transformers_match_onnxruntime(model):
    from kiln.relay.testing import compare

    name, x = random_input(model)
    ref = compare.onnxruntime_session(model, 1).run(None, {name: x})[0]
    _, y = build_and_run(model, {name: x})
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(ref).max()))
