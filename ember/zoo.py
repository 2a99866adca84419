"""Bundled default models: the onnx package's "light" models made runnable with real-looking
weights.

The light models under ``onnx/backend/test/data/light/`` store every weight as a
``ConstantOfShape`` node (a constant fill), which makes them tiny but numerically degenerate.
``randomized_light_model`` replaces each such weight with a seeded random initializer scaled for
its role (He-initialised convolution weights, batch-norm statistics near identity, ...), so the
activations of the network stay in a realistic range. No download is involved.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import numpy_helper

from .errors import ModelLoadError

LIGHT_MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
                "shufflenet", "squeezenet", "vgg19", "zfnet512")


def light_model_path(name: str) -> str:
    """Path of the onnx package's ``light_<name>.onnx``.

    Raises:
        ModelLoadError: unknown name.
    """
    name = name.removeprefix("light_").removesuffix(".onnx")
    if name not in LIGHT_MODELS:
        raise ModelLoadError(f"unknown light model {name!r}; choose one of {LIGHT_MODELS}")
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        f"light_{name}.onnx")


def _weight(rng, shape, consumer: onnx.NodeProto | None, index: int) -> np.ndarray:
    op = consumer.op_type if consumer is not None else ""
    shape = tuple(int(s) for s in shape)
    if op in ("Conv", "ConvTranspose") and index == 1:
        fan_in = int(np.prod(shape[1:])) or 1
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
    if op == "Gemm" and index == 1:
        fan_in = shape[-1] if any(a.name == "transB" and a.i for a in consumer.attribute) \
            else shape[0]
        return (rng.standard_normal(shape) * np.sqrt(1.0 / max(fan_in, 1))).astype(np.float32)
    if op == "BatchNormalization":
        if index == 4:  # variance: positive, near 1
            return rng.uniform(0.5, 1.5, shape).astype(np.float32)
        if index == 1:  # scale: damped so the residual stack does not blow up the logits
            return rng.uniform(0.2, 0.4, shape).astype(np.float32)
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)  # bias, mean
    return (rng.standard_normal(shape) * 0.05).astype(np.float32)


def randomized_light_model(name: str = "resnet50", seed: int = 0) -> onnx.ModelProto:
    """The light model ``name`` with every ``ConstantOfShape`` weight replaced by a seeded
    random float32 initializer (same names and shapes, so the graph is unchanged otherwise).

    Returns:
        an ``onnx.ModelProto`` (opset of the original model, 9 for all light models).
    """
    model = onnx.load(light_model_path(name))
    g = model.graph
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    consumers: dict[str, tuple[onnx.NodeProto, int]] = {}
    for node in g.node:
        for k, i in enumerate(node.input):
            consumers.setdefault(i, (node, k))
    rng = np.random.default_rng(seed)
    keep = []
    new_inits = []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.input and node.input[0] in consts:
            shape = consts[node.input[0]].reshape(-1)
            cons, idx = consumers.get(node.output[0], (None, 0))
            new_inits.append(numpy_helper.from_array(_weight(rng, shape, cons, idx),
                                                     node.output[0]))
        else:
            keep.append(node)
    del g.node[:]
    g.node.extend(keep)
    used = {i for n in keep for i in n.input}
    survivors = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(survivors + new_inits)
    inputs = [vi for vi in g.input if vi.name not in consts or vi.name in used]
    del g.input[:]
    g.input.extend(inputs)
    return model


def at_resolution(model: onnx.ModelProto, size: int) -> onnx.ModelProto:
    """A copy of image model ``model`` whose first graph input (not an initializer) ``(N, C, H, W)`` is declared
    ``(N, C, size, size)`` (stale ``value_info`` shapes dropped), to run a model at a reduced
    resolution where a slow device (lavapipe) would take minutes at full size. Models whose
    classifier follows a fixed-size flatten (AlexNet, VGG, ZFNet) or a fixed-window average
    pool accept only the original size; onnxruntime and ember both refuse them elsewhere."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {t.name for t in m.graph.initializer}
    vi = next(v for v in m.graph.input if v.name not in inits)
    dims = vi.type.tensor_type.shape.dim
    if len(dims) != 4:
        raise ModelLoadError(f"at_resolution: input {vi.name} has {len(dims)} dimensions, not "
                             f"(N, C, H, W)")
    dims[2].dim_value = dims[3].dim_value = int(size)
    del m.graph.value_info[:]
    return m


def default_model_input(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded standard-normal float32 inputs for every non-initializer graph input."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
        out[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return out
