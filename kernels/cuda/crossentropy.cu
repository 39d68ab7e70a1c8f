// Softmax + cross-entropy fused over the vocabulary, one block per row. Forward reads each
// logit once, keeping a running (max, sum of exp) per thread, and writes only the loss and
// the log-sum-exp; backward recomputes the probabilities from the lse (no (N,V) softmax).
// Templated on the storage type T of the logits and their gradient (float or bf16); losses,
// lse, dloss and the arithmetic are fp32 either way.
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

template <class T>
__global__ void __launch_bounds__(kCeThreads)
    crossentropy_forward_kernel(float* losses, float* lse, const T* logits, const int32_t* targets,
                                int V, int valid, detail::VecSplit s) {
  constexpr int W = detail::kVecOf<T>;
  __shared__ float shared_m[32], shared_s[32];
  const int row = blockIdx.x;
  const T* z = logits + size_t(row) * V;
  const int tid = threadIdx.x;
  MaxSum acc;
  if (s.vec) {
    const size_t tail0 = s.head + W * s.nvec;
    if (size_t(tid) < s.head) acc.add(detail::to_float(z[tid]));
    if (size_t(tid) < valid - tail0) acc.add(detail::to_float(z[tail0 + tid]));
    for (size_t j = tid; j < s.nvec; j += blockDim.x) {
      float x[W];
      detail::load_vec(z + s.head + W * j, x);
      for (int k = 0; k < W; ++k) acc.add(x[k]);
    }
  } else {
    for (int v = tid; v < valid; v += blockDim.x) acc.add(detail::to_float(z[v]));
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
      losses[row] = t >= 0 && t < valid ? l - detail::to_float(z[t]) : NAN;
    }
  }
}

// No __restrict__: dlogits may alias logits. Every element is read, then written, by one thread.
template <class T>
__global__ void crossentropy_backward_kernel(T* dlogits, const T* logits, const float* lse,
                                             const int32_t* targets, float dloss, int V, int valid,
                                             detail::VecSplit s) {
  constexpr int W = detail::kVecOf<T>;
  const int row = blockIdx.x;
  const T* z = logits + size_t(row) * V;
  T* dz = dlogits + size_t(row) * V;
  const float l = lse[row];
  const int t = targets[row];
  const int tid = threadIdx.x;
  auto grad = [&](float x, int v) {
    const float g = dloss * expf(x - l);
    return v == t ? g - dloss : g;
  };
  auto one = [&](int v) { dz[v] = detail::from_float<T>(grad(detail::to_float(z[v]), v)); };
  if (s.vec) {
    const size_t tail0 = s.head + W * s.nvec;
    if (size_t(tid) < s.head) one(tid);
    if (size_t(tid) < valid - tail0) one(int(tail0) + tid);
    for (size_t j = tid; j < s.nvec; j += blockDim.x) {
      const int v = int(s.head + W * j);
      float x[W];
      detail::load_vec(z + v, x);
      for (int k = 0; k < W; ++k) x[k] = grad(x[k], v + k);
      detail::store_vec(dz + v, x);
    }
  } else {
    for (int v = tid; v < valid; v += blockDim.x) one(v);
  }
  // Padding columns (Megatron's padded vocabulary) get no probability and no gradient.
  for (int v = valid + tid; v < V; v += blockDim.x) dz[v] = detail::from_float<T>(0.0f);
}

template <class T>
void forward(float* losses, float* lse, const T* logits, const int32_t* targets, int N, int V,
             int valid, cudaStream_t stream) {
  if (valid < 0 || valid > V) valid = V;
  if (N <= 0 || valid <= 0) return;
  // Rows start 16-byte apart when V is a multiple of the vector width, so the split of row 0
  // holds for every row.
  const detail::VecSplit s =
      V % detail::kVecOf<T> == 0 ? detail::vec_split(size_t(valid), logits) : detail::VecSplit{};
  crossentropy_forward_kernel<T>
      <<<N, kCeThreads, 0, stream>>>(losses, lse, logits, targets, V, valid, s);
  detail::check_launch("crossentropy_forward");
}

template <class T>
void backward(T* dlogits, const T* logits, const float* lse, const int32_t* targets, float dloss,
              int N, int V, int valid, cudaStream_t stream) {
  if (valid < 0 || valid > V) valid = V;
  if (N <= 0 || V <= 0) return;
  const detail::VecSplit s = V % detail::kVecOf<T> == 0
                                 ? detail::vec_split(size_t(valid), dlogits, logits)
                                 : detail::VecSplit{};
  crossentropy_backward_kernel<T>
      <<<N, kCeThreads, 0, stream>>>(dlogits, logits, lse, targets, dloss, V, valid, s);
  detail::check_launch("crossentropy_backward");
}

}  // namespace

void crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                          int N, int V, cudaStream_t stream, int valid) {
  forward(losses, lse, logits, targets, N, V, valid, stream);
}
void crossentropy_forward(float* losses, float* lse, const bf16* logits, const int32_t* targets,
                          int N, int V, cudaStream_t stream, int valid) {
  forward(losses, lse, logits, targets, N, V, valid, stream);
}

void crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                           const int32_t* targets, float dloss, int N, int V, cudaStream_t stream,
                           int valid) {
  backward(dlogits, logits, lse, targets, dloss, N, V, valid, stream);
}
void crossentropy_backward(bf16* dlogits, const bf16* logits, const float* lse,
                           const int32_t* targets, float dloss, int N, int V, cudaStream_t stream,
                           int valid) {
  backward(dlogits, logits, lse, targets, dloss, N, V, valid, stream);
}

}  // namespace triad::kernels::cuda
