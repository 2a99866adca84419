"""ONNX frontend: ``from_onnx(model, shapes=None) -> (IRModule, params)``.

Each ONNX operator maps to graph-IR operators through one converter per op and opset range
(``ember.frontend.converters``). Initializers become ``params``; ``Constant`` nodes and every node
whose inputs are all known at compile time are folded with the operators' NumPy references, so
shape subgraphs (``Shape -> Gather -> Concat -> Reshape``) resolve when input shapes are static.
Unknown operators and attributes fail with an ``UnsupportedOpError`` naming the op, the node, the
opset and the model input that leads to it.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from ..dtypes import convert
from ..errors import (EmberError, HostValueError, ModelLoadError, RuntimeValueError,
                      ShapeFunctionMissingError, ShapeMismatchError, SymbolicShapeError,
                      UnsupportedOpError)
from ..graph.builder import FunctionBuilder, infer_call
from ..graph.ir import Constant, IRModule, TensorType, Value, Var, normalize_attrs
from ..ops import get_op
from .symbolic_fold import ShapeConstant
from .symbolic_fold import fold as fold_symbolic
from .converters import lookup_converter
from .dtypes import onnx_dtype

INLINE_CONST_LIMIT = 16  # constants with more elements become named params

def load_model(model, external_files: list | None = None) -> onnx.ModelProto:
    """An ``onnx.ModelProto`` from a path, bytes or a ModelProto. A model given by path may keep
    tensors in external data files next to it (ONNX external data): they are read in, and
    their paths appended to ``external_files`` when given (the compiled-model cache hashes
    them).

    Raises:
        ModelLoadError: missing file, not an ONNX model, truncated model; external data (read
            from the files next to a model given by path) that is missing, or that a model
            given as bytes or a ModelProto without its data refers to.
    """
    if isinstance(model, onnx.ModelProto):
        _check_model(model, "the given ModelProto")
        _load_external_data(model, None, "the given ModelProto")
        return model
    base_dir = None
    if isinstance(model, (bytes, bytearray)):
        data = bytes(model)
        where = "the given bytes"
    elif not isinstance(model, (str, os.PathLike)):
        raise ModelLoadError(f"expected a model path, bytes or an onnx.ModelProto, got "
                             f"{type(model).__name__}")
    else:
        path = os.fspath(model)
        if not os.path.exists(path):
            raise ModelLoadError(f"model file {path!r} does not exist")
        if os.path.isdir(path):
            raise ModelLoadError(f"model path {path!r} is a directory, not an .onnx file")
        with open(path, "rb") as f:
            data = f.read()
        where = repr(path)
        base_dir = os.path.dirname(os.path.abspath(path))
    try:
        m = onnx.ModelProto()
        m.ParseFromString(data)
    except Exception as e:  # protobuf raises DecodeError (and others on garbage)
        raise ModelLoadError(f"{where} is not a valid ONNX model (truncated or not ONNX): "
                             f"{type(e).__name__}: {e}") from None
    _check_model(m, where)
    _load_external_data(m, base_dir, where, external_files)
    return m


def external_data_files(m: onnx.ModelProto, base_dir: str) -> list[str]:
    """Paths (sorted, unique) of the files holding ``m``'s external-data tensors, resolved
    against ``base_dir`` (the model file's folder)."""
    from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data
    return sorted({os.path.join(base_dir, ExternalDataInfo(t).location)
                   for t in _get_all_tensors(m) if uses_external_data(t)})


def _load_external_data(m: onnx.ModelProto, base_dir: str | None, where: str,
                        files: list | None = None) -> None:
    """Read the tensors ``m`` stores in external data files into ``m`` (ONNX's external data:
    files named relative to the model file's folder).

    Raises:
        ModelLoadError: the model came as bytes (no folder to find the files in), or a file is
            missing or too short."""
    from onnx.external_data_helper import (_get_all_tensors, load_external_data_for_model,
                                           uses_external_data)
    if not any(uses_external_data(t) for t in _get_all_tensors(m)):
        return
    if base_dir is None:
        raise ModelLoadError(f"{where} keeps tensors in external data files, which are found "
                             f"next to the model file: pass the model's path instead (or "
                             f"onnx.load(path), which reads them)")
    if files is not None:
        files.extend(external_data_files(m, base_dir))
    try:
        load_external_data_for_model(m, base_dir)
    except Exception as e:  # a missing or cut-short file, a location outside base_dir
        raise ModelLoadError(f"{where}: its external data cannot be read ({type(e).__name__}: "
                             f"{e}); keep the data files next to the model file") from None


def _check_model(m: onnx.ModelProto, where: str) -> None:
    """Reject what parses as protobuf but cannot be a whole ONNX model (a cut-off file parses
    as a prefix of its fields)."""
    if not m.graph.node and not m.graph.output:
        raise ModelLoadError(f"{where} parsed as an empty ONNX model (no graph): it is probably "
                             f"not an ONNX file")
    if m.ir_version >= 3 and not m.opset_import:
        raise ModelLoadError(f"{where} declares no opset_import, which ONNX IR version "
                             f"{m.ir_version} requires: the model is truncated or malformed")


class NodeView:
    """What a converter sees of one ONNX node: its inputs as graph values (``None`` for omitted
    optional inputs), its attributes as Python values, its name, op type and opset."""

    def __init__(self, node: onnx.NodeProto, inputs: list, opset: int):
        self.proto = node
        self.op_type = node.op_type
        self.domain = node.domain or ""
        self.name = node.name or (node.output[0] if node.output else node.op_type)
        self.inputs = inputs
        self.outputs = list(node.output)
        self.opset = opset
        self.attrs = {a.name: _attr_value(a) for a in node.attribute}

    @property
    def where(self) -> str:
        return f"node {self.name!r} ({self.op_type}, opset {self.opset}): "

    def attr(self, name: str, default=None):
        """The node's attribute ``name`` (tensors as numpy arrays, strings decoded), or ``default``
        when absent."""
        return self.attrs.get(name, default)

    def input(self, k: int):
        """Input ``k`` or ``None`` when omitted."""
        return self.inputs[k] if k < len(self.inputs) else None


def _attr_value(a: onnx.AttributeProto):
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list) and v and isinstance(v[0], bytes):
        return [x.decode("utf-8", "replace") for x in v]
    return v


