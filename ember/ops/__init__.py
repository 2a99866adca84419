"""The operator registry and every built-in operator (each defined once, in one module)."""

from .registry import (REQUIRED, OpDef, OpPattern, broadcast_shapes, get_op, list_ops,  # noqa: F401
                       normalize_axis, register_op, unregister_op)
from . import elemwise, nn, transform, reduce  # noqa: F401,E402  (registers the built-ins)
from . import activation, indexing, integer, nn_ext  # noqa: F401,E402  (ONNX-suite families)
from . import image  # noqa: F401,E402  (resampling, grid sampling, col2im)
from . import signal  # noqa: F401,E402  (DFT, STFT)
from . import linalg  # noqa: F401,E402  (einsum, det)
from . import spatial  # noqa: F401,E402  (max unpool, roi align, deform conv)
from . import random  # noqa: F401,E402  (counter-based uniform/normal/bernoulli)
from . import winograd  # noqa: F401,E402  (Winograd transforms of 3x3 convolutions)
from . import inverted_residual  # noqa: F401,E402  (MobileNetV2 block as one kernel)
from . import channel_shuffle  # noqa: F401,E402  (grouped conv of a shuffled input)
from . import transformer  # noqa: F401,E402  (attention, RMS/group norm, rotary, SwiGLU)
from . import collective  # noqa: F401,E402  (dist.* communication operators)
from . import qnn, qnn_conv  # noqa: F401,E402  (the QDQ form and the int8 convolution)
from . import shape_funcs  # noqa: F401,E402  (symbolic shape functions, after every operator)
from .registry import has_shape_func, register_shape_func  # noqa: F401,E402
