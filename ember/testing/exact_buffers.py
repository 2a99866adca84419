"""Exact-size buffers for AddressSanitizer runs (a pytest plugin, also importable).

``GraphExecutor`` places every intermediate tensor in one arena (slots rounded up to 64 bytes)
and ``aligned_empty`` over-allocates by up to 64 bytes, so a kernel that writes a little past
its output lands in a neighbouring slot or in slack bytes: inside an allocation, invisible to
AddressSanitizer. Importing this module (``python -m pytest -p ember.testing.exact_buffers``, or
``import ember.testing.exact_buffers`` in a script) changes that for the process:

- ``aligned_empty`` returns a buffer that ends exactly at the end of its own ``posix_memalign``
  allocation (64-byte aligned start);
- every ``GraphExecutor`` gives each arena slot and each weight its own such allocation (not
  one shared weight arena on huge pages) and runs step by step (the AOT entry has the arena
  offsets compiled in), reading outputs from those slots.

Results are unchanged (slots share bytes only between tensors whose lifetimes are disjoint);
it only makes overruns visible. Use it together with ``EMBER_CFLAGS=-fsanitize=address`` (see
docs/performance.md, "Checking generated code with AddressSanitizer"). Linux/glibc only.
"""

from __future__ import annotations

import ctypes
import weakref

import numpy as np

from ..runtime import executor as _ex

_libc = ctypes.CDLL(None)
_libc.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t,
                                 ctypes.c_size_t]
_libc.posix_memalign.restype = ctypes.c_int
_libc.free.argtypes = [ctypes.c_void_p]


def aligned_empty(nbytes: int) -> np.ndarray:
    """A uint8 array of ``nbytes`` (64-byte aligned) that ends where its allocation ends.

    Raises:
        MemoryError: the allocation failed.
    """
    n = max(int(nbytes), 1)
    p = ctypes.c_void_p()
    if _libc.posix_memalign(ctypes.byref(p), _ex.ALIGN, n) != 0 or not p.value:
        raise MemoryError(f"posix_memalign of {n} bytes failed")
    buf = (ctypes.c_uint8 * n).from_address(p.value)
    weakref.finalize(buf, _libc.free, p.value)
    return np.frombuffer(buf, np.uint8)[:int(nbytes)]


_orig_init = _ex.GraphExecutor.__init__
_orig_bind_params = _ex.GraphExecutor._bind_params


def _bind_params(self, params):
    out = {}
    for name, a in _orig_bind_params(self, params).items():
        b = aligned_empty(a.nbytes)
        out[name] = b.view(a.dtype).reshape(a.shape) if a.nbytes else a
        out[name][...] = a
    return out

_orig_output_source = _ex.GraphExecutor._output_source


def _init(self, lib, plan, params, num_threads=None):
    _orig_init(self, lib, plan, params, num_threads)
    self._slot_bufs = {}
    for k, s in enumerate(plan["slots"]):
        if s["kind"] == "arena":
            n = int(np.prod(s["shape"], dtype=np.int64)) * _ex._dtype(s["dtype"]).itemsize
            b = aligned_empty(n)
            self._slot_bufs[k] = b
            self._ptr[k] = b.ctypes.data
    self.use_aot = False
    self._out_src = [self._output_source(o["slot"]) for o in self.output_specs]


def _output_source(self, slot):
    s = self.plan["slots"][slot]
    if s["kind"] == "arena" and slot in getattr(self, "_slot_bufs", {}):
        dt = _ex._dtype(s["dtype"])
        return self._slot_bufs[slot].view(dt).reshape(tuple(s["shape"])), None
    return _orig_output_source(self, slot)


_ex.aligned_empty = aligned_empty
_ex.GraphExecutor.__init__ = _init
_ex.GraphExecutor._bind_params = _bind_params
_ex.GraphExecutor._output_source = _output_source
