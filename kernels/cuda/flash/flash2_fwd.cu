// FlashAttention-2 forward: one thread block per (Q block, b, h); the K/V blocks stream through a
// two-stage cp.async pipeline (block j + 1 loads while block j computes); each warp owns MT
// m-tiles of the Q block, so the softmax needs no inter-warp reduction; O is normalised once at
// the end.
#include <stdexcept>
#include <string>

#include "flash_fwd.cuh"

namespace triad::kernels::cuda::flash::detail {

template <typename T, int D, int Br, int Bc, int W>
__global__ void __launch_bounds__(32 * W, 2) flash2_fwd_kernel(const FwdParams p) {
  using Cfg = FwdConfig<D, Br, Bc, W>;
  constexpr int NT = Cfg::kThreads, MT = Cfg::kMT;
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int T_ = p.T;
  const int nQ = (T_ + Br - 1) / Br, nK = (T_ + Bc - 1) / Bc;
  const int mblk = p.causal ? nQ - 1 - static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x);
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int q0 = mblk * Br;
  const T* qg = static_cast<const T*>(p.q) + b * p.qs.b + h * p.qs.h + q0 * p.qs.t;
  const T* kg = static_cast<const T*>(p.k) + b * p.ks.b + h * p.ks.h;
  const T* vg = static_cast<const T*>(p.v) + b * p.vs.b + h * p.vs.h;

  const uint32_t sQ = smem_u32(smem);
  const uint32_t sKV = sQ + Br * D * 2;  // stage s: K at sKV + s * kStage, V at + Bc * D * 2
  constexpr uint32_t kStage = 2 * Bc * D * 2;

  const int n_kv = p.causal ? min(nK, (min(q0 + Br, T_) - 1) / Bc + 1) : nK;
  load_tile<Br, D, NT>(sQ, qg, p.qs.t, T_ - q0, tid);
  load_tile<Bc, D, NT>(sKV, kg, p.ks.t, T_, tid);
  load_tile<Bc, D, NT>(sKV + Bc * D * 2, vg, p.vs.t, T_, tid);
  cp_commit();

  FwdWarp<T, D, Bc, MT, FwdTiles<D>::kQRegs> w;
  w.init();
  const int warp_row = warp * 16 * MT;
  const int row0 = q0 + warp_row;
  for (int j = 0; j < n_kv; ++j) {
    // Block j has landed (this thread's copies, then everyone's), and every warp is done with
    // block j - 1, whose stage now takes block j + 1 while block j computes.
    cp_wait<0>();
    __syncthreads();
    if (j + 1 < n_kv) {
      const int n1 = (j + 1) * Bc;
      const uint32_t st = sKV + ((j + 1) & 1) * kStage;
      load_tile<Bc, D, NT>(st, kg + n1 * p.ks.t, p.ks.t, T_ - n1, tid);
      load_tile<Bc, D, NT>(st + Bc * D * 2, vg + n1 * p.vs.t, p.vs.t, T_ - n1, tid);
      cp_commit();
    }
    if (j == 0) w.load_q(sQ, warp_row, lane);
    const int n0 = j * Bc;
    const bool mask = n0 + Bc > T_ || (p.causal && n0 + Bc - 1 > row0);
    const uint32_t st = sKV + (j & 1) * kStage;
    w.step(sQ, warp_row, st, st + Bc * D * 2, lane, mask, row0, n0, T_, p.causal != 0,
           p.scale_log2);
  }
  T* og = static_cast<T*>(p.o) + b * p.os.b + h * p.os.h;
  w.write_out(og, p.os.t, p.lse + static_cast<int64_t>(bh) * T_, row0, T_, lane);
}

template <typename T, int D>
void launch_flash2_fwd(const FwdParams& p, cudaStream_t stream) {
  using Tl = FwdTiles<D>;
  constexpr int Br = Tl::kBr, Bc = Tl::kBc, W = Tl::kWarps;
  auto kernel = flash2_fwd_kernel<T, D, Br, Bc, W>;
  const size_t smem = static_cast<size_t>(Br + 4 * Bc) * D * 2;
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("flash2_forward: cudaFuncSetAttribute: ") +
                             cudaGetErrorString(e));
  }
  const dim3 grid((p.T + Br - 1) / Br, p.B * p.H);
  kernel<<<grid, 32 * W, smem, stream>>>(p);
}

template void launch_flash2_fwd<__nv_bfloat16, 64>(const FwdParams&, cudaStream_t);
template void launch_flash2_fwd<__nv_bfloat16, 128>(const FwdParams&, cudaStream_t);
template void launch_flash2_fwd<__half, 64>(const FwdParams&, cudaStream_t);
template void launch_flash2_fwd<__half, 128>(const FwdParams&, cudaStream_t);

}  // namespace triad::kernels::cuda::flash::detail
