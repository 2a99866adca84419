"""The NPU's hardware description, read from a JSON file (the shape of VTA's ``vta_config.json``).

A config names the GEMM core's block (``BATCH`` x ``BLOCK_IN`` x ``BLOCK_OUT``), the element
types, the four on-chip scratchpads in bytes, and the timing constants of the cycle model
(docs/npu.md, "Cost model"). ``load_config()`` reads the default shipped with ember
(``ember/npu/configs/default.json``); ``load_config(path)`` reads another one. Every schedule
and the simulator read their limits from the resulting :class:`NPUConfig`, never from
constants of their own.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import TargetError

DEFAULT_CONFIG = Path(__file__).with_name("configs") / "default.json"

# Addressable depth of each scratchpad in the ISA's fields (micro-op index widths, isa.py):
# a config whose scratchpad holds more entries than its index field can name is rejected.
MAX_DEPTH = {"uop": 1 << 13, "inp": 1 << 11, "wgt": 1 << 10, "acc": 1 << 11}


@dataclass(frozen=True)
class NPUConfig:
    """A VTA-class accelerator, as data.

    Sizes are bytes, times are cycles of the accelerator clock (``clock_mhz``). One scratchpad
    entry holds one operand of the GEMM intrinsic: an ``inp`` entry is ``batch x block_in`` int8
    values, a ``wgt`` entry ``block_out x block_in`` int8, an ``acc`` entry ``batch x
    block_out`` int32, a ``uop`` entry one 32-bit micro-op.

    Raises (from :func:`from_dict`): ``TargetError`` for a missing or unknown key, a dtype other
    than int8/int32, or a scratchpad too small for one tile of the intrinsic (naming it).
    """

    name: str
    batch: int
    block_in: int
    block_out: int
    uop_buff_bytes: int
    inp_buff_bytes: int
    wgt_buff_bytes: int
    acc_buff_bytes: int
    clock_mhz: float
    dram_bytes_per_cycle: int
    dram_latency_cycles: int
    dma_setup_cycles: int
    gemm_pipeline_depth: int
    alu_pipeline_depth: int
    alu_ii: int
    gemm_rs_epilogue_depth: int
    inp_dtype: str = "int8"
    wgt_dtype: str = "int8"
    acc_dtype: str = "int32"
    out_dtype: str = "int8"

    # bytes of one entry of each scratchpad
    @property
    def entry_bytes(self) -> dict:
        return {"uop": 4, "inp": self.batch * self.block_in,
                "wgt": self.block_out * self.block_in, "acc": 4 * self.batch * self.block_out,
                "out": self.batch * self.block_out}

    def depth(self, buf: str) -> int:
        """Number of entries of scratchpad ``buf`` (``"uop"``, ``"inp"``, ``"wgt"``, ``"acc"``)."""
        return getattr(self, f"{buf}_buff_bytes") // self.entry_bytes[buf]

    @property
    def macs_per_cycle(self) -> int:
        return self.batch * self.block_in * self.block_out

    @classmethod
    def from_dict(cls, d: dict, source: str = "<dict>") -> "NPUConfig":
        """Build and validate a config from VTA-style upper-case keys (see default.json)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {}
        for k, v in d.items():
            key = k.lower()
            if key not in names:
                raise TargetError(f"NPU config {source}: unknown key {k!r}; known keys: "
                                  f"{sorted(n.upper() for n in names)}")
            kw[key] = v
        missing = [f.name.upper() for f in dataclasses.fields(cls)
                   if f.name not in kw and f.default is dataclasses.MISSING]
        if missing:
            raise TargetError(f"NPU config {source}: missing keys {missing}")
        cfg = cls(**kw)
        cfg.validate(source)
        return cfg

    def validate(self, source: str = "<config>") -> None:
        """Check the config can hold one tile of the GEMM intrinsic in every scratchpad."""
        for k in ("inp_dtype", "wgt_dtype", "out_dtype"):
            if getattr(self, k) != "int8":
                raise TargetError(f"NPU config {source}: {k.upper()}={getattr(self, k)!r}; only "
                                  f"int8 is supported")
        if self.acc_dtype != "int32":
            raise TargetError(f"NPU config {source}: ACC_DTYPE must be int32")
        if self.batch != 1:
            raise TargetError(f"NPU config {source}: BATCH={self.batch}; the kernels and the "
                              f"simulator support BATCH=1 only")
        for k in ("block_in", "block_out", "dram_bytes_per_cycle", "alu_ii"):
            if int(getattr(self, k)) < 1:
                raise TargetError(f"NPU config {source}: {k.upper()} must be >= 1")
        for k in ("dram_latency_cycles", "dma_setup_cycles", "gemm_pipeline_depth",
                  "alu_pipeline_depth", "gemm_rs_epilogue_depth"):
            if int(getattr(self, k)) < 0:
                raise TargetError(f"NPU config {source}: {k.upper()} must be >= 0")
        for buf in ("uop", "inp", "wgt", "acc"):
            nbytes = getattr(self, f"{buf}_buff_bytes")
            need = self.entry_bytes[buf]
            if nbytes < need:
                raise TargetError(
                    f"NPU config {source}: the {buf} scratchpad ({buf.upper()}_BUFF_BYTES="
                    f"{nbytes}) cannot hold one tile of the {self.batch}x{self.block_in}x"
                    f"{self.block_out} GEMM intrinsic ({need} bytes); make it at least {need}")
            if self.depth(buf) > MAX_DEPTH[buf]:
                raise TargetError(
                    f"NPU config {source}: the {buf} scratchpad has {self.depth(buf)} entries "
                    f"but the ISA's micro-op fields address {MAX_DEPTH[buf]}; make "
                    f"{buf.upper()}_BUFF_BYTES at most {MAX_DEPTH[buf] * need}")


def load_config(path: str | Path | None = None) -> NPUConfig:
    """Read an NPU config JSON (``None``: the default shipped in ``ember/npu/configs/``).

    Raises ``TargetError`` if the file is missing, is not JSON, or fails validation.
    """
    p = Path(path) if path is not None else DEFAULT_CONFIG
    try:
        d = json.loads(p.read_text())
    except FileNotFoundError:
        raise TargetError(f"NPU config file {str(p)!r} does not exist") from None
    except json.JSONDecodeError as e:
        raise TargetError(f"NPU config file {str(p)!r} is not JSON: {e}") from None
    if not isinstance(d, dict):
        raise TargetError(f"NPU config file {str(p)!r} must hold a JSON object")
    return NPUConfig.from_dict(d, source=str(p))
