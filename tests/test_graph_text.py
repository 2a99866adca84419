"""The graph IR's text form: print -> parse gives a structurally equal module (constants of every
dtype, quoted names, multi-output bindings, symbolic dims, calls between functions), printing
again gives the same text; malformed text raises ``IRParseError`` naming the line."""

import numpy as np
import pytest

from ember.errors import IRParseError
from ember.graph import FunctionBuilder, IRModule, TensorType, structural_equal
from ember.graph.ir import Binding, Call, Constant, Function, Var, normalize_attrs


def round_trip(mod: IRModule) -> IRModule:
    text = mod.text()
    back = IRModule.from_text(text)
    assert structural_equal(mod, back), f"not equal after parsing:\n{text}\n{back.text()}"
    assert back.text() == text
    return back


def module(bindings_fn, params):
    """A module from ``params`` ``[(name, type)]`` and a function of the param Vars returning
    ``(bindings, outputs)``."""
    ps = [Var(n, t) for n, t in params]
    bindings, outputs = bindings_fn(*ps)
    return IRModule.from_function(Function(ps, bindings, outputs, "main"))


def bind(op, args, out_types, names=None, **attrs):
    outs = tuple(Var(names[k] if names else f"v{id(args)}_{k}", t)
                 for k, t in enumerate(out_types))
    return Binding(outs, Call(op, tuple(args), normalize_attrs(attrs)))


F32 = TensorType((2, 3), "float32")


CONSTANTS = {
    "float32 specials": np.array([1.5, -0.0, np.nan, np.inf, -np.inf, 1e-45, 3.4028235e38],
                                 np.float32),
    "float32 pi": np.float32(np.pi).reshape(()),
    "float64": np.array([[np.pi, -1e-300], [1e300, 0.1]], np.float64),
    "float16": np.array([0.1, 65504, -2.0], np.float16),
    "int64 extremes": np.array([2**63 - 1, -2**63, 0], np.int64),
    "int32": np.arange(-3, 3, dtype=np.int32).reshape(2, 3),
    "int8": np.array([-128, 127], np.int8),
    "uint8": np.array([0, 255], np.uint8),
    "uint64 big": np.array([2**64 - 1], np.uint64),
    "bool": np.array([[True, False]]),
    "empty": np.zeros((0, 3), np.float32),
    "scalar int": np.int64(7).reshape(()),
}


@pytest.mark.parametrize("name", sorted(CONSTANTS))
def test_constants_round_trip(name):
    c = Constant(CONSTANTS[name])

    def body(x):
        b = bind("add", [x, c], [x.type], names=["y"])
        return [b], [b.outputs[0], Constant(CONSTANTS[name])]
    mod = module(body, [("x", TensorType(c.type.shape, c.type.dtype))])
    back = round_trip(mod)
    got = back.main.bindings[0].call.args[1].data
    assert got.dtype == c.data.dtype and got.shape == c.data.shape
    np.testing.assert_array_equal(got, c.data)
    if c.data.dtype.kind == "f":  # signs of zeros survive too
        assert np.array_equal(np.signbit(got), np.signbit(c.data))


@pytest.mark.parametrize("name", ["gpu_0/data_0", "with space", 'quote"inside', "back\\slash",
                                  "comma,paren)", "ünïcode", "a = b", "123abc", "x:y", "%pct",
                                  "#hash", "semi;colon", "brace}{", "dots.are.plain"])
def test_quoted_names_round_trip(name):
    def body(x):
        b = bind("nn.relu", [x], [x.type], names=[name + "_out"])
        return [b], [b.outputs[0]]
    back = round_trip(module(body, [(name, F32)]))
    assert back.main.params[0].name == name
    assert back.main.bindings[0].outputs[0].name == name + "_out"


def test_multi_output_binding_round_trip():
    def body(x):
        t1, t2 = TensorType((2, 1), "float32"), TensorType((2, 2), "float32")
        b = bind("split", [x], [t1, t2], names=["a", "b"], axis=1, split=[1, 2])
        c = bind("concatenate", [b.outputs[1], b.outputs[0]], [F32], names=["c"], axis=1)
        return [b, c], [c.outputs[0], b.outputs[0]]
    back = round_trip(module(body, [("x", F32)]))
    b0 = back.main.bindings[0]
    assert [o.name for o in b0.outputs] == ["a", "b"]
    assert back.main.bindings[1].call.args[0] is b0.outputs[1]


def test_symbolic_dims_round_trip():
    t = TensorType(("batch", 3, "seq_len"), "float32")

    def body(x):
        b = bind("nn.relu", [x], [t], names=["y"])
        return [b], [b.outputs[0]]
    back = round_trip(module(body, [("x", t)]))
    assert back.main.params[0].type.shape == ("batch", 3, "seq_len")
    assert back.main.outputs[0].type == t


def test_attributes_round_trip():
    attrs = {"ints": [1, -2, 3], "nested": [[1, 2], [3]], "empty": [], "none": None,
             "f": 0.1, "nan": float("nan"), "inf": float("-inf"), "s": 'a,b) : Tensor["x"]',
             "flag": True, "neg": -7, "big": 2**62}

    def body(x):
        b = bind("custom.op", [x], [x.type], names=["y"], **attrs)
        return [b], [b.outputs[0]]
    back = round_trip(module(body, [("x", F32)]))
    got = back.main.bindings[0].call.attrs
    assert got["ints"] == (1, -2, 3) and got["nested"] == ((1, 2), (3,)) and got["none"] is None
    assert np.isnan(got["nan"]) and got["inf"] == float("-inf") and got["s"] == attrs["s"]


