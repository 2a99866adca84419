"""ember.npu: hardware config, ISA encoding and the text assembler."""

import dataclasses
import importlib.resources
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ember.errors import IRParseError, NPUError, TargetError
from ember.npu import asm, isa
from ember.npu.config import NPUConfig, load_config

ROOT = Path(__file__).resolve().parents[1]


def test_default_config_is_package_data_with_vta_shape():
    f = importlib.resources.files("ember.npu") / "configs" / "default.json"
    d = json.loads(f.read_text())
    cfg = load_config()
    assert (cfg.batch, cfg.block_in, cfg.block_out) == (d["BATCH"], d["BLOCK_IN"],
                                                         d["BLOCK_OUT"]) == (1, 16, 16)
    # 32 KiB uop / 32 KiB inp / 256 KiB wgt / 128 KiB acc, in entries of each operand
    assert cfg.depth("uop") == 32768 // 4
    assert cfg.depth("inp") == 32768 // 16
    assert cfg.depth("wgt") == 262144 // 256
    assert cfg.depth("acc") == 131072 // 64
    assert dataclasses.is_dataclass(cfg) and cfg.__dataclass_params__.frozen
    # the wheel ships it: setuptools package-data names the configs
    text = (ROOT / "pyproject.toml").read_text()
    assert '"ember.npu" = ["configs/*.json"]' in text


@pytest.mark.parametrize("buf,nbytes", [("inp", 8), ("wgt", 255), ("acc", 32), ("uop", 2)])
def test_config_that_cannot_hold_one_tile_names_the_scratchpad(tmp_path, buf, nbytes):
    d = json.loads((importlib.resources.files("ember.npu") / "configs" / "default.json")
                   .read_text())
    d[f"{buf.upper()}_BUFF_BYTES"] = nbytes
    p = tmp_path / "small.json"
    p.write_text(json.dumps(d))
    with pytest.raises(TargetError, match=f"the {buf} scratchpad"):
        load_config(p)


def test_config_errors(tmp_path):
    with pytest.raises(TargetError, match="does not exist"):
        load_config(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(TargetError, match="not JSON"):
        load_config(tmp_path / "bad.json")
    d = dataclasses.asdict(load_config())
    d = {k.upper(): v for k, v in d.items()}
    d["BLOCK_SIZE"] = 3
    with pytest.raises(TargetError, match="unknown key 'BLOCK_SIZE'"):
        NPUConfig.from_dict(d)
    d.pop("BLOCK_SIZE")
    d["WGT_BUFF_BYTES"] = 4096 * 256  # 4096 entries > 10-bit wgt index
    with pytest.raises(TargetError, match="wgt scratchpad has 4096 entries"):
        NPUConfig.from_dict(d)


def _random_instruction(rng, kind):
    kw = {}
    for name, bits, signed in kind.fields:
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        kw[name] = int(rng.choice([lo, hi, rng.integers(lo, hi + 1)]))
    for f in ("pop_prev", "pop_next", "push_prev", "push_next"):
        kw[f] = bool(rng.integers(2))
    return kind.cls(**kw)


def test_random_streams_round_trip_binary_and_text():
    rng = np.random.default_rng(1)
    kinds = list(isa.KINDS.values())
    for _ in range(30):
        prog = [_random_instruction(rng, kinds[rng.integers(len(kinds))]) for _ in range(40)]
        uops = [isa.Uop(int(rng.integers(2048)), int(rng.integers(2048)), int(rng.integers(1024)))
                for _ in range(20)]
        data = isa.encode_program(prog)
        assert len(data) == 16 * len(prog)
        assert isa.decode_program(data) == prog
        assert isa.decode_uops(isa.encode_uops(uops)) == uops
        text = asm.disassemble(prog, uops)
        assert asm.assemble(text) == (prog, uops)
        # text -> binary -> text is stable too
        assert asm.disassemble(isa.decode_program(data), uops) == text


def test_every_kind_fits_the_word_and_known_layout():
    for kind in isa.KINDS.values():
        assert kind.bits <= 128
    # word layout: opcode in bits 0-2, flags in 3-6, then fields LSB first
    ins = isa.Load(mem=isa.MEM_INP, sram_base=5, dram_base=7, y_size=1, x_size=2, x_stride=3,
                   push_next=True)
    w = isa.encode(ins)
    assert w & 7 == 0 and (w >> 6) & 1 == 1 and (w >> 7) & 3 == isa.MEM_INP
    assert (w >> 9) & 0xFFFF == 5 and (w >> 25) & 0xFFFFFFFF == 7


def test_field_range_and_decode_errors():
    with pytest.raises(NPUError, match="uop_end=16384"):
        isa.Gemm(uop_bgn=0, uop_end=16384, iter_out=1, iter_in=1, dst_fo=0, dst_fi=0,
                 src_fo=0, src_fi=0)
    with pytest.raises(NPUError, match="imm=40000"):
        isa.Alu(op=0, imm=40000, uop_bgn=0, uop_end=1, iter_out=1, iter_in=1, dst_fo=0,
                dst_fi=0)
    with pytest.raises(NPUError, match="unknown opcode 7"):
        isa.decode(7)
    with pytest.raises(NPUError, match="bits set above"):
        isa.decode(3 | (1 << 100))  # FINISH with stray bits
    with pytest.raises(NPUError, match="micro-op field dst"):
        isa.Uop(dst=2048)


def test_register_instruction_rejects_wide_or_mismatched_kinds():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Wide(isa.Instruction):
        a: int
        b: int

    with pytest.raises(NPUError, match="needs 135 bits"):
        isa.register_instruction("WIDE", 7, Wide, [("a", 64, False), ("b", 64, False)], "compute")
    with pytest.raises(NPUError, match="exactly the dataclass fields"):
        isa.register_instruction("WIDE", 7, Wide, [("a", 8, False)], "compute")
    with pytest.raises(NPUError, match="registered already"):
        isa.register_instruction("GEMM", 7, Wide, [("a", 8, False), ("b", 8, False)], "compute")
    assert "WIDE" not in isa.KINDS and 7 not in isa.KINDS_BY_OPCODE


def test_assembler_errors_name_the_line():
    with pytest.raises(IRParseError, match="line 2: unknown mnemonic 'GEM'"):
        asm.assemble("FINISH\nGEM uop_bgn=0\n")
    with pytest.raises(IRParseError, match="missing fields"):
        asm.assemble("STORE sram_base=0\n")
    with pytest.raises(IRParseError, match="unknown flag 'pop'"):
        asm.assemble("FINISH pop\n")
    instrs, _ = asm.assemble("# comment\nLOAD mem=wgt sram_base=0 dram_base=0x10 y_size=1 "
                             "x_size=1 x_stride=0 y_pad0=0 y_pad1=0 x_pad0=0 x_pad1=0 push_next\n")
    assert instrs == [isa.Load(mem=isa.MEM_WGT, sram_base=0, dram_base=16, y_size=1, x_size=1,
                               x_stride=0, push_next=True)]


def test_npu_is_imported_lazily():
    code = ("import sys, ember; assert 'ember.npu' not in sys.modules; "
            "assert callable(ember.npu.lower_conv2d); assert 'ember.npu' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
