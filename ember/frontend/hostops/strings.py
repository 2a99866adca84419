"""String operators on the host: StringNormalizer, StringConcat, StringSplit, RegexFullMatch, and
string forms of Equal, Cast and CastLike."""

from __future__ import annotations

import re

import numpy as np

from . import host_op


def _str_array(x) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind == "S":
        a = np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(a)
    return a.astype(object)


@host_op("StringNormalizer")
def string_normalizer(h, ins):
    """Host kernel for ONNX StringNormalizer: remove ``stopwords`` (case-sensitive per
    ``is_case_sensitive``) and apply ``case_change_action`` (LOWER/UPPER/NONE) to a ``(C,)`` or
    ``(1, C)`` string tensor; an all-removed input gives one empty string."""
    x = _str_array(ins[0])
    case = h.attr("case_change_action", "NONE")
    sensitive = h.attr("is_case_sensitive", 0)
    stop = h.attr("stopwords") or []
    shape = x.shape
    flat = list(x.reshape(-1))
    if stop:
        if sensitive:
            flat = [s for s in flat if s not in stop]
        else:
            low = {w.lower() for w in stop}
            flat = [s for s in flat if s.lower() not in low]
    if case == "LOWER":
        flat = [s.lower() for s in flat]
    elif case == "UPPER":
        flat = [s.upper() for s in flat]
    if len(shape) == 2 and shape[0] == 1:
        out_shape = (1, len(flat)) if flat else (1, 1)
    else:
        out_shape = (len(flat),) if flat else (1,)
    if not flat:
        flat = [""]
    return [np.array(flat, dtype=object).reshape(out_shape)]


@host_op("StringConcat")
def string_concat(h, ins):
    """Host kernel for ONNX StringConcat-20: element-wise ``a + b`` of two string tensors (numpy
    broadcasting)."""
    a, b = _str_array(ins[0]), _str_array(ins[1])
    return [np.array(np.char.add(a.astype(str), b.astype(str)), dtype=object)]


@host_op("RegexFullMatch")
def regex_full_match(h, ins):
    """Host kernel for ONNX RegexFullMatch-20: bool tensor, true where the whole string matches
    ``pattern`` (Python ``re`` syntax)."""
    x = _str_array(ins[0])
    pat = re.compile(h.attr("pattern"))
    return [np.vectorize(lambda s: pat.fullmatch(s) is not None, otypes=[bool])(x)
            if x.size else np.zeros(x.shape, bool)]


@host_op("StringSplit")
def string_split(h, ins):
    """Host kernel for ONNX StringSplit-20: split each string on ``delimiter`` (whitespace runs
    when empty) at most ``maxsplit`` times; returns the parts padded with ``""`` to shape ``x.shape
    + (max parts,)`` and the int64 part counts of shape ``x.shape``."""
    x = _str_array(ins[0])
    sep = h.attr("delimiter")
    maxsplit = h.attr("maxsplit")
    parts = []
    for s in x.reshape(-1):
        if sep is None or sep == "":
            p = s.split(None, maxsplit if maxsplit is not None else -1)
        else:
            p = s.split(sep, maxsplit if maxsplit is not None else -1)
        parts.append(p)
    width = max([len(p) for p in parts], default=0)
    y = np.full(x.shape + (width,), "", dtype=object)
    n = np.zeros(x.shape, np.int64)
    for k, (idx, p) in enumerate(zip(np.ndindex(*x.shape), parts)):
        y[idx + (slice(0, len(p)),)] = p
        n[idx] = len(p)
    return [y, n]


@host_op("Equal", mode="fallback")
def equal_str(h, ins):
    """Host kernel for ONNX Equal on string tensors (fallback): element-wise bool equality."""
    a, b = _str_array(ins[0]), _str_array(ins[1])
    return [np.asarray(a == b, dtype=bool)]


