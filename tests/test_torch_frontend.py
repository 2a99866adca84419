"""The PyTorch frontend: ember.compile(module, example_inputs), torch.compile(backend="ember"),
from_exported_program, custom operators, TorchScript, and its errors. Every numeric check is
against torch eager at rtol 1e-4 / atol 1e-5."""

import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'ember[torch]')")

import ember  # noqa: E402
from ember.errors import (InputError, ShapeMismatchError, TorchExportError,  # noqa: E402
                          UnsupportedOpError)
from ember.frontend.torch import ember_backend  # noqa: E402
from ember.frontend.torch.dynamo import EmberFallbackWarning  # noqa: E402
from ember.testing import torch_models as tm  # noqa: E402

from webgpu_util import needs_adapter  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RTOL, ATOL = 1e-4, 1e-5
# whole models whose compile takes several seconds each run only with --runslow; the default
# run keeps a transformer and a CNN through ember.compile and the CNN through torch.compile
QUICK = {"ember.compile": {"gpt2", "unet"}, "torch.compile": {"unet"}}


def _flat(out):
    return [out] if isinstance(out, torch.Tensor) else list(out)


def _eager(m, args):
    with torch.no_grad():
        return [t.numpy() for t in _flat(m(*args))]


def _check(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=RTOL, atol=ATOL)


def _models(door: str):
    for name in tm.MODELS:
        marks = [] if name in QUICK[door] else [pytest.mark.slow(reason="a whole model")]
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", list(_models("ember.compile")))
def test_model_ember_compile(name):
    m, args = tm.MODELS[name]()
    c = ember.compile(m, example_inputs=args)
    import inspect
    assert c.input_names == list(inspect.signature(m.forward).parameters)
    _check(c.run([a.numpy() for a in args]), _eager(m, args))


@pytest.mark.parametrize("name", list(_models("torch.compile")))
def test_model_torch_compile(name):
    m, args = tm.MODELS[name]()
    graphs = []

    def backend(gm, ex, **kw):
        r = ember_backend(gm, ex, **kw)
        graphs.append(r)
        return r

    torch._dynamo.reset()
    with warnings.catch_warnings(), torch._dynamo.config.patch(allow_rnn=True):
        warnings.simplefilter("error", EmberFallbackWarning)
        with torch.no_grad():
            got = _flat(torch.compile(m, backend=backend)(*args))
    assert graphs and all(type(g).__name__ == "EmberGraph" for g in graphs)
    assert all(isinstance(t, torch.Tensor) for t in got)
    _check([t.numpy() for t in got], _eager(m, args))


