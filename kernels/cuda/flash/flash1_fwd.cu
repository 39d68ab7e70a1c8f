// FlashAttention-1 forward (the paper's Algorithm 1): K/V blocks in the outer loop, Q blocks in
// the inner loop. For every (K/V block, Q block) pair the Q block's unnormalised O, running max
// and running sum are read from the fp32 workspace, rescaled, updated and written back; the last
// K/V block a Q block sees normalises O and writes out and lse. A thread block owns one (b, h)
// and a contiguous chunk of Q blocks (FlashAttention-1's split over the sequence, so that small
// batch * heads still fill the GPU); within it, warps split the Q block's rows as in flash2.
#include <stdexcept>
#include <string>

#include "flash_fwd.cuh"

namespace triad::kernels::cuda::flash::detail {

template <typename T, int D, int Br, int Bc, int W>
__global__ void __launch_bounds__(32 * W, 2) flash1_fwd_kernel(const FwdParams p) {
  using Cfg = FwdConfig<D, Br, Bc, W>;
  constexpr int NT = Cfg::kThreads, MT = Cfg::kMT;
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int T_ = p.T;
  const int nQ = (T_ + Br - 1) / Br, nK = (T_ + Bc - 1) / Bc;
  const int m_begin = blockIdx.x * p.q_blocks_per_cta;
  const int m_end = min(nQ, m_begin + p.q_blocks_per_cta);
  if (m_begin >= m_end) return;
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const T* qg = static_cast<const T*>(p.q) + b * p.qs.b + h * p.qs.h;
  const T* kg = static_cast<const T*>(p.k) + b * p.ks.b + h * p.ks.h;
  const T* vg = static_cast<const T*>(p.v) + b * p.vs.b + h * p.vs.h;
  T* og = static_cast<T*>(p.o) + b * p.os.b + h * p.os.h;
  float* lse_bh = p.lse + static_cast<int64_t>(bh) * T_;
  float* ws_o = p.ws_o + static_cast<int64_t>(bh) * T_ * D;
  float* ws_ml = p.ws_ml + static_cast<int64_t>(bh) * T_ * 2;

  const uint32_t sK = smem_u32(smem);
  const uint32_t sV = sK + Bc * D * 2;
  const uint32_t sQ0 = sV + Bc * D * 2;  // two Q buffers
  constexpr uint32_t kQBytes = Br * D * 2;

  const int last_row = min(m_end * Br, T_) - 1;
  const int n_kv = p.causal ? last_row / Bc + 1 : nK;
  const int warp_row = warp * 16 * MT;
  FwdWarp<T, D, Bc, MT, FwdTiles<D>::kQRegs> w;

  for (int j = 0; j < n_kv; ++j) {
    const int n0 = j * Bc;
    __syncthreads();  // the previous K/V block and Q buffers are no longer read
    load_tile<Bc, D, NT>(sK, kg + n0 * p.ks.t, p.ks.t, T_ - n0, tid);
    load_tile<Bc, D, NT>(sV, vg + n0 * p.vs.t, p.vs.t, T_ - n0, tid);
    const int m_start = p.causal ? max(m_begin, n0 / Br) : m_begin;
    load_tile<Br, D, NT>(sQ0, qg + m_start * Br * p.qs.t, p.qs.t, T_ - m_start * Br, tid);
    cp_commit();
    for (int mb = m_start; mb < m_end; ++mb) {
      const int buf = (mb - m_start) & 1;
      cp_wait<0>();
      __syncthreads();  // Q block mb (and the K/V block) landed; the other Q buffer is free
      if (mb + 1 < m_end) {
        const int q1 = (mb + 1) * Br;
        load_tile<Br, D, NT>(sQ0 + (buf ^ 1) * kQBytes, qg + q1 * p.qs.t, p.qs.t, T_ - q1, tid);
        cp_commit();
      }
      const int q0 = mb * Br;
      const int row0 = q0 + warp_row;
      const int last_j = p.causal ? (min(q0 + Br, T_) - 1) / Bc : nK - 1;
      // Read the state this Q block left after the previous K/V block.
      if (j == 0) {
        w.init();
      } else {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int row = row0 + mt * 16 + g + 8 * r;
            float2 ml = make_float2(-INFINITY, 0.f);
            if (row < T_) {
              ml = *reinterpret_cast<const float2*>(ws_ml + 2 * static_cast<int64_t>(row));
            }
            w.m[mt][r] = ml.x;
            w.l[mt][r] = t == 0 ? ml.y : 0.f;  // the row sum lives in one lane of the four
            const float* orow = ws_o + static_cast<int64_t>(row) * D + 2 * t;
#pragma unroll
            for (int nd = 0; nd < D / 8; ++nd) {
              float2 v = make_float2(0.f, 0.f);
              if (row < T_) v = *reinterpret_cast<const float2*>(orow + nd * 8);
              w.o[mt][nd][2 * r] = v.x;
              w.o[mt][nd][2 * r + 1] = v.y;
            }
          }
        }
      }
      const bool mask = n0 + Bc > T_ || (p.causal && n0 + Bc - 1 > row0);
      w.load_q(sQ0 + buf * kQBytes, warp_row, lane);
      w.step(sQ0 + buf * kQBytes, warp_row, sK, sV, lane, mask, row0, n0, T_, p.causal != 0,
             p.scale_log2);
      if (j == last_j) {
        w.write_out(og, p.os.t, lse_bh, row0, T_, lane);
      } else {
        float lsum[MT][2];
        w.reduce_l(lsum);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int row = row0 + mt * 16 + g + 8 * r;
            if (row >= T_) continue;
            if (t == 0) {
              *reinterpret_cast<float2*>(ws_ml + 2 * static_cast<int64_t>(row)) =
                  make_float2(w.m[mt][r], lsum[mt][r]);
            }
            float* orow = ws_o + static_cast<int64_t>(row) * D + 2 * t;
#pragma unroll
            for (int nd = 0; nd < D / 8; ++nd) {
              *reinterpret_cast<float2*>(orow + nd * 8) =
                  make_float2(w.o[mt][nd][2 * r], w.o[mt][nd][2 * r + 1]);
            }
          }
        }
      }
    }
  }
}