def _check_required_inputs(view: NodeView) -> None:
    """Raise ``ModelLoadError`` naming the node and the input when a required (non-optional,
    non-variadic) input of the node's ONNX schema at its opset is omitted or empty; converters
    may then assume every required input is a graph value."""
    try:
        schema = onnx.defs.get_schema(view.op_type, view.opset, view.domain)
    except Exception:  # an operator or domain onnx has no schema for: its converter decides
        return
    single = onnx.defs.OpSchema.FormalParameterOption.Single
    for k, formal in enumerate(schema.inputs):
        if formal.option != single:
            continue
        if view.input(k) is None:
            raise ModelLoadError(
                f"{view.where}required input {k} ({formal.name!r}) of {view.op_type}-"
                f"{schema.since_version} is missing (the node has "
                f"{len(view.proto.input)} input(s)); the ONNX spec requires it: give the node "
                f"that input")


class ImportContext:
    """State of one graph import; converters call ``call``/``const``/``constant_value``."""

    def __init__(self, opsets: dict):
        self.fb = FunctionBuilder("main")
        self.opsets = opsets
        self.params: dict[str, np.ndarray] = {}
        # id(constant) -> (constant, param): the constant is kept alive with its param, so its
        # id is never reused by a later constant (a folded temporary, e.g. a recurrent weight's
        # transposed slice, freed and another one allocated at its address got the first one's
        # param: a GRU's second layer read a (256, 768) weight as its (256, 256) one)
        self._param_of_const: dict[int, tuple[Constant, Var]] = {}
        self.const_names: dict[int, str] = {}  # id(Constant) -> the ONNX value name it came from
        self.node: NodeView | None = None
        self.symbol_bounds: dict[str, tuple] = {}  # declared (lo, hi) of symbolic dims
        self.missing_shape_funcs: dict[str, list] = {}  # op -> where (ShapeFunctionMissingError)
        self._unknown = 0

    # values -----------------------------------------------------------------------------------
    @staticmethod
    def constant_value(v) -> np.ndarray | None:
        """The numpy value of ``v`` when known at compile time, else ``None``."""
        return v.data if isinstance(v, Constant) else None

    def require_constant(self, v, what: str) -> np.ndarray:
        """The compile-time value of ``v``; raises ``RuntimeValueError`` (naming ``what``) when
        it is only known at run time, which the staged executor answers by specializing."""
        c = self.constant_value(v)
        if c is None:
            err = RuntimeValueError(f"{what} is computed at run time; the static compiler needs "
                                    f"it known at compile time (the staged executor "
                                    f"specializes on its value)")
            err.value = v
            raise err
        return c

    @staticmethod
    def const(value, dtype: str | None = None) -> Constant:
        """A compile-time constant value."""
        return Constant(np.asarray(value, dtype=dtype))

    def _materialize(self, v: Value, hint: str) -> Value:
        """Large constants become named params (weights); small ones stay inline."""
        if isinstance(v, Constant) and v.data.size > INLINE_CONST_LIMIT:
            key = id(v)
            if key not in self._param_of_const:
                p = self.fb.param(hint, v.type)
                self.params[p.name] = np.ascontiguousarray(v.data).reshape(v.data.shape)
                self._param_of_const[key] = (v, p)
            return self._param_of_const[key][1]
        return v

    def call(self, op: str, args: Sequence[Value], attrs: dict | None = None, fold: bool = True):
        """Emit graph op ``op``; folded to a ``Constant`` when every argument is constant."""
        where = self.node.where if self.node else ""
        args = list(args)
        shape_args = [a for a in args if isinstance(a, ShapeConstant)]
        if shape_args:
            if fold and all(isinstance(a, Constant) for a in args):
                attrs_n, types = infer_call(op, args, dict(attrs or {}), where)
                r = fold_symbolic(op, args, attrs_n, types, self.symbol_bounds)
                if r is not None:
                    return r
            raise SymbolicShapeError(
                f"{where}operator {op} takes a shape computed from symbolic dimensions "
                f"({shape_args[0]!r}) that cannot be folded at compile time: only shape "
                f"arithmetic (gather, concat, reshape, slice, + - * / min max, cast, equal, "
                f"where) is folded symbolically; fix the symbols with shapes= to compile for "
                f"one size")
        if fold and args and all(isinstance(a, Constant) for a in args):
            attrs_n, types = infer_call(op, args, dict(attrs or {}), where)
            if any(t.symbols for t in types):  # a constant sliced to a symbolic size
                return self.call(op, args, attrs, fold=False)
            outs = get_op(op).reference([a.data for a in args], attrs_n)
            res = [Constant(convert(o, t.dtype).reshape(t.shape))
                   for o, t in zip(outs, types)]
            return res[0] if len(res) == 1 else tuple(res)
        for a in args:
            if isinstance(a, Constant) and a.data.dtype.kind in "OUS":
                raise HostValueError(f"{where}a string tensor reaches operator {op}: compiled "
                                     f"kernels take numeric tensors only; the staged executor "
                                     f"(ember.compile(..., executor='auto' or 'staged')) runs "
                                     f"operators on strings on the host")
        hint = (self.node.outputs[0] if self.node and self.node.outputs else op)
        args = [self._materialize(a, self.const_names.get(id(a), f"{hint}_c{k}"))
                for k, a in enumerate(args)]
        names = [n for n in self.node.outputs if n] if self.node else None
        try:
            return self.fb.call(op, args, attrs, names=names, where=where)
        except ShapeFunctionMissingError:
            return self._call_without_shape_func(op, args, attrs, names, where)

    def _call_without_shape_func(self, op, args, attrs, names, where):
        """Record that ``op`` has no symbolic shape function and go on importing (so the
        error ``from_onnx`` raises at the end lists every such operator): the outputs get
        the types ``infer_type`` gives with the symbols set to two sets of sample sizes,
        dimensions that differ between the two becoming fresh placeholder symbols."""
        from ..tir import symbolic as sym
        from ..graph.ir import Binding, Call
        self.missing_shape_funcs.setdefault(op, []).append(where or op)
        names_ = sorted({n for a in args for n in a.type.symbols})
        probes = []
        for base in (17, 29):
            sizes = {n: base + 2 * k for k, n in enumerate(names_)}
            tys = [TensorType(tuple(sym.substitute(d, sizes) for d in a.type.shape),
                              a.type.dtype) for a in args]
            opdef = get_op(op)
            try:
                at = opdef.normalize_attrs(normalize_attrs(dict(attrs or {})), where)
                probes.append(opdef.infer_type(tys, sym.substitute_attrs(at, sizes)))
            except (EmberError, ValueError, TypeError, IndexError, KeyError):
                raise ShapeFunctionMissingError(self.missing_shape_funcs) from None
        outs = []
        for k, (t1, t2) in enumerate(zip(*probes)):
            dims = []
            for d1, d2 in zip(t1.shape, t2.shape):
                if d1 == d2:
                    dims.append(d1)
                else:
                    dims.append(sym.Symbol(f"_unknown{self._unknown}"))
                    self._unknown += 1
            nm = names[k] if names and k < len(names) else None
            outs.append(Var(self.fb.fresh_name(nm), TensorType(tuple(dims), t1.dtype)))
        self.fb.bindings.append(Binding(tuple(outs), Call(op, tuple(args), dict(attrs or {}))))
        return outs[0] if len(outs) == 1 else tuple(outs)


