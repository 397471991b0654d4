"""``torch.compile(model, backend="kiln")``: a BERT-style encoder layer and a ViT-style block
(tiny sizes, plain PyTorch) and the models benchmark's ResNet-18, BERT and ViT (small
configurations) compiled by kiln match eager PyTorch; new shapes recompile; parameters and
buffers are frozen; aligned inputs are read in place (DLPack, no copy); a graph kiln cannot
compile runs eagerly after one log line naming the operator."""

import logging
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from torch import nn  # noqa: E402

from kiln.relay.frontend import torch_compile  # noqa: E402  (registers backend="kiln")


class EncoderLayer(nn.Module):
    """BERT's encoder layer (post-norm): masked multi-head self-attention, then an exact
    GELU feed-forward, each with a residual and a LayerNorm."""

    def __init__(self, d: int = 32, heads: int = 4, ff: int = 64) -> None:
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff1, self.ff2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def split(self, x):
        b, n, _ = x.shape
        return x.view(b, n, self.heads, self.dh).transpose(1, 2)

    def forward(self, x, mask):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        a = q @ k.transpose(-1, -2) / math.sqrt(self.dh)
        a = a.masked_fill(mask[:, None, None, :] == 0, -1e4).softmax(-1) @ v
        b, _, n, _ = a.shape
        x = self.ln1(x + self.o(a.transpose(1, 2).reshape(b, n, -1)))
        return self.ln2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


class ViTBlock(nn.Module):
    """A ViT: patch embedding (a strided convolution), a class token and position
    embeddings, one pre-norm block (fused QKV projection split in three, tanh GELU MLP),
    the class token's logits."""

    def __init__(self, d: int = 32, heads: int = 2, patch: int = 4, image: int = 16,
                 classes: int = 10) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Conv2d(3, d, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, d))
        self.ln1, self.ln2, self.ln = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU("tanh"), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, classes)

    def forward(self, img):
        x = self.embed(img).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, -1)
        q, k, v = (t.reshape(b, n, self.heads, -1).permute(0, 2, 1, 3) for t in (q, k, v))
        a = torch.softmax(q @ k.transpose(-2, -1) * (d // self.heads) ** -0.5, -1) @ v
        x = x + self.proj(a.permute(0, 2, 1, 3).reshape(b, n, d))
        x = x + self.mlp(self.ln2(x))
        return self.head(self.ln(x)[:, 0])


def _close(compiled, model, *args):
    with torch.no_grad():
        torch.testing.assert_close(compiled(*args), model(*args), rtol=1e-4, atol=1e-4)


@pytest.fixture
def compiled_by_kiln(caplog):
    """Fails the test when a graph ran eagerly (the backend logged a fallback)."""
    with caplog.at_level(logging.WARNING, logger="kiln.torch"):
        yield
    fallbacks = [r.getMessage() for r in caplog.get_records("call") if r.name == "kiln.torch"]
    assert fallbacks == []


def _mask(b: int, n: int):
    mask = torch.ones(b, n, dtype=torch.int64)
    mask[-1, n // 2:] = 0
    return mask


def test_backend_is_registered():
    assert "kiln" in torch._dynamo.list_backends()


def test_mlp_matches_eager(compiled_by_kiln):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).eval()
    torch._dynamo.reset()
    _close(torch.compile(model, backend="kiln"), model, torch.randn(3, 8))


def test_unsupported_operator_runs_eagerly_after_one_log_line(caplog):
    class CumSum(nn.Module):
        def forward(self, x):
            return torch.cumsum(x, 1) * 2

    torch._dynamo.reset()
    compiled = torch.compile(CumSum(), backend="kiln")
    x = torch.randn(2, 5)
    with caplog.at_level(logging.WARNING, logger="kiln.torch"):
        _close(compiled, CumSum(), x)
        _close(compiled, CumSum(), x)
    lines = [r.getMessage() for r in caplog.records if r.name == "kiln.torch"]
    assert len(lines) == 1 and "CumSum" in lines[0], lines


@pytest.mark.slow
def test_bert_encoder_layer_matches_eager_and_recompiles_on_new_shapes(compiled_by_kiln):
    torch.manual_seed(0)
    model = EncoderLayer().eval()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="kiln")
    for b, n in ((2, 8), (2, 12), (1, 5)):
        _close(compiled, model, torch.randn(b, n, 32), _mask(b, n))


@pytest.mark.slow
def test_vit_block_matches_eager(compiled_by_kiln):
    torch.manual_seed(0)
    model = ViTBlock().eval()
    torch._dynamo.reset()
    _close(torch.compile(model, backend="kiln"), model, torch.randn(2, 3, 16, 16))


def test_kiln_compiled_graph_caches_per_signature():
    torch.manual_seed(0)
    model = nn.Linear(4, 3).eval()
    gm = torch.fx.symbolic_trace(model)
    graph = torch_compile.kiln_backend(gm, [torch.randn(2, 4)])
    with torch.no_grad():
        for rows in (2, 5, 2):
            x = torch.randn(rows, 4)
            (y,) = graph(x)
            torch.testing.assert_close(y, model(x), rtol=1e-5, atol=1e-5)
    assert len(graph.compiled) == 2


def _compiled_linear(x):
    """A ``KilnCompiledGraph`` of ``nn.Linear(4, 3)`` called once on ``x``, its module."""
    model = nn.Linear(4, 3).eval()
    graph = torch_compile.kiln_backend(torch.fx.symbolic_trace(model), [x])
    with torch.no_grad():
        (y,) = graph(x)
        torch.testing.assert_close(y, model(x), rtol=1e-5, atol=1e-5)
    ((module, _),) = graph.compiled.values()
    return graph, module


def test_aligned_inputs_are_read_in_place():
    torch.manual_seed(0)
    x = torch.randn(2, 4)
    assert x.data_ptr() % 64 == 0  # torch's CPU allocator aligns to 64 bytes
    graph, module = _compiled_linear(x)
    assert torch.from_dlpack(module.get_input("input0")).data_ptr() == x.data_ptr()
    # a view that is not aligned (or not contiguous) is copied once, with the same result
    big = torch.randn(3, 4)
    graph(big[1:])
    assert torch.from_dlpack(module.get_input("input0")).data_ptr() != big.data_ptr()
    with torch.no_grad():
        torch.testing.assert_close(graph(big[1:])[0], graph(big[1:].clone())[0])


def test_set_input_after_zero_copy_does_not_write_the_callers_tensor():
    x = torch.randn(2, 4)
    _, module = _compiled_linear(x)
    before = x.clone()
    module.set_input("input0", np.ones((2, 4), np.float32))
    torch.testing.assert_close(x, before)
    assert torch.from_dlpack(module.get_input("input0")).data_ptr() != x.data_ptr()


def test_parameters_and_buffers_are_frozen():
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 3)
            self.register_buffer("scale", torch.full((3,), 2.0))

        def forward(self, x):
            return self.lin(x) * self.scale

    seen = []

    def spy(gm, example_inputs):
        graph = torch_compile.kiln_backend(gm, example_inputs)
        seen.append(graph)
        return graph

    model = Scaled().eval()
    torch._dynamo.reset()
    x = torch.randn(2, 4)
    _close(torch.compile(model, backend=spy), model, x)
    (graph,) = seen
    ((module, used),) = graph.compiled.values()
    assert len(graph.frozen) == 3 and module.get_num_inputs() == len(used) == 1


