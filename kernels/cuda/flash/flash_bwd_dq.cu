// Backward helpers: the preprocessing kernel (delta = rowsum(dO * O), zeroed dQ accumulator),
// the deterministic dQ kernel (parallel over Q blocks, K/V blocks streamed through a two-stage
// cp.async pipeline; recomputes S and dP, no atomics) and the fp32 accumulator -> dq conversion.
#include <stdexcept>
#include <string>

#include "flash_common.cuh"

namespace triad::kernels::cuda::flash::detail {

template <typename T>
__device__ __forceinline__ float dot8(const uint4& a, const uint4& b) {
  const float2 a0 = Elem<T>::unpack(a.x), b0 = Elem<T>::unpack(b.x);
  const float2 a1 = Elem<T>::unpack(a.y), b1 = Elem<T>::unpack(b.y);
  const float2 a2 = Elem<T>::unpack(a.z), b2 = Elem<T>::unpack(b.z);
  const float2 a3 = Elem<T>::unpack(a.w), b3 = Elem<T>::unpack(b.w);
  return a0.x * b0.x + a0.y * b0.y + a1.x * b1.x + a1.y * b1.y + a2.x * b2.x + a2.y * b2.y +
         a3.x * b3.x + a3.y * b3.y;
}

// 8 threads per row, 32 rows per 256-thread block.
template <typename T, int D>
__global__ void __launch_bounds__(256) flash_bwd_prep_kernel(const BwdParams p) {
  const int tid = threadIdx.x, sub = tid & 7;
  const int row = blockIdx.x * 32 + (tid >> 3);
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const bool ok = row < p.T;
  float acc = 0.f;
  if (ok) {
    const T* o =
        static_cast<const T*>(p.o) + b * p.os.b + h * p.os.h + static_cast<int64_t>(row) * p.os.t;
    const T* d = static_cast<const T*>(p.dout) + b * p.dos.b + h * p.dos.h +
                 static_cast<int64_t>(row) * p.dos.t;
#pragma unroll
    for (int c = sub; c < D / 8; c += 8) {
      acc += dot8<T>(*reinterpret_cast<const uint4*>(o + c * 8),
                     *reinterpret_cast<const uint4*>(d + c * 8));
    }
  }
  acc += __shfl_xor_sync(0xffffffffu, acc, 1);
  acc += __shfl_xor_sync(0xffffffffu, acc, 2);
  acc += __shfl_xor_sync(0xffffffffu, acc, 4);
  if (!ok) return;
  const int64_t r = static_cast<int64_t>(bh) * p.T + row;
  if (sub == 0) p.delta[r] = acc;
  if (p.dq_acc != nullptr) {
    float4* z = reinterpret_cast<float4*>(p.dq_acc + r * D);
#pragma unroll
    for (int c = sub; c < D / 4; c += 8) z[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(256) flash_bwd_dq_convert_kernel(const BwdParams p) {
  const int tid = threadIdx.x, sub = tid & 7;
  const int row = blockIdx.x * 32 + (tid >> 3);
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  if (row >= p.T) return;
  const float4* src =
      reinterpret_cast<const float4*>(p.dq_acc + (static_cast<int64_t>(bh) * p.T + row) * D);
  T* dst = static_cast<T*>(p.dq) + b * p.dqs.b + h * p.dqs.h + static_cast<int64_t>(row) * p.dqs.t;
  const float s = p.scale;
#pragma unroll
  for (int c = sub; c < D / 8; c += 8) {
    const float4 x = src[2 * c], y = src[2 * c + 1];
    uint4 out;
    out.x = Elem<T>::pack(x.x * s, x.y * s);
    out.y = Elem<T>::pack(x.z * s, x.w * s);
    out.z = Elem<T>::pack(y.x * s, y.y * s);
    out.w = Elem<T>::pack(y.z * s, y.w * s);
    *reinterpret_cast<uint4*>(dst + c * 8) = out;
  }
}

template <int D>
struct DqTiles {
  static constexpr int kBr = 64, kBc = 64, kWarps = 4;
};

// dQ = scale * sum_j dS_j K_j with dS = P * (dP - delta), P = exp(scale Q K^T - lse), dP = dO V^T.
template <typename T, int D, int Br, int Bc, int W>
__global__ void __launch_bounds__(32 * W, 2) flash_bwd_dq_kernel(const BwdParams p) {
  static_assert(Br == 16 * W, "one 16-row m-tile per warp");
  constexpr int NT = 32 * W;
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int T_ = p.T;
  const int nQ = (T_ + Br - 1) / Br, nK = (T_ + Bc - 1) / Bc;
  const int mblk = p.causal ? nQ - 1 - static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x);
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int q0 = mblk * Br;
  const T* qg = static_cast<const T*>(p.q) + b * p.qs.b + h * p.qs.h + q0 * p.qs.t;
  const T* dog = static_cast<const T*>(p.dout) + b * p.dos.b + h * p.dos.h + q0 * p.dos.t;
  const T* kg = static_cast<const T*>(p.k) + b * p.ks.b + h * p.ks.h;
  const T* vg = static_cast<const T*>(p.v) + b * p.vs.b + h * p.vs.h;

  constexpr uint32_t kQ = Br * D * 2, kKV = Bc * D * 2;
  const uint32_t sQ = smem_u32(smem);
  const uint32_t sdO = sQ + kQ;
  const uint32_t sKV = sdO + kQ;  // stage s: K at sKV + s * 2 * kKV, V at + kKV

  const int n_kv = p.causal ? min(nK, (min(q0 + Br, T_) - 1) / Bc + 1) : nK;
  load_tile<Br, D, NT>(sQ, qg, p.qs.t, T_ - q0, tid);
  load_tile<Br, D, NT>(sdO, dog, p.dos.t, T_ - q0, tid);
  load_tile<Bc, D, NT>(sKV, kg, p.ks.t, T_, tid);
  load_tile<Bc, D, NT>(sKV + kKV, vg, p.vs.t, T_, tid);
  cp_commit();

  const int row_w = q0 + warp * 16;
  float nlse[2], dl[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row_w + g + 8 * r;
    const bool ok = row < T_;
    nlse[r] = ok ? -p.lse[static_cast<int64_t>(bh) * T_ + row] * kLog2e : 0.f;
    dl[r] = ok ? p.delta[static_cast<int64_t>(bh) * T_ + row] : 0.f;
  }
  float dq[D / 8][4];
#pragma unroll
  for (int nd = 0; nd < D / 8; ++nd) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[nd][e] = 0.f;
  }

  for (int j = 0; j < n_kv; ++j) {
    cp_wait<0>();
    __syncthreads();  // block j landed; every warp is done with block j - 1's stage
    if (j + 1 < n_kv) {
      const int n1 = (j + 1) * Bc;
      const uint32_t st = sKV + ((j + 1) & 1) * 2 * kKV;
      load_tile<Bc, D, NT>(st, kg + n1 * p.ks.t, p.ks.t, T_ - n1, tid);
      load_tile<Bc, D, NT>(st + kKV, vg + n1 * p.vs.t, p.vs.t, T_ - n1, tid);
      cp_commit();
    }
    const int n0 = j * Bc;
    const uint32_t sK = sKV + (j & 1) * 2 * kKV, sV = sK + kKV;
    float s[Bc / 8][4], dp[Bc / 8][4];
#pragma unroll
    for (int nb = 0; nb < Bc / 8; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nb][e] = dp[nb][e] = 0.f;
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4], c[4];
      ldsm4(a, a_addr<D>(sQ, warp * 16, kk * 16, lane));
      ldsm4(c, a_addr<D>(sdO, warp * 16, kk * 16, lane));
#pragma unroll
      for (int nb2 = 0; nb2 < Bc / 16; ++nb2) {
        uint32_t bk[4], bv[4];
        ldsm4(bk, bn_addr<D>(sK, nb2 * 16, kk * 16, lane));
        Elem<T>::mma(s[2 * nb2], a, bk[0], bk[1]);
        Elem<T>::mma(s[2 * nb2 + 1], a, bk[2], bk[3]);
        ldsm4(bv, bn_addr<D>(sV, nb2 * 16, kk * 16, lane));
        Elem<T>::mma(dp[2 * nb2], c, bv[0], bv[1]);
        Elem<T>::mma(dp[2 * nb2 + 1], c, bv[2], bv[3]);
      }
    }
    const bool mask = n0 + Bc > T_ || q0 + Br > T_ || (p.causal && n0 + Bc - 1 > row_w);
#pragma unroll
    for (int nb = 0; nb < Bc / 8; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        float pv = ex2(fmaf(s[nb][e], p.scale_log2, nlse[r]));
        if (mask) {
          const int row = row_w + g + 8 * r;
          const int key = n0 + nb * 8 + 2 * t + (e & 1);
          if (row >= T_ || key >= T_ || (p.causal && key > row)) pv = 0.f;
        }
        dp[nb][e] = pv * (dp[nb][e] - dl[r]);
      }
    }
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk) {
      uint32_t a[4];
      a[0] = Elem<T>::pack(dp[2 * kk][0], dp[2 * kk][1]);
      a[1] = Elem<T>::pack(dp[2 * kk][2], dp[2 * kk][3]);
      a[2] = Elem<T>::pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
      a[3] = Elem<T>::pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
#pragma unroll
      for (int nd2 = 0; nd2 < D / 16; ++nd2) {
        uint32_t bk[4];
        ldsm4t(bk, bt_addr<D>(sK, kk * 16, nd2 * 16, lane));
        Elem<T>::mma(dq[2 * nd2], a, bk[0], bk[1]);
        Elem<T>::mma(dq[2 * nd2 + 1], a, bk[2], bk[3]);
      }
    }
  }
  T* dqg = static_cast<T*>(p.dq) + b * p.dqs.b + h * p.dqs.h;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row_w + g + 8 * r;
    if (row >= T_) continue;
    T* dqrow = dqg + static_cast<int64_t>(row) * p.dqs.t + 2 * t;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
      *reinterpret_cast<uint32_t*>(dqrow + nd * 8) =
          Elem<T>::pack(dq[nd][2 * r] * p.scale, dq[nd][2 * r + 1] * p.scale);
    }
  }
}

