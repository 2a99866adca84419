// device kernel 0: grid (1, 1, 1), block (32, 1, 1), args [('param', 0), ('param', 1), ('param', 2)]
extern "C" __global__ void __launch_bounds__(32) k_7c6742f71e5ad85e(const float* __restrict__ p0, const float* __restrict__ p1, float* __restrict__ p2) {
  {
    const int64_t i0 = (int64_t)threadIdx.x;
    float acc0;
    acc0 = 0x0.0p+0f;
    for (int64_t i1 = 0; i1 < 16; ++i1) {
      acc0 = (acc0 + (p0[(((i0 / 4LL) * 16LL) + i1)] * p1[((i1 * 4LL) + (i0 % 4LL))]));
    }
    p2[(((i0 / 4LL) * 4LL) + (i0 % 4LL))] = acc0;
  }
}
