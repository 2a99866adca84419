"""torch.export.Dim through the PyTorch frontend: one compile, several shapes, against torch
eager (rtol 1e-4 / atol 1e-5); sizes outside a Dim's bounds; operators without a symbolic
shape function."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'ember[torch]')")

import ember  # noqa: E402
from ember.errors import ShapeFunctionMissingError, ShapeMismatchError  # noqa: E402
from ember.testing import torch_models as tm  # noqa: E402

Dim = torch.export.Dim


def _eager(m, args):
    with torch.no_grad():
        out = m(*args)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.numpy() for o in outs]


def _check_at(compiled, m, args):
    got = compiled.run({n: a.numpy() for n, a in zip(compiled.input_names, args)})
    want = _eager(m, args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(24, 64), torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x))).softmax(-1)


def test_mlp_dynamic_batch_and_seq_one_compile():
    torch.manual_seed(0)
    m = MLP().eval()
    dyn = {"x": {0: Dim("batch", min=1, max=8), 1: Dim("seq", max=128)}}
    c = ember.compile(m, example_inputs=(torch.randn(2, 5, 24),), dynamic_shapes=dyn)
    assert c.info["symbols"] == {"batch": [1, 8], "seq": [0, 128]}  # Dim min defaults to 0
    for b, t in [(1, 2), (2, 5), (8, 128), (3, 37)]:
        _check_at(c, m, (torch.randn(b, t, 24),))
    assert c.info["compile_count"] == 1
    with pytest.raises(ShapeMismatchError, match="batch"):
        c.run({"x": np.zeros((9, 5, 24), np.float32)})
    with pytest.raises(ShapeMismatchError, match="seq"):
        c.run({"x": np.zeros((2, 129, 24), np.float32)})


def test_bert_encoder_dynamic_batch_and_seq():
    m, (ids, mask) = tm.bert(seq=8, batch=2)
    batch, seq = Dim("batch", min=1, max=4), Dim("seq", min=2, max=32)
    dyn = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    c = ember.compile(m, example_inputs=(ids, mask), dynamic_shapes=dyn)
    assert c.info["symbols"] == {"batch": [1, 4], "seq": [2, 32]}
    g = torch.Generator().manual_seed(3)
    for b, t in [(1, 2), (2, 8), (4, 32), (3, 13)]:
        i = torch.randint(0, 64, (b, t), generator=g)
        mk = torch.ones(b, t, dtype=torch.int64)
        mk[:, t - max(t // 4, 1):] = 0
        _check_at(c, m, (i, mk))
    assert c.info["compile_count"] == 1
    with pytest.raises(ShapeMismatchError, match="seq"):  # two inputs disagree on seq
        c.run({"input_ids": np.zeros((1, 8), np.int64),
               "attention_mask": np.ones((1, 9), np.int64)})
    with pytest.raises(ShapeMismatchError, match="seq"):  # outside Dim("seq", max=32)
        c.run({"input_ids": np.zeros((1, 33), np.int64),
               "attention_mask": np.ones((1, 33), np.int64)})


@pytest.mark.slow(reason="a second whole-model symbolic compile (GPT-2-style, ~8 s)")
def test_gpt2_decoder_dynamic_seq_sliced_buffer():
    m, (ids,) = tm.gpt2(seq=8, batch=2)  # pos buffer sliced to seq, causal attention
    c = ember.compile(m, example_inputs=(ids,),
                      dynamic_shapes={"ids": {0: Dim("batch", max=4), 1: Dim("seq", max=16)}})
    g = torch.Generator().manual_seed(4)
    for b, t in [(1, 2), (2, 16), (3, 9)]:
        _check_at(c, m, (torch.randint(0, 64, (b, t), generator=g),))
    assert c.info["compile_count"] == 1


def test_symbol_names_from_dims_and_bounds_in_ir():
    m = MLP().eval()
    ep = torch.export.export(m, (torch.randn(3, 4, 24),),
                             dynamic_shapes={"x": {0: Dim("rows", min=1, max=64)}})
    mod, _ = ember.frontend.from_exported_program(
        ep, dynamic_shapes={"x": {0: Dim("rows", min=1, max=64)}})
    assert str(mod["main"].params[0].type) == "Tensor[(rows, 4, 24), float32]"
    assert mod["main"].attrs["symbol_bounds"] == {"rows": [1, 64]}
    mod2, _ = ember.frontend.from_exported_program(ep)  # without the spec: <input>_d<axis>
    assert str(mod2["main"].params[0].type) == "Tensor[(x_d0, 4, 24), float32]"


def test_op_without_shape_function_is_listed():
    class Conv(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)
            self.pool = torch.nn.MaxPool2d(2)

        def forward(self, x):
            return self.pool(self.conv(x)).flatten(1)

    with pytest.raises(ShapeFunctionMissingError) as e:
        ember.compile(Conv().eval(), example_inputs=(torch.randn(2, 3, 10, 10),),
                      dynamic_shapes={"x": {0: Dim("batch", max=8)}})
    assert "nn.conv" in e.value.ops and len(e.value.ops) >= 2  # conv and pooling, both listed
    assert "register_shape_func" in str(e.value)
