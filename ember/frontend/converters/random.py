"""Converters for ONNX random generators: RandomUniform, RandomNormal, RandomUniformLike,
RandomNormalLike and Bernoulli, onto the counter-based kernels of ``ember.ops.random``.

With a ``seed`` attribute the draws are a fixed function of the seed (the same on every run and
every compile). Without one, a key is drawn once per converted node from the operating system's
entropy, so the compiled graph returns the same tensor on each run (no generator state is kept
between runs) and a new compile draws anew.
"""

from __future__ import annotations

import secrets

from ...errors import UnsupportedOpError
from ...ops.random import key_of
from ..dtypes import onnx_dtype
from . import converter


def _key(node) -> int:
    seed = node.attr("seed")
    return key_of(seed) if seed is not None else secrets.randbits(64)


def _dtype(node, default: str) -> str:
    dt = node.attr("dtype")
    return onnx_dtype(dt, f"{node.op_type} dtype: ") if dt is not None else default


def _generator(kind, like):
    def convert(ctx, node):
        if like:
            x = node.input(0)
            shape, dtype = list(x.type.shape), _dtype(node, x.type.dtype)
        else:
            shape, dtype = list(node.attr("shape")), _dtype(node, "float32")
        if kind == "uniform":
            a, b = float(node.attr("low", 0.0)), float(node.attr("high", 1.0))
        else:
            a, b = float(node.attr("mean", 0.0)), float(node.attr("scale", 1.0))
        if dtype not in ("float16", "float32", "float64", "bfloat16"):
            raise UnsupportedOpError(f"{node.op_type} dtype {dtype} is not floating point")
        return [ctx.call(f"random.{kind}", [], {"shape": shape, "dtype": dtype, "a": a, "b": b,
                                                "key": _key(node)})]
    return convert


converter("RandomUniform", since=1)(_generator("uniform", like=False))
converter("RandomNormal", since=1)(_generator("normal", like=False))
converter("RandomUniformLike", since=1)(_generator("uniform", like=True))
converter("RandomNormalLike", since=1)(_generator("normal", like=True))


@converter("Bernoulli", since=15)
def bernoulli(ctx, node):
    """ONNX Bernoulli-15: ``random.bernoulli(p)``, 1 with probability ``p`` per element, in
    ``dtype`` (default p's) with the generator key from ``seed``."""
    p = node.input(0)
    return [ctx.call("random.bernoulli", [p], {"dtype": _dtype(node, p.type.dtype),
                                               "key": _key(node)})]


RANDOM_OPS = frozenset({"RandomUniform", "RandomNormal", "RandomUniformLike",
                        "RandomNormalLike", "Bernoulli"})


def has_unseeded_random(model) -> bool:
    """Whether ``model`` (an ``onnx.ModelProto``) has a random generator without a ``seed``
    attribute, in its graph, a subgraph or a model-local function. Such a model draws a new key
    at every compile, so a compiled copy of it must not be reused (the compiled-model cache
    skips it)."""
    def graphs(g):
        yield g
        for n in g.node:
            for a in n.attribute:
                if a.HasField("g"):
                    yield from graphs(a.g)
                for sub in a.graphs:
                    yield from graphs(sub)

    nodes = [n for g in graphs(model.graph) for n in g.node]
    nodes += [n for f in model.functions for n in f.node]
    return any(n.op_type in RANDOM_OPS and n.domain in ("", "ai.onnx")
               and not any(a.name == "seed" for a in n.attribute) for n in nodes)
