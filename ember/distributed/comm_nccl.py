"""``NCCLCommunicator``: the ``Communicator`` interface on NVIDIA's NCCL, for GPU ranks.

The library is ``libnccl.so.2`` of NVIDIA's ``nvidia-nccl-cu13`` wheel (ember's ``nccl``
extra), found by ``cuda.pathfinder`` and called through ``ctypes`` (NCCL's C API: ``nccl.h``,
NCCL 2.x: ``ncclGetUniqueId``, ``ncclCommInitRank``, ``ncclAllReduce``, ``ncclAllGather``,
``ncclBroadcast``, ``ncclSend`` / ``ncclRecv``, ``ncclCommAbort``); device memory and the stream
go through ``cuda.bindings.driver`` as in ``ember.runtime.cuda``. The ranks are spawned and
bootstrapped over MPI (rank 0's ``ncclUniqueId`` is broadcast on ``MPI_COMM_WORLD``), so
``DeviceCluster(["gpu:0", "gpu:1"])`` starts them as it starts CPU ranks.

Arrays stay NumPy arrays at this interface (the executor's values live on the host): each
operation copies its input into a device buffer, runs the NCCL collective on the rank's
stream and copies the result back; device-resident collectives between CUDA segments (no host
staging) are not done yet. Uneven all-gathers pad every shard to the largest extent (NCCL's
all-gather takes one count) and cut the padding on the host; a reduce-scatter of uneven sizes
is an all-reduce and a slice. Every wait polls the stream with the cluster's deadline and
ends in ``ncclCommAbort`` + ``CollectiveTimeoutError`` (or ``RunAbortedError``), never a hang.

Without an NVIDIA GPU, its driver, cuda-bindings or the NCCL wheel: ``DeviceError`` saying
what to install (``check_nccl``).
"""

from __future__ import annotations

import ctypes
import time

import numpy as np

from ..errors import DeviceError
from .comm import Communicator

__all__ = ["NCCLCommunicator", "check_nccl", "load_nccl", "NCCL_MISSING"]

NCCL_MISSING = ("NCCL is not installed: pip install 'ember[nccl]' (NVIDIA's nvidia-nccl-cu13 "
                "wheel, with the cuda extra's cuda-bindings)")

# ncclDataType_t and ncclRedOp_t of nccl.h
_NCCL_DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5,
                "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9}
_NCCL_SUM = 0
_UNIQUE_ID_BYTES = 128


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * _UNIQUE_ID_BYTES)]


_LIB = None


def load_nccl() -> ctypes.CDLL:
    """``libnccl.so.2`` (``cuda.pathfinder.load_nvidia_dynamic_lib("nccl")``), its function
    signatures set.

    Raises:
        DeviceError: the NCCL wheel or cuda-pathfinder is not installed (``NCCL_MISSING``).
    """
    global _LIB
    if _LIB is not None:
        return _LIB
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
        lib = ctypes.CDLL(load_nvidia_dynamic_lib("nccl").abs_path)
    except Exception as e:  # ImportError, DynamicLibNotFoundError, OSError
        raise DeviceError(f"{NCCL_MISSING} ({type(e).__name__}: {e})") from None
    vp, sz, i32 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    sigs = {"ncclGetVersion": [ctypes.POINTER(i32)],
            "ncclGetUniqueId": [ctypes.POINTER(_UniqueId)],
            "ncclCommInitRank": [ctypes.POINTER(vp), i32, _UniqueId, i32],
            "ncclCommDestroy": [vp], "ncclCommAbort": [vp],
            "ncclAllReduce": [vp, vp, sz, i32, i32, vp, vp],
            "ncclAllGather": [vp, vp, sz, i32, vp, vp],
            "ncclBroadcast": [vp, vp, sz, i32, i32, vp, vp],
            "ncclSend": [vp, sz, i32, i32, vp, vp], "ncclRecv": [vp, sz, i32, i32, vp, vp],
            "ncclGroupStart": [], "ncclGroupEnd": []}
    for name, args in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, i32
    lib.ncclGetErrorString.argtypes, lib.ncclGetErrorString.restype = [i32], ctypes.c_char_p
    _LIB = lib
    return lib


def nccl_version() -> int:
    """NCCL's version code (``NCCL_VERSION(major, minor, patch)``: 23203 for 2.32.3)."""
    v = ctypes.c_int()
    _check(load_nccl(), load_nccl().ncclGetVersion(ctypes.byref(v)), "ncclGetVersion")
    return v.value


def _check(lib, res: int, what: str) -> None:
    if res != 0:
        raise DeviceError(f"NCCL: {what} failed: {lib.ncclGetErrorString(res).decode()} "
                          f"(ncclResult_t {res})")


