"""Tensor intrinsics of the NPU: what the kernel generator tensorizes a convolution's inner
block onto, and the ALU epilogue that goes with it.

An :class:`Intrinsic` declares the block it computes (``batch x block_in x block_out``, int8 x
int8 -> int32), which requantize epilogues it can serve (``matches``), and how to emit its
accumulate instruction and its ALU operations. The registry :data:`INTRINSICS` is the
intrinsic side's one extension point (:func:`register_intrinsic`); :func:`select_intrinsic`
picks the highest-priority match, which is how the code generator "matches" a layer.

An ALU step is ``(op, use_imm, imm)`` with ``op`` one of ``isa.ALU_OPS``; ``("ADD", 0, 0)``
adds the per-channel bias held in the accumulator scratchpad.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import NPUError
from . import isa


@dataclass(frozen=True)
class Requant:
    """The output stage of an int8 layer, in the ALU's integer semantics::

        y = clip(floor((wrap32(wrap32(acc + bias) * multiplier) + 2**(shift-1)) / 2**shift),
                 0 if relu else -128, 127)

    (``shift == 0``: no rounding term). ``multiplier`` must fit the ALU's 16-bit immediate.
    """

    multiplier: int = 1
    shift: int = 0
    relu: bool = False
    bias: bool = False

    def __post_init__(self):
        if not -(1 << 15) <= self.multiplier < (1 << 15):
            raise NPUError(f"requantize multiplier {self.multiplier} does not fit the ALU's "
                           f"16-bit immediate; scale it down and lower the shift")
        if not 0 <= self.shift <= 31:
            raise NPUError(f"requantize shift {self.shift} must be in [0, 31]")


@dataclass(frozen=True)
class Intrinsic:
    """A tensor intrinsic of the GEMM core (see the module docstring).

    ``accumulate(last, rq, **loop)``: the instruction accumulating one K chunk (``last``: the
    tile's final chunk); ``pre_alu(rq)``: ALU steps after the accumulator reset, before any
    accumulation; ``post_alu(rq)``: ALU steps after the final chunk.
    """

    name: str
    instruction: str
    block: tuple
    dtypes: tuple
    priority: int
    matches: object
    accumulate: object
    pre_alu: object
    post_alu: object


INTRINSICS: dict[str, Intrinsic] = {}


def register_intrinsic(intrin: Intrinsic) -> Intrinsic:
    """Add a tensor intrinsic (the intrinsic registry's one extension point)."""
    if intrin.instruction not in isa.KINDS:
        raise NPUError(f"intrinsic {intrin.name}: {intrin.instruction!r} is not a registered "
                       f"instruction kind")
    INTRINSICS[intrin.name] = intrin
    return intrin


def select_intrinsic(rq: Requant, name: str | None = None) -> Intrinsic:
    """The intrinsic the generator uses for epilogue ``rq``: ``name`` if given (it must
    match), else the highest-priority match. Raises ``NPUError`` if none matches."""
    if name is not None:
        it = INTRINSICS.get(name)
        if it is None:
            raise NPUError(f"unknown NPU intrinsic {name!r}; known: {sorted(INTRINSICS)}")
        if not it.matches(rq):
            raise NPUError(f"NPU intrinsic {name!r} cannot compute the epilogue {rq}")
        return it
    found = sorted((it for it in INTRINSICS.values() if it.matches(rq)),
                   key=lambda it: -it.priority)
    if not found:
        raise NPUError(f"no NPU intrinsic computes the epilogue {rq} (a requantize shift of 1 "
                       f"is not supported on the ALU: double the multiplier and use shift 2)")
    return found[0]


def _bias(rq):
    return [(isa.ALU_ADD, 0, 0)] if rq.bias else []


def _alu_requant(rq):
    steps = []
    if rq.multiplier != 1:
        steps.append((isa.ALU_MUL, 1, rq.multiplier))
    if rq.shift:
        # floor((p + 2**(s-1)) / 2**s) == ((p >> (s-1)) + 1) >> 1, with no int32 overflow
        if rq.shift > 1:
            steps.append((isa.ALU_SHR, 1, rq.shift - 1))
        steps += [(isa.ALU_ADD, 1, 1), (isa.ALU_SHR, 1, 1)]
    steps += [(isa.ALU_MAX, 1, 0 if rq.relu else -128), (isa.ALU_MIN, 1, 127)]
    return steps


def _gemm(last, rq, **loop):
    return isa.Gemm(**loop)


def _gemm_rs(last, rq, **loop):
    if last:
        return isa.GemmRS(shift=rq.shift, relu=int(rq.relu), **loop)
    return isa.Gemm(**loop)


register_intrinsic(Intrinsic(
    name="gemm", instruction="GEMM", block=(1, 16, 16), dtypes=("int8", "int8", "int32"),
    priority=0, matches=lambda rq: rq.shift != 1, accumulate=_gemm,
    pre_alu=lambda rq: [], post_alu=lambda rq: _bias(rq) + _alu_requant(rq)))

# GEMM with fused ReLU + rounding shift + saturation: serves power-of-two requantization
# (multiplier 1) without the ALU passes of the epilogue; the bias is added before accumulating.
register_intrinsic(Intrinsic(
    name="gemm_rs", instruction="GEMM_RS", block=(1, 16, 16), dtypes=("int8", "int8", "int32"),
    priority=10, matches=lambda rq: rq.multiplier == 1, accumulate=_gemm_rs,
    pre_alu=_bias, post_alu=lambda rq: []))