#: the models of kiln.relay.testing at test sizes (the benchmark runs them full size)
SMALL_MODELS = {
    "resnet18": {"hw": 32, "classes": 10},
    "bert_encoder": {"seq": 16, "layers": 2, "hidden": 64, "heads": 4, "ffn": 128,
                     "vocab": 100},
    "vit": {"hw": 32, "patch": 8, "layers": 2, "hidden": 64, "heads": 4, "ffn": 128,
            "classes": 10},
}


@pytest.mark.slow
@pytest.mark.parametrize("key", list(SMALL_MODELS))
def test_benchmark_models_compile_whole_and_match_eager(key, compiled_by_kiln):
    """ResNet-18, a small BERT encoder and a small ViT (kiln.relay.testing's, as the models
    benchmark runs them under ``torch.compile``): one graph, compiled by kiln, inputs read
    in place."""
    from kiln.relay import testing

    model = testing.get_model(key, **SMALL_MODELS[key])
    module = testing.onnx_to_fx(model)
    x = torch.from_numpy(testing.random_input(model)[1]).clone()  # torch-allocated: aligned
    seen = []

    def spy(gm, example_inputs):
        seen.append(torch_compile.kiln_backend(gm, example_inputs))
        return seen[-1]

    torch._dynamo.reset()
    compiled = torch.compile(module, backend=spy)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), module(x), rtol=1e-4, atol=1e-4)
    (graph,) = seen  # one graph: no graph break
    ((kiln_module, used),) = graph.compiled.values()
    assert torch.from_dlpack(kiln_module.get_input(f"input{used[0]}")).data_ptr() == \
        x.data_ptr()


def test_unsupported_operator_in_a_model_is_named_once(caplog):
    """A model whose graph holds an operator kiln's importer does not convert runs eagerly,
    after one log line naming it (here CumSum after a convolution)."""
    class ConvCumSum(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)

        def forward(self, x):
            return torch.cumsum(self.conv(x), 1)

    model = ConvCumSum().eval()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="kiln")
    x = torch.randn(1, 3, 8, 8)
    with caplog.at_level(logging.WARNING, logger="kiln.torch"):
        for _ in range(3):
            _close(compiled, model, x)
    lines = [r.getMessage() for r in caplog.records if r.name == "kiln.torch"]
    assert len(lines) == 1 and "CumSum" in lines[0], lines