def _value_info_type(vi: onnx.ValueInfoProto, shapes: Mapping | None, where: str,
                     dynamic: bool = False) -> TensorType:
    """The graph input's ``TensorType``. A dimension is the model's ``dim_value``, or what
    ``shapes[name]`` gives (an int fixes it; a str names a symbol, ``"batch"``, or is a
    dimension expression); a ``dim_param`` not given by ``shapes`` becomes the symbol of that
    name when ``dynamic`` (a dimension with neither gets the symbol ``<input>_d<k>``), and is
    refused otherwise (``SymbolicShapeError``: the static compile needs every size)."""
    from ..tir import symbolic as sym
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise HostValueError(f"graph input {vi.name!r} is not a tensor (a sequence, map or "
                             f"optional): the static executor cannot take it; the staged "
                             f"executor (ember.compile(..., executor='auto' or 'staged')) can")
    if tt.elem_type == onnx.TensorProto.STRING:
        raise HostValueError(f"graph input {vi.name!r} is a string tensor: the static executor "
                             f"cannot take it; the staged executor (ember.compile(..., "
                             f"executor='auto' or 'staged')) runs string operators on the host")
    dtype = onnx_dtype(tt.elem_type, f"graph input {vi.name!r}: ")
    if shapes and vi.name in shapes:
        given = shapes[vi.name]
        if isinstance(given, (str, bytes)) or not all(
                (isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0)
                or isinstance(d, str) for d in given):
            raise ShapeMismatchError(f"shapes[{vi.name!r}] = {given!r} must be a sequence of "
                                     f"non-negative ints or symbol names, e.g. (1, 3, 224, 224) "
                                     f"or ('batch', 'seq')")
        try:
            shape = tuple(int(d) if not isinstance(d, str) else sym.parse_dim(d) for d in given)
        except ShapeMismatchError as e:
            raise ShapeMismatchError(f"shapes[{vi.name!r}] = {given!r}: {e}") from None
        if tt.HasField("shape"):
            if len(tt.shape.dim) != len(shape):
                raise ShapeMismatchError(f"shapes[{vi.name!r}] = {given!r} has rank "
                                         f"{len(shape)}, the model declares rank "
                                         f"{len(tt.shape.dim)}")
            for k, (d, s) in enumerate(zip(tt.shape.dim, shape)):
                if d.HasField("dim_value") and not sym.dims_equal(d.dim_value, s):
                    raise ShapeMismatchError(
                        f"shapes[{vi.name!r}] = {given!r} changes dimension {k}, which the "
                        f"model fixes at {d.dim_value}; only symbolic dimensions can be set")
        return TensorType(shape, dtype)
    if not tt.HasField("shape"):
        raise SymbolicShapeError(f"graph input {vi.name!r} has no shape: pass "
                                 f"shapes={{{vi.name!r}: (...)}}")
    dims = []
    for k, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif dynamic:
            name = d.dim_param if d.dim_param and d.dim_param.isidentifier() else \
                f"{_ident(vi.name)}_d{k}"
            dims.append(sym.Symbol(name))
        else:
            raise SymbolicShapeError(
                f"graph input {vi.name!r} has a symbolic dimension "
                f"{d.dim_param or '?'!r}: pass shapes={{{vi.name!r}: (...)}} (command line: "
                f"--shape {vi.name}=D0,D1,...) to compile it for a concrete shape, or "
                f"dynamic={{{(d.dim_param or 'name')!r}: (lo, hi)}} to compile it once for "
                f"every size (docs/dynamic_shapes.md)")
    return TensorType(tuple(dims), dtype)


