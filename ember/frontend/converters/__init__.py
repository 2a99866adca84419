"""ONNX operator converters: one function per operator and opset range.

A converter is registered with ``@converter("Conv", since=1)``; the importer picks, for a node
of opset ``v``, the registration of that op with the largest ``since <= v`` (and ``until``, when
given, ``>= v``). A converter gets the ``ImportContext`` and the ``NodeView`` and returns the
node's outputs as graph values (``Var`` or ``Constant``), in ONNX output order.

Errors: each converter's docstring lists what it raises itself; in addition the type inference
of the graph ops it emits (``ctx.call``) raises ``ShapeMismatchError``/``UnsupportedOpError``
naming the node, and an input read with ``ctx.require_constant`` raises ``RuntimeValueError``
when its value is only known at run time (the staged executor then specializes on it).
"""

from __future__ import annotations

import functools
from typing import Callable

_CONVERTERS: dict[tuple[str, str], list[tuple[int, int | None, Callable]]] = {}


def converter(op_type: str, since: int = 1, until: int | None = None, domain: str = ""):
    """Register a converter for ``domain.op_type`` at opsets ``[since, until]``."""
    def deco(fn):
        lst = _CONVERTERS.setdefault((domain, op_type), [])
        lst.append((since, until, fn))
        lst.sort(key=lambda t: t[0])
        return fn
    return deco


def lookup_converter(domain: str, op_type: str, opset: int) -> Callable | None:
    """The converter for a node, or ``None`` when the op/opset is not supported."""
    best = None
    for since, until, fn in _CONVERTERS.get((domain, op_type), []):
        if since <= opset and (until is None or opset <= until):
            best = fn
    return best


@functools.lru_cache(maxsize=None)
def _first_opsets() -> dict[tuple[str, str], int]:
    import onnx.defs
    first: dict[tuple[str, str], int] = {}
    for s in onnx.defs.get_all_schemas_with_history():
        k = (s.domain, s.name)
        first[k] = min(first.get(k, s.since_version), s.since_version)
    return first


def onnx_first_opsets() -> dict[tuple[str, str], int]:
    """``{(domain, op_type): opset}``: the opset that introduced each operator in onnx's
    schemas (``onnx.defs``; read once per process, a fresh dict each call)."""
    return dict(_first_opsets())


def supported_onnx_ops() -> dict[tuple[str, str], list[tuple[int, int | None]]]:
    """``{(domain, op_type): [(since, until), ...]}`` of every registered converter.

    ``since`` is never below the opset in which ONNX introduced the operator (a converter
    registered with the default ``since=1`` for ``Gelu`` reports ``20-``).
    """
    first = _first_opsets()
    out = {}
    for k, v in sorted(_CONVERTERS.items()):
        lo = first.get(k, 1)
        ranges = [(max(s, lo), u) for s, u, _ in v if u is None or u >= lo]
        out[k] = ranges
    return out


from . import math, nn, tensor  # noqa: E402,F401  (register the converters)
from . import elementwise, indexing, nn_ext, quantize  # noqa: E402,F401
from . import image  # noqa: E402,F401  (Resize, Upsample, GridSample, Col2Im)
from . import rnn  # noqa: E402,F401  (RNN, GRU, LSTM)
from . import signal  # noqa: E402,F401  (DFT, STFT, windows, MelWeightMatrix)
from . import linalg  # noqa: E402,F401  (Einsum, Det)
from . import training  # noqa: E402,F401  (Adagrad, Adam, Momentum)
from . import spatial  # noqa: E402,F401  (MaxUnpool, RoiAlign, DeformConv)
from . import random  # noqa: E402,F401  (RandomUniform/Normal[Like], Bernoulli)
from . import autodiff  # noqa: E402,F401  (Gradient)
from . import transformer  # noqa: E402,F401  (Attention, RMSNormalization, RotaryEmbedding, ...)
