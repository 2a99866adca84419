static __device__ __forceinline__ void ember_wmma_f16_f32f16_2x2(float* __restrict__ ct,
    const float* __restrict__ a, int64_t sam, int64_t sak,
    const __half* __restrict__ b, int64_t sbk, int64_t sbn, int64_t K,
    __half* __restrict__ sa, __half* __restrict__ sb) {
  using namespace nvcuda;
  const int lane = threadIdx.x & 31;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  for (int64_t k0 = 0; k0 < K; k0 += 16) {
    for (int e = lane; e < 512; e += 32) {
      const int r = e / 16, c = e % 16;
      const int64_t k = k0 + c;
      sa[e] = k < K ? __float2half_rn(a[r * sam + k * sak]) : __float2half_rn(0.0f);
    }
    for (int e = lane; e < 512; e += 32) {
      const int r = e / 32, c = e % 32;
      const int64_t k = k0 + r;
      sb[e] = k < K ? b[k * sbk + c * sbn] : __float2half_rn(0.0f);
    }
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], sa + i * 256, 16);
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], sb + j * 16, 32);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    __syncwarp();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(ct + i * 512 + j * 16, acc[i][j], 32,
                              wmma::mem_row_major);
  __syncwarp();
}

extern "C" __global__ void __launch_bounds__(64) k_a04b3f8aa7b878fb(const float* __restrict__ p0, const __half* __restrict__ p1, const __half* __restrict__ p2, float* __restrict__ p3) {
  {
    const int64_t i0 = (int64_t)threadIdx.y;
    __shared__ __align__(32) float ws0[2048];
    __shared__ __align__(32) __half ws1[1024];
    __shared__ __align__(32) __half ws2[1024];
    {
      const int64_t i1 = (int64_t)threadIdx.x;
      ember_wmma_f16_f32f16_2x2((&ws0[(i0 * 1024LL)]), (&p0[(i0 * 1280LL)]), 40LL, 1LL, (&p1[0LL]), 32LL, 1LL, 40LL, (&ws1[(i0 * 512LL)]), (&ws2[(i0 * 512LL)]));
      for (int64_t i2 = 0; i2 < 32; ++i2) {
        p3[(((i0 * 1024LL) + (i2 * 32LL)) + i1)] = ((float)(__half2float(__float2half_rn((float)(ember_max_float32(__half2float(__float2half_rn((float)((__half2float(__float2half_rn((float)(__half2float(__float2half_rn((float)(ws0[(((i0 * 1024LL) + (i2 * 32LL)) + i1)])))))) + __half2float(p2[i1]))))), 0x0.0p+0f))))));
      }
    }
  }
}
