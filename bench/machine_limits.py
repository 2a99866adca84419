"""What this machine delivers to a float32 CPU kernel: the ceilings ember's kernels are held to.

Four C measurements, compiled here with the system C compiler (``-O3 -march=native -fopenmp``)
and run in a child process, all on 2 MiB-aligned memory advised ``MADV_HUGEPAGE`` (as ember's
runtime places its weights and activations):

1. **Read bandwidth** (GB/s) of a sum over a buffer of 8 MB ... 256 MB, 1 and 2 threads: where
   the working set stops fitting the cache share this process gets, the rate drops to DRAM's.
2. **FMA ceilings** (GFLOP/s, 1 thread, best of 9 interleaved runs each): a register-only
   loop of independent AVX-512 FMAs (what ``ember.runtime.profiler.measure_peak_gflops``
   calls the peak), and the same FMAs fed as a GEMM micro-kernel feeds them (one broadcast
   load per row, two B vector loads per step, a 14 x 32 register tile, all in L1): the
   practical ceiling of any register block.
3. **ember's own GEMM micro-kernels** (``ember.codegen.microkernel``), L1-resident, 1 thread,
   best of 9 interleaved runs: 14 x 32 and 7 x 32 register tiles.
4. **A weight-streaming convolution** (ResNet-50's stage-4 1x1 convolution, K-blocked as the
   GEMM rule schedules it: 49 output rows, K = 2048, eight 32-channel panels, 2 MB of weights,
   1 thread) with its weights hot, rotating through 4 MB, 32 MB and 120 MB of copies: the
   cost of weights that come from L3 and from DRAM.

AVX-512 only (the machine ember's benchmarks run on); elsewhere the script says so and exits.

Usage: python bench/machine_limits.py [--out bench/results/machine_limits.txt]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

_COMMON = r"""
#define _GNU_SOURCE
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                          return t.tv_sec + t.tv_nsec * 1e-9; }
static float* huge_floats(size_t n) {           /* 2 MiB aligned, MADV_HUGEPAGE, touched */
  size_t b = ((n * 4 + (2u << 20) - 1) / (2u << 20)) * (2u << 20);
  char* p = mmap(0, b + (2u << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) { perror("mmap"); exit(1); }
  p = (char*)(((uintptr_t)p + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1));
  madvise(p, b, MADV_HUGEPAGE);
  memset(p, 0, b);
  return (float*)p;
}
static void free_huge(float* p, size_t n) {      /* the aligned range huge_floats handed out */
  munmap(p, ((n * 4 + (2u << 20) - 1) / (2u << 20)) * (2u << 20));
}
static float sink[256];
"""

_BANDWIDTH = r"""
static double pass_gbps(const float* f, size_t n, int threads) {
  omp_set_num_threads(threads);
  double best = 1e9;
  for (int r = 0; r < 8; ++r) {
    double t = now();
    #pragma omp parallel
    {
      __m512 a = _mm512_setzero_ps();
      #pragma omp for schedule(static)
      for (size_t i = 0; i < n; i += 64) {
        a = _mm512_add_ps(a, _mm512_load_ps(f + i));
        a = _mm512_add_ps(a, _mm512_load_ps(f + i + 16));
        a = _mm512_add_ps(a, _mm512_load_ps(f + i + 32));
        a = _mm512_add_ps(a, _mm512_load_ps(f + i + 48));
      }
      sink[omp_get_thread_num()] += _mm512_reduce_add_ps(a);
    }
    double dt = now() - t;
    if (r > 0 && dt < best) best = dt;
  }
  return n * 4.0 / best / 1e9;
}
int main(void) {
  int sizes[] = {8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 256};
  for (int si = 0; si < 11; ++si) {        /* one buffer per size, read on 1 and 2 threads */
    size_t n = ((size_t)sizes[si] << 20) / 4;
    float* f = huge_floats(n);
    for (size_t i = 0; i < n; ++i) f[i] = 1e-6f;
    for (int threads = 1; threads <= 2; ++threads)
      printf("bandwidth %d %d %.2f\n", threads, sizes[si], pass_gbps(f, n, threads));
    free_huge(f, n);
  }
  return 0;
}
"""

_FMA = r"""
static float A[14 * 256] __attribute__((aligned(64)));
static float B[256 * 32] __attribute__((aligned(64)));
static double reg_loop(long n) {          /* register-only: 16 independent chains */
  __m512 c[16], x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-4f);
  for (int i = 0; i < 16; ++i) c[i] = _mm512_set1_ps(i * 1e-3f);
  double t = now();
  for (long k = 0; k < n; ++k) {
    #pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) c[i] = _mm512_fmadd_ps(x, c[i], y);
  }
  double dt = now() - t;
  for (int i = 0; i < 16; ++i) sink[i] += _mm512_reduce_add_ps(c[i]);
  return 2.0 * 16 * 16 * n / dt / 1e9;
}
static double tile_loop(long m) {         /* as a GEMM micro-kernel feeds them: 14 x 32 tile */
  __m512 c[28];
  for (int i = 0; i < 28; ++i) c[i] = _mm512_setzero_ps();
  double t = now();
  for (long it = 0; it < m; ++it) {
    for (int k = 0; k < 128; ++k) {
      __m512 b0 = _mm512_load_ps(B + k * 32), b1 = _mm512_load_ps(B + k * 32 + 16);
      #pragma GCC unroll 14
      for (int i = 0; i < 14; ++i) {
        __m512 a = _mm512_set1_ps(A[k * 14 + i]);
        c[2 * i] = _mm512_fmadd_ps(a, b0, c[2 * i]);
        c[2 * i + 1] = _mm512_fmadd_ps(a, b1, c[2 * i + 1]);
      }
    }
  }
  double dt = now() - t;
  for (int i = 0; i < 28; ++i) sink[i] += _mm512_reduce_add_ps(c[i]);
  return 2.0 * 14 * 32 * 128 * m / dt / 1e9;
}
int main(void) {
  for (int i = 0; i < 14 * 256; ++i) A[i] = 1e-3f * (i % 9);
  for (int i = 0; i < 256 * 32; ++i) B[i] = 1e-3f * (i % 7);
  double reg = 0, tile = 0;
  for (int r = 0; r < 9; ++r) {           /* interleaved: clock changes hit both alike */
    double a = reg_loop(4000000), b = tile_loop(40000);
    if (a > reg) reg = a;
    if (b > tile) tile = b;
  }
  printf("fma_register %.1f\nfma_broadcast_tile %.1f\n", reg, tile);
  return 0;
}
"""

_UKERNEL = r"""
int main(void) {
  const int K = 256, LDA = 264;
  float* A = huge_floats(14 * LDA + 64); float* Bm = huge_floats(K * 32); float* C = huge_floats(14 * 32);
  for (int i = 0; i < 14 * LDA; ++i) A[i] = 1e-3f * (i % 7);
  for (int i = 0; i < K * 32; ++i) Bm[i] = 1e-3f * (i % 5);
  volatile int64_t lda = LDA, k = K, nr = 32;
  long n = (long)(4e8 / (2.0 * 14 * 32 * K));
  double best14 = 0, best7 = 0;
  for (int r = 0; r < 9; ++r) {           /* interleaved, best of 9 */
    double t = now();
    for (long i = 0; i < n; ++i) UK14(C, A, Bm, nr, lda, k, 1, nr, 1);
    double g = 2.0 * 14 * 32 * K * n / (now() - t) / 1e9;
    if (g > best14) best14 = g;
    t = now();
    for (long i = 0; i < 2 * n; ++i) UK7(C, A, Bm, nr, lda, k, 1, nr, 1);
    g = 2.0 * 7 * 32 * K * 2 * n / (now() - t) / 1e9;
    if (g > best7) best7 = g;
  }
  printf("ukernel_14x32 %.1f\nukernel_7x32 %.1f\n", best14, best7);
  sink[0] += C[0];
  return 0;
}
"""

_STREAM = r"""
/* the K-blocked schedule of a 49-row 1x1 convolution: per 32-channel panel, per 128-deep slice
   of K, the 7 row blocks of 7 rows (ember's 7 x 32 micro-kernel, next-slice prefetch on) */