template <typename T, int D>
void launch_flash1_fwd(const FwdParams& p0, int num_sms, cudaStream_t stream) {
  using Tl = FwdTiles<D>;
  constexpr int Br = Tl::kBr, Bc = Tl::kBc, W = Tl::kWarps;
  auto kernel = flash1_fwd_kernel<T, D, Br, Bc, W>;
  const size_t smem = static_cast<size_t>(2 * Br + 2 * Bc) * D * 2;
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("flash1_forward: cudaFuncSetAttribute: ") +
                             cudaGetErrorString(e));
  }
  FwdParams p = p0;
  const int nQ = (p.T + Br - 1) / Br;
  const int bh = p.B * p.H;
  // Split the Q blocks of a (b, h) into chunks so that about two thread blocks per SM run.
  int splits = (2 * num_sms + bh - 1) / bh;
  splits = splits < 1 ? 1 : (splits > nQ ? nQ : splits);
  p.q_blocks_per_cta = (nQ + splits - 1) / splits;
  splits = (nQ + p.q_blocks_per_cta - 1) / p.q_blocks_per_cta;
  const dim3 grid(splits, bh);
  kernel<<<grid, 32 * W, smem, stream>>>(p);
}

template void launch_flash1_fwd<__nv_bfloat16, 64>(const FwdParams&, int, cudaStream_t);
template void launch_flash1_fwd<__nv_bfloat16, 128>(const FwdParams&, int, cudaStream_t);
template void launch_flash1_fwd<__half, 64>(const FwdParams&, int, cudaStream_t);
template void launch_flash1_fwd<__half, 128>(const FwdParams&, int, cudaStream_t);

}  // namespace triad::kernels::cuda::flash::detail
