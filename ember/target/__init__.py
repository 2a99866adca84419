"""Compilation targets.

``Target("llvm -mcpu=native")`` is the host CPU (the kind keeps TVM's spelling ``llvm``; ``cpu``
and ``c`` name the same target: ember generates C and builds it with the system compiler).
CPU options: ``-mcpu=NAME`` (passed to the C compiler as ``-march=NAME``; ``native`` by
default), ``-num-threads=N`` (OpenMP threads; default: the OpenMP runtime's choice) and
``-isa=NAME`` (``avx512``, ``avx2`` or ``scalar``: cap the SIMD instruction set that schedules
and micro-kernels use below what ``-mcpu`` allows).

GPU kinds (see docs/gpu.md):

- ``Target("webgpu")``: WGSL kernels run through WebGPU (``wgpu``). Its compile-time limits are
  the WebGPU specification's guaranteed minimums (256 invocations per workgroup, 16 KiB of
  workgroup storage, 65,535 workgroups per dimension, warp size 1: nothing is assumed about
  subgroups), which every adapter meets; the runtime reads the adapter's own limits when it
  loads a model and refuses kernels beyond them.
- ``Target("cuda")`` and the tags ``Target("nvidia/nvidia-t4")``, ``"nvidia/a100"``,
  ``"nvidia/h200"`` (``Target.list_tags()``), which expand to the GPU's attributes
  (``ember.target.tags``). ember has no CUDA printer yet: building for them raises
  ``TargetError``.

GPU options override attributes: ``-max_threads_per_block=N``, ``-max_shared_memory_per_block=
BYTES``, ``-thread_warp_size=N``, ``-max_num_blocks=N`` (workgroups per grid dimension),
``-arch=sm_XX``, ``-l2_cache_size_bytes=BYTES``, ``-max_storage_buffer_binding_size=BYTES`` (the
largest tensor one kernel binding may hold; webgpu: 134,217,728, the WebGPU spec's default
maxStorageBufferBindingSize; dense weights above it are split by the ``SplitDense`` graph pass).

Accelerator kind (see docs/npu.md): ``Target("npu")`` is the VTA-class NPU of ``ember.npu`` with
its default hardware description (``ember/npu/configs/default.json``), ``Target("npu
-config=FILE")`` one read from a JSON file of the same keys. The config is read and validated
when the target is made (``TargetError`` naming the key or the scratchpad that cannot hold one
tile); ``target.npu_config`` is the ``NPUConfig``. The layers the NPU cannot run, and the rest of
the graph, run on the host CPU (``-mcpu``/``-num-threads``/``-isa`` are accepted for it).
"""

from __future__ import annotations

from ..errors import TargetError
from .cpu import CPU_KINDS, _march_features
from .tags import TAGS

GPU_KINDS = {"webgpu", "cuda"}
NPU_KINDS = {"npu"}

# attribute defaults per GPU kind: WebGPU's from the WebGPU spec's "limits" defaults
GPU_DEFAULTS: dict[str, dict] = {
    "webgpu": {"max_threads_per_block": 256, "max_shared_memory_per_block": 16384,
               "thread_warp_size": 1, "max_num_blocks": 65535,
               "max_storage_buffer_binding_size": 134217728},
    "cuda": {"arch": "sm_75", "max_threads_per_block": 1024,
             "max_shared_memory_per_block": 49152, "thread_warp_size": 32,
             "max_num_blocks": 65535, "l2_cache_size_bytes": 4 * 1024 * 1024},
}
_INT_ATTRS = ("max_threads_per_block", "max_shared_memory_per_block", "thread_warp_size",
              "max_num_blocks", "l2_cache_size_bytes", "max_storage_buffer_binding_size")