def _ident(name: str) -> str:
    import re
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return s if s and not s[0].isdigit() else "v" + s


def check_dynamic(dynamic) -> dict:
    """``dynamic=`` as ``{symbol: (lo, hi)}``: ``True`` (every dim_param symbolic, no bounds) or
    a mapping from symbol names to ``(lo, hi)`` inclusive int bounds (``None`` for none).

    Raises:
        ShapeMismatchError: a name that is not an identifier, or bounds that are not
            ``0 <= lo <= hi`` ints."""
    if dynamic is None or dynamic is False:
        return {}
    if dynamic is True:
        return {}
    if not isinstance(dynamic, Mapping):
        raise ShapeMismatchError(f"dynamic={dynamic!r} must be True or a mapping "
                                 f"{{symbol: (lo, hi)}}, e.g. {{'seq': (1, 2048)}}")
    out = {}
    for name, b in dynamic.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ShapeMismatchError(f"dynamic names {name!r}, which is not a symbol name "
                                     f"(an identifier such as 'seq')")
        if b is None:
            continue
        if (not isinstance(b, (tuple, list)) or len(b) != 2
                or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool)
                           for x in b) or not 0 <= b[0] <= b[1]):
            raise ShapeMismatchError(f"dynamic[{name!r}] = {b!r} must be (lo, hi) ints with "
                                     f"0 <= lo <= hi, e.g. (1, 2048)")
        out[name] = (int(b[0]), int(b[1]))
    return out


