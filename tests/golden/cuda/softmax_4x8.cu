// device kernel 0: grid (1, 1, 1), block (4, 1, 1), args [('param', 0), ('param', 1), ('workspace', 0), ('workspace', 1), ('workspace', 2)]
extern "C" __global__ void __launch_bounds__(4) k_18777c4b736473dc(const float* __restrict__ p0, float* __restrict__ p1, float* __restrict__ p2, float* __restrict__ p3, float* __restrict__ p4) {
  {
    const int64_t i0 = (int64_t)threadIdx.x;
    float acc0;
    acc0 = (-(float)INFINITY);
    for (int64_t i1 = 0; i1 < 8; ++i1) {
      acc0 = ember_max_float32(acc0, p0[((i0 * 8LL) + i1)]);
    }
    p2[i0] = acc0;
  }
}

// device kernel 1: grid (1, 1, 1), block (32, 1, 1), args [('param', 0), ('param', 1), ('workspace', 0), ('workspace', 1), ('workspace', 2)]
extern "C" __global__ void __launch_bounds__(32) k_8dd0de148af44164(const float* __restrict__ p0, float* __restrict__ p1, float* __restrict__ p2, float* __restrict__ p3, float* __restrict__ p4) {
  {
    const int64_t i0 = (int64_t)threadIdx.x;
    p3[(((i0 / 8LL) * 8LL) + (i0 % 8LL))] = expf((p0[(((i0 / 8LL) * 8LL) + (i0 % 8LL))] - p2[(i0 / 8LL)]));
  }
}

// device kernel 2: grid (1, 1, 1), block (4, 1, 1), args [('param', 0), ('param', 1), ('workspace', 0), ('workspace', 1), ('workspace', 2)]
extern "C" __global__ void __launch_bounds__(4) k_e8f6f8dbd7402ff5(const float* __restrict__ p0, float* __restrict__ p1, float* __restrict__ p2, float* __restrict__ p3, float* __restrict__ p4) {
  {
    const int64_t i0 = (int64_t)threadIdx.x;
    float acc0;
    acc0 = 0x0.0p+0f;
    for (int64_t i1 = 0; i1 < 8; ++i1) {
      acc0 = (acc0 + p3[((i0 * 8LL) + i1)]);
    }
    p4[i0] = acc0;
  }
}

// device kernel 3: grid (1, 1, 1), block (32, 1, 1), args [('param', 0), ('param', 1), ('workspace', 0), ('workspace', 1), ('workspace', 2)]
extern "C" __global__ void __launch_bounds__(32) k_580947a7a7d1b06c(const float* __restrict__ p0, float* __restrict__ p1, float* __restrict__ p2, float* __restrict__ p3, float* __restrict__ p4) {
  {
    const int64_t i0 = (int64_t)threadIdx.x;
    p1[(((i0 / 8LL) * 8LL) + (i0 % 8LL))] = (p3[(((i0 / 8LL) * 8LL) + (i0 % 8LL))] * (0x1.0000000000000p+0f / p4[(i0 / 8LL)]));
  }
}
