"""Run a ``CUDAModel``'s CUDA C on the CPU, for tests on machines without a GPU.

The module's source is compiled as C++ by the host compiler (``$CXX`` or ``g++``) with a few
definitions standing in for CUDA's (``__global__``, ``threadIdx``/``blockIdx`` as thread-local
variables, ``__int_as_float``...); every block and thread of each launch runs in turn, in one
host thread; the threads of a block whose kernel has ``__syncthreads`` run as coroutines
(``ucontext``) switched at every barrier, so a barrier orders them as on a GPU. The launches, their arguments and the memory layout are the
runtime's own (``CUDAModel.launches``, ``where``, ``device_bytes``), so this checks the printed
CUDA C and the runtime's layout against a reference; only the driver calls are left out.
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

SHIM = r"""
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <cstdint>
#include <utility>
#define EMBER_HAVE_STDINT
using namespace std;
struct ember_dim3 { unsigned x, y, z; };
static ember_dim3 threadIdx, blockIdx;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(n)
#define __shared__ static
// a block whose kernel synchronizes runs its threads as coroutines (ucontext): each runs
// to its next __syncthreads, in turn, so every thread reaches barrier k before any passes it
#include <ucontext.h>
static ucontext_t ember_sched, *ember_cur;
struct ember_thread { ucontext_t ctx; ember_dim3 tid; bool done; int wait; };
static void** ember_args;
static void (*ember_entry)(void**);
static ember_thread *ember_now, *ember_threads;
// wait: 0 runnable, 1 at a barrier (resumed when every thread is), 2 in a warp shuffle
#define __syncthreads() (ember_now->wait = 1, swapcontext(ember_cur, &ember_sched))
static long long ember_lanes[1024];
template <typename T> static T __shfl_down_sync(unsigned, T v, int d) {
  int me = (int)(ember_now - ember_threads);
  memcpy(&ember_lanes[me], &v, sizeof(T));
  ember_now->wait = 2; swapcontext(ember_cur, &ember_sched);  // every lane has written
  T r = v;
  if (me % 32 + d < 32) memcpy(&r, &ember_lanes[me + d], sizeof(T));
  ember_now->wait = 2; swapcontext(ember_cur, &ember_sched);  // every lane has read
  return r;
}
static void ember_trampoline() { ember_entry(ember_args); ember_now->done = true; }
static void ember_run_block(void (*entry)(void**), void** a, ember_dim3 b, int bx, int by, int bz) {
  static char* stacks = nullptr; static int nstacks = 0; const int STACK = 1 << 17;
  int n = bx * by * bz;
  if (n > nstacks) { free(stacks); stacks = (char*)malloc((size_t)n * STACK); nstacks = n; }
  ember_thread* ts = new ember_thread[n];
  ember_threads = ts;
  ember_entry = entry; ember_args = a; blockIdx = b;
  for (int i = 0; i < n; ++i) {
    ts[i].tid = {(unsigned)(i % bx), (unsigned)(i / bx % by), (unsigned)(i / (bx * by))};
    ts[i].done = false; ts[i].wait = 0;
    getcontext(&ts[i].ctx);
    ts[i].ctx.uc_stack.ss_sp = stacks + (size_t)i * STACK;
    ts[i].ctx.uc_stack.ss_size = STACK;
    ts[i].ctx.uc_link = &ember_sched;
    makecontext(&ts[i].ctx, ember_trampoline, 0);
  }
  for (int left = n; left;) {
    bool running = false;
    for (int i = 0; i < n; ++i) {
      if (ts[i].done || ts[i].wait == 1) continue;
      ts[i].wait = 0; running = true;
      ember_now = &ts[i]; ember_cur = &ts[i].ctx; threadIdx = ts[i].tid;
      swapcontext(&ember_sched, &ts[i].ctx);
    }
    left = 0;
    bool all_at_barrier = true;
    for (int i = 0; i < n; ++i) {
      if (ts[i].done) continue;
      ++left;
      if (ts[i].wait != 1) all_at_barrier = false;
    }
    if (all_at_barrier) for (int i = 0; i < n; ++i) ts[i].wait = 0;  // the barrier opens
    (void)running;
  }
  delete[] ts;
}
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
template <typename... A, size_t... I>
static void ember_call_(void (*f)(A...), void** a, index_sequence<I...>) { f((A)a[I]...); }
template <typename... A>
static void ember_call(void (*f)(A...), void** a) { ember_call_(f, a, index_sequence_for<A...>{}); }
"""

_LIBS: dict[str, ctypes.CDLL] = {}


def cxx() -> str | None:
    """The host C++ compiler, or ``None``."""
    import os
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")


def _library(model) -> ctypes.CDLL:
    names = sorted({k["name"] for st in model.steps for k in st["kernels"]})
    parts = re.split(r'extern "C" __global__ void __launch_bounds__\(\d+\) (\w+)\(', model.source)
    sources = dict(zip(parts[1::2], parts[2::2]))  # kernel name -> its text
    launchers = []
    for n in names:
        if "__syncthreads" in sources.get(n, "") or "__shfl" in sources.get(n, ""):
            body = (f"ember_run_block([](void** a) {{ ember_call({n}, a); }}, a, "
                    f"{{(unsigned)x, (unsigned)y, (unsigned)z}}, bx, by, bz);")
        else:
            body = (f"for (int tz = 0; tz < bz; ++tz) for (int ty = 0; ty < by; ++ty) "
                    f"for (int tx = 0; tx < bx; ++tx) {{ blockIdx = {{(unsigned)x, (unsigned)y, "
                    f"(unsigned)z}}; threadIdx = {{(unsigned)tx, (unsigned)ty, (unsigned)tz}}; "
                    f"ember_call({n}, a); }}")
        launchers.append(
            f'extern "C" void launch_{n}(void** a, int gx, int gy, int gz, int bx, int by, '
            f"int bz) {{ for (int z = 0; z < gz; ++z) for (int y = 0; y < gy; ++y) "
            f"for (int x = 0; x < gx; ++x) {{ {body} }} }}\n")
    launchers = "".join(launchers)
    half = ("typedef _Float16 __half; static inline float __half2float(__half h) "
            "{ return (float)h; } static inline __half __float2half_rn(float f) "
            "{ return (__half)f; }\n")  # the host's IEEE half (GCC >= 12) for cuda_fp16.h
    src = SHIM + model.source.replace("#include <cuda_fp16.h>\n", half) + "\n" + launchers
    key = hashlib.sha256(src.encode()).hexdigest()
    if key not in _LIBS:
        d = Path(tempfile.mkdtemp(prefix="ember-cuda-emu-"))
        (d / "m.cpp").write_text(src)
        r = subprocess.run([cxx(), "-O1", "-std=c++17", "-shared", "-fPIC", "-w", str(d / "m.cpp"),
                            "-o", str(d / "m.so")], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"the host compiler rejected the CUDA C:\n{r.stderr[-3000:]}")
        _LIBS[key] = ctypes.CDLL(str(d / "m.so"))
    return _LIBS[key]


def emulate(model, feeds: dict) -> tuple[list[np.ndarray], list[int]]:
    """``(outputs, status words of the index-checked steps)`` of one inference of ``model``
    (a ``CUDAModel``) run on the CPU."""
    lib = _library(model)
    mem = np.zeros(model.device_bytes + 256, np.uint8)
    base = (mem.ctypes.data + 255) // 256 * 256
    view = mem[base - mem.ctypes.data:]
    slots = model.plan["slots"]
    for k, s in enumerate(slots):
        if s["kind"] == "param":
            a = np.ascontiguousarray(model.params[s["param"]]).reshape(-1).view(np.uint8)
            view[model.where[k]:model.where[k] + a.nbytes] = a
    for i in model.plan["inputs"]:
        a = np.ascontiguousarray(feeds[i["name"]]).reshape(-1).view(np.uint8)
        view[model.where[i["slot"]]:model.where[i["slot"]] + a.nbytes] = a
    for name, grid, block, ptrs, _ in model.launches(base):
        args = (ctypes.c_void_p * len(ptrs))(*ptrs)
        getattr(lib, f"launch_{name}")(args, *grid, *block)
    outs = []
    for o in model.plan["outputs"]:
        s = slots[o["slot"]]
        n = int(np.prod(s["shape"], dtype=np.int64)) * np.dtype(s["dtype"]).itemsize
        at = model.where[o["slot"]]
        outs.append(view[at:at + n].view(np.dtype(s["dtype"])).reshape(s["shape"]).copy())
    status = [int(view[model.status_at + 256 * j:model.status_at + 256 * j + 4].view(np.int32)[0])
              for j in range(len(model.checked))]
    return outs, status