def from_onnx(model, shapes: Mapping[str, Sequence] | None = None, dynamic=None
              ) -> tuple[IRModule, dict[str, np.ndarray]]:
    """Import an ONNX model (path, bytes or ``ModelProto``) into the graph IR.

    Args:
        model: the model.
        shapes: optional ``{input name: shape}`` overriding or fixing input shapes; an entry
            may name symbols (``("batch", "seq")``), which makes those dims symbolic.
        dynamic: ``None`` (default: every ``dim_param`` must be fixed by ``shapes``), ``True``
            or ``{symbol: (lo, hi)}``: ``dim_param``s become symbolic dimensions (bounds
            inclusive; recorded in ``main.attrs["symbol_bounds"]``), shape subgraphs fold
            symbolically (``frontend.symbolic_fold``). See docs/dynamic_shapes.md.
    Returns:
        ``(mod, params)``: ``mod["main"]`` takes the graph inputs (non-initializers) then the
        weights; ``params`` maps weight parameter names to numpy arrays.
    Raises:
        ModelLoadError, UnsupportedOpError, ShapeMismatchError.
        ShapeFunctionMissingError: symbolic dims reach operators without a shape function
            (every one is listed).

    Model-local functions are inlined and operators that ember has no converter for but that
    ONNX defines by a function body (schema functions, context-dependent ones) are replaced by
    that body first (``ember.frontend.functions.expand_model``).
    """
    from .functions import expand_model
    m = expand_model(load_model(model))
    opsets = {(o.domain or ""): o.version for o in m.opset_import}
    if "ai.onnx" in opsets:
        opsets.setdefault("", opsets["ai.onnx"])
    if "" not in opsets:
        opsets[""] = 1
    ctx = ImportContext(opsets)
    bounds = check_dynamic(dynamic)
    ctx.symbol_bounds = bounds
    g = m.graph
    env: dict[str, Value] = {}
    inits = {}
    for t in g.initializer:
        try:
            inits[t.name] = numpy_helper.to_array(t)
        except Exception as e:
            raise ModelLoadError(f"initializer {t.name!r} cannot be read: {e}") from None
    for t in g.sparse_initializer:
        raise UnsupportedOpError(f"sparse initializer {t.values.name!r} is not supported")
    runtime_inputs = [vi.name for vi in g.input if vi.name not in inits]
    unknown = sorted(set(shapes or {}) - set(runtime_inputs))
    if unknown:
        raise ShapeMismatchError(f"shapes names {unknown}, which are not inputs of the model; "
                                 f"its inputs are {runtime_inputs}")
    for vi in g.input:
        if vi.name in inits:
            continue
        env[vi.name] = ctx.fb.param(vi.name, _value_info_type(
            vi, shapes, "", dynamic=dynamic is not None and dynamic is not False))
    symbols = sorted({n for p in ctx.fb.params for n in p.type.symbols})
    undeclared = sorted(set(bounds) - set(symbols))
    if undeclared:
        raise ShapeMismatchError(f"dynamic= bounds {undeclared}, which are not symbols of the "
                                 f"model's inputs (its symbols: {symbols or 'none'})")
    for name, arr in inits.items():
        env[name] = Constant(arr)
        ctx.const_names[id(env[name])] = name

    ctx.graph, ctx.values = g, env  # the whole graph, for converters that read it (Gradient)
    producers: dict[str, onnx.NodeProto] = {}
    for node in g.node:
        for o in node.output:
            producers[o] = node
    for node_index, node in enumerate(g.node):
        domain = node.domain or ""
        if domain == "ai.onnx":
            domain = ""
        opset = opsets.get(domain, 1)
        ins = []
        for name in node.input:
            if name == "":
                ins.append(None)
            elif name in env:
                ins.append(env[name])
            else:
                raise ModelLoadError(f"node {node.name or node.op_type!r} reads {name!r}, which no "
                                     f"node, input or initializer defines (model not topologically "
                                     f"sorted or malformed)")
        view = NodeView(node, ins, opset)
        _check_required_inputs(view)
        conv = lookup_converter(domain, node.op_type, opset)
        if conv is None:
            raise UnsupportedOpError(
                f"{view.where}operator {(domain + '.') if domain else ''}{node.op_type} is not "
                f"supported at opset {opset}; reached from model input(s) "
                f"{_leading_inputs(node, producers, g)}", op=node.op_type, node=view.name,
                opset=opset)
        ctx.node = view
        try:
            outs = conv(ctx, view)
        except EmberError as e:
            msg = str(e)
            if view.where not in msg:
                msg = view.where + msg
            if isinstance(e, RuntimeValueError):
                value = getattr(e, "value", None)
                name = e.value_name or next((n for n in node.input if n and env.get(n) is value),
                                            None)
                raise RuntimeValueError(msg, op=e.op or node.op_type, node=view.name,
                                        opset=opset, value_name=name,
                                        node_index=node_index) from None
            err = type(e)(msg) if not isinstance(e, UnsupportedOpError) else type(e)(
                msg, op=e.op or node.op_type, node=view.name, opset=opset)
            raise err from None
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        for k, name in enumerate(node.output):
            if name == "":
                continue
            if k >= len(outs) or outs[k] is None:
                raise UnsupportedOpError(f"{view.where}output {k} ({name!r}) is not supported",
                                         op=node.op_type, node=view.name, opset=opset)
            v = outs[k]
            if isinstance(v, Constant):
                ctx.const_names.setdefault(id(v), name)
            env[name] = v
    outputs = []
    for vi in g.output:
        if vi.name not in env:
            raise ModelLoadError(f"graph output {vi.name!r} is not produced by any node")
        v = env[vi.name]
        if isinstance(v, ShapeConstant):
            raise SymbolicShapeError(f"graph output {vi.name!r} is a shape computed from "
                                     f"symbolic dimensions ({v!r}): returning it needs a "
                                     f"run-time shape value, which is not supported yet")
        if isinstance(v, Constant) and v.data.dtype.kind in "OUS":
            raise HostValueError(f"graph output {vi.name!r} is a string tensor: a static compiled "
                                 f"model returns numeric tensors only; the staged executor "
                                 f"(ember.compile(..., executor='auto' or 'staged')) returns "
                                 f"strings")
        outputs.append(v)
    if ctx.missing_shape_funcs:
        raise ShapeFunctionMissingError(ctx.missing_shape_funcs)
    func = ctx.fb.finish(outputs)
    if symbols:
        func.attrs["symbol_bounds"] = {n: list(bounds.get(n, (0, None))) for n in symbols}
    names = [vi.name for vi in g.output]
    _rename_outputs(func, names)
    if [o.name if isinstance(o, Var) else None for o in func.outputs] != names:
        # an output that is a graph input, a constant or another output's value keeps its own
        # ONNX name here (what CompiledModel.output_names reports)
        func.attrs["output_names"] = names
    return IRModule.from_function(func), ctx.params


