"""Text form of NPU programs: the printer (disassembler) and the assembler, which round-trip.

One line per instruction: the mnemonic, ``field=value`` pairs in the kind's order, then the
dependency flags that are set. Micro-ops are ``.uop dst=.. src=.. wgt=..`` lines. ``#`` starts a
comment. Example::

    LOAD mem=inp sram_base=0 dram_base=64 y_size=3 x_size=8 x_stride=8 y_pad0=1 ... push_next
    GEMM reset=0 uop_bgn=0 uop_end=9 iter_out=2 iter_in=8 ... pop_prev push_next

Each instruction kind has one entry in :data:`FORMATS` (:func:`register_format`): its mnemonic
and, per field, an optional pair of value printer/parser (``mem=inp``, ``op=ADD``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import IRParseError
from . import isa
from .isa import Uop


@dataclass(frozen=True)
class Format:
    """How one instruction kind prints: ``mnemonic`` and ``{field: (to_text, from_text)}``."""

    mnemonic: str
    values: dict = field(default_factory=dict)


FORMATS: dict[str, Format] = {}


def register_format(kind_name: str, mnemonic: str | None = None, values: dict | None = None):
    """Register the text form of a registered instruction kind (the printer's one extension
    point); without ``values`` every field prints as a decimal integer."""
    if kind_name not in isa.KINDS:
        raise KeyError(f"{kind_name!r} is not a registered NPU instruction kind")
    FORMATS[kind_name] = Format(mnemonic or kind_name, dict(values or {}))


def _names(table):
    # a value outside the table (an encoding the simulator rejects) prints as its number
    return (lambda v: table[v] if v < len(table) else str(v)), \
        (lambda s: [t.upper() for t in table].index(s.upper())
         if s.upper() in [t.upper() for t in table] else int(s, 0))


register_format("LOAD", values={"mem": _names(isa.MEM_TYPES)})
register_format("STORE")
register_format("GEMM")
register_format("ALU", values={"op": _names(isa.ALU_OPS)})
register_format("FINISH")
register_format("GEMM_RS")

_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


def format_instruction(instr: isa.Instruction) -> str:
    """One line of text for ``instr``."""
    kind = instr.kind
    fmt = FORMATS.get(kind.name) or Format(kind.name)
    parts = [fmt.mnemonic]
    for name, _bits, _signed in kind.fields:
        v = getattr(instr, name)
        conv = fmt.values.get(name)
        parts.append(f"{name}={conv[0](v) if conv else int(v)}")
    parts += [f for f in _FLAGS if getattr(instr, f)]
    return " ".join(parts)


def disassemble(instrs, uops=()) -> str:
    """Program text: the micro-ops (``.uop`` lines) then one line per instruction."""
    lines = [f".uop dst={u.dst} src={u.src} wgt={u.wgt}" for u in uops]
    lines += [format_instruction(i) for i in instrs]
    return "\n".join(lines) + "\n"


def assemble(text: str):
    """Parse program text into ``(instructions, uops)``.

    Raises ``IRParseError`` naming the line for an unknown mnemonic, field or flag, a missing
    field, or a value that does not parse.
    """
    by_mnemonic = {(FORMATS.get(k) or Format(k)).mnemonic: isa.KINDS[k] for k in isa.KINDS}
    instrs, uops = [], []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        head, *toks = line.split()
        try:
            if head == ".uop":
                kv = dict(t.split("=", 1) for t in toks)
                uops.append(Uop(**{k: int(v) for k, v in kv.items()}))
                continue
            kind = by_mnemonic.get(head)
            if kind is None:
                raise ValueError(f"unknown mnemonic {head!r}; known: {sorted(by_mnemonic)}")
            fmt = FORMATS.get(kind.name) or Format(kind.name)
            fields = {n for n, _, _ in kind.fields}
            kw = {}
            for t in toks:
                if "=" not in t:
                    if t not in _FLAGS:
                        raise ValueError(f"unknown flag {t!r}; flags are {list(_FLAGS)}")
                    kw[t] = True
                    continue
                k, v = t.split("=", 1)
                if k not in fields:
                    raise ValueError(f"{head} has no field {k!r}")
                conv = fmt.values.get(k)
                kw[k] = conv[1](v) if conv else int(v, 0)
            missing = [n for n, _, _ in kind.fields if n not in kw]
            if missing:
                raise ValueError(f"{head} is missing fields {missing}")
            instrs.append(kind.cls(**kw))
        except (ValueError, TypeError, isa.NPUError) as e:
            raise IRParseError(f"NPU assembly line {lineno}: {e}: {raw.strip()!r}") from None
    return instrs, uops
