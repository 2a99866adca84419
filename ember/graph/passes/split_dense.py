"""SplitDense (GPU pipelines): a dense layer whose constant weight is larger than one device
buffer binding may hold becomes several dense layers over output-feature chunks, their
outputs concatenated.

WebGPU binds every tensor of a kernel as one storage buffer, at most the adapter's
``maxStorageBufferBindingSize`` bytes (WebGPU spec, "Limits"; the spec's default and the
guaranteed minimum is 128 MiB = 134,217,728 bytes, lavapipe's own limit). The first classifier
weight of AlexNet (9216 x 4096 float32: 151 MB), ZFNet-512 and VGG-19 (25088 x 4096: 411 MB)
is bigger. Dense layers are independent along their output features, so::

    nn.gemm(A, B, C)  ->  concatenate([nn.gemm(A, B[.., n0:n1], C[.., n0:n1]), ...], axis=-1)
    matmul(A, W)      ->  concatenate([matmul(A, W[:, n0:n1]), ...], axis=-1)

``B`` keeps its ``trans_b`` layout (rows of a ``(N, K)`` weight, columns of a ``(K, N)`` one);
``C`` is split where its last axis has ``N`` entries and shared where it broadcasts. Each chunk
is its own kernel, so FuseOps still fuses a chunk's elementwise producers; the chunks are
balanced (``ceil(N / pieces)`` features each, ``pieces`` the fewest that fit).

Candidates: ``nn.gemm`` and ``matmul`` whose weight (input 1) is a 2-D ``Constant`` of more than
the budget's bytes. A weight of which one output feature alone (``K`` values) exceeds the
budget is left as it is (the runtime then refuses it with a ``DeviceError`` naming the node).

The budget, in bytes: the ``PassContext`` config ``SplitDense.max_weight_bytes`` when set, else
the target attribute ``max_storage_buffer_binding_size`` (``Target("webgpu")``: 134,217,728 by
default, ``-max_storage_buffer_binding_size=BYTES`` to change it; ``cuda`` has no default, so
the pass does nothing there unless the option or the config is given). The adapter's real limit
is only known at run time; a smaller one than the target's still gets the runtime's
``DeviceError``.
"""

from __future__ import annotations

import numpy as np

from ..ir import Constant
from ..mutator import rewrite_function
from .combine_parallel import slice_axis
from .pass_manager import function_pass, register_config

MAX_WEIGHT_BYTES = register_config(
    "SplitDense.max_weight_bytes", int,
    "largest constant dense/gemm/matmul weight (bytes) SplitDense leaves whole (default: the "
    "target's max_storage_buffer_binding_size)")


def target_budget(target) -> int | None:
    """The target's ``max_storage_buffer_binding_size`` attribute in bytes (``None`` when the
    target, e.g. a CPU or ``cuda`` without the option, has none)."""
    from ...target import Target
    if not target:
        return None
    t = Target(target)
    v = t.options.get("max_storage_buffer_binding_size") if t.is_gpu else None
    return int(v) if v is not None else None


def _chunks(n: int, per: int) -> list[tuple[int, int]]:
    pieces = -(-n // per)
    size = -(-n // pieces)
    return [(s, min(s + size, n)) for s in range(0, n, size)]


def split_dense_function(func, max_bytes: int):
    """``func`` with every candidate dense layer (module doc) whose weight exceeds
    ``max_bytes`` bytes split into output-feature chunks of at most ``max_bytes`` bytes each."""

    def visit(b, args, rw):
        c = b.call
        if c.op not in ("nn.gemm", "matmul") or len(args) < 2:
            return None
        w = args[1]
        if not isinstance(w, Constant) or w.data.ndim != 2 or w.data.nbytes <= max_bytes:
            return None
        trans = c.op == "nn.gemm" and bool(c.attrs.get("trans_b"))
        n_axis = 0 if trans else 1
        n = w.data.shape[n_axis]
        per = max_bytes // (w.data.shape[1 - n_axis] * w.data.itemsize)
        if per < 1 or n < 2:  # one output feature alone is over the budget
            return None
        out_axis = b.outputs[0].type.ndim - 1
        parts = []
        for s, e in _chunks(n, per):
            wd = w.data[s:e] if trans else w.data[:, s:e]
            hint = f"{w.name_hint}_{s}_{e}" if w.name_hint else None
            part = [args[0], Constant(np.ascontiguousarray(wd), hint)]
            if len(args) == 3:
                bias = args[2]
                shape = bias.type.shape
                if len(shape) and shape[-1] == n and n > 1:
                    if isinstance(bias, Constant):
                        bias = Constant(np.ascontiguousarray(bias.data[..., s:e]))
                    else:
                        bias = slice_axis(rw, bias, len(shape) - 1, s, e)
                part.append(bias)
            parts.append(rw.emit(c.op, part, dict(c.attrs)))
        return [rw.emit("concatenate", parts, {"axis": out_axis})]
    return rewrite_function(func, visit)


@function_pass("SplitDense", opt_level=0)
def split_dense(func, mod, ctx):
    """Graph pass: ``split_dense_function`` under the budget of the module doc (GPU
    pipelines)."""
    budget = ctx.get_config(MAX_WEIGHT_BYTES)
    if budget is None:
        from .winograd import current_target
        budget = target_budget(current_target())
    if budget is None:
        return func
    return split_dense_function(func, budget)


__all__ = ["split_dense_function", "target_budget", "MAX_WEIGHT_BYTES"]
