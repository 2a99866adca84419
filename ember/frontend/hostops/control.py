"""Control flow on the host: ``If``, ``Loop``, ``Scan``, ``SequenceMap``. The host only decides
which branch runs and how often; every body runs as a staged graph of compiled segments."""

from __future__ import annotations

import numpy as np

from ...errors import ShapeMismatchError, UnsupportedOpError
from . import host_op


def _scalar_bool(v, what: str) -> bool:
    a = np.asarray(v)
    if a.size != 1:
        raise ShapeMismatchError(f"{what} must hold one element, got shape {a.shape}")
    return bool(a.reshape(-1)[0])


@host_op("If")
def if_(h, ins):
    """Host kernel for ONNX If: run ``then_branch`` or ``else_branch`` (by the one-element
    ``cond``) with the outer scope; returns its outputs.

    Raises:
        ShapeMismatchError: ``cond`` does not hold exactly one element."""
    cond = _scalar_bool(ins[0], "If cond")
    g = h.attr("then_branch" if cond else "else_branch")
    return h.run_graph(g, [], h.outer)


def _stack(parts: list, axis: int = 0):
    if not parts:
        return np.zeros((0,), np.float32)
    if all(isinstance(p, list) for p in parts):
        return [x for p in parts for x in p]
    return np.stack([np.asarray(p) for p in parts], axis=axis)


@host_op("Loop")
def loop(h, ins):
    """Host kernel for ONNX Loop: run ``body`` while ``i < M`` (when given) and ``cond``, threading
    the loop-carried values; returns the final carried values, then each scan output stacked along
    a new axis 0 (empty, typed from the body's output, when no iteration ran).

    Raises:
        ShapeMismatchError: a ``cond`` that does not hold exactly one element."""
    m, cond, carried = ins[0], ins[1], list(ins[2:])
    body = h.attr("body")
    trip = int(np.asarray(m).reshape(-1)[0]) if m is not None else None
    c = _scalar_bool(cond, "Loop cond") if cond is not None else True
    nv = len(carried)
    scans: list[list] = []
    i = 0
    while (trip is None or i < trip) and c:
        outs = h.run_graph(body, [np.array(i, np.int64), np.array(c, np.bool_)] + carried,
                           h.outer)
        c = _scalar_bool(outs[0], "Loop body cond")
        carried = list(outs[1:1 + nv])
        extra = outs[1 + nv:]
        if not scans:
            scans = [[] for _ in extra]
        for lst, v in zip(scans, extra):
            lst.append(v)
        i += 1
    n_scan = len(body.output) - 1 - nv
    if not scans:
        scans = [[] for _ in range(n_scan)]
        out_scans = []
        for k in range(n_scan):
            out_scans.append(_empty_scan(body.output[1 + nv + k]))
        return carried + out_scans
    return carried + [_stack(s) for s in scans]


def _empty_scan(vi):
    import onnx
    from onnx import helper
    tt = vi.type.tensor_type
    dt = helper.tensor_dtype_to_np_dtype(tt.elem_type) if tt.elem_type else np.float32
    dims = [d.dim_value if d.HasField("dim_value") else 0 for d in tt.shape.dim] \
        if tt.HasField("shape") else []
    del onnx
    return np.zeros([0] + dims, dt)


@host_op("Scan")
def scan(h, ins):
    """Host kernel for ONNX Scan (8 with a batch axis, 9+): run ``body`` over the scan inputs along
    ``scan_input_axes`` (reversed per ``scan_input_directions``), threading the state; returns the
    final states, then the scan outputs stacked along ``scan_output_axes``.

    Raises:
        ShapeMismatchError: scan inputs of different sequence lengths."""
    body = h.attr("body")
    n_scan_in = h.attr("num_scan_inputs")
    if h.opset < 9:
        return _scan8(h, ins, body, n_scan_in)
    n_state = len(ins) - n_scan_in
    states = list(ins[:n_state])
    xs = [np.asarray(x) for x in ins[n_state:]]
    in_axes = list(h.attr("scan_input_axes") or [0] * n_scan_in)
    in_dirs = list(h.attr("scan_input_directions") or [0] * n_scan_in)
    n_scan_out = len(body.output) - n_state
    out_axes = list(h.attr("scan_output_axes") or [0] * n_scan_out)
    out_dirs = list(h.attr("scan_output_directions") or [0] * n_scan_out)
    xs = [np.moveaxis(x, a if a >= 0 else a + x.ndim, 0) for x, a in zip(xs, in_axes)]
    if xs and len({x.shape[0] for x in xs}) != 1:
        raise ShapeMismatchError(f"Scan inputs have different sequence lengths "
                                 f"{[x.shape[0] for x in xs]}")
    T = xs[0].shape[0] if xs else 0
    outs_t: list[list] = [[] for _ in range(n_scan_out)]
    for t in range(T):
        step = [x[T - 1 - t] if d else x[t] for x, d in zip(xs, in_dirs)]
        res = h.run_graph(body, states + step, h.outer)
        states = list(res[:n_state])
        for k, v in enumerate(res[n_state:]):
            outs_t[k].append(np.asarray(v))
    scans = []
    for k, lst in enumerate(outs_t):
        if out_dirs[k]:
            lst = lst[::-1]
        y = np.stack(lst, 0) if lst else np.zeros((0,), np.float32)
        a = out_axes[k]
        a = a if a >= 0 else a + y.ndim
        scans.append(np.moveaxis(y, 0, a))
    return states + scans


def _scan8(h, ins, body, n_scan_in):
    seq_lens = ins[0]
    rest = ins[1:]
    n_state = len(rest) - n_scan_in
    states = [np.asarray(s) for s in rest[:n_state]]
    xs = [np.asarray(x) for x in rest[n_state:]]
    dirs = list(h.attr("directions") or [0] * n_scan_in)
    B = xs[0].shape[0]
    n_out = len(body.output) - n_state
    final_states = [[] for _ in range(n_state)]
    scan_outs = [[] for _ in range(n_out)]
    for b in range(B):
        L = int(seq_lens[b]) if seq_lens is not None else xs[0].shape[1]
        st = [s[b] for s in states]
        outs_b = [[] for _ in range(n_out)]
        for t in range(L):
            step = [x[b, L - 1 - t] if d else x[b, t] for x, d in zip(xs, dirs)]
            res = h.run_graph(body, st + step, h.outer)
            st = list(res[:n_state])
            for k, v in enumerate(res[n_state:]):
                outs_b[k].append(np.asarray(v))
        for k in range(n_state):
            final_states[k].append(np.asarray(st[k]))
        for k in range(n_out):
            scan_outs[k].append(np.stack(outs_b[k], 0))
    return [np.stack(s, 0) for s in final_states] + [np.stack(s, 0) for s in scan_outs]


@host_op("SequenceMap")
def sequence_map(h, ins):
    """Host kernel for ONNX SequenceMap: run ``body`` on the ``i``-th element of each sequence
    input (tensor inputs passed whole) for every ``i``; returns one sequence per body output.

    Raises:
        UnsupportedOpError: no input is a sequence."""
    body = h.attr("body")
    seqs = [x for x in ins if isinstance(x, list)]
    if not seqs:
        raise UnsupportedOpError("SequenceMap needs a sequence input")
    n = len(ins[0])
    outs: list[list] = [[] for _ in body.output]
    for i in range(n):
        args = [x[i] if isinstance(x, list) else x for x in ins]
        res = h.run_graph(body, args, h.outer)
        for k, v in enumerate(res):
            outs[k].append(np.asarray(v))
    return outs