static void conv(const float* A, const float* B, float* acc, int K, int NP) {
  for (int p = 0; p < NP; ++p) {
    memset(acc, 0, 49 * 32 * 4);
    for (int ks = 0; ks < K / 128; ++ks)
      for (int rb = 0; rb < 7; ++rb)
        UK7PN(acc + rb * 224, A + (size_t)rb * 7 * K + ks * 128,
              B + (size_t)p * K * 32 + ks * 4096, 32, K, 128, 1, 32, 1);
  }
}
int main(void) {
  const int K = 2048, NP = 8;
  size_t nb = (size_t)K * 32 * NP;                       /* 2 MB of weights */
  float* A = huge_floats((size_t)49 * K); float* acc = huge_floats(49 * 32);
  for (size_t i = 0; i < (size_t)49 * K; ++i) A[i] = 1e-3f * (i % 7);
  int copies[] = {1, 2, 16, 60};
  for (int ci = 0; ci < 4; ++ci) {
    int nc = copies[ci];
    float** B = malloc(nc * sizeof(float*));
    for (int c = 0; c < nc; ++c) {
      B[c] = huge_floats(nb);
      for (size_t i = 0; i < nb; ++i) B[c][i] = 1e-3f * ((i + c) % 5);
    }
    int runs = nc * 6 < 60 ? 60 : nc * 6;
    double* ts = malloc(runs * sizeof(double));
    for (int r = 0; r < runs; ++r) {
      double t = now();
      conv(A, B[r % nc], acc, K, NP);
      ts[r] = now() - t;
    }
    int lo = nc;                                           /* the first pass warms up */
    for (int i = lo; i < runs; ++i)
      for (int j = i + 1; j < runs; ++j)
        if (ts[j] < ts[i]) { double x = ts[i]; ts[i] = ts[j]; ts[j] = x; }
    printf("stream %d %.4f\n", (int)(nc * nb * 4 >> 20), ts[lo + (runs - lo) / 2] * 1e3);
    sink[1] += acc[0];
  }
  return 0;
}
"""


def _run(cc: str, src: str, tmp: str, name: str) -> list[list[str]]:
    c = os.path.join(tmp, name + ".c")
    exe = os.path.join(tmp, name)
    with open(c, "w") as f:
        f.write(src)
    subprocess.run([cc, "-O3", "-march=native", "-fopenmp", "-ffp-contract=fast", "-std=gnu11",
                    c, "-o", exe], check=True)
    out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    return [line.split() for line in out.splitlines() if line.strip()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="also write the report to this path")
    args = ap.parse_args(argv)
    from ember.codegen.microkernel import microkernel_source
    from ember.target import Target
    if Target("llvm").isa != "avx512":
        print("machine_limits: this host has no AVX-512; the measurements are written for it")
        return 0
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    uk = "".join(microkernel_source(n, ("gemm", "avx512", "float32", mr, 32, 1, False, None, pf))
                 for n, mr, pf in (("UK14", 14, False), ("UK7", 7, False), ("UK7PN", 7, True)))
    with tempfile.TemporaryDirectory() as tmp:
        bw = _run(cc, _COMMON + _BANDWIDTH, tmp, "bandwidth")
        fma = dict(_run(cc, _COMMON + _FMA, tmp, "fma"))
        ukr = dict(_run(cc, _COMMON + uk + _UKERNEL, tmp, "ukernel"))
        st = _run(cc, _COMMON + uk + _STREAM, tmp, "stream")
    peak = float(fma["fma_register"])
    L = ["# python bench/machine_limits.py (AVX-512, float32, huge pages; see the script's doc)",
         "", "read bandwidth, GB/s (sum over a buffer of the size; best of 7 passes):",
         f"  {'MB':>5} {'1 thread':>9} {'2 threads':>10}"]
    rates = {(int(t), int(s)): float(g) for _, t, s, g in bw}
    for s in sorted({s for _, s in rates}):
        L.append(f"  {s:5d} {rates[(1, s)]:9.1f} {rates[(2, s)]:10.1f}")
    L += ["", "FMA ceilings, 1 thread (GFLOP/s):",
          f"  register-only FMA loop (the profiler's peak):       {peak:7.1f}",
          f"  FMAs fed as a 14x32 micro-kernel feeds them, in L1: {float(fma['fma_broadcast_tile']):7.1f}"
          f"  ({100 * float(fma['fma_broadcast_tile']) / peak:.0f}% of the peak)",
          f"  ember's 14x32 micro-kernel, K = 256, in L1:         {float(ukr['ukernel_14x32']):7.1f}"
          f"  ({100 * float(ukr['ukernel_14x32']) / peak:.0f}%)",
          f"  ember's 7x32 micro-kernel, K = 256, in L1:          {float(ukr['ukernel_7x32']):7.1f}"
          f"  ({100 * float(ukr['ukernel_7x32']) / peak:.0f}%)",
          "", "ResNet-50 stage-4 1x1 convolution (49 x 2048 x 256, K-blocked, 2 MB of weights, "
          "1 thread), median ms:"]
    hot = float(st[0][2])
    for _, mb, ms in st:
        label = "hot (one copy)" if mb == st[0][1] else f"weights rotating through {mb} MB"
        L.append(f"  {label:34s} {float(ms):.3f} ms  ({float(ms) / hot:.2f}x hot)")
    print("\n".join(L))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(L) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