class OpSoup(torch.nn.Module):
    """Views, indexing, in-place ops, promotion, reductions and pooling forms in one graph."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 6, 3, padding=2, dilation=2, groups=2)
        self.convt = torch.nn.ConvTranspose1d(6, 4, 3, stride=2, padding=1, groups=2)
        self.gn = torch.nn.GroupNorm(2, 6)
        self.register_buffer("idx", torch.tensor([3, 0, 2]))

    def forward(self, x, n):
        y = self.gn(self.conv(x))                       # (2, 6, 8)
        y = F_relu_(y.clone())
        z = self.convt(y)                               # (2, 4, 15)
        a = z[:, 1:, ::2].flip(-1).permute(2, 0, 1)     # slice with step, flip, permute
        b = torch.cat([a, a * 2], dim=-1).reshape(8, -1).t().unsqueeze(0)
        c = torch.nn.functional.pad(b, (1, 2, 0, -1), value=0.5)
        d = c.select(1, -1) + c[..., self.idx].sum(-1)  # select, index with a tensor
        e = torch.where(d > 0, d, 0.1 * d).amax(-1, keepdim=True)
        f = x.var(dim=-1, keepdim=True) + x.std(-1, keepdim=True) + x.mean()
        g = (n * 2 + 1) // 3 + n.float() / 2            # int arithmetic and promotion
        h = torch.nn.functional.max_pool1d(x, 3, 2, ceil_mode=True)
        i = torch.nn.functional.avg_pool1d(x, 3, 2, padding=1, count_include_pad=False)
        j = torch.nn.functional.adaptive_avg_pool1d(x, 4)
        k = x.argmax(-1).float() + torch.cumsum(x, 1).tril()[..., 0:1].sum((1, 2))[:, None]
        return e, f, g, h, i, j, k, torch.stack([x[0], x[1]], 1).expand(2, 4, 2, 8).sum(0)


def F_relu_(t):
    return t.relu_().add_(1.0)


def test_op_coverage_module():
    m = OpSoup().eval()
    torch.manual_seed(1)
    args = (torch.randn(2, 4, 8), torch.arange(6).reshape(2, 3))
    c = ember.compile(m, example_inputs=args)
    assert c.input_names == ["x", "n"]
    _check(c.run([a.numpy() for a in args]), _eager(m, args))


class ModelOps(torch.nn.Module):
    """What models use after decomposition, in one graph: interpolate (nearest by factor and by
    size, bilinear with and without align_corners, bicubic: two-tensor indexing), advanced
    indexing (adjacent and split index tensors), index_put (x[i] = v, +=, x[:, i] = v, a mask
    with one value), attention with boolean and float masks, embedding, a bidirectional GRU,
    in-place ops on intermediates and a buffer."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(11, 6)
        self.gru = torch.nn.GRU(6, 5, batch_first=True, bidirectional=True)
        self.register_buffer("rows", torch.tensor([2, 0, -1]))

    def forward(self, x, ids, keep):
        F = torch.nn.functional
        up = [F.interpolate(x, scale_factor=2, mode="nearest"),
              F.interpolate(x, size=(7, 11), mode="nearest"),
              F.interpolate(x, size=(9, 4), mode="bilinear"),
              F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
              F.interpolate(x, scale_factor=2, mode="bicubic")]
        flat = torch.cat([u.flatten(1) for u in up], 1)              # (1, n)
        a = x[0, self.rows, 1:3][:, :, self.rows[:2]]                 # index, adjacent
        b = x[0, :, self.rows, torch.tensor([0, 3, 4])]               # two tensors, in place
        c = x[self.rows[1:2], :, torch.tensor([1]), torch.tensor([2])]  # split -> first
        y = x.clone()
        y[0, self.rows] = 0.5                                         # index_put
        y[:, :, torch.tensor([1, 1])] += 1.0                          # accumulate, None slot
        y[y > 1.2] = -1.0                                             # mask, one value
        h, _ = self.gru(self.emb(ids))                                # (1, 4, 10)
        h = h.relu_()
        h.mul_(2).add_(-0.5)
        q = h.view(1, 2, 4, 5)
        bool_mask = keep[None, None, None, :].bool()
        o1 = F.scaled_dot_product_attention(q, q, q, attn_mask=bool_mask)
        o2 = F.scaled_dot_product_attention(q, q, q, attn_mask=(keep[None, :].float() - 1) * 9)
        return flat, a, b, c, y, o1 + o2


def _model_ops_args():
    torch.manual_seed(3)
    return (torch.randn(1, 3, 5, 6), torch.tensor([[1, 4, 10, 0]]), torch.tensor([1, 1, 0, 1]))


def test_model_ops_ember_compile():
    m, args = ModelOps().eval(), _model_ops_args()
    c = ember.compile(m, example_inputs=args)
    _check(c.run([a.numpy() for a in args]), _eager(m, args))


@pytest.mark.slow(reason="a second compile of the ModelOps graph, through torch.compile")
def test_model_ops_torch_compile():
    m, args = ModelOps().eval(), _model_ops_args()
    torch._dynamo.reset()
    with warnings.catch_warnings(), torch._dynamo.config.patch(allow_rnn=True):
        warnings.simplefilter("error", EmberFallbackWarning)
        with torch.no_grad():
            got = _flat(torch.compile(m, backend=ember_backend)(*args))
    _check([t.numpy() for t in got], _eager(m, args))


