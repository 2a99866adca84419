"""Text form of the graph IR: print a module and parse it back.

::

    def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
      %0 = nn.conv(%x, %w, strides=[1, 1], pads=[1, 1, 1, 1]) : Tensor[(1, 4, 8, 8), float32]
      %1 = nn.relu(%0) : Tensor[(1, 4, 8, 8), float32]
      %2, %3 = split(%1, axis=1, split=[2, 2]) : Tensor[(1, 2, 8, 8), float32], Tensor[(1, 2, 8, 8), float32]
      return %2, %3
    }

A binding may call another function of the module by name (``%5 = @fused_nn_conv_nn_relu_0(%x,
%w) : ...``); a function's attributes follow its parameters as JSON
(``def @fused_nn_conv_nn_relu_0(%p0: ..., %p1: ...) attrs={"primitive": 1} {``).

One binding per line. Names that are not plain identifiers are quoted (``%"gpu_0/data_0"``).
Attribute values are JSON (lists, numbers, strings, ``null``; ``NaN``/``Infinity`` allowed).
Constants are written ``const(DTYPE, [SHAPE], VALUES)`` with values as a flat JSON list.
Symbolic dimensions print as their expression text (``Tensor[(batch, (seq + 1), 256), float32]``,
``ember.tir.symbolic``); inside an attribute (a reshape's ``newshape``) a symbolic
dimension is the JSON object ``{"dim": "(batch * seq)"}``.
Parsing re-runs no type inference: the types written are the types read. ``print_module(mod,
max_const_elems=N)`` elides constants of more than N elements as ``const(float32, [64, 3, 7, 7],
...)`` (for IR dumps of models whose weights are bound; such text does not parse back).
"""

from __future__ import annotations

import json
import re

import numpy as np

from ..errors import IRParseError, ShapeMismatchError
from ..tir import symbolic
from .ir import Binding, Call, Constant, Function, IRModule, TensorType, Var, normalize_attrs

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$|^[0-9]+$")


def _name(v: Var) -> str:
    return "%" + (v.name if _PLAIN.match(v.name) else json.dumps(v.name))


def _const(c: Constant, max_elems: int | None = None) -> str:
    data = c.data
    dt = c.type.dtype
    if max_elems is not None and data.size > max_elems:
        return f"const({dt}, {json.dumps(list(data.shape))}, ...)"
    if data.dtype.kind == "f":
        vals = [float(x) for x in data.astype(np.float64).reshape(-1)]
    elif data.dtype.kind == "b":
        vals = [int(x) for x in data.reshape(-1)]
    elif data.dtype.kind in "iu":
        vals = [int(x) for x in data.reshape(-1)]
    else:
        vals = [str(x) for x in data.reshape(-1)]
    return f"const({dt}, {json.dumps(list(data.shape))}, {json.dumps(vals)})"


def _arg(a, max_elems: int | None = None) -> str:
    return _name(a) if isinstance(a, Var) else _const(a, max_elems)


def _json_default(v):
    """JSON form of attribute values json cannot write: a symbolic dimension."""
    if symbolic.is_symbolic(v):
        return {"dim": symbolic.dim_str(v)}
    raise TypeError(f"attribute value {v!r} ({type(v).__name__}) has no JSON form")


def _dumps(v, **kw) -> str:
    return json.dumps(v, default=_json_default, **kw)


def _json_hook(obj: dict):
    if set(obj) == {"dim"} and isinstance(obj["dim"], str):
        return symbolic.parse_dim(obj["dim"])
    return obj


def _loads(s: str):
    return json.loads(s, object_hook=_json_hook)


def print_function(f: Function, max_const_elems: int | None = None) -> str:
    """Text of one function (constants over ``max_const_elems`` elements elided)."""
    params = ", ".join(f"{_name(p)}: {p.type}" for p in f.params)
    attrs = f" attrs={_dumps(f.attrs, sort_keys=True)}" if f.attrs else ""
    lines = [f"def @{f.name}({params}){attrs} {{"]
    for b in f.bindings:
        outs = ", ".join(_name(o) for o in b.outputs)
        args = [_arg(a, max_const_elems) for a in b.call.args]
        args += [f"{k}={_dumps(v)}" for k, v in b.call.attrs.items()]
        types = ", ".join(str(o.type) for o in b.outputs)
        lines.append(f"  {outs} = {b.call.op}({', '.join(args)}) : {types}")
    lines.append("  return " + ", ".join(_arg(o, max_const_elems) for o in f.outputs))
    lines.append("}")
    return "\n".join(lines)


def print_module(mod: IRModule, max_const_elems: int | None = None) -> str:
    """Text of a module: its functions, ``main`` first (constants over ``max_const_elems``
    elements elided; ``None`` prints every value)."""
    names = sorted(mod.functions, key=lambda n: (n != "main", _natural(n)))
    return "\n\n".join(print_function(mod[n], max_const_elems) for n in names) + "\n"


def _natural(name: str) -> tuple:
    """Sort key ordering ``f_2`` before ``f_10``."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


# parsing ---------------------------------------------------------------------------------------

def _split_top(s: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside brackets and quotes."""
    out, depth, cur, quote, esc = [], 0, [], False, False
    for ch in s:
        if quote:
            cur.append(ch)
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                quote = False
            continue
        if ch == '"':
            quote = True
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    tail = "".join(cur).strip()
    if tail:
        out.append(tail)
    return out


_TYPE = re.compile(r"^Tensor\[\((.*)\),\s*([A-Za-z0-9_]+)\]$")