class Target:
    """A parsed target: ``kind`` (``"llvm"`` for every CPU spelling, ``"webgpu"``, ``"cuda"``)
    and ``options`` (CPU: ``mcpu``/``num-threads``/``isa``; GPU: the attributes, every one
    filled in from the kind's defaults or the tag).

    Raises:
        TargetError: an empty string, an unknown kind or tag, an unknown option or a bad value.
    """

    def __init__(self, spec: "str | Target" = "llvm"):
        if isinstance(spec, Target):
            self.kind, self.options, self.tag = spec.kind, dict(spec.options), spec.tag
            self._npu_config = getattr(spec, "_npu_config", None)
            return
        parts = str(spec).split()
        if not parts:
            raise TargetError("empty target string; use e.g. 'llvm -mcpu=native'")
        kind = parts[0].lower()
        self.tag = None
        if kind in TAGS:
            self.tag = kind
            attrs = dict(TAGS[kind])
            kind = attrs.pop("kind")
            self.kind = kind
            self.options = {k: str(v) for k, v in {**GPU_DEFAULTS[kind], **attrs}.items()}
            self._parse_gpu(parts[1:])
            return
        if kind in GPU_KINDS:
            self.kind = kind
            self.options = {k: str(v) for k, v in GPU_DEFAULTS[kind].items()}
            self._parse_gpu(parts[1:])
            return
        if kind not in CPU_KINDS and kind not in NPU_KINDS:
            raise TargetError(f"unknown target kind {parts[0]!r}: ember supports 'llvm' (also "
                              f"spelled 'cpu' or 'c') for the host CPU, 'webgpu', 'cuda', 'npu' "
                              f"and the tags {sorted(TAGS)}")
        self.kind = "npu" if kind in NPU_KINDS else "llvm"
        self.options: dict[str, str] = {"mcpu": "native"}
        known = ("mcpu", "num-threads", "isa") + (("config",) if self.kind == "npu" else ())
        for p in parts[1:]:
            if not p.startswith("-") or "=" not in p:
                raise TargetError(f"bad target option {p!r}: expected -key=value")
            k, v = p.lstrip("-").split("=", 1)
            if k not in known:
                raise TargetError(f"unknown {self.kind} target option -{k} (known: "
                                  f"{', '.join('-' + x for x in known)})")
            if k == "num-threads" and not (v.isdigit() and int(v) > 0):
                raise TargetError(f"-num-threads={v}: expected a positive integer")
            if k == "isa" and v not in ("avx512", "avx2", "scalar"):
                raise TargetError(f"unknown -isa={v}: use avx512, avx2 or scalar")
            self.options[k] = v
        self._npu_config = None
        if self.kind == "npu":
            self._npu_config = self._load_npu_config()

    def _load_npu_config(self):
        from ..npu.config import load_config
        return load_config(self.options.get("config"))

    @property
    def is_npu(self) -> bool:
        """True for the accelerator kind ``npu`` (its host part is the CPU)."""
        return self.kind in NPU_KINDS

    @property
    def npu_config(self):
        """The ``ember.npu.NPUConfig`` of an ``npu`` target (``-config=FILE``, else the default).

        Raises:
            TargetError: a target of another kind."""
        if not self.is_npu:
            raise TargetError(f"target {self} is not an NPU: it has no NPU config")
        if getattr(self, "_npu_config", None) is None:
            self._npu_config = self._load_npu_config()
        return self._npu_config

    def host(self) -> "Target":
        """The CPU target that runs what an accelerator target does not (itself for a CPU)."""
        if not self.is_npu:
            return self
        return Target(" ".join(["llvm"] + [f"-{k}={v}" for k, v in sorted(self.options.items())
                                           if k != "config"]))

    def _parse_gpu(self, parts) -> None:
        known = set(_INT_ATTRS) | {"arch"}
        for p in parts:
            if not p.startswith("-") or "=" not in p:
                raise TargetError(f"bad target option {p!r}: expected -key=value")
            k, v = p.lstrip("-").split("=", 1)
            if k not in known:
                raise TargetError(f"unknown {self.kind} target option -{k} (known: "
                                  f"{', '.join('-' + x for x in sorted(known))})")
            if k in _INT_ATTRS and not (v.isdigit() and int(v) > 0):
                raise TargetError(f"-{k}={v}: expected a positive integer")
            self.options[k] = v

    @staticmethod
    def list_tags() -> list[str]:
        """The target tags ``Target`` accepts (e.g. ``"nvidia/a100"``), sorted."""
        return sorted(TAGS)

    @property
    def is_gpu(self) -> bool:
        """True for the GPU kinds (``webgpu``, ``cuda``)."""
        return self.kind in GPU_KINDS

    def attr(self, name: str) -> "int | str":
        """GPU attribute ``name`` (ints for the limits, a str for ``arch``).

        Raises:
            TargetError: a CPU target, or an attribute this target does not have."""
        if not self.is_gpu:
            raise TargetError(f"target {self} is not a GPU: it has no attribute {name!r}")
        if name not in self.options:
            raise TargetError(f"target {self} has no attribute {name!r} (it has "
                              f"{sorted(self.options)})")
        v = self.options[name]
        return int(v) if name in _INT_ATTRS else v

    @property
    def max_threads_per_block(self) -> int:
        """GPU: the most threads (invocations) one block (workgroup) may have."""
        return self.attr("max_threads_per_block")

    @property
    def max_shared_memory_per_block(self) -> int:
        """GPU: bytes of shared (workgroup) memory one block may use."""
        return self.attr("max_shared_memory_per_block")

    @property
    def thread_warp_size(self) -> int:
        """GPU: threads per warp (1 for WebGPU: no subgroup size is assumed)."""
        return self.attr("thread_warp_size")

    @property
    def max_num_blocks(self) -> int:
        """GPU: the most blocks (workgroups) per grid dimension of one launch."""
        return self.attr("max_num_blocks")

    @property
    def mcpu(self) -> str:
        return self.options.get("mcpu", "native")

    @property
    def features(self) -> frozenset:
        """Instruction-set features the C compiler enables for ``-march=mcpu`` (``native``: the
        host's), e.g. ``{"avx512f", "avx2", "fma"}``; empty when no compiler can be asked (or
        for a GPU target)."""
        if self.is_gpu:
            return frozenset()
        return _march_features(self.mcpu)

    @property
    def isa(self) -> str:
        """The SIMD instruction set code generation uses: ``"avx512"``, ``"avx2"`` or
        ``"scalar"``."""
        f = self.features
        best = "avx512" if "avx512f" in f else ("avx2" if "avx2" in f and "fma" in f
                                                else "scalar")
        cap = self.options.get("isa")
        order = ["scalar", "avx2", "avx512"]
        if cap and order.index(cap) < order.index(best):
            return cap
        return best

    @property
    def vector_lanes(self) -> int:
        """float32 lanes of one SIMD register (16 for AVX-512, 8 for AVX2, 4 otherwise)."""
        return {"avx512": 16, "avx2": 8}.get(self.isa, 4)

    @property
    def num_threads(self) -> int | None:
        v = self.options.get("num-threads")
        return int(v) if v else None

    def __str__(self):
        return " ".join([self.kind] + [f"-{k}={v}" for k, v in sorted(self.options.items())])

    def __repr__(self):
        return f"Target({str(self)!r})"

    def __eq__(self, other):
        return isinstance(other, Target) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))


__all__ = ["CPU_KINDS", "GPU_KINDS", "NPU_KINDS", "TAGS", "Target", "TargetError"]