def test_calls_between_functions_and_function_attrs():
    text = """
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = @fused_relu_add(%x, const(float32, [], [1.0])) : Tensor[(2, 3), float32]
  return %0
}

def @fused_relu_add(%p0: Tensor[(2, 3), float32], %p1: Tensor[(), float32]) attrs={"primitive": 1} {
  %0 = nn.relu(%p0) : Tensor[(2, 3), float32]
  %1 = add(%0, %p1) : Tensor[(2, 3), float32]
  return %1
}
"""
    mod = IRModule.from_text(text)
    assert mod["fused_relu_add"].attrs == {"primitive": 1}
    assert mod.main.bindings[0].call.op == "@fused_relu_add"
    round_trip(mod)


def test_built_function_round_trip_and_comments():
    fb = FunctionBuilder()
    x = fb.param("x", TensorType((1, 3, 8, 8), "float32"))
    w = fb.param("w", TensorType((4, 3, 3, 3), "float32"))
    y = fb.call("nn.conv", [x, w], {"strides": [1, 1], "pads": [1, 1, 1, 1]})
    z = fb.call("nn.relu", [y])
    mod = IRModule.from_function(fb.finish([z]))
    back = round_trip(mod)
    commented = "# a comment\n\n" + mod.text().replace("\n  return", "\n  # inside\n\n  return")
    assert structural_equal(IRModule.from_text(commented), back)


def test_structural_equal_can_fail():
    def make(c=1.0, shape=(2, 3), attr=1, op="add"):
        def body(x):
            b = bind(op, [x, Constant(np.float32(c).reshape(()))], [x.type], names=["y"],
                     axis=attr)
            return [b], [b.outputs[0]]
        return module(body, [("x", TensorType(shape, "float32"))])
    base = make()
    assert structural_equal(base, make())
    for other in (make(c=2.0), make(shape=(3, 2)), make(attr=2), make(op="subtract")):
        assert not structural_equal(base, other)


# parse errors ---------------------------------------------------------------------------------

GOOD = """def @main(%x: Tensor[(2, 3), float32]) {
  %0 = nn.relu(%x) : Tensor[(2, 3), float32]
  %1 = add(%0, %x) : Tensor[(2, 3), float32]
  return %1
}
"""


def lines_with(line_no: int, new: str) -> str:
    lines = GOOD.splitlines()
    lines[line_no - 1] = new
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("line_no,new,what", [
    (1, "function main(x) {", "def @name"),
    (1, "def @main(%x: Tensor[(2, 3) float32]) {", "type"),
    (1, "def @main(%x: Tensor[(2, 3), notadtype]) {", "dtype"),
    (1, "def @main(x: Tensor[(2, 3), float32]) {", "%name"),
    (2, "  %0 = nn.relu(%y) : Tensor[(2, 3), float32]", "before it is defined"),
    (2, "  %0 = nn.relu(%x)", "op(args)"),
    (2, "  %0, %9 = nn.relu(%x) : Tensor[(2, 3), float32]", "types"),
    (2, "  %0 = nn.relu(%x, axis=[1,) : Tensor[(2, 3), float32]", "attribute"),
    (2, "  %0 = nn.relu(const(float32, [2], [1.0, 2.0, 3.0])) : Tensor[(2, 3), float32]",
     "constant"),
    (2, "  %0 = nn.relu(const(float32, [2], oops)) : Tensor[(2, 3), float32]", "constant"),
    (2, '  %"unterminated = nn.relu(%x) : Tensor[(2, 3), float32]', "name"),
    (3, "  %0 = add(%0, %x) : Tensor[(2, 3), float32]", "defined twice"),
    (4, "  return %nope", "before it is defined"),
])
def test_parse_error_names_the_line(line_no, new, what):
    with pytest.raises(IRParseError) as e:
        IRModule.from_text(lines_with(line_no, new))
    msg = str(e.value)
    assert f"line {line_no}" in msg, msg
    assert what in msg, msg


def test_unclosed_function_names_the_line():
    text = GOOD.replace("}\n", "")
    with pytest.raises(IRParseError, match=r"line 1\b.*not closed"):
        IRModule.from_text(text)


def test_missing_return_names_the_line():
    text = "\n\n" + GOOD.replace("  return %1\n", "")
    with pytest.raises(IRParseError, match=r"line 3\b.*no return"):
        IRModule.from_text(text)


def test_bad_function_attrs_names_the_line():
    text = GOOD.replace(") {", ") attrs={bad} {", 1)
    with pytest.raises(IRParseError, match="line 1"):
        IRModule.from_text(text)


def test_structural_equal_compares_attribute_values_as_data():
    def make(**attrs):
        def body(x):
            b = Binding((Var("y", x.type),), Call("custom.op", (x,), attrs))
            return [b], [b.outputs[0]]
        return module(body, [("x", F32)])
    assert structural_equal(make(a=[1, 2], n=[float("nan")]), make(a=(1, 2), n=(float("nan"),)))
    assert not structural_equal(make(a=[1, 2]), make(a=[1, 2, 3]))
