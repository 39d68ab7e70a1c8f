// Context parallelism's layout moves and ring attention's log-sum-exp merge, as kernels/cpu's
// copy_rows and attention_merge (the same float arithmetic; expf/logf round within an ulp of
// the host's). E is the activations' storage type; a plain copy moves its bits untouched.
#include <cstdint>

#include "common.cuh"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda {
namespace {

__device__ inline int64_t row_offset(int64_t r, const RowBox& box, const RowStrides& st) {
  const int64_t k = r % box.n[2], ij = r / box.n[2];
  const int64_t j = ij % box.n[1], i = ij / box.n[1];
  return i * st.s[0] + j * st.s[1] + k * st.s[2];
}

template <class E>
__global__ void copy_rows_kernel(E* dst, RowStrides ds, const E* src, RowStrides ss, RowBox box,
                                 bool accumulate, int64_t total) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / box.row, c = e % box.row;
    E& d = dst[row_offset(r, box, ds) + c];
    if (!src) {
      d = detail::from_float<E>(0.0f);
      continue;
    }
    const E s = src[row_offset(r, box, ss) + c];
    d = accumulate ? detail::from_float<E>(detail::to_float(d) + detail::to_float(s)) : s;
  }
}

// One warp per row (b, h, s): every lane reads the row's two lse values and forms the same
// weights before lane 0 writes the merged lse.
template <class E>
__global__ void attention_merge_kernel(E* out, RowStrides os, float* lse, RowStrides ls,
                                       const E* part, const float* part_lse, int64_t H, int64_t S,
                                       int64_t D, int64_t rows, bool first) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int64_t s = row % S, bh = row / S, h = bh % H, b = bh / H;
  E* o = out + b * os.s[0] + h * os.s[1] + s * os.s[2];
  float* l = lse + b * ls.s[0] + h * ls.s[1] + s * ls.s[2];
  const E* po = part + row * D;
  const float pl = part_lse[row];
  // A part that saw no keys (lse -inf) adds nothing; output that has seen none yet takes the
  // part as it is (the merge below would give NaN from -inf - -inf). Whole warps leave alike.
  if (!first && pl == -INFINITY) return;
  if (first || *l == -INFINITY) {
    for (int64_t d = lane; d < D; d += 32) o[d] = po[d];
    __syncwarp();
    if (lane == 0) *l = pl;
    return;
  }
  const float l0 = *l;
  const float m = fmaxf(l0, pl);
  const float merged = m + logf(expf(l0 - m) + expf(pl - m));
  const float a = expf(l0 - merged), c = expf(pl - merged);
  for (int64_t d = lane; d < D; d += 32)
    o[d] = detail::from_float<E>(a * detail::to_float(o[d]) + c * detail::to_float(po[d]));
  __syncwarp();
  if (lane == 0) *l = merged;
}

}  // namespace

template <class E>
void copy_rows(E* dst, const RowStrides& ds, const NoDeduce<E>* src, const RowStrides& ss,
               const RowBox& box, bool accumulate, cudaStream_t stream) {
  const int64_t total = box.n[0] * box.n[1] * box.n[2] * box.row;
  if (total <= 0) return;
  copy_rows_kernel<E><<<detail::grid_for(size_t(total)), detail::kThreads, 0, stream>>>(
      dst, ds, src, ss, box, accumulate, total);
  detail::check_launch("copy_rows");
}

template <class E>
void attention_merge(E* out, const RowStrides& os, float* lse, const RowStrides& ls, const E* part,
                     const float* part_lse, int64_t B, int64_t H, int64_t S, int64_t D, bool first,
                     cudaStream_t stream) {
  const int64_t rows = B * H * S;
  if (rows <= 0) return;
  constexpr int kRowsPerBlock = detail::kThreads / 32;
  const unsigned blocks =
      static_cast<unsigned>(detail::ceil_div(size_t(rows), size_t(kRowsPerBlock)));
  attention_merge_kernel<E><<<blocks, detail::kThreads, 0, stream>>>(
      out, os, lse, ls, part, part_lse, H, S, D, rows, first);
  detail::check_launch("attention_merge");
}

#define TRIAD_INSTANTIATE(E)                                                                       \
  template void copy_rows(E*, const RowStrides&, const E*, const RowStrides&, const RowBox&, bool, \
                          cudaStream_t);                                                           \
  template void attention_merge(E*, const RowStrides&, float*, const RowStrides&, const E*,        \
                                const float*, int64_t, int64_t, int64_t, int64_t, bool,            \
                                cudaStream_t);
TRIAD_INSTANTIATE(float)
TRIAD_INSTANTIATE(bf16)
TRIAD_INSTANTIATE(f16)
#undef TRIAD_INSTANTIATE

}  // namespace triad::kernels::cuda
