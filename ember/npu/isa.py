"""The NPU's instruction set: frozen dataclasses, one registry of instruction kinds, and the
binary encoding (one 128-bit word per instruction, one 32-bit word per micro-op).

The ISA follows VTA's (Moreau et al., "A Hardware-Software Blueprint for Flexible Deep
Learning Specialization", IEEE Micro 2019): three units (load, compute, store) each run their
own in-order queue; four dependency flags on every instruction pop/push a token from/to the
neighbouring unit (load <-> compute <-> store). ``prev``/``next`` name the neighbour before and
after the unit in that chain.

An instruction kind is registered in ONE place, :func:`register_instruction`, with its opcode,
its dataclass, its encoded fields (name, bits, signed) and the unit that executes it. The
simulator (``sim.SEMANTICS``), the intrinsic registry (``intrin.INTRINSICS``) and the printer
(``asm.FORMATS``) have one registry each as well; docs/npu.md ("Adding an instruction") lists
the four steps.

Word layout (least significant bit first): ``opcode`` (3 bits), ``pop_prev``, ``pop_next``,
``push_prev``, ``push_next`` (1 bit each), then the kind's fields in registration order.
Micro-op word: ``dst`` (acc index, 11 bits), ``src`` (inp index, or acc index for ALU, 11 bits),
``wgt`` (wgt index, 10 bits).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..errors import NPUError

WORD_BITS = 128
HEADER_BITS = 7  # opcode (3) + four dependency flags
UNITS = ("load", "compute", "store")
MEM_TYPES = ("uop", "wgt", "inp", "acc")  # LOAD/STORE mem field
MEM_UOP, MEM_WGT, MEM_INP, MEM_ACC = range(4)
ALU_OPS = ("MIN", "MAX", "ADD", "SHR", "MUL")
ALU_MIN, ALU_MAX, ALU_ADD, ALU_SHR, ALU_MUL = range(5)
UOP_FIELDS = (("dst", 11), ("src", 11), ("wgt", 10))


@dataclass(frozen=True, kw_only=True)
class Instruction:
    """Base of every instruction: the four dependency-token flags.

    ``pop_prev``/``pop_next``: wait for (and consume) a token pushed by the previous/next unit
    before starting; ``push_prev``/``push_next``: send a token to it after finishing.
    """

    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    @property
    def kind(self) -> "InstrKind":
        return KINDS_BY_CLASS[type(self)]

    def __post_init__(self):
        kind = KINDS_BY_CLASS.get(type(self))
        if kind is None:
            raise NPUError(f"{type(self).__name__} is not a registered NPU instruction kind")
        for name, bits, signed in kind.fields:
            v = getattr(self, name)
            lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
            if not isinstance(v, (int, np.integer)) or not lo <= int(v) <= hi:
                raise NPUError(f"{kind.name}: field {name}={v!r} does not fit its {bits}-bit "
                               f"{'signed' if signed else 'unsigned'} range [{lo}, {hi}]")


@dataclass(frozen=True, kw_only=True)
class Load(Instruction):
    """2-D strided DMA from DRAM into a scratchpad, with zero padding made on the fly.

    Reads ``y_size`` rows of ``x_size`` entries from DRAM entry ``dram_base`` (units: the
    entry size of ``mem``), rows ``x_stride`` entries apart, and writes them to the scratchpad
    from entry ``sram_base`` as a ``(y_pad0 + y_size + y_pad1) x (x_pad0 + x_size + x_pad1)``
    block whose border entries are zero. ``mem``: 0 uop, 1 wgt, 2 inp, 3 acc (int32).
    """

    mem: int
    sram_base: int
    dram_base: int
    y_size: int
    x_size: int
    x_stride: int
    y_pad0: int = 0
    y_pad1: int = 0
    x_pad0: int = 0
    x_pad1: int = 0


@dataclass(frozen=True, kw_only=True)
class Store(Instruction):
    """2-D strided DMA of accumulator entries to DRAM as int8 (low 8 bits of each int32: the
    ALU epilogue clips first). ``y_size`` rows of ``x_size`` entries from acc ``sram_base``
    (rows contiguous) to DRAM out-entry ``dram_base`` (16 bytes), rows ``x_stride`` apart."""

    sram_base: int
    dram_base: int
    y_size: int
    x_size: int
    x_stride: int


@dataclass(frozen=True, kw_only=True)
class _Loop(Instruction):
    """The micro-op loop shared by GEMM, ALU and GEMM_RS (see :class:`Gemm`)."""

    uop_bgn: int
    uop_end: int
    iter_out: int
    iter_in: int
    dst_fo: int
    dst_fi: int
    src_fo: int = 0
    src_fi: int = 0


@dataclass(frozen=True, kw_only=True)
class _WeightLoop(_Loop):
    wgt_fo: int = 0
    wgt_fi: int = 0


@dataclass(frozen=True, kw_only=True)
class Gemm(_WeightLoop):
    """The GEMM core: for ``i0 < iter_out``, ``i1 < iter_in``, micro-op ``u`` in
    ``uop[uop_bgn:uop_end]``::

        d = u.dst + i0*dst_fo + i1*dst_fi; s = u.src + i0*src_fo + i1*src_fi
        w = u.wgt + i0*wgt_fo + i1*wgt_fi
        acc[d] = 0 if reset else acc[d] + inp[s] @ wgt[w].T     (int8 x int8 -> int32, wraps)
    """

    reset: int = 0


@dataclass(frozen=True, kw_only=True)
class Alu(_Loop):
    """The vector ALU on accumulator entries: same loop as :class:`Gemm` (no weights),
    ``acc[d] = op(acc[d], imm if use_imm else acc[s])`` with int32 wrap-around. ``op``: MIN,
    MAX, ADD, SHR (arithmetic shift right by the operand; a negative operand shifts left), MUL
    (low 32 bits of the product)."""

    op: int
    use_imm: int = 1
    imm: int = 0


@dataclass(frozen=True, kw_only=True)
class Finish(Instruction):
    """End of the program (compute unit). Every instruction must happen before it and every
    token queue must be empty after it."""


@dataclass(frozen=True, kw_only=True)
class GemmRS(_WeightLoop):
    """GEMM with fused ReLU, rounding shift and int8 saturation (added as a hardware team's
    request; docs/npu.md, "Adding an instruction"). Runs the :class:`Gemm` micro-op loop
    (accumulate, no reset), then replaces every accumulator entry the loop wrote with::

        clip(floor((acc + 2**(shift-1)) / 2**shift), 0 if relu else -128, 127)

    (``shift == 0``: no rounding term), computed exactly (a 33-bit rounding adder).
    """

    shift: int = 0
    relu: int = 0


@dataclass(frozen=True)
class Uop:
    """One micro-op: scratchpad indices of the accumulator (``dst``), the input or ALU source
    (``src``) and the weight block (``wgt``)."""

    dst: int
    src: int = 0
    wgt: int = 0

    def __post_init__(self):
        for (name, bits) in UOP_FIELDS:
            v = getattr(self, name)
            if not 0 <= int(v) < (1 << bits):
                raise NPUError(f"micro-op field {name}={v} does not fit {bits} bits")


@dataclass(frozen=True)
class InstrKind:
    """A registered instruction kind: ``fields`` are ``(name, bits, signed)`` in word order;
    ``unit(instr)`` names the unit (``"load"``, ``"compute"``, ``"store"``) that runs it."""

    name: str
    opcode: int
    cls: type
    fields: tuple
    unit: object

    @property
    def bits(self) -> int:
        return HEADER_BITS + sum(b for _, b, _ in self.fields)


KINDS: dict[str, InstrKind] = {}
KINDS_BY_OPCODE: dict[int, InstrKind] = {}
KINDS_BY_CLASS: dict[type, InstrKind] = {}


def register_instruction(name: str, opcode: int, cls: type, fields, unit) -> InstrKind:
    """Register an instruction kind (the ISA's one extension point).

    ``fields``: ``[(name, bits, signed), ...]``, each the name of a dataclass field of ``cls``;
    together with the 7 header bits they must fit 128 bits. ``unit``: a unit name or a
    function of the instruction returning one. Raises ``NPUError`` on a duplicate name/opcode,
    an unknown field or an encoding wider than 128 bits.
    """
    if name in KINDS or opcode in KINDS_BY_OPCODE:
        raise NPUError(f"NPU instruction {name!r} / opcode {opcode} is registered already")
    if not 0 <= opcode < 8:
        raise NPUError(f"NPU opcode {opcode} does not fit the 3-bit opcode field")
    names = {f.name for f in dataclasses.fields(cls)} - {"pop_prev", "pop_next", "push_prev",
                                                          "push_next"}
    fields = tuple((n, int(b), bool(s)) for n, b, s in fields)
    if {n for n, _, _ in fields} != names:
        raise NPUError(f"NPU instruction {name}: encoded fields {[f[0] for f in fields]} must "
                       f"be exactly the dataclass fields {sorted(names)}")
    unit_fn = unit if callable(unit) else (lambda _i, _u=unit: _u)
    kind = InstrKind(name, opcode, cls, fields, unit_fn)
    if kind.bits > WORD_BITS:
        raise NPUError(f"NPU instruction {name} needs {kind.bits} bits; the word has "
                       f"{WORD_BITS}")
    KINDS[name] = kind
    KINDS_BY_OPCODE[opcode] = kind
    KINDS_BY_CLASS[cls] = kind
    return kind


_GEMM_LOOP = [("uop_bgn", 13, False), ("uop_end", 14, False), ("iter_out", 12, False),
              ("iter_in", 12, False), ("dst_fo", 11, False), ("dst_fi", 11, False),
              ("src_fo", 11, False), ("src_fi", 11, False)]
_DMA = [("sram_base", 16, False), ("dram_base", 32, False), ("y_size", 16, False),
        ("x_size", 16, False), ("x_stride", 16, False)]

register_instruction(
    "LOAD", 0, Load,
    [("mem", 2, False)] + _DMA + [("y_pad0", 4, False), ("y_pad1", 4, False),
                                  ("x_pad0", 4, False), ("x_pad1", 4, False)],
    unit="load")
register_instruction("STORE", 1, Store, _DMA, unit="store")
register_instruction("GEMM", 2, Gemm,
                     [("reset", 1, False)] + _GEMM_LOOP + [("wgt_fo", 10, False),
                                                           ("wgt_fi", 10, False)],
                     unit="compute")
register_instruction("FINISH", 3, Finish, [], unit="compute")
register_instruction("ALU", 4, Alu,
                     [("op", 3, False), ("use_imm", 1, False), ("imm", 16, True)] + _GEMM_LOOP,
                     unit="compute")
register_instruction("GEMM_RS", 5, GemmRS,
                     [("shift", 5, False), ("relu", 1, False)] + _GEMM_LOOP
                     + [("wgt_fo", 10, False), ("wgt_fi", 10, False)],
                     unit="compute")

_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


def unit_of(instr: Instruction) -> str:
    """The unit that runs ``instr``: ``"load"``, ``"compute"`` or ``"store"``."""
    return instr.kind.unit(instr)


def encode(instr: Instruction) -> int:
    """The 128-bit word of one instruction, as a Python int."""
    kind = instr.kind
    word, pos = kind.opcode, 3
    for f in _FLAGS:
        word |= int(bool(getattr(instr, f))) << pos
        pos += 1
    for name, bits, _signed in kind.fields:
        word |= (int(getattr(instr, name)) & ((1 << bits) - 1)) << pos
        pos += bits
    return word


def decode(word: int) -> Instruction:
    """Inverse of :func:`encode`. Raises ``NPUError`` for an unknown opcode or stray bits."""
    kind = KINDS_BY_OPCODE.get(word & 7)
    if kind is None:
        raise NPUError(f"NPU instruction word {word:#034x}: unknown opcode {word & 7}")
    kw, pos = {}, 3
    for f in _FLAGS:
        kw[f] = bool((word >> pos) & 1)
        pos += 1
    for name, bits, signed in kind.fields:
        v = (word >> pos) & ((1 << bits) - 1)
        if signed and v >> (bits - 1):
            v -= 1 << bits
        kw[name] = v
        pos += bits
    if word >> pos:
        raise NPUError(f"NPU instruction word {word:#034x} ({kind.name}) has bits set above "
                       f"bit {pos}")
    return kind.cls(**kw)


def encode_program(instrs) -> bytes:
    """Instructions -> little-endian 16-byte words."""
    return b"".join(encode(i).to_bytes(16, "little") for i in instrs)


def decode_program(data: bytes) -> list:
    """Inverse of :func:`encode_program`."""
    if len(data) % 16:
        raise NPUError(f"NPU instruction stream of {len(data)} bytes is not whole 16-byte words")
    return [decode(int.from_bytes(data[i:i + 16], "little")) for i in range(0, len(data), 16)]


def encode_uops(uops) -> np.ndarray:
    """Micro-ops -> uint32 words (``dst | src << 11 | wgt << 22``)."""
    out = np.empty(len(uops), dtype=np.uint32)
    for k, u in enumerate(uops):
        out[k] = u.dst | (u.src << 11) | (u.wgt << 22)
    return out


def decode_uops(words) -> list:
    """Inverse of :func:`encode_uops`."""
    w = np.asarray(words, dtype=np.uint32)
    return [Uop(int(x & 0x7FF), int((x >> 11) & 0x7FF), int(x >> 22)) for x in w]


def uop_fields(words: np.ndarray):
    """Vectorized micro-op decode: ``(dst, src, wgt)`` int64 arrays."""
    w = words.astype(np.int64)
    return w & 0x7FF, (w >> 11) & 0x7FF, w >> 22
