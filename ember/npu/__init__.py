"""ember.npu: a VTA-class accelerator target: hardware description as data, ISA, simulator
(functional and cycle modes, hazard checker) and kernel generation for int8 conv2d / dense.

Imported on first use (``ember.npu`` is loaded lazily by ``ember/__init__.py``). See
docs/npu.md. Entry points::

    from ember import npu
    k = npu.lower_conv2d(w, b, input_shape=(1, 64, 56, 56), pads=(1, 1, 1, 1),
                         multiplier=3, shift=10, relu=True)
    y, stats = k.run(x, mode="cycle")     # y int8 (1, O, OH, OW); stats.cycles, busy, stalls

``register_lowering(op, fn)`` declares how a graph operator (a user's custom one too) runs on
the NPU when a model is built for ``Target("npu")`` (``offload.py``).
"""

from .config import NPUConfig, load_config  # noqa: F401
from . import isa, asm, sim, intrin, reference  # noqa: F401
from .asm import assemble, disassemble  # noqa: F401
from .intrin import INTRINSICS, Requant, register_intrinsic, select_intrinsic  # noqa: F401
from .isa import register_instruction  # noqa: F401
from .kernels import (ConvShape, NPUKernel, Program, Tiling, choose_tiling,  # noqa: F401
                      lower_conv2d, lower_dense, pack_input, pack_weight, simulate,
                      unpack_output)
from .sim import Simulator, Stats, register_semantics  # noqa: F401
from .offload import lowered_ops, register_lowering, unregister_lowering  # noqa: F401