def _to_string(x: np.ndarray) -> np.ndarray:
    def fmt(v):
        if isinstance(v, (float, np.floating)):
            f = float(v)
            if np.isnan(f):
                return "NaN"
            if np.isinf(f):
                return "INF" if f > 0 else "-INF"
            return repr(np.float32(f).item()) if x.dtype == np.float32 else repr(f)
        return str(v)
    return np.vectorize(fmt, otypes=[object])(x) if x.size else x.astype(object)


def _from_string(x: np.ndarray, dt) -> np.ndarray:
    flat = [str(s) for s in x.reshape(-1)]
    if np.dtype(dt).kind == "f":
        vals = []
        for s in flat:
            t = s.strip().lower()
            vals.append(float("nan") if t == "nan" else float("inf") if t in ("inf", "+inf",
                        "infinity") else float("-inf") if t in ("-inf", "-infinity") else float(s))
        return np.array(vals, dtype=np.float64).astype(dt).reshape(x.shape)
    return np.array([int(s) for s in flat], dtype=dt).reshape(x.shape)


def cast_strings(x, to_dtype):
    """Cast between string tensors and numeric tensors (ONNX Cast rules for strings)."""
    x = np.asarray(x)
    src_str = x.dtype.kind in "OUS"
    if to_dtype == object:
        return _str_array(x) if src_str else _to_string(x)
    return _from_string(_str_array(x), to_dtype)


@host_op("Cast", mode="fallback")
def cast(h, ins):
    """Host kernel for ONNX Cast to or from strings (fallback): ``cast_strings`` to dtype ``to``
    (ONNX Cast rules for strings)."""
    from onnx import TensorProto, helper
    to = h.attr("to")
    dt = object if to == TensorProto.STRING else helper.tensor_dtype_to_np_dtype(to)
    return [cast_strings(ins[0], dt)]


@host_op("CastLike", mode="fallback")
def cast_like(h, ins):
    """Host kernel for ONNX CastLike to or from strings (fallback): ``cast_strings`` to the dtype
    of input 1 (object for strings)."""
    like = np.asarray(ins[1])
    dt = object if like.dtype.kind in "OUS" else like.dtype
    return [cast_strings(ins[0], dt)]


def reference_kernel(h, ins):
    """Host kernel of any ONNX operator applied to string tensors that has no kernel of its own
    here (layout and selection operators: Reshape, Transpose, Gather, Concat, Slice, Where,
    Constant... of strings): the node runs alone in onnx's reference implementation
    (``onnx.reference.ReferenceEvaluator``), which defines them for every element type.
    ``ins``: numpy arrays (strings as object arrays) or ``None`` for omitted inputs; returns the
    node's outputs (strings as object arrays of ``str``).

    Raises:
        UnsupportedOpError: the reference implementation cannot run the node (the message
            names it and the reason)."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    from ...errors import UnsupportedOpError
    from ..staging import np_to_onnx_elem
    node = h.proto
    feeds, infos = {}, []
    for name, v in zip(node.input, ins):
        if not name or v is None:
            continue
        a = np.asarray(v)
        if a.dtype.kind in "OUS":
            a = _str_array(a)
        feeds[name] = a
        infos.append(helper.make_tensor_value_info(name, np_to_onnx_elem(a.dtype), list(a.shape)))
    outs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
    g = helper.make_graph([node], f"host_{node.op_type}", infos, outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v)
                                            for d, v in h.opsets.items()])
    try:
        res = ReferenceEvaluator(m).run(None, feeds)
    except Exception as e:  # noqa: BLE001 - the reference's own errors are not typed
        raise UnsupportedOpError(f"{h.where}operator {node.op_type} on string tensors: onnx's "
                                 f"reference implementation failed ({type(e).__name__}: {e})",
                                 op=node.op_type, node=h.name, opset=h.opset) from None
    it = iter(res)
    return [(_str_array(r) if np.asarray(r).dtype.kind in "OUS" else r) if o else None
            for o, r in ((o, next(it) if o else None) for o in node.output)]
