"""relay.frontend.from_pytorch: models written in plain PyTorch, traced (and scripted) with
TorchScript, imported, compiled by kiln and compared with PyTorch's own outputs; the
importer's errors (every unsupported operator listed at once) and TVM's options
(custom_convert_map, (shape, dtype) input infos, parser-friendly names)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import kiln  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402
from kiln.relay.graph import call, const  # noqa: E402

#: torch.jit is deprecated in favour of torch.export, but it is what classic TVM code imports
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


def _trace(net: nn.Module, *xs):
    """``torch.jit.trace`` without its check (running the model again, most of its time)."""
    return torch.jit.trace(net, xs, check_trace=False)


def _compile_and_run(mod, params, feed: dict) -> list[np.ndarray]:
    with relay.build_config(opt_level=3):
        lib = relay.build(mod, "llvm", params=params)
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    gm.set_input(**feed)
    gm.run()
    return [gm.get_output(i).numpy() for i in range(gm.get_num_outputs())]


def _eval_with_stats(net: nn.Module) -> nn.Module:
    """``net`` in eval mode, its batch norms with non-trivial statistics and affine terms."""
    torch.manual_seed(0)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    return net.eval()


def _check(net: nn.Module, *shapes, script: bool = False):
    """Trace (or script) ``net``, import it, and compare kiln's outputs with PyTorch's."""
    torch.manual_seed(1)
    xs = [torch.randn(*s) for s in shapes]
    with torch.no_grad():
        ref = net(*xs)
        sm = torch.jit.script(net) if script else _trace(net, *xs)
    refs = [r.numpy() for r in (ref if isinstance(ref, tuple) else (ref,))]
    names = [f"x{i}" for i in range(len(xs))]
    mod, params = relay.frontend.from_pytorch(sm, list(zip(names, shapes, strict=True)))
    outs = _compile_and_run(mod, params, {n: x.numpy() for n, x in zip(names, xs,
                                                                        strict=True)})
    assert len(outs) == len(refs)
    for y, r in zip(outs, refs, strict=True):
        assert y.shape == r.shape
        np.testing.assert_allclose(y, r, rtol=1e-4, atol=1e-5)
    return mod, params


@pytest.mark.parametrize("script", [False, True], ids=["traced", "scripted"])
def test_mlp(script):
    net = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 16),
                        nn.Tanh(), nn.Linear(16, 5), nn.Softmax(dim=1)).eval()
    _, params = _check(net, (4, 20), script=script)
    assert set(params) == {f"{i}.{w}" for i in (0, 3, 5) for w in ("weight", "bias")}


class _SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(2)
        self.avg = nn.AvgPool2d(3, stride=1, padding=1)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = self.avg(torch.relu(self.bn2(self.conv2(x))))
        x = self.gap(x)
        return self.fc(x.view(x.size(0), -1))


@pytest.mark.slow  # each model test compiles its kernels: about 1 s, more under load
@pytest.mark.parametrize("script", [False, True], ids=["traced", "scripted"])
def test_small_cnn_conv_bn_relu_pool_linear(script):
    mod, _ = _check(_eval_with_stats(_SmallCNN()), (2, 3, 16, 16), script=script)
    assert "conv2d" in mod.astext() and "global_avg_pool2d" in mod.astext()


class _BasicBlock(nn.Module):
    """ResNet's basic block, with its in-place ReLUs and ``out += identity``."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


@pytest.mark.slow
def test_residual_block():
    net = nn.Sequential(_BasicBlock(8, 16, 2), _BasicBlock(16, 16, 1))
    _check(_eval_with_stats(net), (1, 8, 12, 12))


