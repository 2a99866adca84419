// device kernel 0: grid (1, 1, 1), block (75, 1, 1), args [('param', 0), ('param', 1), ('param', 2)]
extern "C" __global__ void __launch_bounds__(75) k_ae084ce5e7f3a8fc(const float* __restrict__ p0, const float* __restrict__ p1, float* __restrict__ p2) {
  {
    const int64_t i0 = (int64_t)threadIdx.x;
    float acc0;
    acc0 = 0x0.0p+0f;
    for (int64_t i1 = 0; i1 < 2; ++i1) {
      for (int64_t i2 = 0; i2 < 3; ++i2) {
        for (int64_t i3 = 0; i3 < 3; ++i3) {
          acc0 = (acc0 + (((((((((i0 / 5LL) % 5LL) + i2) - 1LL) >= 0LL) && (((((i0 / 5LL) % 5LL) + i2) - 1LL) < 5LL)) && ((((i0 % 5LL) + i3) - 1LL) >= 0LL)) && ((((i0 % 5LL) + i3) - 1LL) < 5LL)) ? (p0[((((((i1 * 25LL) + (((i0 / 5LL) % 5LL) * 5LL)) + (i2 * 5LL)) + (i0 % 5LL)) + i3) + -6LL)] * p1[(((((i0 / 25LL) * 18LL) + (i1 * 9LL)) + (i2 * 3LL)) + i3)]) : 0x0.0p+0f));
        }
      }
    }
    p2[((((i0 / 25LL) * 25LL) + (((i0 / 5LL) % 5LL) * 5LL)) + (i0 % 5LL))] = acc0;
  }
}
