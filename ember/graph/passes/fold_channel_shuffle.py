"""FoldChannelShuffle: ShuffleNet's channel shuffle costs no copy kernel. A depthwise
convolution commutes with a channel permutation, and the grouped 1x1 convolution after it reads
the shuffled channels through its own indexing (``nn.shuffled_group_conv``):

    gconv(dwconv(shuffle(y), wd, bd), w, b)
      =>  shuffled_group_conv(dwconv(y, wd[inv], bd[inv]), shuffled_weight(w), b)

``shuffle`` is any chain of single-use ``reshape`` / ``transpose`` bindings on a channels-last
(N, H, W, C) value whose composite is, at every pixel, the channel shuffle of ``gs`` groups
(``out[..., j * gs + i] = y[..., i * (C / gs) + j]``; found by running the chain's NumPy
references on an index tensor, so the NCHW round trip ``ConvertLayout`` leaves around ONNX's
reshape -> transpose -> reshape is recognized as it is). ``dwconv`` is an NHWC depthwise
``nn.conv`` (any stride and padding, constant weights and bias) whose only reader is ``gconv``,
an NHWC 1x1 stride-1 unpadded grouped ``nn.conv`` (constant weights). ``w`` is re-laid out by
``ops.channel_shuffle.shuffled_weight``: where ``gs`` does not divide the ``Cg`` input channels
per group (ShuffleNet's 136 = 4 x 34 channels), each group's block takes a column more, its
extra weights zero (36 products instead of 34 per output, against a copy of the tensor; at
most ``MAX_EXTRA_PRODUCTS`` more, else the copy stays).
``inv`` is the inverse permutation: the depthwise convolution now runs on ``y``'s channel
order (channel ``c`` of ``y`` with the filter of its shuffled position). Runs after
``ConvertLayout``.
"""

from __future__ import annotations

import numpy as np

from ..ir import Constant, Var
from ..mutator import rewrite_function, users
from .pass_manager import function_pass

_MOVES = ("reshape", "transpose")


def _nhwc_conv(b):
    c = b.call
    return (not c.is_function_call and c.op == "nn.conv" and c.attrs.get("data_layout") == "NHWC"
            and c.attrs.get("out_layout") in (None, "NHWC") and len(b.outputs) == 1
            and isinstance(c.args[1], Constant)
            and (len(c.args) < 3 or isinstance(c.args[2], Constant)))


def _is_depthwise(b) -> bool:
    if not _nhwc_conv(b):
        return False
    w = b.call.args[1].data
    return w.ndim == 4 and w.shape[1] == 1 and int(b.call.attrs.get("group", 1)) == w.shape[0] \
        and tuple(b.call.args[0].type.shape)[-1] == w.shape[0]


# the folded convolution computes gs x Q products per output for the group's Cg channels; it is
# taken while that is at most this much more (ShuffleNet's 34 channels per group, gs = 4: 36)
MAX_EXTRA_PRODUCTS = 0.25


def _blocks_fit(C: int, g: int, gs: int) -> bool:
    """Every group's block of the shuffled convolution stays inside the C / gs columns and
    adds at most ``MAX_EXTRA_PRODUCTS`` zero products."""
    from ...ops.channel_shuffle import shuffled_blocks
    j0, Q = shuffled_blocks(C, g, gs)
    return j0[-1] + Q <= C // gs and gs * Q <= (1 + MAX_EXTRA_PRODUCTS) * (C // g)


def _is_pointwise_group(b, gs: int) -> bool:
    if not _nhwc_conv(b):
        return False
    a, w = b.call.attrs, b.call.args[1].data
    g = int(a.get("group", 1))
    C = b.call.args[0].type.shape[-1]
    return (g > 1 and w.ndim == 4 and w.shape[2:] == (1, 1) and C % g == 0
            and w.shape[1] == C // g and C % gs == 0 and _blocks_fit(C, g, gs)
            and all(int(s) == 1 for s in (a.get("strides") or [1, 1]))
            and all(int(d) == 1 for d in (a.get("dilations") or [1, 1]))
            and not any(a.get("pads") or []))


