// Softmax + cross-entropy fused over the vocabulary, one block per row. Forward reads each
// logit once, keeping a running (max, sum of exp) per thread, and writes only the loss and
// the log-sum-exp; backward recomputes the probabilities from the lse (no (N,V) softmax).
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common.cuh"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda {
namespace {

constexpr int kCeThreads = 512;

// (m, s): s = sum exp(x - m) over the values seen, m their max (-inf when none).
struct MaxSum {
  float m = -INFINITY;
  float s = 0.0f;
  __device__ void add(float x) {
    if (x > m) {
      s = s * expf(m - x) + 1.0f;
      m = x;
    } else if (x > -INFINITY) {
      s += expf(x - m);
    }
  }
  __device__ void merge(float m2, float s2) {
    const float mm = fmaxf(m, m2);
    if (mm == -INFINITY) return;  // both sides empty
    s = s * expf(m - mm) + s2 * expf(m2 - mm);
    m = mm;
  }
};

__device__ inline MaxSum warp_max_sum(MaxSum v) {
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, v.m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, v.s, o);
    v.merge(m2, s2);
  }
  return v;
}

__global__ void __launch_bounds__(kCeThreads)
    crossentropy_forward_kernel(float* losses, float* lse, const float* logits,
                                const int32_t* targets, int V, detail::VecSplit s) {
  __shared__ float shared_m[32], shared_s[32];
  const int row = blockIdx.x;
  const float* z = logits + size_t(row) * V;
  const int tid = threadIdx.x;
  MaxSum acc;
  if (s.vec) {
    const size_t tail0 = s.head + 4 * s.nvec;
    if (size_t(tid) < s.head) acc.add(z[tid]);
    if (size_t(tid) < V - tail0) acc.add(z[tail0 + tid]);
    for (size_t j = tid; j < s.nvec; j += blockDim.x) {
      const float4 x = detail::load4(z + s.head + 4 * j);
      acc.add(x.x);
      acc.add(x.y);
      acc.add(x.z);
      acc.add(x.w);
    }
  } else {
    for (int v = tid; v < V; v += blockDim.x) acc.add(z[v]);
  }
  acc = warp_max_sum(acc);
  const int lane = tid & 31, warp = tid >> 5;
  if (lane == 0) {
    shared_m[warp] = acc.m;
    shared_s[warp] = acc.s;
  }
  __syncthreads();
  if (warp == 0) {
    MaxSum all;
    if (lane < int(blockDim.x >> 5)) all = MaxSum{shared_m[lane], shared_s[lane]};
    all = warp_max_sum(all);
    if (lane == 0) {
      const float l = all.m + logf(all.s);
      const int t = targets[row];
      lse[row] = l;
      losses[row] = t >= 0 && t < V ? l - z[t] : NAN;
    }
  }
}

// No __restrict__: dlogits may alias logits. Every element is read, then written, by one thread.
__global__ void crossentropy_backward_kernel(float* dlogits, const float* logits, const float* lse,
                                             const int32_t* targets, float dloss, int V,
                                             detail::VecSplit s) {
  const int row = blockIdx.x;
  const float* z = logits + size_t(row) * V;
  float* dz = dlogits + size_t(row) * V;
  const float l = lse[row];
  const int t = targets[row];
  const int tid = threadIdx.x;
  auto grad = [&](float x, int v) {
    const float g = dloss * expf(x - l);
    return v == t ? g - dloss : g;
  };
  if (s.vec) {
    const size_t tail0 = s.head + 4 * s.nvec;
    if (size_t(tid) < s.head) dz[tid] = grad(z[tid], tid);
    if (size_t(tid) < V - tail0) {
      const int v = int(tail0) + tid;
      dz[v] = grad(z[v], v);
    }
    for (size_t j = tid; j < s.nvec; j += blockDim.x) {
      const int v = int(s.head + 4 * j);
      const float4 x = detail::load4(z + v);
      detail::store4(
          dz + v, make_float4(grad(x.x, v), grad(x.y, v + 1), grad(x.z, v + 2), grad(x.w, v + 3)));
    }
  } else {
    for (int v = tid; v < V; v += blockDim.x) dz[v] = grad(z[v], v);
  }
}

}  // namespace

void crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                          int N, int V, cudaStream_t stream) {
  if (N <= 0 || V <= 0) return;
  // Rows start 16-byte apart when V % 4 == 0, so the split of row 0 holds for every row.
  const detail::VecSplit s = V % 4 == 0 ? detail::vec_split(size_t(V), logits) : detail::VecSplit{};
  crossentropy_forward_kernel<<<N, kCeThreads, 0, stream>>>(losses, lse, logits, targets, V, s);
  detail::check_launch("crossentropy_forward");
}

void crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                           const int32_t* targets, float dloss, int N, int V, cudaStream_t stream) {
  if (N <= 0 || V <= 0) return;
  const detail::VecSplit s =
      V % 4 == 0 ? detail::vec_split(size_t(V), dlogits, logits) : detail::VecSplit{};
  crossentropy_backward_kernel<<<N, kCeThreads, 0, stream>>>(dlogits, logits, lse, targets, dloss,
                                                             V, s);
  detail::check_launch("crossentropy_backward");
}

}  // namespace triad::kernels::cuda
