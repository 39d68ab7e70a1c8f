// Backward over K/V blocks (FlashAttention-2 Algorithm 2; with the K/V blocks of a (b, h) run in
// turn by one thread block, FlashAttention-1's Algorithm 4). A thread block holds a K/V block of
// Bc = 16 * W keys, each warp 16 keys; Q blocks of Br rows (with dO, lse and delta) stream through
// a two-stage cp.async pipeline. Per Q block each warp computes, transposed so that its keys are
// the MMA rows and no inter-warp reduction is needed:
//   S^T = K Q^T, P^T = exp(scale S^T - lse), dV += P^T dO, dP^T = V dO^T,
//   dS^T = P^T * (dP^T - delta), dK += dS^T Q,
// and, unless dQ has its own kernel, dQ += dS K from dS^T staged in shared memory, added to the
// fp32 accumulator atomically (kAtomic) or by plain read-modify-write (kRmw: one thread block per
// (b, h), so deterministic).
#include <stdexcept>
#include <string>

#include "flash_common.cuh"

namespace triad::kernels::cuda::flash::detail {

template <int D, DqMode kDq>
struct BwdTiles {
  static constexpr int kBc = bwd_kv_block<D, kDq>(), kBr = 64, kWarps = kBc / 16;
};

template <typename T, int D, int Bc, int Br, int W, DqMode kDq>
__global__ void __launch_bounds__(32 * W, W >= 8 ? 1 : 2) flash_bwd_dkdv_kernel(const BwdParams p) {
  static_assert(Bc == 16 * W, "one 16-key m-tile per warp");
  static_assert(W % (Br / 16) == 0, "dQ tiles must divide among the warps");
  constexpr int NT = 32 * W;
  static_assert(2 * Br <= NT, "lse and delta loads take one thread per row each");
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int T_ = p.T;
  const int nQ = (T_ + Br - 1) / Br, nK = (T_ + Bc - 1) / Bc;
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const T* qg = static_cast<const T*>(p.q) + b * p.qs.b + h * p.qs.h;
  const T* kg = static_cast<const T*>(p.k) + b * p.ks.b + h * p.ks.h;
  const T* vg = static_cast<const T*>(p.v) + b * p.vs.b + h * p.vs.h;
  const T* dog = static_cast<const T*>(p.dout) + b * p.dos.b + h * p.dos.h;
  const float* lse_bh = p.lse + static_cast<int64_t>(bh) * T_;
  const float* delta_bh = p.delta + static_cast<int64_t>(bh) * T_;

  constexpr uint32_t kKV = Bc * D * 2, kQ = Br * D * 2;
  const uint32_t sK = smem_u32(smem);
  const uint32_t sV = sK + kKV;
  const uint32_t sQ0 = sV + kKV;         // 2 stages
  const uint32_t sdO0 = sQ0 + 2 * kQ;    // 2 stages
  const uint32_t sStat = sdO0 + 2 * kQ;  // 2 stages x (lse[Br], delta[Br]) fp32
  const uint32_t sdS = sStat + 2 * 2 * Br * 4;
  const float* stat_ptr = reinterpret_cast<const float*>(smem + (sStat - sK));

  auto load_q_block = [&](int i, int stage) {
    const int q0 = i * Br;
    load_tile<Br, D, NT>(sQ0 + stage * kQ, qg + q0 * p.qs.t, p.qs.t, T_ - q0, tid);
    load_tile<Br, D, NT>(sdO0 + stage * kQ, dog + q0 * p.dos.t, p.dos.t, T_ - q0, tid);
    if (tid < 2 * Br) {
      const int r = tid % Br;
      const bool ok = q0 + r < T_;
      const float* src = tid < Br ? lse_bh : delta_bh;
      cp_async4(sStat + (stage * 2 * Br + tid) * 4, ok ? src + q0 + r : src, ok);
    }
  };

  for (int j = blockIdx.x; j < nK; j += gridDim.x) {
    const int n0 = j * Bc;
    const int i_begin = p.causal ? n0 / Br : 0;
    __syncthreads();  // the previous K/V block's shared memory is no longer read
    load_tile<Bc, D, NT>(sK, kg + n0 * p.ks.t, p.ks.t, T_ - n0, tid);
    load_tile<Bc, D, NT>(sV, vg + n0 * p.vs.t, p.vs.t, T_ - n0, tid);
    load_q_block(i_begin, 0);
    cp_commit();

    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[nd][e] = dv[nd][e] = 0.f;
    }
    const int key_w = n0 + warp * 16;  // the warp's first key

    for (int i = i_begin; i < nQ; ++i) {
      const int stage = (i - i_begin) & 1;
      // Q block i landed; every warp is done with Q block i - 1 (its stage and dS^T).
      cp_wait<0>();
      __syncthreads();
      if (i + 1 < nQ) {
        load_q_block(i + 1, stage ^ 1);
        cp_commit();
      }
      const int q0 = i * Br;
      const uint32_t sQ = sQ0 + stage * kQ, sdO = sdO0 + stage * kQ;
      const float* s_lse = stat_ptr + stage * 2 * Br;
      const float* s_delta = s_lse + Br;

      // S^T = K_w Q^T (16 keys x Br queries).
      float s[Br / 8][4], dp[Br / 8][4];
#pragma unroll
      for (int nb = 0; nb < Br / 8; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nb][e] = dp[nb][e] = 0.f;
      }
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[4], c[4];
        ldsm4(a, a_addr<D>(sK, warp * 16, kk * 16, lane));
        ldsm4(c, a_addr<D>(sV, warp * 16, kk * 16, lane));
#pragma unroll
        for (int nb2 = 0; nb2 < Br / 16; ++nb2) {
          uint32_t bq[4], bo[4];
          ldsm4(bq, bn_addr<D>(sQ, nb2 * 16, kk * 16, lane));
          Elem<T>::mma(s[2 * nb2], a, bq[0], bq[1]);
          Elem<T>::mma(s[2 * nb2 + 1], a, bq[2], bq[3]);
          // dP^T = V_w dO^T
          ldsm4(bo, bn_addr<D>(sdO, nb2 * 16, kk * 16, lane));
          Elem<T>::mma(dp[2 * nb2], c, bo[0], bo[1]);
          Elem<T>::mma(dp[2 * nb2 + 1], c, bo[2], bo[3]);
        }
      }
      // P^T and dS^T (in place: s becomes P^T, dp becomes dS^T).
      const bool mask = q0 + Br > T_ || n0 + Bc > T_ || (p.causal && key_w + 15 > q0);
#pragma unroll
      for (int nb = 0; nb < Br / 8; ++nb) {
        const float2 lse2 = *reinterpret_cast<const float2*>(s_lse + nb * 8 + 2 * t);
        const float2 dl2 = *reinterpret_cast<const float2*>(s_delta + nb * 8 + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float lse = (e & 1) ? lse2.y : lse2.x;
          const float dl = (e & 1) ? dl2.y : dl2.x;
          float pv = ex2(fmaf(s[nb][e], p.scale_log2, -lse * kLog2e));
          if (mask) {
            const int key = key_w + g + (e >> 1) * 8;
            const int q = q0 + nb * 8 + 2 * t + (e & 1);
            if (q >= T_ || key >= T_ || (p.causal && key > q)) pv = 0.f;
          }
          s[nb][e] = pv;
          dp[nb][e] = pv * (dp[nb][e] - dl);
        }
      }
      // dV += P^T dO and dK += dS^T Q (k = the Br queries).
#pragma unroll
      for (int kq = 0; kq < Br / 16; ++kq) {
        uint32_t ap[4], ads[4];
        ap[0] = Elem<T>::pack(s[2 * kq][0], s[2 * kq][1]);
        ap[1] = Elem<T>::pack(s[2 * kq][2], s[2 * kq][3]);
        ap[2] = Elem<T>::pack(s[2 * kq + 1][0], s[2 * kq + 1][1]);
        ap[3] = Elem<T>::pack(s[2 * kq + 1][2], s[2 * kq + 1][3]);
        ads[0] = Elem<T>::pack(dp[2 * kq][0], dp[2 * kq][1]);
        ads[1] = Elem<T>::pack(dp[2 * kq][2], dp[2 * kq][3]);
        ads[2] = Elem<T>::pack(dp[2 * kq + 1][0], dp[2 * kq + 1][1]);
        ads[3] = Elem<T>::pack(dp[2 * kq + 1][2], dp[2 * kq + 1][3]);
        if constexpr (kDq != DqMode::kNone) {
          // Stage dS^T (keys x queries) for the dQ product.
          const int krow = warp * 16 + g;
          st_shared_u32(sdS + swz<Br>(krow, kq * 16) + 4 * t, ads[0]);
          st_shared_u32(sdS + swz<Br>(krow + 8, kq * 16) + 4 * t, ads[1]);
          st_shared_u32(sdS + swz<Br>(krow, kq * 16 + 8) + 4 * t, ads[2]);
          st_shared_u32(sdS + swz<Br>(krow + 8, kq * 16 + 8) + 4 * t, ads[3]);
        }
#pragma unroll
        for (int nd2 = 0; nd2 < D / 16; ++nd2) {
          uint32_t bo[4], bq[4];
          ldsm4t(bo, bt_addr<D>(sdO, kq * 16, nd2 * 16, lane));
          Elem<T>::mma(dv[2 * nd2], ap, bo[0], bo[1]);
          Elem<T>::mma(dv[2 * nd2 + 1], ap, bo[2], bo[3]);
          ldsm4t(bq, bt_addr<D>(sQ, kq * 16, nd2 * 16, lane));
          Elem<T>::mma(dk[2 * nd2], ads, bq[0], bq[1]);
          Elem<T>::mma(dk[2 * nd2 + 1], ads, bq[2], bq[3]);
        }
      }
      if constexpr (kDq != DqMode::kNone) {
        __syncthreads();
        // dQ (Br x D) += dS (Br x Bc) K (Bc x D); warp (wm, wn): rows wm*16.., a column range.
        constexpr int WM = Br / 16, WN = W / WM, CW = D / WN, CH = CW < 64 ? CW : 64;
        const int wm = warp % WM, wn = warp / WM;
#pragma unroll
        for (int cc = 0; cc < CW / CH; ++cc) {
          const int c0 = wn * CW + cc * CH;
          float acc[CH / 8][4];
#pragma unroll
          for (int nd = 0; nd < CH / 8; ++nd) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[nd][e] = 0.f;
          }
#pragma unroll
          for (int kk = 0; kk < Bc / 16; ++kk) {
            uint32_t a[4];
            ldsm4t(a, bn_addr<Br>(sdS, kk * 16, wm * 16, lane));
#pragma unroll
            for (int nd2 = 0; nd2 < CH / 16; ++nd2) {
              uint32_t bk[4];
              ldsm4t(bk, bt_addr<D>(sK, kk * 16, c0 + nd2 * 16, lane));
              Elem<T>::mma(acc[2 * nd2], a, bk[0], bk[1]);
              Elem<T>::mma(acc[2 * nd2 + 1], a, bk[2], bk[3]);
            }
          }
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int row = q0 + wm * 16 + g + 8 * r;
            if (row >= T_) continue;
            float* dst = p.dq_acc + (static_cast<int64_t>(bh) * T_ + row) * D + c0 + 2 * t;
#pragma unroll
            for (int nd = 0; nd < CH / 8; ++nd) {
              if constexpr (kDq == DqMode::kAtomic) {
                atomic_add2(dst + nd * 8, acc[nd][2 * r], acc[nd][2 * r + 1]);
              } else {
                float2 v = *reinterpret_cast<float2*>(dst + nd * 8);
                v.x += acc[nd][2 * r];
                v.y += acc[nd][2 * r + 1];
                *reinterpret_cast<float2*>(dst + nd * 8) = v;
              }
            }
          }
        }
      }
    }

    // dK = scale * dS^T Q, dV = P^T dO, keys < T.
    T* dkg = static_cast<T*>(p.dk) + b * p.dks.b + h * p.dks.h;
    T* dvg = static_cast<T*>(p.dv) + b * p.dvs.b + h * p.dvs.h;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = key_w + g + 8 * r;
      if (key >= T_) continue;
      T* dkrow = dkg + static_cast<int64_t>(key) * p.dks.t + 2 * t;
      T* dvrow = dvg + static_cast<int64_t>(key) * p.dvs.t + 2 * t;