class NormSortScatter(torch.nn.Module):
    """Instance norm and batch norm without running statistics (batch statistics),
    F.normalize / vector norms (p = 2, 1, 3), topk, sort (descending), cumprod, scatter
    (src, scalar value, add)."""

    def __init__(self):
        super().__init__()
        self.inorm = torch.nn.InstanceNorm2d(3, affine=True)
        self.bn = torch.nn.BatchNorm2d(3, track_running_stats=False)

    def forward(self, x, v, i):
        F = torch.nn.functional
        a = self.inorm(x) + self.bn(x)
        b = F.normalize(v, dim=-1) + torch.linalg.vector_norm(v, ord=1, dim=0) + \
            v.norm(p=3, dim=1, keepdim=True)
        t, ti = torch.topk(v, 2, dim=-1)
        s, si = torch.sort(v, dim=0, descending=True)
        z = torch.zeros(4, 6)
        d = z.scatter(0, i, v[:2]) + z.scatter_add(1, i, v[:2]) + z.scatter(1, i, 2.0)
        return a, b, t, ti, s, si, torch.cumprod(v, 1), d


def test_norm_sort_scatter_ops():
    torch.manual_seed(0)
    m = NormSortScatter().eval()
    args = (torch.randn(2, 3, 4, 5), torch.randn(4, 6),
            torch.tensor([[0, 1, 2, 3, 3, 1], [1, 0, 3, 2, 2, 0]]))
    c = ember.compile(m, example_inputs=args)
    _check(c.run([a.numpy() for a in args]), _eager(m, args))


class MaskSelect(torch.nn.Module):
    def forward(self, x):
        y = torch.tanh(x) * 3
        return y[y > 0].sum() + x.mean()    # boolean-mask indexing: data-dependent shape


def test_boolean_mask_indexing_is_one_clear_error():
    with pytest.raises(UnsupportedOpError) as ei:
        ember.compile(MaskSelect(), example_inputs=(torch.randn(4, 5),))
    msg = str(ei.value)
    assert "depends on run-time values" in msg and "aten.index.Tensor" in msg
    assert "test_torch_frontend.py" in msg and "y[y > 0]" in msg       # the source line
    assert "torch.where" in msg and "backend='ember'" in msg


def test_boolean_mask_indexing_in_torch_compile_does_not_crash():
    m, x = MaskSelect(), torch.randn(4, 5)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmberFallbackWarning)
        with torch.no_grad():
            got = torch.compile(m, backend=ember_backend)(x)
    _check([got.numpy()], _eager(m, (x,)))


def test_params_keep_qualified_names():
    m, args = tm.resnet()
    mod, params = ember.frontend.from_exported_program(torch.export.export(m, args))
    sd = m.state_dict()
    assert "blocks.0.conv1.weight" in params and "fc.weight" in params
    np.testing.assert_array_equal(params["blocks.0.conv1.weight"],
                                  sd["blocks.0.conv1.weight"].numpy())
    assert [p.name for p in mod.main.params][0] == "x"


class TwoUnsupported(torch.nn.Module):
    def forward(self, x):
        y = torch.special.erfinv(x * 0.5)
        return torch.atan2(y, x + 2)


def test_unsupported_ops_listed_at_once():
    x = torch.rand(2, 3)
    with pytest.raises(UnsupportedOpError) as ei:
        ember.compile(TwoUnsupported(), example_inputs=(x,))
    msg = str(ei.value)
    assert "aten.erfinv.default" in msg and "aten.atan2.default" in msg
    assert "test_torch_frontend.py" in msg and "torch.special.erfinv" in msg  # source lines
    assert "register_converter" in msg and "register_op" in msg
    assert ei.value.ops == ["aten.atan2.default", "aten.erfinv.default"]


class DataDependent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:      # Python control flow on a tensor value
            return torch.relu(y) * 2
        return y - 1


def test_export_failure_is_typed():
    with pytest.raises(TorchExportError) as ei:
        ember.compile(DataDependent().eval(), example_inputs=(torch.randn(2, 4),))
    assert "torch.export could not trace DataDependent" in str(ei.value)
    assert "torch.compile(module, backend='ember')" in str(ei.value)
    assert ei.value.torch_error is not None


