// Whole-buffer reductions (for gradient-norm clipping) and scaling/filling. sum and
// sum_squares are deterministic: pass 1 has a grid fixed by n, each block writes one double
// partial (fixed-order warp/block reduction), pass 2 adds the partials in one block.
#include <cstddef>

#include "common.cuh"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda {
namespace {

constexpr int kSumBlocks = 1024;  // at most this many partials; pass 2 is one block of this size

template <bool kSquare>
__device__ inline double term(float v) {
  const double d = v;
  return kSquare ? d * d : d;
}

template <bool kSquare>
__global__ void partial_sums_kernel(double* partial, const float* x, size_t n, detail::VecSplit s) {
  __shared__ double shared[32];
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  double acc = 0.0;
  if (!s.vec) {
    for (size_t i = tid; i < n; i += stride) acc += term<kSquare>(x[i]);
  } else {
    const size_t tail0 = s.head + 4 * s.nvec;
    if (tid < s.head) acc += term<kSquare>(x[tid]);
    if (tid < n - tail0) acc += term<kSquare>(x[tail0 + tid]);
    for (size_t j = tid; j < s.nvec; j += stride) {
      const float4 v = detail::load4(x + s.head + 4 * j);
      acc += term<kSquare>(v.x) + term<kSquare>(v.y) + term<kSquare>(v.z) + term<kSquare>(v.w);
    }
  }
  acc = detail::block_sum(acc, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void finish_sum_kernel(double* out, const double* partial, int count) {
  __shared__ double shared[32];
  double v = int(threadIdx.x) < count ? partial[threadIdx.x] : 0.0;
  v = detail::block_sum(v, shared);
  if (threadIdx.x == 0) *out = v;
}

template <bool kSquare>
void reduce(double* out, const float* x, size_t n, cudaStream_t stream, const char* name) {
  if (n == 0) {
    detail::check_cuda(cudaMemsetAsync(out, 0, sizeof(double), stream), name);
    return;
  }
  const detail::VecSplit s = detail::vec_split(n, x);
  const size_t work = s.vec ? s.nvec + 4 : n;
  size_t blocks = detail::ceil_div(work, detail::kThreads);
  if (blocks > size_t(kSumBlocks)) blocks = kSumBlocks;
  detail::Scratch partial(blocks * sizeof(double), stream, name);
  partial_sums_kernel<kSquare><<<static_cast<unsigned>(blocks), detail::kThreads, 0, stream>>>(
      partial.as<double>(), x, n, s);
  detail::check_launch(name);
  finish_sum_kernel<<<1, kSumBlocks, 0, stream>>>(out, partial.as<double>(), int(blocks));
  detail::check_launch(name);
}

struct Scale {
  static constexpr int kVec = 4;
  float* x;
  float s;
  __device__ void scalar(size_t i) const { x[i] *= s; }
  __device__ void vec(size_t i) const {
    float4 v = detail::load4(x + i);
    v.x *= s, v.y *= s, v.z *= s, v.w *= s;
    detail::store4(x + i, v);
  }
};

struct Fill {
  static constexpr int kVec = 4;
  float* x;
  float value;
  __device__ void scalar(size_t i) const { x[i] = value; }
  __device__ void vec(size_t i) const {
    detail::store4(x + i, make_float4(value, value, value, value));
  }
};

}  // namespace

void sum(double* out, const float* x, size_t n, cudaStream_t stream) {
  reduce<false>(out, x, n, stream, "sum");
}

void sum_squares(double* out, const float* x, size_t n, cudaStream_t stream) {
  reduce<true>(out, x, n, stream, "sum_squares");
}

void scale_inplace(float* x, size_t n, float s, cudaStream_t stream) {
  detail::launch_elementwise("scale_inplace", Scale{x, s}, n, detail::vec_split(n, x), stream);
}

void fill(float* x, size_t n, float value, cudaStream_t stream) {
  detail::launch_elementwise("fill", Fill{x, value}, n, detail::vec_split(n, x), stream);
}

}  // namespace triad::kernels::cuda