#pragma unroll
      for (int nd = 0; nd < D / 8; ++nd) {
        *reinterpret_cast<uint32_t*>(dkrow + nd * 8) =
            Elem<T>::pack(dk[nd][2 * r] * p.scale, dk[nd][2 * r + 1] * p.scale);
        *reinterpret_cast<uint32_t*>(dvrow + nd * 8) =
            Elem<T>::pack(dv[nd][2 * r], dv[nd][2 * r + 1]);
      }
    }
  }
}

template <typename T, int D, DqMode kDq>
static void launch_dkdv_mode(const BwdParams& p, int kv_ctas_per_bh, cudaStream_t stream) {
  using Tl = BwdTiles<D, kDq>;
  constexpr int Bc = Tl::kBc, Br = Tl::kBr, W = Tl::kWarps;
  auto kernel = flash_bwd_dkdv_kernel<T, D, Bc, Br, W, kDq>;
  const size_t smem = static_cast<size_t>(2 * Bc * D * 2 + 4 * Br * D * 2 + 4 * Br * 4) +
                      (kDq != DqMode::kNone ? static_cast<size_t>(Bc * Br * 2) : 0);
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("flash backward (dK/dV): cudaFuncSetAttribute: ") +
                             cudaGetErrorString(e));
  }
  const int nK = (p.T + Bc - 1) / Bc;
  const int ctas = kv_ctas_per_bh <= 0 || kv_ctas_per_bh > nK ? nK : kv_ctas_per_bh;
  const dim3 grid(ctas, p.B * p.H);
  kernel<<<grid, 32 * W, smem, stream>>>(p);
}

template <typename T, int D>
void launch_bwd_dkdv(const BwdParams& p, DqMode mode, int kv_ctas_per_bh, cudaStream_t stream) {
  switch (mode) {
    case DqMode::kNone:
      launch_dkdv_mode<T, D, DqMode::kNone>(p, kv_ctas_per_bh, stream);
      break;
    case DqMode::kAtomic:
      launch_dkdv_mode<T, D, DqMode::kAtomic>(p, kv_ctas_per_bh, stream);
      break;
    case DqMode::kRmw:
      launch_dkdv_mode<T, D, DqMode::kRmw>(p, kv_ctas_per_bh, stream);
      break;
  }
}

template void launch_bwd_dkdv<__nv_bfloat16, 64>(const BwdParams&, DqMode, int, cudaStream_t);
template void launch_bwd_dkdv<__nv_bfloat16, 128>(const BwdParams&, DqMode, int, cudaStream_t);
template void launch_bwd_dkdv<__half, 64>(const BwdParams&, DqMode, int, cudaStream_t);
template void launch_bwd_dkdv<__half, 128>(const BwdParams&, DqMode, int, cudaStream_t);

}  // namespace triad::kernels::cuda::flash::detail
