"""One-off check (about 15 s): the vectorized float32 -> bf16 rounding (``ember_vst_bf16_16`` and
``ember_vrnd_bf16_16``: ``vcvtneps2bf16`` with the denormal fallback, ``ember/codegen/vector.py``)
against the scalar reference ``ember_enc_bfloat16`` over all 2^32 float32 bit patterns, and the
raw instruction's mismatches (all of them zero-exponent inputs). Needs a CPU with AVX512_BF16.
Run from the repository root: ``python bench/bf16_rounding_exhaustive.py``."""

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ember.codegen.dtype_support import support_source  # noqa: E402
from ember.codegen.vector import bf16_vector_helpers  # noqa: E402

src = "#include <stdint.h>\n#include <string.h>\n#include <stdio.h>\n" + support_source("bfloat16") \
    + bf16_vector_helpers(16) + r"""
int main(void) {
#if !EMBER_NATIVE_BF16_16
  printf("no native path\n"); return 2;
#else
  uint64_t bad = 0, raw_bad = 0, raw_den = 0;
  for (uint64_t base = 0; base < (1ull << 32); base += 16) {
    uint32_t in[16]; uint16_t out[16], raw[16];
    for (int k = 0; k < 16; ++k) in[k] = (uint32_t)(base + k);
    ember_bf16f_x16 x; memcpy(&x, in, 64);
    ember_vst_bf16_16(out, x);
    __m256i r = (__m256i)_mm512_cvtneps_pbh((__m512)x); memcpy(raw, &r, 32);
    ember_bf16f_x16 y = ember_vrnd_bf16_16(x); uint32_t yr[16]; memcpy(yr, &y, 64);
    for (int k = 0; k < 16; ++k) {
      float f; memcpy(&f, &in[k], 4);
      uint16_t ref = ember_enc_bfloat16(f, 0);
      if (out[k] != ref || yr[k] != ((uint32_t)ref << 16)) { if (bad < 5) printf("bad %08x %04x %04x\n", in[k], out[k], ref); ++bad; }
      if (raw[k] != ref) { ++raw_bad; if ((in[k] & 0x7f800000u) == 0) ++raw_den; else if (raw_bad - raw_den < 5) printf("raw non-denormal mismatch %08x %04x %04x\n", in[k], raw[k], ref); }
    }
  }
  printf("mismatches %llu; raw instruction mismatches %llu (zero-exponent inputs %llu)\n",
         (unsigned long long)bad, (unsigned long long)raw_bad, (unsigned long long)raw_den);
  return bad != 0;
#endif
}
"""
d = tempfile.mkdtemp()
open(f"{d}/t.c", "w").write(src)
subprocess.run(["cc", "-O2", "-march=native", f"{d}/t.c", "-o", f"{d}/t"], check=True)
sys.exit(subprocess.run([f"{d}/t"]).returncode)
