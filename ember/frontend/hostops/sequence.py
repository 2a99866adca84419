"""Sequence and optional operators on the host (a sequence is a Python list of arrays, an empty
optional is ``None``): SequenceConstruct/Empty/Insert/At/Erase/Length, ConcatFromSequence,
SplitToSequence, Optional, OptionalHasElement, OptionalGetElement."""

from __future__ import annotations

import numpy as np
from onnx import helper

from ...errors import ShapeMismatchError
from . import host_op


def _pos(p, n: int, insert: bool = False) -> int:
    k = int(np.asarray(p).reshape(-1)[0])
    lo, hi = -n, (n if insert else n - 1)
    if not lo <= k <= hi:
        raise ShapeMismatchError(f"sequence position {k} is out of range for length {n}")
    return k + n if k < 0 else k


@host_op("SequenceConstruct")
def seq_construct(h, ins):
    """Host kernel for ONNX SequenceConstruct: the sequence (a list) of the input tensors."""
    return [[np.asarray(x) for x in ins]]


@host_op("SequenceEmpty")
def seq_empty(h, ins):
    """Host kernel for ONNX SequenceEmpty: an empty sequence."""
    return [[]]


@host_op("SequenceInsert")
def seq_insert(h, ins):
    """Host kernel for ONNX SequenceInsert: a copy of the sequence with the tensor inserted at
    ``position`` (default: appended; negative counts from the end).

    Raises:
        ShapeMismatchError: ``position`` out of ``[-n, n]``."""
    seq = list(ins[0])
    pos = len(seq) if len(ins) < 3 or ins[2] is None else _pos(ins[2], len(seq), insert=True)
    seq.insert(pos, np.asarray(ins[1]))
    return [seq]


@host_op("SequenceAt")
def seq_at(h, ins):
    """Host kernel for ONNX SequenceAt: the element at ``position`` (negative counts from the end).

    Raises:
        ShapeMismatchError: ``position`` out of ``[-n, n - 1]``."""
    return [ins[0][_pos(ins[1], len(ins[0]))]]


@host_op("SequenceErase")
def seq_erase(h, ins):
    """Host kernel for ONNX SequenceErase: a copy of the sequence without the element at
    ``position`` (default: the last).

    Raises:
        ShapeMismatchError: ``position`` out of ``[-n, n - 1]``."""
    seq = list(ins[0])
    pos = len(seq) - 1 if len(ins) < 2 or ins[1] is None else _pos(ins[1], len(seq))
    del seq[pos]
    return [seq]


@host_op("SequenceLength")
def seq_length(h, ins):
    """Host kernel for ONNX SequenceLength: the int64 scalar length of the sequence."""
    return [np.array(len(ins[0]), np.int64)]


@host_op("ConcatFromSequence")
def concat_from_sequence(h, ins):
    """Host kernel for ONNX ConcatFromSequence: the sequence's tensors concatenated along ``axis``,
    or stacked on a new ``axis`` when ``new_axis=1``."""
    axis = h.attr("axis")
    if h.attr("new_axis", 0):
        return [np.stack(ins[0], axis=axis)]
    return [np.concatenate(ins[0], axis=axis)]


@host_op("SplitToSequence")
def split_to_sequence(h, ins):
    """Host kernel for ONNX SplitToSequence: split along ``axis`` into a sequence: by the sizes in
    ``split`` (1-D), in chunks of ``split`` (scalar; the last may be smaller), or into size-1 parts
    (squeezed unless ``keepdims=1``).

    Raises:
        ShapeMismatchError: 1-D ``split`` sizes that do not sum to the axis length."""
    x = np.asarray(ins[0])
    axis = h.attr("axis", 0)
    axis = axis + x.ndim if axis < 0 else axis
    n = x.shape[axis]
    split = ins[1] if len(ins) > 1 else None
    if split is None:
        parts = [np.take(x, [i], axis=axis) for i in range(n)]
        if not h.attr("keepdims", 1):
            parts = [np.squeeze(p, axis=axis) for p in parts]
        return [parts]
    s = np.asarray(split)
    if s.ndim == 0:
        k = int(s)
        bounds = list(range(k, n, k))
    else:
        bounds = list(np.cumsum(s)[:-1])
        if int(np.sum(s)) != n:
            raise ShapeMismatchError(f"SplitToSequence split {s.tolist()} does not sum to {n}")
    return [list(np.split(x, bounds, axis=axis))]


@host_op("Optional")
def optional(h, ins):
    """Host kernel for ONNX Optional: an optional holding the input, or empty (``None``) without
    one."""
    return [ins[0] if ins else None]


@host_op("OptionalHasElement")
def optional_has_element(h, ins):
    """Host kernel for ONNX OptionalHasElement: bool scalar, true when the input is present and not
    an empty optional."""
    return [np.array(bool(ins) and ins[0] is not None)]


@host_op("OptionalGetElement")
def optional_get_element(h, ins):
    """Host kernel for ONNX OptionalGetElement: the value held by the optional (a tensor or
    sequence is returned as is).

    Raises:
        ShapeMismatchError: the optional is empty."""
    if ins[0] is None:
        raise ShapeMismatchError("OptionalGetElement of an empty optional")
    return [ins[0]]


@host_op("Identity", mode="fallback")
def identity(h, ins):
    """Host kernel for ONNX Identity on sequences, optionals and strings (fallback): the input
    itself."""
    return [ins[0]]


def _elem_np(to: int):
    return helper.tensor_dtype_to_np_dtype(to)
