// device kernel 0: grid (2, 1, 1), block (256, 1, 1), args [('param', 0), ('param', 1), ('workspace', 0), ('workspace', 1), ('workspace', 2)]
extern "C" __global__ void __launch_bounds__(256) k_13193ea4ef0d5d07(const float* __restrict__ p0, float* __restrict__ p1, float* __restrict__ p2, float* __restrict__ p3, float* __restrict__ p4) {
  {
    const int64_t i0 = (int64_t)blockIdx.x;
    __shared__ float ws0[256];
    {
      const int64_t i1 = (int64_t)threadIdx.x;
      float acc0;
      acc0 = (-(float)INFINITY);
      acc0 = ember_max_float32(acc0, p0[((i0 * 256LL) + i1)]);
      ws0[i1] = acc0;
    }
    __syncthreads();
    {
      const int64_t i2 = (int64_t)threadIdx.x;
      if ((i2 < 128LL)) {
        ws0[i2] = ember_max_float32(ws0[i2], ws0[(i2 + 128LL)]);
      }
    }
    __syncthreads();
    {
      const int64_t i3 = (int64_t)threadIdx.x;
      if ((i3 < 64LL)) {
        ws0[i3] = ember_max_float32(ws0[i3], ws0[(i3 + 64LL)]);
      }
    }
    __syncthreads();
    {
      const int64_t i4 = (int64_t)threadIdx.x;
      if ((i4 < 32LL)) {
        ws0[i4] = ember_max_float32(ws0[i4], ws0[(i4 + 32LL)]);
      }
    }
    __syncthreads();
    {
      const int64_t i5 = (int64_t)threadIdx.x;
      if ((i5 < 32LL)) {
        float acc1;
        acc1 = ws0[i5];
        acc1 = ember_max_float32(acc1, __shfl_down_sync(0xffffffffu, acc1, 16));
        acc1 = ember_max_float32(acc1, __shfl_down_sync(0xffffffffu, acc1, 8));
        acc1 = ember_max_float32(acc1, __shfl_down_sync(0xffffffffu, acc1, 4));
        acc1 = ember_max_float32(acc1, __shfl_down_sync(0xffffffffu, acc1, 2));
        acc1 = ember_max_float32(acc1, __shfl_down_sync(0xffffffffu, acc1, 1));
        if ((i5 == 0LL)) {
          ws0[0LL] = acc1;
        }
      }
    }
    __syncthreads();
    {
      const int64_t i6 = (int64_t)threadIdx.x;
      if ((i6 == 0LL)) {
        p2[i0] = ember_max_float32((-(float)INFINITY), ws0[0LL]);
      }
    }
  }
}

// device kernel 1: grid (2, 1, 1), block (256, 1, 1), args [('param', 0), ('param', 1), ('workspace', 0), ('workspace', 1), ('workspace', 2)]
extern "C" __global__ void __launch_bounds__(256) k_638ebcffd49e6049(const float* __restrict__ p0, float* __restrict__ p1, float* __restrict__ p2, float* __restrict__ p3, float* __restrict__ p4) {
  {
    const int64_t i0 = (int64_t)blockIdx.x;
    {
      const int64_t i1 = (int64_t)threadIdx.x;
      p3[((i0 * 256LL) + i1)] = expf((p0[((i0 * 256LL) + i1)] - p2[i0]));
    }
  }
}

// device kernel 2: grid (2, 1, 1), block (256, 1, 1), args [('param', 0), ('param', 1), ('workspace', 0), ('workspace', 1), ('workspace', 2)]
extern "C" __global__ void __launch_bounds__(256) k_f38c0cbb9f6cd633(const float* __restrict__ p0, float* __restrict__ p1, float* __restrict__ p2, float* __restrict__ p3, float* __restrict__ p4) {
  {
    const int64_t i0 = (int64_t)blockIdx.x;
    __shared__ float ws0[256];
    {
      const int64_t i1 = (int64_t)threadIdx.x;
      float acc0;
      acc0 = 0x0.0p+0f;
      acc0 = (acc0 + p3[((i0 * 256LL) + i1)]);
      ws0[i1] = acc0;
    }
    __syncthreads();
    {
      const int64_t i2 = (int64_t)threadIdx.x;
      if ((i2 < 128LL)) {
        ws0[i2] = (ws0[i2] + ws0[(i2 + 128LL)]);
      }
    }
    __syncthreads();
    {
      const int64_t i3 = (int64_t)threadIdx.x;
      if ((i3 < 64LL)) {
        ws0[i3] = (ws0[i3] + ws0[(i3 + 64LL)]);
      }
    }
    __syncthreads();
    {
      const int64_t i4 = (int64_t)threadIdx.x;
      if ((i4 < 32LL)) {
        ws0[i4] = (ws0[i4] + ws0[(i4 + 32LL)]);
      }
    }
    __syncthreads();
    {
      const int64_t i5 = (int64_t)threadIdx.x;
      if ((i5 < 32LL)) {
        float acc1;
        acc1 = ws0[i5];
        acc1 = (acc1 + __shfl_down_sync(0xffffffffu, acc1, 16));
        acc1 = (acc1 + __shfl_down_sync(0xffffffffu, acc1, 8));
        acc1 = (acc1 + __shfl_down_sync(0xffffffffu, acc1, 4));
        acc1 = (acc1 + __shfl_down_sync(0xffffffffu, acc1, 2));
        acc1 = (acc1 + __shfl_down_sync(0xffffffffu, acc1, 1));
        if ((i5 == 0LL)) {
          ws0[0LL] = acc1;
        }
      }
    }
    __syncthreads();
    {
      const int64_t i6 = (int64_t)threadIdx.x;
      if ((i6 == 0LL)) {
        p4[i0] = (0x0.0p+0f + ws0[0LL]);
      }
    }
  }
}

// device kernel 3: grid (2, 1, 1), block (256, 1, 1), args [('param', 0), ('param', 1), ('workspace', 0), ('workspace', 1), ('workspace', 2)]
extern "C" __global__ void __launch_bounds__(256) k_38d99a4b1f6a174f(const float* __restrict__ p0, float* __restrict__ p1, float* __restrict__ p2, float* __restrict__ p3, float* __restrict__ p4) {
  {
    const int64_t i0 = (int64_t)blockIdx.x;
    {
      const int64_t i1 = (int64_t)threadIdx.x;
      p1[((i0 * 256LL) + i1)] = (p3[((i0 * 256LL) + i1)] * (0x1.0000000000000p+0f / p4[i0]));
    }
  }
}
