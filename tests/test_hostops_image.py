"""ImageDecoder as a host kernel: images encoded losslessly by Pillow decode back to the original
pixels (RGB, BGR, Grayscale), the staged executor reports the node as run on the host, and
undecodable bytes raise a typed error."""

from __future__ import annotations

import io

import numpy as np
import pytest
from onnx import TensorProto, helper

from ember.errors import UnsupportedOpError
from ember.frontend.backend import prepare

Image = pytest.importorskip("PIL.Image")


def _model(fmt):
    node = helper.make_node("ImageDecoder", ["x"], ["y"], pixel_format=fmt)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8,
                                                                      [None])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])


def _encode(pixels, fmt):
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt)
    return np.frombuffer(buf.getvalue(), np.uint8)


@pytest.mark.parametrize("container", ["PNG", "BMP", "TIFF", "PPM"])
@pytest.mark.parametrize("fmt", ["RGB", "BGR", "Grayscale"])
def test_lossless_images_decode_to_their_pixels(container, fmt):
    rgb = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    rep = prepare(_model(fmt))
    y = rep.run([_encode(rgb, container)])[0]
    if fmt == "RGB":
        np.testing.assert_array_equal(y, rgb)
    elif fmt == "BGR":
        np.testing.assert_array_equal(y, rgb[:, :, ::-1])
    else:
        gray = np.asarray(Image.fromarray(rgb).convert("L"))[:, :, None]
        np.testing.assert_array_equal(y, gray)
    assert [h["op"] for h in rep.staged.report()["host_nodes"]] == ["ImageDecoder"]


def test_undecodable_bytes_raise_a_typed_error():
    with pytest.raises(UnsupportedOpError, match="cannot decode"):
        prepare(_model("RGB")).run([np.arange(20, dtype=np.uint8)])