template <typename T, int D>
void launch_bwd_prep(const BwdParams& p, cudaStream_t stream) {
  const dim3 grid((p.T + 31) / 32, p.B * p.H);
  flash_bwd_prep_kernel<T, D><<<grid, 256, 0, stream>>>(p);
}

template <typename T, int D>
void launch_bwd_dq_convert(const BwdParams& p, cudaStream_t stream) {
  const dim3 grid((p.T + 31) / 32, p.B * p.H);
  flash_bwd_dq_convert_kernel<T, D><<<grid, 256, 0, stream>>>(p);
}

template <typename T, int D>
void launch_bwd_dq(const BwdParams& p, cudaStream_t stream) {
  using Tl = DqTiles<D>;
  constexpr int Br = Tl::kBr, Bc = Tl::kBc, W = Tl::kWarps;
  auto kernel = flash_bwd_dq_kernel<T, D, Br, Bc, W>;
  const size_t smem = static_cast<size_t>(2 * Br + 4 * Bc) * D * 2;
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("flash backward (dQ): cudaFuncSetAttribute: ") +
                             cudaGetErrorString(e));
  }
  const dim3 grid((p.T + Br - 1) / Br, p.B * p.H);
  kernel<<<grid, 32 * W, smem, stream>>>(p);
}

#define TRIAD_FLASH_INSTANTIATE(T, D)                                        \
  template void launch_bwd_prep<T, D>(const BwdParams&, cudaStream_t);       \
  template void launch_bwd_dq_convert<T, D>(const BwdParams&, cudaStream_t); \
  template void launch_bwd_dq<T, D>(const BwdParams&, cudaStream_t);
TRIAD_FLASH_INSTANTIATE(__nv_bfloat16, 64)
TRIAD_FLASH_INSTANTIATE(__nv_bfloat16, 128)
TRIAD_FLASH_INSTANTIATE(__half, 64)
TRIAD_FLASH_INSTANTIATE(__half, 128)
#undef TRIAD_FLASH_INSTANTIATE

}  // namespace triad::kernels::cuda::flash::detail