def _chain(v, prod, use):
    """The single-use reshape/transpose bindings producing ``v`` back to their source value,
    in execution order, and that source (``([], v)`` when there are none)."""
    chain = []
    while isinstance(v, Var) and id(v) in prod:
        b = prod[id(v)]
        if b.call.is_function_call or b.call.op not in _MOVES or len(b.outputs) != 1:
            break
        if chain and len(use.get(id(b.outputs[0]), [])) != 1:
            break  # an inner value read elsewhere
        chain.insert(0, b)
        v = b.call.args[0]
    return chain, v


def _shuffle_groups(chain, src) -> int | None:
    """``gs`` when ``chain`` applied to ``src`` (N, H, W, C) is the channel shuffle of ``gs > 1``
    groups at every pixel, else ``None``."""
    from ...ops import get_op
    from ...ops.channel_shuffle import shuffle_channels
    shape = tuple(src.type.shape)
    if len(shape) != 4 or not all(isinstance(d, int) for d in shape) or \
            tuple(chain[-1].outputs[0].type.shape) != shape or np.prod(shape) > (1 << 24):
        return None
    idx = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    v = idx
    for b in chain:
        v = get_op(b.call.op).reference([v], b.call.attrs)[0]
    v = np.asarray(v)
    if v.shape != shape:
        return None
    C = shape[-1]
    for gs in range(2, C):
        if C % gs == 0 and np.array_equal(v, shuffle_channels(idx, gs)):
            return gs
    return None


def fold_function(func):
    """``func`` with the rewrite of the module doc applied."""
    prod = {id(o): b for b in func.bindings for o in b.outputs}
    use = users(func)
    plan: dict[int, tuple] = {}  # id(gconv binding) -> (dw binding, source y, gs)
    for b in func.bindings:
        if not _is_depthwise(b):
            continue
        us = use.get(id(b.outputs[0]), [])
        if len(us) != 1 or us[0] is None:
            continue
        chain, src = _chain(b.call.args[0], prod, use)
        if not chain or len(use.get(id(chain[-1].outputs[0]), [])) != 1:
            continue
        gs = _shuffle_groups(chain, src)
        if gs is None or not _is_pointwise_group(us[0], gs) or us[0].call.args[0] is not \
                b.outputs[0]:
            continue
        plan[id(us[0])] = (b, src, gs)
    if not plan:
        return func
    dws = {id(p[0]) for p in plan.values()}

    def visit(b, args, rw):
        if id(b) in dws:
            return [b.outputs[0]]  # emitted by its reader below (its only one)
        if id(b) not in plan:
            return None
        dw, src, gs = plan[id(b)]
        C = src.type.shape[-1]
        # shuffled position c' holds y's channel perm[c']; y's channel c sits at inv[c]
        perm = (np.arange(C) % gs) * (C // gs) + np.arange(C) // gs
        inv = np.argsort(perm)
        dargs = [rw.lookup(src), Constant(dw.call.args[1].data[inv], dw.call.args[1].name_hint)]
        if len(dw.call.args) > 2:
            dargs.append(Constant(dw.call.args[2].data[inv], dw.call.args[2].name_hint))
        z = rw.emit("nn.conv", dargs, dict(dw.call.attrs), name=dw.outputs[0].name)
        from ...ops.channel_shuffle import shuffled_weight
        wq = shuffled_weight(args[1].data, C, int(b.call.attrs["group"]), gs)
        gargs = [z, Constant(wq, args[1].name_hint)] + list(args[2:])
        return [rw.emit("nn.shuffled_group_conv", gargs,
                        {"group": int(b.call.attrs["group"]), "shuffle": gs})]
    return rewrite_function(func, visit)


@function_pass("FoldChannelShuffle", opt_level=2)
def FoldChannelShuffle(func, mod, ctx):
    """A channel shuffle before a depthwise + grouped 1x1 convolution pair folded into their
    indexing (module doc)."""
    return fold_function(func)
