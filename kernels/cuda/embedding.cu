// Token + position embedding (llm.c encoder_forward/backward). The backward is deterministic
// without float atomics: each block owns a chunk of vocabulary rows, scans every token in
// order, keeps those in its chunk, groups them by row (stably) and adds their dout rows into
// the dwte row in token order. That is the CPU's summation order, so dwte is bit-identical to
// kernels::cpu on every run. Templated on the storage type E of out/wte/wpe/dout (float, or
// bf16 with the compute copy of the weights); the sums and dwte/dwpe are fp32 either way, so
// with bf16 dout the gradients equal the CPU's float result on the same (bf16) values.
// Vocab-parallel (tensor parallelism): wte and dwte hold the rows [vocab_start, vocab_start +
// rows); other tokens look up zeros and add nothing, as in kernels::cpu.
#include <cstddef>
#include <cstdint>

#include "common.cuh"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda {
namespace {

// out[i] for i in [kW j, kW j + kW): one element (kW = 1) or one 16-byte vector (kW =
// kVecOf<E>, C % kW == 0 and every pointer 16-byte aligned) per step. vocab_rows < 0: wte holds
// every token's row.
template <class E, int kW>
__global__ void embedding_forward_kernel(E* out, const int32_t* tokens, const E* wte, const E* wpe,
                                         int T, int C, size_t groups, int64_t vocab_start,
                                         int vocab_rows) {
  for (size_t g = size_t(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += size_t(gridDim.x) * blockDim.x) {
    const size_t i = g * kW;
    const size_t bt = i / C;
    const int c = static_cast<int>(i % C);
    const int64_t row = int64_t(tokens[bt]) - vocab_start;
    const E* p = wpe ? wpe + (bt % T) * C + c : nullptr;
    if (vocab_rows >= 0 && (row < 0 || row >= vocab_rows)) {  // another rank's row: zero
      if constexpr (kW > 1) {
        float v[kW] = {};
        if (p) detail::load_vec(p, v);
        detail::store_vec(out + i, v);
      } else {
        out[i] = p ? *p : detail::from_float<E>(0.0f);
      }
      continue;
    }
    const E* w = wte + size_t(row) * C + c;
    if constexpr (kW > 1) {
      float v[kW];
      detail::load_vec(w, v);
      if (p) {
        float q[kW];
        detail::load_vec(p, q);
        for (int k = 0; k < kW; ++k) v[k] += q[k];
      }
      detail::store_vec(out + i, v);
    } else {
      const float v = detail::to_float(*w);
      out[i] = detail::from_float<E>(p ? v + detail::to_float(*p) : v);
    }
  }
}

constexpr int kChunkRows = 64;    // vocabulary rows owned by one block
constexpr int kSegment = 2048;    // matching tokens held before they are added in
constexpr int kBwdThreads = 256;  // <= kSegment (one tile of tokens always fits)
constexpr int kBwdWarps = kBwdThreads / 32;

struct EmbeddingShared {
  int bt[kSegment];      // matching token positions, in order
  int row[kSegment];     // their row within the chunk
  int sorted[kSegment];  // positions grouped by row, stable
  int start[kChunkRows + 1];
  int cursor[kChunkRows];
  int warp_hits[kBwdWarps];
};

// Adds the segment's `len` positions into the chunk's dwte rows. Called by the whole block.
template <class E>
__device__ void flush_segment(EmbeddingShared& sh, int len, float* dwte, const E* dout, int C,
                              int v0, int rows) {
  const int tid = threadIdx.x, lane = tid & 31;
  for (int r = tid; r < kChunkRows; r += blockDim.x) sh.cursor[r] = 0;
  __syncthreads();
  for (int i = tid; i < len; i += blockDim.x) atomicAdd(&sh.cursor[sh.row[i]], 1);  // exact
  __syncthreads();
  if (tid == 0) {
    sh.start[0] = 0;
    for (int r = 0; r < kChunkRows; ++r) sh.start[r + 1] = sh.start[r] + sh.cursor[r];
  }
  __syncthreads();
  // Stable counting sort by one warp, 32 positions at a time in order: a lane's slot is its
  // row's cursor plus the number of earlier lanes with the same row.
  if (tid < 32) {
    for (int r = lane; r < kChunkRows; r += 32) sh.cursor[r] = sh.start[r];
    __syncwarp();
    for (int base = 0; base < len; base += 32) {
      const int i = base + lane;
      const int r = i < len ? sh.row[i] : -1;
      const unsigned peers = __match_any_sync(0xffffffffu, r);
      const int rank = __popc(peers & ((1u << lane) - 1u));
      if (r >= 0) sh.sorted[sh.cursor[r] + rank] = sh.bt[i];
      __syncwarp();
      if (r >= 0 && (peers >> lane) == 1u) sh.cursor[r] += __popc(peers);  // last of its group
      __syncwarp();
    }
  }
  __syncthreads();
  for (int r = 0; r < rows; ++r) {
    const int s0 = sh.start[r], s1 = sh.start[r + 1];
    if (s0 == s1) continue;
    float* dw = dwte + size_t(v0 + r) * C;
    for (int c = tid; c < C; c += blockDim.x) {
      float acc = dw[c];
      for (int e = s0; e < s1; ++e) acc += detail::to_float(dout[size_t(sh.sorted[e]) * C + c]);
      dw[c] = acc;
    }
  }
  __syncthreads();  // the segment's arrays are reused
}

template <class E>
__global__ void __launch_bounds__(kBwdThreads)
    embedding_backward_wte_kernel(float* dwte, const E* dout, const int32_t* tokens, int BT, int C,
                                  int V, int64_t vocab_start) {
  __shared__ EmbeddingShared sh;
  const int v0 = blockIdx.x * kChunkRows;
  const int rows = min(kChunkRows, V - v0);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int len = 0;  // the same in every thread
  for (int base = 0; base < BT; base += blockDim.x) {
    const int bt = base + threadIdx.x;
    const int64_t tok = bt < BT ? int64_t(tokens[bt]) - vocab_start : -1;  // row in the shard
    const bool hit = tok >= v0 && tok < v0 + rows;  // rows outside [0, V) belong to no block
    // Order-preserving compaction: hits in earlier warps, then earlier lanes, come first.
    const unsigned ballot = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) sh.warp_hits[warp] = __popc(ballot);
    __syncthreads();
    int before = __popc(ballot & ((1u << lane) - 1u)), total = 0;
    for (int w = 0; w < kBwdWarps; ++w) {
      if (w < warp) before += sh.warp_hits[w];
      total += sh.warp_hits[w];
    }
    if (len + total > kSegment) {
      flush_segment(sh, len, dwte, dout, C, v0, rows);
      len = 0;
    }
    if (hit) {
      sh.bt[len + before] = bt;
      sh.row[len + before] = static_cast<int>(tok - v0);
    }
    len += total;
    __syncthreads();  // warp_hits is rewritten by the next tile
  }
  if (len > 0) flush_segment(sh, len, dwte, dout, C, v0, rows);
}

// dwpe[t, c] += sum_b dout[b, t, c], b in order (the CPU's order).
template <class E>
__global__ void embedding_backward_wpe_kernel(float* dwpe, const E* dout, int B, int T, int C) {
  const size_t total = size_t(T) * C;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += size_t(gridDim.x) * blockDim.x) {
    float acc = dwpe[i];
    for (int b = 0; b < B; ++b) acc += detail::to_float(dout[size_t(b) * total + i]);
    dwpe[i] = acc;
  }
}