def test_data_dependent_control_flow_graph_breaks():
    m = DataDependent().eval()
    graphs = []

    def backend(gm, ex, **kw):
        graphs.append(ember_backend(gm, ex, **kw))
        return graphs[-1]

    torch._dynamo.reset()
    cm = torch.compile(m, backend=backend)
    with torch.no_grad():
        for s in (1.0, -1.0):  # both branches
            x = s * torch.ones(2, 4) * 3
            m.fc.bias.fill_(s)
            _check([cm(x).numpy()], _eager(m, (x,)))
    assert len(graphs) >= 2 and all(type(g).__name__ == "EmberGraph" for g in graphs)


def test_unsupported_op_in_torch_compile_runs_eagerly_with_warning():
    torch._dynamo.reset()
    x = torch.rand(2, 3)
    with pytest.warns(EmberFallbackWarning, match="aten.erfinv.default"):
        with torch.no_grad():
            got = torch.compile(TwoUnsupported(), backend=ember_backend)(x)
    _check([got.numpy()], _eager(TwoUnsupported(), (x,)))


def test_weight_update_rebuilds_graph():
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()).eval()
    graphs = []

    def backend(gm, ex, **kw):
        graphs.append(ember_backend(gm, ex, **kw))
        return graphs[-1]

    torch._dynamo.reset()
    cm = torch.compile(m, backend=backend)
    x = torch.randn(3, 8)
    with torch.no_grad():
        cm(x)
        m[0].weight.mul_(-2.0)
        got = cm(x)
    _check([got.numpy()], _eager(m, (x,)))
    assert graphs[-1].builds == 2


def test_dynamic_shapes_refused_for_torchscript():
    # torch.export.Dim sizes are compiled symbolically (tests/test_torch_dynamic.py); a
    # ScriptModule goes through the TorchScript ONNX exporter, which takes no Dim spec
    m = torch.jit.script(torch.nn.Linear(4, 2).eval())
    with pytest.raises(ShapeMismatchError, match="torch.jit.ScriptModule"):
        ember.compile(m, example_inputs=(torch.randn(3, 4),),
                      dynamic_shapes={"input": {0: torch.export.Dim("b")}})


def test_missing_example_inputs():
    with pytest.raises(InputError, match="example_inputs"):
        ember.compile(torch.nn.ReLU())


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("n", torch.zeros(1))

    def forward(self, x):
        self.n.add_(1)
        return x + self.n


def test_buffer_mutation_is_refused():
    with pytest.raises(UnsupportedOpError, match="mutates 'n'"):
        ember.compile(Counter(), example_inputs=(torch.randn(2),))