def check_nccl(devices: list[int]) -> None:
    """Check that GPU ranks on CUDA ``devices`` can start: the CUDA driver, enough GPUs, NCCL.

    Raises:
        DeviceError: no NCCL (``NCCL_MISSING``: what to install), no cuda-bindings / driver /
            GPU (``ember.runtime.cuda``'s message), or fewer GPUs than the largest index.
    """
    from ..runtime.cuda import _driver, _ok
    load_nccl()
    try:
        cu = _driver()
    except DeviceError as e:
        raise DeviceError(f"GPU ranks on devices {devices} (NCCL): {e}") from None
    count = _ok(cu, cu.cuDeviceGetCount(), "cuDeviceGetCount")
    if count == 0 or max(devices) >= count:
        raise DeviceError(f"GPU ranks on devices {devices} (NCCL): this machine has {count} "
                          f"CUDA device(s); run on a machine with an NVIDIA GPU per rank")


class NCCLCommunicator(Communicator):
    """``Communicator`` over an NCCL communicator of ``mpi_comm``'s ranks, this rank on CUDA
    device ``device``.

    Args:
        mpi_comm: the mpi4py intra-communicator of the ranks (bootstrap only: it carries rank
            0's ``ncclUniqueId``).
        device: this rank's CUDA device index.
        timeout: seconds one operation may wait before ``CollectiveTimeoutError``.
        abort_check: as ``MPICommunicator``'s.

    Raises:
        DeviceError: no GPU / driver / NCCL, or an NCCL call failed (names it).
    """

    def __init__(self, mpi_comm, device: int, timeout: float = 60.0, abort_check=None):
        from ..runtime.cuda import _driver, _ok
        self._cu, self._okf = _driver(), _ok
        self.lib = load_nccl()
        self.rank, self.size = mpi_comm.Get_rank(), mpi_comm.Get_size()
        self.timeout, self.abort_check = float(timeout), abort_check
        cu = self._cu
        dev = self._ok(cu.cuDeviceGet(int(device)), f"cuDeviceGet({device})")
        self._ctx = self._ok(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        self._ok(cu.cuCtxSetCurrent(self._ctx), "cuCtxSetCurrent")
        self._stream = self._ok(cu.cuStreamCreate(0), "cuStreamCreate")
        uid = _UniqueId()
        if self.rank == 0:
            _check(self.lib, self.lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        raw = mpi_comm.bcast(ctypes.string_at(ctypes.addressof(uid), _UNIQUE_ID_BYTES)
                             if self.rank == 0 else None, root=0)
        ctypes.memmove(ctypes.addressof(uid), raw, _UNIQUE_ID_BYTES)
        self._comm = ctypes.c_void_p()
        _check(self.lib, self.lib.ncclCommInitRank(ctypes.byref(self._comm), self.size, uid,
                                                   self.rank), "ncclCommInitRank")
        self._pending: list = []
        super().__init__()

    # device buffers and waits ------------------------------------------------------------
    def _ok(self, res, what):
        return self._okf(self._cu, res, what)

    def _dev(self, nbytes: int):
        return self._ok(self._cu.cuMemAlloc(max(int(nbytes), 1)), f"cuMemAlloc({nbytes})")

    def _free(self, *ptrs):
        for p in ptrs:
            self._cu.cuMemFree(p)

    def _h2d(self, ptr, x: np.ndarray):
        self._ok(self._cu.cuMemcpyHtoDAsync(ptr, x.ctypes.data, x.nbytes, self._stream),
                 "cuMemcpyHtoDAsync")

    def _d2h(self, out: np.ndarray, ptr):
        self._ok(self._cu.cuMemcpyDtoHAsync(out.ctypes.data, ptr, out.nbytes, self._stream),
                 "cuMemcpyDtoHAsync")

    def _wait(self, what: str, nbytes: int, t0: float) -> None:
        cu = self._cu

        def done():
            (err,) = cu.cuStreamQuery(self._stream)
            if err not in (cu.CUresult.CUDA_SUCCESS, cu.CUresult.CUDA_ERROR_NOT_READY):
                raise DeviceError(f"rank {self.rank}: {what} failed on the GPU: {err.name}")
            return err == cu.CUresult.CUDA_SUCCESS
        self.wait_until(done, what, nbytes, t0, give_up=lambda: self.lib.ncclCommAbort(self._comm))

    @staticmethod
    def _dtype(x) -> int:
        name = str(np.dtype(x.dtype)) if not isinstance(x, str) else x
        if name not in _NCCL_DTYPES:
            raise DeviceError(f"NCCL has no data type for {name} (types: {sorted(_NCCL_DTYPES)})")
        return _NCCL_DTYPES[name]

    # Communicator ---------------------------------------------------------------------------
    def all_reduce(self, x, op="sum"):
        if op != "sum":
            raise DeviceError(f"all_reduce op {op!r}: only 'sum' is implemented")
        t0 = time.perf_counter()
        x = np.ascontiguousarray(x)
        out = np.empty_like(x)
        buf = self._dev(x.nbytes)
        try:
            self._h2d(buf, x)
            _check(self.lib, self.lib.ncclAllReduce(int(buf), int(buf), x.size, self._dtype(x),
                                                    _NCCL_SUM, self._comm, int(self._stream)),
                   "ncclAllReduce")
            self._d2h(out, buf)
            self._wait(f"all_reduce of {x.shape} {x.dtype}", x.nbytes, t0)
        finally:
            self._free(buf)
        return out

    def all_gather(self, x, axis, sizes):
        t0 = time.perf_counter()
        sizes = [int(s) for s in sizes]
        xm = np.ascontiguousarray(np.moveaxis(np.ascontiguousarray(x), axis, 0))
        big = max(sizes)
        padded = np.zeros((big,) + xm.shape[1:], x.dtype)
        padded[:xm.shape[0]] = xm
        gathered = np.empty((self.size * big,) + xm.shape[1:], x.dtype)
        src, dst = self._dev(padded.nbytes), self._dev(gathered.nbytes)
        try:
            self._h2d(src, padded)
            _check(self.lib, self.lib.ncclAllGather(int(src), int(dst), padded.size,
                                                    self._dtype(x), self._comm,
                                                    int(self._stream)), "ncclAllGather")
            self._d2h(gathered, dst)
            self._wait(f"all_gather of {x.shape} {x.dtype} on axis {axis}", xm.nbytes, t0)
        finally:
            self._free(src, dst)
        parts = [gathered[r * big:r * big + s] for r, s in enumerate(sizes)]
        return np.ascontiguousarray(np.moveaxis(np.concatenate(parts, 0), 0, axis))

    def reduce_scatter(self, x, axis, sizes):
        sizes = [int(s) for s in sizes]
        full = self.all_reduce(x)
        off = sum(sizes[:self.rank])
        idx = [slice(None)] * full.ndim
        idx[axis] = slice(off, off + sizes[self.rank])
        return np.ascontiguousarray(full[tuple(idx)])

    def send(self, x, peer, tag=0):
        x = np.ascontiguousarray(x)
        buf = self._dev(x.nbytes)
        self._h2d(buf, x)
        _check(self.lib, self.lib.ncclSend(int(buf), x.size, self._dtype(x), int(peer),
                                           self._comm, int(self._stream)), "ncclSend")
        self._pending.append((buf, x))   # NCCL orders by stream; ``tag`` is implied by order
        self.stats["bytes_sent"] += x.nbytes

    def recv(self, shape, dtype, peer, tag=0):
        t0 = time.perf_counter()
        out = np.empty(tuple(shape), np.dtype(dtype))
        buf = self._dev(out.nbytes)
        try:
            _check(self.lib, self.lib.ncclRecv(int(buf), out.size, self._dtype(str(out.dtype)),
                                               int(peer), self._comm, int(self._stream)),
                   "ncclRecv")
            self._d2h(out, buf)
            self._wait(f"recv of {tuple(shape)} {dtype} from rank {peer}", 0, t0)
        finally:
            self._free(buf)
        return out

    def broadcast(self, x, root, shape=None, dtype=None):
        t0 = time.perf_counter()
        if self.rank == root:
            out = np.ascontiguousarray(x).copy()
        else:
            out = np.empty(tuple(shape), np.dtype(dtype))
        buf = self._dev(out.nbytes)
        try:
            if self.rank == root:
                self._h2d(buf, out)
            _check(self.lib, self.lib.ncclBroadcast(int(buf), int(buf), out.size,
                                                    self._dtype(out), int(root), self._comm,
                                                    int(self._stream)), "ncclBroadcast")
            self._d2h(out, buf)
            self._wait(f"broadcast of {out.shape} {out.dtype} from rank {root}",
                       out.nbytes if self.rank == root else 0, t0)
        finally:
            self._free(buf)
        return out

    def flush(self):
        pending, self._pending = self._pending, []
        if pending:
            self._wait("sends", 0, time.perf_counter())
            self.stats["calls"] -= 1
            self._free(*[b for b, _ in pending])

    def barrier(self):
        one = np.zeros(1, np.float32)
        self.all_reduce(one)
        self.stats["calls"] -= 1

    def close(self) -> None:
        """Destroy the NCCL communicator and the stream."""
        if self._comm:
            self.lib.ncclCommDestroy(self._comm)
            self._comm = ctypes.c_void_p()