template <class E>
void forward(E* out, const int32_t* tokens, const E* wte, const E* wpe, int B, int T, int C,
             int64_t vocab_start, int vocab_rows, cudaStream_t stream) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  constexpr int W = detail::kVecOf<E>;
  const size_t n = size_t(B) * T * C;
  const bool vec = C % W == 0 && detail::misalign(out) == 0 && detail::misalign(wte) == 0 &&
                   (!wpe || detail::misalign(wpe) == 0);
  if (vec)
    embedding_forward_kernel<E, W><<<detail::grid_for(n / W), detail::kThreads, 0, stream>>>(
        out, tokens, wte, wpe, T, C, n / W, vocab_start, vocab_rows);
  else
    embedding_forward_kernel<E, 1><<<detail::grid_for(n), detail::kThreads, 0, stream>>>(
        out, tokens, wte, wpe, T, C, n, vocab_start, vocab_rows);
  detail::check_launch("embedding_forward");
}

template <class E>
void backward(float* dwte, float* dwpe, const E* dout, const int32_t* tokens, int B, int T, int C,
              int V, int64_t vocab_start, cudaStream_t stream) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  if (V > 0) {
    embedding_backward_wte_kernel<E>
        <<<static_cast<unsigned>(detail::ceil_div(V, kChunkRows)), kBwdThreads, 0, stream>>>(
            dwte, dout, tokens, B * T, C, V, vocab_start);
    detail::check_launch("embedding_backward dwte");
  }
  if (dwpe) {
    embedding_backward_wpe_kernel<E>
        <<<detail::grid_for(size_t(T) * C), detail::kThreads, 0, stream>>>(dwpe, dout, B, T, C);
    detail::check_launch("embedding_backward dwpe");
  }
}

}  // namespace

template <class E>
void embedding_forward(E* out, const int32_t* tokens, const E* wte, const NoDeduce<E>* wpe, int B,
                       int T, int C, cudaStream_t stream, int64_t vocab_start, int vocab_rows) {
  forward(out, tokens, wte, wpe, B, T, C, vocab_start, vocab_rows, stream);
}

template <class E>
void embedding_backward(float* dwte, float* dwpe, const E* dout, const int32_t* tokens, int B,
                        int T, int C, int V, cudaStream_t stream, int64_t vocab_start) {
  backward(dwte, dwpe, dout, tokens, B, T, C, V, vocab_start, stream);
}

#define TRIAD_INSTANTIATE(E)                                                                     \
  template void embedding_forward(E*, const int32_t*, const E*, const E*, int, int, int,         \
                                  cudaStream_t, int64_t, int);                                   \
  template void embedding_backward(float*, float*, const E*, const int32_t*, int, int, int, int, \
                                   cudaStream_t, int64_t);
TRIAD_INSTANTIATE(float)
TRIAD_INSTANTIATE(bf16)
TRIAD_INSTANTIATE(f16)
#undef TRIAD_INSTANTIATE

}  // namespace triad::kernels::cuda