class _DepthwiseSeparable(nn.Module):
    """MobileNet's block: 1x1 expansion, 3x3 depthwise (groups = channels), ReLU6, 1x1
    projection, residual add."""

    def __init__(self, c, expand):
        super().__init__()
        h = c * expand
        self.block = nn.Sequential(
            nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(inplace=True),
            nn.Conv2d(h, h, 3, 1, 1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return x + self.block(x)


@pytest.mark.slow
def test_mobilenet_depthwise_block():
    net = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.Hardtanh(0.0, 6.0), _DepthwiseSeparable(8, 4),
                        nn.Conv2d(8, 8, 3, 1, 1, groups=4), nn.ReLU())
    mod, _ = _check(_eval_with_stats(net), (1, 3, 16, 16))
    assert "groups=32" in mod.astext() and "groups=4" in mod.astext()


class _Ops(nn.Module):
    """The remaining operators, each once: scalar arithmetic, cat, permute/transpose, mean,
    gelu (both forms), clamp, slicing, squeeze/unsqueeze, flatten, addmm and matmul."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 5))
        self.b = nn.Parameter(torch.randn(5))

    def forward(self, x, y):
        a = torch.cat([torch.sigmoid(x), F.gelu(x), F.gelu(x, approximate="tanh")], dim=1)
        a = (a - 0.5) / 2.0 * 3 + 1
        a = torch.clamp(a, min=-1.0, max=2.5)
        a = F.leaky_relu(F.avg_pool2d(a, 2, ceil_mode=True, count_include_pad=False), 0.1)
        m = a.mean(dim=(2, 3))  # [N, 6]
        t = a.permute(0, 2, 3, 1).contiguous().transpose(1, 2)
        t = t.reshape(t.size(0), -1, 6)[:, 1:5].flatten(1)  # [N, 24]
        h = torch.addmm(self.b, m, self.w).unsqueeze(1).squeeze(1)
        return torch.matmul(m, y) + torch.tanh(h[:, 0:1]), t * x.size(1), x[:, 1]


@pytest.mark.slow
def test_operators_and_multiple_outputs():
    _check(_Ops().eval(), (2, 2, 5, 5), (6, 3))


def test_every_unsupported_operator_is_listed_at_once():
    class Net(nn.Module):
        def forward(self, x):
            y = torch.cumsum(x, 1)
            return torch.flip(F.layer_norm(y, [4]), [0]) + torch.relu(x)

    sm = _trace(Net(), torch.randn(2, 4))
    with pytest.raises(NotImplementedError) as e:
        relay.frontend.from_pytorch(sm, [("x", (2, 4))])
    for op in ("aten::cumsum", "aten::flip", "aten::layer_norm"):
        assert op in str(e.value)
    assert "aten::relu" not in str(e.value)


def test_custom_convert_map_extends_the_operators():
    class Net(nn.Module):
        def forward(self, x):
            return torch.neg(x) + 1

    def neg(inputs, input_types):
        assert input_types == ["float32"]
        return call("multiply", [inputs[0], const(np.array(-1, "float32"))])

    sm = _trace(Net(), torch.randn(3, 4))
    mod, params = relay.frontend.from_pytorch(sm, [("x", ((3, 4), "float32"))],
                                              custom_convert_map={"aten::neg": neg})
    x = np.random.default_rng(0).standard_normal((3, 4)).astype("float32")
    (y,) = _compile_and_run(mod, params, {"x": x})
    np.testing.assert_allclose(y, 1 - x, rtol=1e-6)


def test_parser_friendly_parameter_names():
    sm = _trace(nn.Sequential(nn.Linear(3, 2)), torch.randn(1, 3))
    _, params = relay.frontend.from_pytorch(sm, [("x", (1, 3))],
                                            use_parser_friendly_name=True)
    assert set(params) == {"0_weight", "0_bias"}


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_batch_norm_in_training_mode_is_rejected():
    sm = _trace(nn.BatchNorm2d(3).train(), torch.randn(2, 3, 4, 4))
    with pytest.raises(NotImplementedError, match=r"aten::batch_norm .*model\.eval\(\)"):
        relay.frontend.from_pytorch(sm, [("x", (2, 3, 4, 4))])


def test_input_infos_are_checked():
    sm = _trace(nn.ReLU(), torch.randn(2))
    with pytest.raises(ValueError, match="forward takes 1 inputs"):
        relay.frontend.from_pytorch(sm, [("a", (2,)), ("b", (2,))])
    with pytest.raises(ValueError, match="positive integers"):
        relay.frontend.from_pytorch(sm, [("a", (0,))])
    with pytest.raises(TypeError, match=r"torch\.jit\.trace"):
        relay.frontend.from_pytorch(nn.ReLU(), [("a", (2,))])
