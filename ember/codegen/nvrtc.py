"""Build CUDA C with NVRTC and nvJitLink, on any machine (no GPU or driver needed).

``build_cuda(source, archs)`` compiles one CUDA translation unit with NVRTC to PTX for the
virtual architecture ``compute_XX`` of the oldest arch, then links that PTX with nvJitLink into
a cubin for every ``sm_XX`` of ``archs`` (``-verbose``: ptxas's resource report). The result,
``CUDABinary``, holds the PTX (for GPUs newer than the cubins: the driver JIT-compiles it), the
cubins and the resource usage per kernel and arch (registers, spill bytes, static shared
memory, stack). ``check_resources`` raises ``CodegenError`` naming a kernel over the target's
limits. Builds are cached by content hash in the kernel cache (``build.cached_build``: source,
options, NVRTC and nvJitLink versions).

Packages (ember's ``cuda`` extra): ``cuda-bindings`` (``cuda.bindings.nvrtc`` / ``nvjitlink``
/ ``driver``), ``nvidia-cuda-nvrtc``, ``nvidia-nvjitlink``, ``nvidia-cuda-runtime`` (the
headers: ``cuda_fp16.h``). Reference: the NVRTC and nvJitLink user guides (CUDA 13).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CodegenError, ToolchainError
from .build import cached_build

#: registers per thread and spill bytes a kernel may use (``check_resources``): 255 is the
#: hardware's limit per thread on sm_70..sm_90; ember's kernels are not expected to spill
MAX_REGISTERS = 255
MAX_SPILL_BYTES = 0

_INSTALL = "pip install 'ember[cuda]' (cuda-bindings, nvidia-cuda-nvrtc, nvidia-nvjitlink, " \
           "nvidia-cuda-runtime)"


def _modules():
    try:
        from cuda.bindings import nvjitlink, nvrtc
    except ImportError as e:
        raise ToolchainError(f"the CUDA compiler libraries are not installed ({e}); {_INSTALL}") \
            from None
    return nvrtc, nvjitlink


@functools.lru_cache(maxsize=None)
def include_dir() -> str | None:
    """The folder holding ``cuda_fp16.h`` (the ``nvidia-cuda-runtime`` wheel's headers), or
    ``None`` when the wheel is not installed."""
    try:
        import nvidia
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for hit in sorted(Path(root).glob("*/include/cuda_fp16.h")):
            return str(hit.parent)
    return None


@functools.lru_cache(maxsize=None)
def crt_include_dir() -> str | None:
    """A folder holding ``crt/mma.h`` (what ``mma.h``, the tensor cores' ``wmma`` API,
    includes): the ``nvidia-cuda-crt`` wheel's headers next to ``cuda_fp16.h``, else a CUDA
    toolkit's (``$CUDA_HOME``, ``$CUDA_PATH``, ``/usr/local/cuda``); ``None`` when neither has
    it."""
    import os
    cands = [include_dir()] + [os.path.join(os.environ[v], "include")
                               for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)] + \
        ["/usr/local/cuda/include"]
    for c in cands:
        if c and os.path.exists(os.path.join(c, "crt", "mma.h")):
            return c
    return None


@functools.lru_cache(maxsize=None)
def versions() -> str:
    """``"nvrtc X.Y, nvjitlink X.Y"`` (part of the cache key).

    Raises:
        ToolchainError: the libraries are missing or cannot be loaded."""
    nvrtc, nvjitlink = _modules()
    try:
        err, major, minor = nvrtc.nvrtcVersion()
        jl = nvjitlink.version()
    except Exception as e:  # the shared libraries behind the bindings are missing
        raise ToolchainError(f"the CUDA compiler libraries cannot be loaded ({e}); {_INSTALL}") \
            from None
    return f"nvrtc {major}.{minor}, nvjitlink {jl[0]}.{jl[1]}"


@dataclass
class KernelResources:
    """ptxas's report for one kernel on one arch: ``registers`` per thread, ``spill_bytes``
    (stores + loads), ``shared_bytes`` (static shared memory), ``stack_bytes``."""

    registers: int = 0
    spill_bytes: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0


@dataclass
class CUDABinary:
    """A built CUDA module: ``ptx`` (text, for ``compute_XX``), ``cubins`` (arch -> bytes),
    ``resources`` (arch -> kernel name -> ``KernelResources``), ``log`` (compiler messages)."""

    ptx: str
    cubins: dict
    resources: dict = field(default_factory=dict)
    log: str = ""

    def to_bytes(self) -> bytes:
        import base64
        return json.dumps({"ptx": self.ptx, "log": self.log,
                           "cubins": {a: base64.b64encode(c).decode()
                                      for a, c in self.cubins.items()},
                           "resources": {a: {k: vars(r) for k, r in rs.items()}
                                         for a, rs in self.resources.items()}}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "CUDABinary":
        import base64
        d = json.loads(data)
        return cls(d["ptx"], {a: base64.b64decode(c) for a, c in d["cubins"].items()},
                   {a: {k: KernelResources(**r) for k, r in rs.items()}
                    for a, rs in d["resources"].items()}, d.get("log", ""))


_FUNC = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+a?)'")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def parse_ptxas_log(log: str) -> dict:
    """``{kernel name: KernelResources}`` from ptxas's ``-v`` report (nvJitLink's info log)."""
    out: dict[str, KernelResources] = {}
    cur = None
    for line in log.splitlines():
        m = _FUNC.search(line)
        if m:
            cur = out.setdefault(m.group(1), KernelResources())
            continue
        if cur is None:
            continue
        m = _SPILL.search(line)
        if m:
            cur.stack_bytes = int(m.group(1))
            cur.spill_bytes = int(m.group(2)) + int(m.group(3))
            continue
        m = _USED.search(line)
        if m:
            cur.registers = int(m.group(1))
            cur.shared_bytes = int(m.group(2) or 0)
            cur = None
    return out


def _nvrtc_ptx(source: str, arch: str, name: str) -> tuple[str, str]:
    nvrtc, _ = _modules()
    virt = "compute_" + arch.split("_", 1)[1]
    # IEEE float32 (no fast math, no flush-to-zero): results comparable with the CPU's
    opts = [f"--gpu-architecture={virt}", "-default-device", "--std=c++17", "-ftz=false",
            "-prec-div=true", "-prec-sqrt=true", "-w"]
    inc = include_dir()
    if inc:
        opts.append(f"--include-path={inc}")
    crt = crt_include_dir() if "<mma.h>" in source else None
    if crt and crt != inc:  # after the wheel's headers: only crt/ is looked up there
        opts.append(f"--include-path={crt}")
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CodegenError(f"NVRTC cannot create a program for {name}: {err}", source=source)
    try:
        bopts = [o.encode() for o in opts]
        (res,) = nvrtc.nvrtcCompileProgram(prog, len(bopts), bopts)
        _, n = nvrtc.nvrtcGetProgramLogSize(prog)
        # a fresh writable buffer: NVRTC writes into it, and b" " * 1 is the interpreter's
        # shared one-byte b" " (an empty log wrote its NUL into every b" " of the process)
        buf = bytearray(n)
        nvrtc.nvrtcGetProgramLog(prog, buf)
        log = buf.decode(errors="replace").rstrip("\x00 \n")
        if res != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            hint = "" if inc or "cuda_fp16" not in source else \
                " (cuda_fp16.h not found: pip install nvidia-cuda-runtime)"
            if "<mma.h>" in source and crt is None:
                hint += " (crt/mma.h not found: pip install nvidia-cuda-crt)"
            raise CodegenError(f"NVRTC rejected the CUDA C of {name}{hint}:\n{log[-4000:]}",
                               source=source, compiler_output=log)
        _, n = nvrtc.nvrtcGetPTXSize(prog)
        buf = bytearray(n)
        nvrtc.nvrtcGetPTX(prog, buf)
        return buf.decode().rstrip("\x00"), log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _link_cubin(ptx: str, arch: str, name: str) -> tuple[bytes, str]:
    _, nvjitlink = _modules()
    h = nvjitlink.create(2, [f"-arch={arch}", "-verbose", "-O3"])
    try:
        data = ptx.encode()
        try:
            nvjitlink.add_data(h, nvjitlink.InputType.PTX, data, len(data), name)
            nvjitlink.complete(h)
        except Exception as e:
            n = nvjitlink.get_error_log_size(h)
            log = bytearray(n)
            nvjitlink.get_error_log(h, log)
            raise CodegenError(f"nvJitLink cannot build {name} for {arch}: {e}\n"
                               f"{log.decode(errors='replace')[-4000:]}", source=ptx) from None
        n = nvjitlink.get_linked_cubin_size(h)
        cubin = bytearray(n)
        nvjitlink.get_linked_cubin(h, cubin)
        n = nvjitlink.get_info_log_size(h)
        log = bytearray(n)
        nvjitlink.get_info_log(h, log)
        return bytes(cubin), log.decode(errors="replace").rstrip("\x00")
    finally:
        nvjitlink.destroy(h)


def build_cuda(source: str, archs: list[str], name: str = "module") -> CUDABinary:
    """Compile CUDA C ``source`` to PTX (``compute_XX`` of the oldest of ``archs``: the driver
    JIT-compiles it for any newer GPU) and a cubin per
    ``sm_XX`` of ``archs``; cached by content hash.

    Raises:
        ToolchainError: NVRTC / nvJitLink are not installed.
        CodegenError: NVRTC rejected the source (the error holds the source and the compiler's
            message), or nvJitLink could not build a cubin."""
    archs = sorted(set(archs), key=lambda a: int(a.split("_")[1].rstrip("a")))

    def make() -> bytes:
        ptx, log = _nvrtc_ptx(source, archs[0], name)
        cubins, res = {}, {}
        for a in archs:
            cubins[a], info = _link_cubin(ptx, a, name)
            res[a] = parse_ptxas_log(info)
            log += "\n" + info
        return CUDABinary(ptx, cubins, res, log).to_bytes()

    data = cached_build(
        ["cuda", versions(), include_dir() or "", " ".join(archs), source]
        + ([crt_include_dir() or ""] if "<mma.h>" in source else []), ".cubin.json", make)
    return CUDABinary.from_bytes(data)


def check_resources(binary: CUDABinary, kernels: dict, target) -> None:
    """Refuse kernels over the target's limits in ``binary``'s resource report.
    ``kernels``: kernel name -> (what it computes, e.g. the node, and its threads per block).

    Raises:
        CodegenError: naming the kernel and node: more than ``MAX_REGISTERS`` registers per
            thread, registers x threads above 65,536 per block, spills above
            ``MAX_SPILL_BYTES``, or shared memory above ``max_shared_memory_per_block``."""
    for arch, res in binary.resources.items():
        for name, r in res.items():
            what, threads = kernels.get(name, (name, 1))
            where = f"CUDA kernel {name} of {what} on {arch}"
            if r.registers > MAX_REGISTERS:
                raise CodegenError(f"{where}: {r.registers} registers per thread, above the "
                                   f"limit of {MAX_REGISTERS}; schedule it with smaller "
                                   f"per-thread tiles")
            if r.registers * threads > 65536:
                raise CodegenError(f"{where}: {r.registers} registers per thread x {threads} "
                                   f"threads is above the 65,536 registers of a block; use fewer "
                                   f"threads per block")
            if r.spill_bytes > MAX_SPILL_BYTES:
                raise CodegenError(f"{where}: spills {r.spill_bytes} bytes to local memory "
                                   f"(limit {MAX_SPILL_BYTES}); schedule it with smaller "
                                   f"per-thread tiles")
            if r.shared_bytes > target.max_shared_memory_per_block:
                raise CodegenError(f"{where}: {r.shared_bytes} bytes of shared memory, above "
                                   f"the target's max_shared_memory_per_block="
                                   f"{target.max_shared_memory_per_block}")


__all__ = ["CUDABinary", "KernelResources", "MAX_REGISTERS", "MAX_SPILL_BYTES", "build_cuda",
           "check_resources", "crt_include_dir", "include_dir", "parse_ptxas_log", "versions"]