def _parse_type(s: str, where: str) -> TensorType:
    m = _TYPE.match(s.strip())
    if not m:
        raise IRParseError(f"{where}: expected a type like Tensor[(1, 3), float32], got {s!r}")
    dims = [d.strip() for d in _split_top(m.group(1)) if d.strip()]
    try:
        shape = tuple(int(d) if re.match(r"^-?\d+$", d) else symbolic.parse_dim(d) for d in dims)
    except ShapeMismatchError as e:
        raise IRParseError(f"{where}: bad dimension in {s.strip()!r}: {e}") from None
    try:
        return TensorType(shape, m.group(2))
    except TypeError as e:
        raise IRParseError(f"{where}: bad dtype {m.group(2)!r}: {e}") from None


def _parse_name(s: str, where: str) -> str:
    s = s.strip()
    if not s.startswith("%"):
        raise IRParseError(f"{where}: expected a %name, got {s!r}")
    s = s[1:]
    if s.startswith('"'):
        try:
            return json.loads(s)
        except json.JSONDecodeError:
            raise IRParseError(f"{where}: bad quoted name {s!r}") from None
    if not _PLAIN.match(s):
        raise IRParseError(f"{where}: bad name %{s}")
    return s


def _parse_value(s: str, env: dict, where: str):
    s = s.strip()
    if s.startswith("const("):
        inner = _split_top(s[len("const("):-1])
        if len(inner) != 3 or not s.endswith(")"):
            raise IRParseError(f"{where}: malformed constant {s[:60]!r}")
        dtype = inner[0]
        try:
            shape = json.loads(inner[1])
            vals = json.loads(inner[2])
            arr = np.array(vals, dtype=np.float64 if dtype.startswith("float") else None)
            arr = arr.astype(dtype).reshape(shape)
        except (ValueError, TypeError) as e:
            raise IRParseError(f"{where}: bad constant: {e}") from None
        return Constant(arr)
    name = _parse_name(s, where)
    if name not in env:
        raise IRParseError(f"{where}: %{name} is used before it is defined")
    return env[name]


_HEADER = re.compile(r"^def\s+@([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*\{$")
_HEADER_ATTRS = re.compile(r"^(.*\))\s+attrs=(\{.*\})\s*\{$")
_BIND = re.compile(r"^(.+?)\s=\s(@?[A-Za-z_][A-Za-z0-9_.]*)\((.*)\)\s*:\s*(Tensor\[.*)$")


def parse_module(text: str) -> IRModule:
    """Parse the text form into an ``IRModule``.

    Raises:
        IRParseError: with the line number and what was expected.
    """
    mod = IRModule()
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line or line.startswith("#"):
            continue
        fattrs = {}
        am = _HEADER_ATTRS.match(line)
        if am:
            try:
                fattrs = _loads(am.group(2))
            except (json.JSONDecodeError, ShapeMismatchError):
                raise IRParseError(f"line {i}: bad function attributes {am.group(2)!r}") from None
            line = am.group(1) + " {"
        m = _HEADER.match(line)
        if not m:
            raise IRParseError(f"line {i}: expected 'def @name(...) {{', got {line[:80]!r}")
        fname = m.group(1)
        env: dict = {}
        params = []
        header_line = i
        for p in _split_top(m.group(2)):
            parts = _split_top(p, ":")
            if len(parts) != 2:
                raise IRParseError(f"line {i}: expected '%name: Tensor[...]', got {p!r}")
            v = Var(_parse_name(parts[0], f"line {i}"), _parse_type(parts[1], f"line {i}"))
            env[v.name] = v
            params.append(v)
        bindings, outputs, closed = [], None, False
        while i < len(lines):
            line = lines[i].strip()
            i += 1
            where = f"line {i}"
            if not line or line.startswith("#"):
                continue
            if line == "}":
                closed = True
                break
            if line.startswith("return"):
                outputs = [_parse_value(x, env, where) for x in _split_top(line[len("return"):])]
                continue
            bm = _BIND.match(line)
            if not bm:
                raise IRParseError(f"{where}: expected '%v = op(args) : type', got {line[:80]!r}")
            outs = [_parse_name(x, where) for x in _split_top(bm.group(1))]
            types = [_parse_type(t, where) for t in _split_top(bm.group(4))]
            if len(outs) != len(types):
                raise IRParseError(f"{where}: {len(outs)} results but {len(types)} types")
            args, attrs = [], {}
            for tok in _split_top(bm.group(3)):
                am = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", tok, re.S)
                if am:
                    try:
                        attrs[am.group(1)] = _loads(am.group(2))
                    except (json.JSONDecodeError, ShapeMismatchError):
                        raise IRParseError(f"{where}: bad attribute value {tok!r}") from None
                else:
                    args.append(_parse_value(tok, env, where))
            ovars = []
            for n, t in zip(outs, types):
                if n in env:
                    raise IRParseError(f"{where}: %{n} is defined twice")
                v = Var(n, t)
                env[n] = v
                ovars.append(v)
            bindings.append(Binding(tuple(ovars), Call(bm.group(2), tuple(args),
                                                       normalize_attrs(attrs))))
        if not closed:
            raise IRParseError(f"line {header_line}: function @{fname} is not closed with '}}' "
                               f"(the text ends at line {len(lines)})")
        if outputs is None:
            raise IRParseError(f"line {header_line}: function @{fname} has no return")
        mod[fname] = Function(params, bindings, outputs, fname, normalize_attrs(fattrs))
    return mod
