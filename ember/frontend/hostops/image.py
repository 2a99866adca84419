"""ImageDecoder (opset 20) on the host: the decoded image's shape depends on the encoded bytes,
so it cannot be a static-shape kernel. Decoding uses Pillow (the ``image`` extra: ``pip install
ember[image]``); without it the operator raises a typed ``UnsupportedOpError``."""

from __future__ import annotations

import io

import numpy as np

from ...errors import UnsupportedOpError
from . import host_op

PIXEL_FORMATS = ("RGB", "BGR", "Grayscale")


@host_op("ImageDecoder")
def image_decoder(h, ins):
    """``encoded_stream`` (1-D uint8: the bytes of a JPEG/PNG/BMP/TIFF/WebP/JPEG 2000/PNM file)
    -> (H, W, 3) uint8 in RGB or BGR order, or (H, W, 1) for Grayscale."""
    fmt = h.attr("pixel_format", "RGB")
    if fmt not in PIXEL_FORMATS:
        raise UnsupportedOpError(f"{h.where}pixel_format={fmt!r} is not one of {PIXEL_FORMATS}",
                                 op="ImageDecoder", node=h.name, opset=h.opset)
    try:
        from PIL import Image
    except ImportError:
        raise UnsupportedOpError(f"{h.where}ImageDecoder needs Pillow to decode images: "
                                 f"pip install 'ember[image]' (or pillow)", op="ImageDecoder",
                                 node=h.name, opset=h.opset) from None
    data = np.asarray(ins[0])
    if data.dtype != np.uint8 or data.ndim != 1:
        raise UnsupportedOpError(f"{h.where}encoded_stream must be a 1-D uint8 tensor, got "
                                 f"{data.shape} {data.dtype}", op="ImageDecoder", node=h.name,
                                 opset=h.opset)
    try:
        img = Image.open(io.BytesIO(data.tobytes()))
        img.load()
    except Exception as e:  # noqa: BLE001 - Pillow raises several types on bad data
        raise UnsupportedOpError(f"{h.where}cannot decode the image ({type(e).__name__}: {e})",
                                 op="ImageDecoder", node=h.name, opset=h.opset) from None
    if fmt == "Grayscale":
        return [np.asarray(img.convert("L"), np.uint8)[:, :, None]]
    rgb = np.asarray(img.convert("RGB"), np.uint8)
    return [np.ascontiguousarray(rgb[:, :, ::-1]) if fmt == "BGR" else rgb]
