"""Converters for the ONNX recurrent layers RNN, GRU and LSTM (opsets 7-22).

A recurrence is unrolled over the (static) sequence length into graph operators. The input
projection of all time steps and both directions is one ``matmul`` hoisted out of the time loop,
``X (seq * batch, input) . [W_0; W_1]^T`` (one 2-D GEMM over all rows) plus ``Wb + Rb`` (all of ``Rb`` is folded in, except
GRU's ``Rbh`` under ``linear_before_reset``, which the reset gate scales). Each step is then the
recurrent ``matmul`` ``h . R_d^T`` (``R_d^T`` built once per direction and shared by every step, so
the compiled model holds one packed copy that stays in cache) and the gate math, whose slices of
the projection and of ``h . R^T`` fuse into the gate kernels: 3 kernels per LSTM step, 2 per GRU
step (``linear_before_reset=1``). ``sequence_lens`` masks the steps
past each batch entry's length (the state is carried, the output is 0); a reverse direction runs
forward over its projection reversed within each length (``reverse_sequence``).

Gate order follows ONNX: RNN ``[i]``, GRU ``[z, r, h]``, LSTM ``[i, o, f, c]`` (peepholes
``[i, o, f]``). ``layout=1`` takes batch-major ``X``/states and returns batch-major outputs.
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeMismatchError, UnsupportedOpError
from . import converter

# activation name -> (graph op, default alpha, default beta, uses alpha, uses beta)
_ACTS = {
    "relu": ("nn.relu", None, None), "tanh": ("tanh", None, None),
    "sigmoid": ("sigmoid", None, None), "softsign": ("nn.softsign", None, None),
    "softplus": ("nn.softplus", None, None), "leakyrelu": ("nn.leaky_relu", 0.01, None),
    "thresholdedrelu": ("nn.thresholded_relu", 1.0, None), "elu": ("nn.elu", 1.0, None),
    "hardsigmoid": ("nn.hard_sigmoid", 0.2, 0.5), "affine": ("affine", 1.0, 0.0),
    "scaledtanh": ("scaled_tanh", 1.0, 1.0),
}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


class Activation:
    """One named ONNX RNN activation with its alpha/beta."""

    def __init__(self, name: str, alpha=None, beta=None):
        key = name.lower()
        if key not in _ACTS:
            raise UnsupportedOpError(f"activation {name!r} is not one of "
                                     f"{sorted(n for n in _ACTS)} (case-insensitive)")
        self.op, da, db = _ACTS[key]
        self.alpha = da if alpha is None else alpha
        self.beta = db if beta is None else beta
        self.takes_alpha, self.takes_beta = da is not None, db is not None

    def __call__(self, ctx, x):
        dt = x.type.dtype
        if self.op == "affine":
            return ctx.call("add", [ctx.call("multiply", [x, ctx.const(self.alpha, dt)]),
                                    ctx.const(self.beta, dt)])
        if self.op == "scaled_tanh":
            t = ctx.call("tanh", [ctx.call("multiply", [x, ctx.const(self.beta, dt)])])
            return ctx.call("multiply", [t, ctx.const(self.alpha, dt)])
        attrs = {}
        if self.takes_alpha:
            attrs["alpha"] = float(self.alpha)
        if self.takes_beta:
            attrs["beta"] = float(self.beta)
        return ctx.call(self.op, [x], attrs)


def activations(node, count: int, num_dir: int) -> list[list[Activation]]:
    """Per direction, the ``count`` activations of the node (alpha/beta consumed in order by
    the activations that take them)."""
    names = list(node.attr("activations") or [])
    if not names:
        names = _DEFAULT_ACTS[node.op_type] * num_dir
    elif num_dir == 2 and len(names) == count:
        names = names * 2
    if len(names) != count * num_dir:
        raise ShapeMismatchError(f"{node.op_type} needs {count * num_dir} activations, got "
                                 f"{names}")
    alphas = list(node.attr("activation_alpha") or [])
    betas = list(node.attr("activation_beta") or [])
    out = []
    for name in names:
        probe = Activation(name)
        a = alphas.pop(0) if probe.takes_alpha and alphas else None
        b = betas.pop(0) if probe.takes_beta and betas else None
        out.append(Activation(name, a, b))
    return [out[d * count:(d + 1) * count] for d in range(num_dir)]


def _slice(ctx, v, axis: int, start: int, stop: int):
    shape = v.type.shape
    b = [0] * len(shape)
    e = list(shape)
    b[axis], e[axis] = start, stop
    return ctx.call("strided_slice", [v], {"begin": b, "end": e, "strides": [1] * len(shape)})


def _index(ctx, v, k: int):
    """``v[k]`` (drops axis 0)."""
    s = _slice(ctx, v, 0, k, k + 1)
    return ctx.call("reshape", [s], {"newshape": list(v.type.shape[1:])})


def _stack(ctx, vs, axis: int):
    """Stack equal-shaped values along a new ``axis``."""
    shp = list(vs[0].type.shape)
    expanded = [ctx.call("reshape", [v], {"newshape": shp[:axis] + [1] + shp[axis:]})
                for v in vs]
    return expanded[0] if len(vs) == 1 else ctx.call("concatenate", expanded, {"axis": axis})


def _gates(ctx, v, n: int, hidden: int):
    return [_slice(ctx, v, v.type.ndim - 1, k * hidden, (k + 1) * hidden) for k in range(n)]


def _step_gate(ctx, xw, t: int, k: int, hidden: int, batch: int):
    """Gate ``k`` of step ``t`` of the projection ``xw`` (seq * batch, G * hidden), rows
    ``t * batch .. (t + 1) * batch``, as one slice (batch, hidden): each gate reads ``xw`` on
    its own, so its slice fuses into the kernel of the gate math instead of the step's
    projection being copied out first."""
    return ctx.call("strided_slice", [xw], {"begin": [t * batch, k * hidden],
                                            "end": [(t + 1) * batch, (k + 1) * hidden],
                                            "strides": [1, 1]})


def _matmul_t(ctx, a, w):
    """``a @ w.T`` for a 2-D weight ``w``."""
    return ctx.call("matmul", [a, ctx.call("transpose", [w], {"perm": [1, 0]})])


def _add(ctx, *vs):
    acc = vs[0]
    for v in vs[1:]:
        if v is not None:
            acc = ctx.call("add", [acc, v])
    return acc


def _mul(ctx, a, b):
    return ctx.call("multiply", [a, b])


def _clip(ctx, v, clip):
    return v if clip is None else ctx.call("clip", [v], {"min": -float(clip),
                                                          "max": float(clip)})


def _recurrence(ctx, node):
    kind = node.op_type
    G = _GATES[kind]
    x, w, r = node.input(0), node.input(1), node.input(2)
    b, lens, h0 = node.input(3), node.input(4), node.input(5)
    c0 = node.input(6) if kind == "LSTM" else None
    p = node.input(7) if kind == "LSTM" else None
    layout = int(node.attr("layout", 0))
    direction = node.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise UnsupportedOpError(f"{kind} direction={direction!r} is not forward, reverse or "
                                 f"bidirectional")
    num_dir = 2 if direction == "bidirectional" else 1
    if x.type.ndim != 3 or w.type.ndim != 3 or r.type.ndim != 3:
        raise ShapeMismatchError(f"{kind}: X, W, R must be 3-D, got {x.type.shape}, "
                                 f"{w.type.shape}, {r.type.shape}")
    hidden = node.attr("hidden_size") or r.type.shape[-1]
    if w.type.shape[0] != num_dir or w.type.shape[1] != G * hidden or \
            r.type.shape[1:] != (G * hidden, hidden):
        raise ShapeMismatchError(f"{kind}: W {w.type.shape} / R {r.type.shape} do not match "
                                 f"{num_dir} direction(s) x {G} gates x hidden {hidden}")
    if layout:
        x = ctx.call("transpose", [x], {"perm": [1, 0, 2]})
        h0 = None if h0 is None else ctx.call("transpose", [h0], {"perm": [1, 0, 2]})
        c0 = None if c0 is None else ctx.call("transpose", [c0], {"perm": [1, 0, 2]})
    seq, batch, _ = x.type.shape
    dt = x.type.dtype
    acts = activations(node, {"RNN": 1, "GRU": 2, "LSTM": 3}[kind], num_dir)
    clip = node.attr("clip")
    if lens is not None:
        lens = ctx.call("cast", [lens], {"dtype": "int64"})
    full_lens = lens if lens is not None else ctx.const(np.full(batch, seq, np.int64))
    lbr = kind == "GRU" and bool(node.attr("linear_before_reset", 0))
    # the input projection of every step and direction is one GEMM, hoisted out of the time
    # loop: X (seq, batch, input) . [W_0; W_1]^T with the foldable recurrent bias added too
    # (all of Rb except GRU's Rbh under linear_before_reset, which is scaled by the reset gate)
    # as a 2-D GEMM over the rows (seq * batch, input): a (seq, batch, input) matmul is a
    # batched GEMM of `batch` rows per step, which the GEMM rule tiles one row at a time
    w_all = ctx.call("reshape", [w], {"newshape": [num_dir * G * hidden, w.type.shape[2]]})
    x_rows = ctx.call("reshape", [x], {"newshape": [seq * batch, x.type.shape[2]]})
    xw_all = _matmul_t(ctx, x_rows, w_all)  # (seq * batch, num_dir * G * hidden)
    rbh_of = [None] * num_dir
    if b is not None:
        fold = []
        for d in range(num_dir):
            bd = _index(ctx, b, d)
            wb, rb = _slice(ctx, bd, 0, 0, G * hidden), _slice(ctx, bd, 0, G * hidden,
                                                                 2 * G * hidden)
            if lbr:
                rbh_of[d] = _slice(ctx, rb, 0, 2 * hidden, 3 * hidden)
                rb = ctx.call("concatenate", [_slice(ctx, rb, 0, 0, 2 * hidden),
                                              ctx.const(np.zeros(hidden, dt))], {"axis": 0})
            fold.append(ctx.call("add", [wb, rb]))
        xw_all = ctx.call("add", [xw_all, fold[0] if num_dir == 1 else
                                  ctx.call("concatenate", fold, {"axis": 0})])
    ys, hs, cs = [], [], []
    for d in range(num_dir):
        reverse = direction == "reverse" or d == 1
        xw = xw_all if num_dir == 1 else _slice(ctx, xw_all, 1, d * G * hidden,
                                                (d + 1) * G * hidden)
        if reverse:  # the projection is per step: reversing it is reversing X
            xw = ctx.call("reshape", [xw], {"newshape": [seq, batch, G * hidden]})
            xw = ctx.call("reverse_sequence", [xw, full_lens], {"batch_axis": 1, "time_axis": 0})
            xw = ctx.call("reshape", [xw], {"newshape": [seq * batch, G * hidden]})
        # R_d^T built once and shared by every step's GEMM: one weight (one packed copy)
        # that stays in cache across the time loop, not a folded copy per step
        rd = _index(ctx, r, d)
        # (GRU without linear_before_reset: h . R^T covers only z and r; the candidate's
        # recurrent GEMM takes r * h, so its R_h^T is a weight of its own)
        split_h = kind == "GRU" and not lbr
        rt = ctx.call("transpose", [_slice(ctx, rd, 0, 0, 2 * hidden) if split_h else rd],
                      {"perm": [1, 0]})
        rht = None if not split_h else \
            ctx.call("transpose", [_slice(ctx, rd, 0, 2 * hidden, 3 * hidden)], {"perm": [1, 0]})
        rbh = rbh_of[d]
        h = _index(ctx, h0, d) if h0 is not None else ctx.const(np.zeros((batch, hidden), dt))
        c = _index(ctx, c0, d) if c0 is not None else ctx.const(np.zeros((batch, hidden), dt))
        pd = _gates(ctx, _index(ctx, p, d), 3, hidden) if p is not None else None
        outs = []
        for t in range(seq):
            # per step: the recurrent GEMM h . R^T alone, then the gate math as elementwise
            # kernels that read their slices of the hoisted projection and of h . R^T directly
            xg = [_step_gate(ctx, xw, t, k, hidden, batch) for k in range(G)]
            hg = _gates(ctx, ctx.call("matmul", [h, rt]), G - split_h, hidden)
            f = acts[d]
            if kind == "RNN":
                h_new = f[0](ctx, _clip(ctx, _add(ctx, xg[0], hg[0]), clip))
                c_new = None
            elif kind == "GRU":
                z = f[0](ctx, _clip(ctx, _add(ctx, xg[0], hg[0]), clip))
                rg = f[0](ctx, _clip(ctx, _add(ctx, xg[1], hg[1]), clip))
                if lbr:
                    pre = _add(ctx, xg[2], _mul(ctx, rg, _add(ctx, hg[2], rbh)))
                else:  # Rbh is folded into the projection
                    rh = ctx.call("matmul", [_mul(ctx, rg, h), rht])
                    pre = _add(ctx, xg[2], rh)
                hc = f[1](ctx, _clip(ctx, pre, clip))
                one_minus_z = ctx.call("subtract", [ctx.const(1.0, dt), z])
                h_new = _add(ctx, _mul(ctx, one_minus_z, hc), _mul(ctx, z, h))
                c_new = None
            else:
                g = [_add(ctx, xk, hk) for xk, hk in zip(xg, hg)]  # i, o, f, c
                pi = _mul(ctx, pd[0], c) if pd else None
                i = f[0](ctx, _clip(ctx, _add(ctx, g[0], pi), clip))
                if node.attr("input_forget", 0):
                    fg = ctx.call("subtract", [ctx.const(1.0, dt), i])
                else:
                    pf = _mul(ctx, pd[2], c) if pd else None
                    fg = f[0](ctx, _clip(ctx, _add(ctx, g[2], pf), clip))
                cc = f[1](ctx, _clip(ctx, g[3], clip))
                c_new = _add(ctx, _mul(ctx, fg, c), _mul(ctx, i, cc))
                po = _mul(ctx, pd[1], c_new) if pd else None
                o = f[0](ctx, _clip(ctx, _add(ctx, g[1], po), clip))
                h_new = _mul(ctx, o, f[2](ctx, c_new))
            if lens is not None:
                live = ctx.call("reshape", [ctx.call("greater", [lens, ctx.const(t, "int64")])],
                                {"newshape": [batch, 1]})
                outs.append(ctx.call("where", [live, h_new, ctx.const(0.0, dt)]))
                h = ctx.call("where", [live, h_new, h])
                if c_new is not None:
                    c = ctx.call("where", [live, c_new, c])
            else:
                outs.append(h_new)
                h = h_new
                c = c_new if c_new is not None else c
        y = _stack(ctx, outs, 0)  # (seq, batch, hidden)
        if reverse:
            y = ctx.call("reverse_sequence", [y, full_lens], {"batch_axis": 1, "time_axis": 0})
        ys.append(y)
        hs.append(h)
        cs.append(c)
    y = _stack(ctx, ys, 1)  # (seq, num_dir, batch, hidden)
    yh = _stack(ctx, hs, 0)
    yc = _stack(ctx, cs, 0)
    if layout:
        y = ctx.call("transpose", [y], {"perm": [2, 0, 1, 3]})
        yh = ctx.call("transpose", [yh], {"perm": [1, 0, 2]})
        yc = ctx.call("transpose", [yc], {"perm": [1, 0, 2]})
    return [y, yh, yc] if kind == "LSTM" else [y, yh]


for _kind in ("RNN", "GRU", "LSTM"):
    converter(_kind, since=7)(_recurrence)