def _rename_outputs(func, names):
    """Give each output ``Var`` its ONNX graph-output name (what ``CompiledModel.output_names``
    reports). A converter that emits several bindings names each after the node's output, so an
    intermediate may hold the name first: it is renamed (``name_1``...). Graph inputs keep
    theirs, and a value that is several outputs at once keeps its first name."""
    by_name = {p.name: p for p in func.params}
    by_name.update({o.name: o for b in func.bindings for o in b.outputs})
    params = {id(p) for p in func.params}
    outputs = {id(o) for o in func.outputs if isinstance(o, Var)}
    done: set[int] = set()
    for v, n in zip(func.outputs, names):
        if not isinstance(v, Var) or id(v) in done or id(v) in params:
            continue
        done.add(id(v))
        if v.name == n:
            continue
        other = by_name.get(n)
        if other is not None:
            if id(other) in params or id(other) in outputs:
                continue
            k = 1
            while f"{n}_{k}" in by_name:
                k += 1
            other.name = f"{n}_{k}"
            by_name[other.name] = other
        by_name.pop(v.name, None)
        v.name = n
        by_name[n] = v


def _leading_inputs(node, producers, g) -> list[str]:
    graph_inputs = {vi.name for vi in g.input}
    found, seen, stack = [], set(), list(node.input)
    while stack:
        n = stack.pop()
        if n in seen or not n:
            continue
        seen.add(n)
        if n in graph_inputs:
            found.append(n)
        elif n in producers:
            stack.extend(producers[n].input)
    return sorted(found) or ["(none: constants only)"]