def test_torchscript_module_through_onnx():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5)).eval()
    x = torch.randn(1, 3, 6, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        s = torch.jit.script(m)
        c = ember.compile(s, example_inputs=(x,))
    assert c.info["frontend"] == "torchscript-onnx"
    _check(c.run([x.numpy()]), _eager(m, (x,)))


def _tutorial_blocks() -> list[str]:
    text = (ROOT / "docs" / "torch.md").read_text()
    sec = text.split("## Tutorial: a custom operator on every target")[1].split("\n## ")[0]
    return [b.split("```")[0] for b in sec.split("```python")[1:]]


def _unregister_tutorial_ops():
    from ember.frontend.torch import unregister_op
    for q in ("mylib::gated_swish", "mylib::qconv2d_relu"):
        unregister_op(q)


@needs_adapter
def test_custom_op_tutorial_in_docs():
    """Both tutorial blocks as written: the float op on CPU and WebGPU, the int8 op bit-exact
    on CPU, WebGPU and the NPU (through ember.compile and torch.compile)."""
    g = {"__name__": "tutorial"}
    try:
        for block in _tutorial_blocks():
            exec(compile(block, "docs/torch.md", "exec"), g)
    finally:  # rerunnable in one process
        _unregister_tutorial_ops()
    assert g["report"]["fallback"] == [] and g["report"]["cycles"] > 0


@pytest.fixture
def qconv():
    """The tutorial's int8 ``mylib::qconv2d_relu`` registered (its definitions only), with the
    names of the block's namespace; unregistered afterwards."""
    block = _tutorial_blocks()[1]
    g = {"__name__": "tutorial"}
    exec(compile("import numpy as np\nimport torch\nimport ember\n"
                 "from ember.frontend.torch import register_op\n" +
                 block.split("net = QNet().eval()")[0], "docs/torch.md", "exec"), g)
    try:
        yield g
    finally:
        _unregister_tutorial_ops()


def _int8(shape, seed):
    return torch.randint(-128, 128, shape, dtype=torch.int8,
                         generator=torch.Generator().manual_seed(seed))


class QLayers(torch.nn.Module):
    """Three qconv2d_relu layers: NPU-runnable, shift 1 (the NPU's ALU refuses it), and one
    whose weight is a run-time input (not a constant)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("w1", _int8((20, 5, 3, 3), 2))
        self.register_buffer("b1", torch.randint(-999, 999, (20,), dtype=torch.int32,
                                                 generator=torch.Generator().manual_seed(3)))
        self.register_buffer("w2", _int8((16, 20, 1, 1), 4))
        self.register_buffer("b2", torch.zeros(16, dtype=torch.int32))

    def forward(self, x, w3):
        q = torch.ops.mylib.qconv2d_relu
        h = q(x, self.w1, self.b1, 2, 2, 7, 13)       # stride 2, pad 2, channel tails
        h = q(h, self.w2, self.b2, 1, 0, 3, 1)         # shift 1: CPU fallback
        return q(h, w3, self.b2, 1, 1, 2, 12)          # weight at run time: CPU


def test_custom_int8_op_npu_offload_and_fallbacks(qconv):
    from ember import npu
    m = QLayers().eval()
    x, w3 = _int8((1, 5, 11, 9), 5), _int8((16, 16, 3, 3), 6)
    want = m(x, w3).numpy()
    # the integer NumPy reference, layer by layer, agrees with torch's implementation
    ref = npu.reference.conv2d_int8
    h = ref(x.numpy(), m.w1.numpy(), m.b1.numpy(), (2, 2), (2,) * 4, 7, 13, relu=True)
    h = ref(h, m.w2.numpy(), m.b2.numpy(), (1, 1), (0,) * 4, 3, 1, relu=True)
    h = ref(h, w3.numpy(), m.b2.numpy(), (1, 1), (1,) * 4, 2, 12, relu=True)
    np.testing.assert_array_equal(h, want)
    assert 0 < (want > 0).mean() < 1
    cpu = ember.compile(m, example_inputs=(x, w3))
    np.testing.assert_array_equal(cpu.run([x.numpy(), w3.numpy()])[0], want)
    n = ember.compile(m, example_inputs=(x, w3), target="npu")
    np.testing.assert_array_equal(n.run({"x": x.numpy(), "w3": w3.numpy()})[0], want)
    rep = n.info["npu"]
    assert [r["layer"] for r in rep["layers"]] == ["qconv2d_relu"]
    assert rep["layers"][0]["shape"] == "conv 5x11x9 -> 20x7x6 k3x3 s2"
    reasons = [f["reason"] for f in rep["fallback"]]
    assert len(reasons) == 2 and "shift of 1" in reasons[0] and "constant" in reasons[1]


def test_custom_op_npu_lowering_of_wrong_shape_is_an_error(qconv):
    from ember import npu
    from ember.frontend.torch import register_op

    def wrong(x_type, consts, attrs, cfg):  # forgets the padding
        return npu.lower_conv2d(consts[0], consts[1], input_shape=x_type.shape,
                                multiplier=attrs["multiplier"], shift=attrs["shift"],
                                relu=True, config=cfg)

    register_op("mylib::qconv2d_relu", compute=qconv["compute"], shape_func=qconv["shape_func"],
                reference=qconv["reference"], npu=wrong, override=True)
    m = QLayers().eval()
    with pytest.raises(ShapeMismatchError, match="NPU lowering of mylib.qconv2d_relu"):
        ember.compile(m, example_inputs=(_int8((1, 5, 11, 9), 5), _int8((16, 16, 3, 3), 6)),
                      target="npu")


def test_custom_int8_op_builds_for_cuda(qconv):
    """The same registration compiles to CUDA (PTX + an sm_90 cubin through NVRTC, no GPU
    needed); its numbers are checked where WebGPU runs the same GPU schedules (the tutorial)."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="the cuda extra (cuda-bindings, NVRTC) "
                        "is not installed")
    m = qconv["QNet"]().eval()
    c = ember.compile(m, example_inputs=(_int8((1, 8, 16, 16), 1),), target="nvidia/h200")
    assert c.info["archs"] == ["sm_90"] and c.info["num_launches"] >= 3


class ScriptQConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("w", _int8((16, 8, 3, 3), 7))
        self.register_buffer("b", torch.randint(-999, 999, (16,), dtype=torch.int32,
                                                generator=torch.Generator().manual_seed(8)))

    def forward(self, x):
        return torch.ops.mylib.qconv2d_relu(x, self.w, self.b, 2, 1, 3, 12)


def test_custom_op_in_torchscript_reaches_cpu_and_npu(qconv):
    """A ScriptModule calling the custom operator: torch's TorchScript ONNX exporter writes it
    as a node of the custom domain 'mylib' (register_op's ONNX symbolic), ember's ONNX frontend
    maps it to the same registration; bit-exact on the CPU and offloaded to the NPU."""
    m, x = ScriptQConv().eval(), _int8((1, 8, 16, 16), 9)
    want = m(x).numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        s = torch.jit.script(m)
        cpu = ember.compile(s, example_inputs=(x,))
        n = ember.compile(s, example_inputs=(x,), target="npu")
    assert cpu.info["frontend"] == "torchscript-onnx"
    np.testing.assert_array_equal(cpu.run([x.numpy()])[0], want)
    np.testing.assert_array_equal(n.run([x.numpy()])[0], want)
    assert len(n.info["npu"]["layers"]) == 1 and not n.info["npu"]["fallback"]


def test_npu_lowering_registry():
    from ember import npu
    assert "qnn.conv2d" in npu.lowered_ops()
    with pytest.raises(ValueError, match="already"):
        npu.register_lowering("qnn.conv2d", lambda *a: None)


def test_custom_op_wrong_shape_func_is_caught():
    from ember.frontend.torch import register_op
    from ember.graph.ir import TensorType
    from ember.ops.registry import _REGISTRY
    from ember.frontend.torch import registry

    @torch.library.custom_op("embertest::halve", mutates_args=())
    def halve(x: torch.Tensor) -> torch.Tensor:
        return x[..., ::2].clone()

    @halve.register_fake
    def _(x):
        return x.new_empty(x.shape[:-1] + (x.shape[-1] // 2,))

    register_op("embertest::halve", compute=lambda i, a, o: i[0],
                shape_func=lambda t, a: TensorType(t[0].shape, t[0].dtype))  # wrong shape
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.ops.embertest.halve(x)

    try:
        with pytest.raises(ShapeMismatchError, match="torch computes"):
            ember.compile(M(), example_inputs=(torch.randn(2, 4),))
    finally:
        _REGISTRY.pop("embertest.halve", None)
        registry._CONVERTERS.pop("embertest::halve", None)


def test_custom_op_undefined():
    from ember.frontend.torch import register_op
    with pytest.raises(UnsupportedOpError, match="custom_op"):
        register_op("nosuchlib::op", compute=None, shape_func=lambda t, a: t[0])


def test_dynamo_entry_point_declared():
    import importlib
    import tomllib
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())
    ep = spec["project"]["entry-points"]["torch_dynamo_backends"]["ember"]
    mod, _, fn = ep.partition(":")
    assert getattr(importlib.import_module(mod), fn) is ember_backend


def test_backend_name_registered_when_installed():
    from importlib import metadata
    eps = [e for e in metadata.entry_points(group="torch_dynamo_backends") if e.name == "ember"]
    if not eps:
        pytest.skip("the installed ember distribution has no torch_dynamo_backends entry "
                    "point (installed before it was added: reinstall with pip install -e .)")
    import torch._dynamo
    assert "ember" in torch._dynamo.list_backends()
    m = torch.nn.Linear(3, 2).eval()
    x = torch.randn(1, 3)
    torch._dynamo.reset()
    with torch.no_grad():
        _check([torch.compile(m, backend="ember")(x).numpy()], _eager(m, (x,)))
