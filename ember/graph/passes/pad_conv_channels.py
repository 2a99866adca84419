"""PadConvChannels: a classifier head's convolution gets zero output channels up to a multiple
of the register block, and the padding is sliced off after the global pool.

    global_pool(act(conv(x, W, b)))  =>  strided_slice(global_pool(act(conv(x, W', b'))), :C)

with ``W'``/``b'`` ``W``/``b`` plus zero rows up to ``C'`` output channels (``C'`` the next
multiple of ``PadConvChannels.multiple``, default 32), ``act`` a chain of one-input
elementwise operators (ReLU...). Each padded channel computes ``act(0)``, pooled on its own and
dropped by the slice, so the result is unchanged. The point is the GEMM's register block: with
``C`` not a multiple of the vector width (SqueezeNet's ``conv10``: 1000 classes) the widest
legal block has a masked tail vector (13 x 25 on AVX-512: 22 % of the FMA lanes idle), with
``C' = 1024`` it is the full-lane 13 x 32 (2.4 % extra work).

Only NHWC convolutions (after ``ConvertLayout``) with constant weights, ``group=1``, at least
``min_channels`` (256) outputs and at most 1/16 extra channels, whose value reaches an
``nn.global_avg_pool`` / ``nn.global_max_pool`` through single-use elementwise operators, are
padded: there the slice is of a (N, 1, 1, C') tensor and costs nothing; anywhere else it would
be a copy of the whole activation.
"""

from __future__ import annotations

import numpy as np

from ..ir import Constant, Function, Var
from ..mutator import rewrite_function, users
from .pass_manager import function_pass, register_config

MULTIPLE = register_config("PadConvChannels.multiple", int,
                           "output channels of a padded classifier-head convolution are "
                           "rounded up to a multiple of this (default 32: two AVX-512 vectors)")

_POOLS = ("nn.global_avg_pool", "nn.global_max_pool")


def _elementwise_unary(b) -> bool:
    from ...ops.registry import OpPattern, get_op
    if b.call.is_function_call or len(b.outputs) != 1:
        return False
    vars_in = [a for a in b.call.args if isinstance(a, Var)]
    try:
        pattern = get_op(b.call.op).pattern
    except Exception:  # noqa: BLE001 - an unknown op is simply not padded through
        return False
    return pattern == OpPattern.ELEMWISE and len(vars_in) == 1 and len(b.call.args) == 1


def _head(b, use, multiple: int, min_channels: int):
    """``(chain, pool, padded channels)`` when ``b`` is a convolution to pad (module doc)."""
    c = b.call
    if c.is_function_call or c.op != "nn.conv" or c.attrs.get("group", 1) != 1:
        return None
    if c.attrs.get("data_layout") != "NHWC" or c.attrs.get("out_layout") not in (None, "NHWC"):
        return None
    if not isinstance(c.args[1], Constant) or (len(c.args) > 2 and
                                               not isinstance(c.args[2], Constant)):
        return None
    cout = int(c.args[1].data.shape[0])
    padded = -(-cout // multiple) * multiple
    if cout < min_channels or padded == cout or (padded - cout) * 16 > cout:
        return None
    chain, v = [], b.outputs[0]
    while True:
        us = use.get(id(v), [])
        if len(us) != 1 or us[0] is None:
            return None
        u = us[0]
        if not u.call.is_function_call and u.call.op in _POOLS and \
                u.call.attrs.get("data_layout") == "NHWC":
            return chain, u, padded
        if not _elementwise_unary(u):
            return None
        chain.append(u)
        v = u.outputs[0]


def pad_function(func: Function, multiple: int = 32, min_channels: int = 256) -> Function:
    """``func`` with each classifier-head convolution padded (module doc)."""
    use = users(func)
    new_of: dict[int, object] = {}  # old output -> its rewritten value

    def visit(b, args, rw):
        if id(b.outputs[0]) in new_of:  # a member of a padded chain: already emitted
            return [new_of[id(b.outputs[0])]]
        head = _head(b, use, multiple, min_channels)
        if head is None:
            return None
        chain, pool, padded = head
        w = args[1].data
        cout = w.shape[0]
        wp = np.concatenate([w, np.zeros((padded - cout,) + w.shape[1:], w.dtype)], axis=0)
        new_args = [args[0], Constant(wp, args[1].name_hint)]
        if len(args) > 2:
            bias = args[2].data
            new_args.append(Constant(np.concatenate(
                [bias, np.zeros((padded - cout,) + bias.shape[1:], bias.dtype)], axis=0)))
        v = rw.emit("nn.conv", new_args, dict(b.call.attrs))
        out = v
        for u in chain:
            v = rw.emit(u.call.op, [v], dict(u.call.attrs), name=u.outputs[0].name)
            new_of[id(u.outputs[0])] = v
        p = rw.emit(pool.call.op, [v], dict(pool.call.attrs), name=pool.outputs[0].name)
        shape = list(p.type.shape)
        new_of[id(pool.outputs[0])] = rw.emit(
            "strided_slice", [p], {"begin": [0] * len(shape), "end": shape[:-1] + [cout],
                                   "strides": [1] * len(shape)}, name=pool.outputs[0].name)
        return [out]
    return rewrite_function(func, visit)


@function_pass("PadConvChannels", opt_level=2)
def PadConvChannels(func, mod, ctx):
    """Pad a classifier head's convolution to full-lane output channels (module doc)."""
    return pad_function(func, int(ctx.config.get(MULTIPLE, 32)))
