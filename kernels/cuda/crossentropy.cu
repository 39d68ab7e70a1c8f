// Softmax + cross-entropy fused over the vocabulary, one block per row. Forward reads each
// logit once, keeping a running (max, sum of exp) per thread, and writes only the loss and
// the log-sum-exp; backward recomputes the probabilities from the lse (no (N,V) softmax).
// Vocab-parallel (tensor parallelism) splits the forward around the group's reductions:
// row_max, (all-reduce max), row_sums, (all-reduce sum), finish; each rank's logits are its
// columns [vocab_start, vocab_start + V), and the backward takes the whole row's lse.
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

// Calls f(x) for each of this thread's logits among the first `valid` of row z, in a fixed
// order: with s.vec the scalar head and tail elements, then 16-byte vectors; else a stride.
template <class T, class F>
__device__ inline void for_each_logit(const T* z, int valid, const detail::VecSplit& s, F&& f) {
  constexpr int W = detail::kVecOf<T>;
  const int tid = threadIdx.x;
  if (s.vec) {
    const size_t tail0 = s.head + W * s.nvec;
    if (size_t(tid) < s.head) f(detail::to_float(z[tid]));
    if (size_t(tid) < valid - tail0) f(detail::to_float(z[tail0 + tid]));
    for (size_t j = tid; j < s.nvec; j += blockDim.x) {
      float x[W];
      detail::load_vec(z + s.head + W * j, x);
      for (int k = 0; k < W; ++k) f(x[k]);
    }
  } else {
    for (int v = tid; v < valid; v += blockDim.x) f(detail::to_float(z[v]));
  }
}

// The column of row's target among this rank's `valid` columns, or -1 when another rank (or
// the padding) holds it.
__device__ inline int64_t target_column(const int32_t* targets, int row, int64_t vocab_start,
                                        int valid) {
  const int64_t t = int64_t(targets[row]) - vocab_start;
  return t >= 0 && t < valid ? t : -1;
}

template <class T>
__global__ void __launch_bounds__(kCeThreads)
    crossentropy_forward_kernel(float* losses, float* lse, const T* logits, const int32_t* targets,
                                int V, int valid, detail::VecSplit s) {
  __shared__ float shared_m[32], shared_s[32];
  const int row = blockIdx.x;
  const T* z = logits + size_t(row) * V;
  const int tid = threadIdx.x;
  MaxSum acc;
  if (s.vec) {
    // A vector's values are independent: their max first, then their exponentials (W at once,
    // no chain through the running pair), merged into the pair once per vector.
    constexpr int W = detail::kVecOf<T>;
    const size_t tail0 = s.head + W * s.nvec;
    if (size_t(tid) < s.head) acc.add(detail::to_float(z[tid]));
    if (size_t(tid) < valid - tail0) acc.add(detail::to_float(z[tail0 + tid]));
    for (size_t j = tid; j < s.nvec; j += blockDim.x) {
      float x[W];
      detail::load_vec(z + s.head + W * j, x);
      float m = x[0];
      for (int k = 1; k < W; ++k) m = fmaxf(m, x[k]);
      if (m == -INFINITY) continue;
      float sum = 0.0f;
      for (int k = 0; k < W; ++k) sum += expf(x[k] - m);
      acc.merge(m, sum);
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

// rowmax[row] = max of the row's valid logits (-inf when there are none).
template <class T>
__global__ void __launch_bounds__(kCeThreads)
    crossentropy_row_max_kernel(float* rowmax, const T* logits, int V, int valid,
                                detail::VecSplit s) {
  __shared__ float shared[32];
  const T* z = logits + size_t(blockIdx.x) * V;
  float m = -INFINITY;
  for_each_logit(z, valid, s, [&](float x) { m = fmaxf(m, x); });
  m = detail::block_max(m, shared);
  if (threadIdx.x == 0) rowmax[blockIdx.x] = m;
}

// sumexp[row] = sum exp(z - rowmax[row]) over the valid logits; target_logit[row] = the
// target's logit when this rank holds it, else 0 (the group's sum then has it exactly once).
template <class T>
__global__ void __launch_bounds__(kCeThreads)
    crossentropy_row_sums_kernel(float* sumexp, float* target_logit, const T* logits,
                                 const float* rowmax, const int32_t* targets, int V, int valid,
                                 int64_t vocab_start, detail::VecSplit s) {
  __shared__ float shared[32];
  const int row = blockIdx.x;
  const T* z = logits + size_t(row) * V;
  const float m = rowmax[row];
  float sum = 0.0f;
  for_each_logit(z, valid, s, [&](float x) { sum += expf(x - m); });
  sum = detail::block_sum(sum, shared);
  if (threadIdx.x == 0) {
    const int64_t t = target_column(targets, row, vocab_start, valid);
    sumexp[row] = sum;
    target_logit[row] = t >= 0 ? detail::to_float(z[t]) : 0.0f;
  }
}

// The forward's last step, on the group's reductions: lse = rowmax + log(sumexp).
__global__ void crossentropy_finish_kernel(float* losses, float* lse, const float* rowmax,
                                           const float* sumexp, const float* target_logit, int N) {
  for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) {
    const float l = rowmax[n] + logf(sumexp[n]);
    lse[n] = l;
    losses[n] = l - target_logit[n];
  }
}

// No __restrict__: dlogits may alias logits. Every element is read, then written, by one thread.
template <class T>
__global__ void crossentropy_backward_kernel(T* dlogits, const T* logits, const float* lse,
                                             const int32_t* targets, float dloss, int V, int valid,
                                             int64_t vocab_start, detail::VecSplit s) {
  constexpr int W = detail::kVecOf<T>;
  const int row = blockIdx.x;
  const T* z = logits + size_t(row) * V;
  T* dz = dlogits + size_t(row) * V;
  const float l = lse[row];
  const int64_t t = target_column(targets, row, vocab_start, valid);
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

// valid < 0 or past the row: every column is vocabulary.
inline int valid_columns(int V, int valid) {
  return valid < 0 || valid > V ? V : valid;
}

// How for_each_logit walks the rows of (N,V) logits. Rows start 16-byte apart when V is a
// multiple of the vector width, so the split of row 0 holds for every row.
template <class T>
detail::VecSplit row_split(const T* logits, int V, int valid) {
  return V % detail::kVecOf<T> == 0 ? detail::vec_split(size_t(valid), logits) : detail::VecSplit{};
}

template <class T>
void forward(float* losses, float* lse, const T* logits, const int32_t* targets, int N, int V,
             int valid, cudaStream_t stream) {
  valid = valid_columns(V, valid);
  if (N <= 0 || valid <= 0) return;
  crossentropy_forward_kernel<T><<<N, kCeThreads, 0, stream>>>(losses, lse, logits, targets, V,
                                                               valid, row_split(logits, V, valid));
  detail::check_launch("crossentropy_forward");
}

// Unlike the forward, a shard with no valid columns still writes its rows (-inf, 0, 0): the
// group's reductions read them.
template <class T>
void row_max(float* rowmax, const T* logits, int N, int V, int valid, cudaStream_t stream) {
  valid = valid_columns(V, valid);
  if (N <= 0) return;
  crossentropy_row_max_kernel<T>
      <<<N, kCeThreads, 0, stream>>>(rowmax, logits, V, valid, row_split(logits, V, valid));
  detail::check_launch("crossentropy_row_max");
}

template <class T>
void row_sums(float* sumexp, float* target_logit, const T* logits, const float* rowmax,
              const int32_t* targets, int N, int V, int valid, int64_t vocab_start,
              cudaStream_t stream) {
  valid = valid_columns(V, valid);
  if (N <= 0) return;
  crossentropy_row_sums_kernel<T>
      <<<N, kCeThreads, 0, stream>>>(sumexp, target_logit, logits, rowmax, targets, V, valid,
                                     vocab_start, row_split(logits, V, valid));
  detail::check_launch("crossentropy_row_sums");
}

template <class T>
void backward(T* dlogits, const T* logits, const float* lse, const int32_t* targets, float dloss,
              int N, int V, int valid, int64_t vocab_start, cudaStream_t stream) {
  valid = valid_columns(V, valid);
  if (N <= 0 || V <= 0) return;
  const detail::VecSplit s = V % detail::kVecOf<T> == 0
                                 ? detail::vec_split(size_t(valid), dlogits, logits)
                                 : detail::VecSplit{};
  crossentropy_backward_kernel<T><<<N, kCeThreads, 0, stream>>>(dlogits, logits, lse, targets,
                                                                dloss, V, valid, vocab_start, s);
  detail::check_launch("crossentropy_backward");
}

}  // namespace

template <class E>
void crossentropy_forward(float* losses, float* lse, const E* logits, const int32_t* targets, int N,
                          int V, cudaStream_t stream, int valid) {
  forward(losses, lse, logits, targets, N, V, valid, stream);
}

template <class E>
void crossentropy_backward(E* dlogits, const E* logits, const float* lse, const int32_t* targets,
                           float dloss, int N, int V, cudaStream_t stream, int valid,
                           int64_t vocab_start) {
  backward(dlogits, logits, lse, targets, dloss, N, V, valid, vocab_start, stream);
}

template <class E>
void crossentropy_row_max(float* rowmax, const E* logits, int N, int V, int valid,
                          cudaStream_t stream) {
  row_max(rowmax, logits, N, V, valid, stream);
}

template <class E>
void crossentropy_row_sums(float* sumexp, float* target_logit, const E* logits, const float* rowmax,
                           const int32_t* targets, int N, int V, int valid, int64_t vocab_start,
                           cudaStream_t stream) {
  row_sums(sumexp, target_logit, logits, rowmax, targets, N, V, valid, vocab_start, stream);
}

#define TRIAD_INSTANTIATE(E)                                                                       \
  template void crossentropy_forward(float*, float*, const E*, const int32_t*, int, int,           \
                                     cudaStream_t, int);                                           \
  template void crossentropy_backward(E*, const E*, const float*, const int32_t*, float, int, int, \
                                      cudaStream_t, int, int64_t);                                 \
  template void crossentropy_row_max(float*, const E*, int, int, int, cudaStream_t);               \
  template void crossentropy_row_sums(float*, float*, const E*, const float*, const int32_t*, int, \
                                      int, int, int64_t, cudaStream_t);
TRIAD_INSTANTIATE(float)
TRIAD_INSTANTIATE(bf16)
TRIAD_INSTANTIATE(f16)
#undef TRIAD_INSTANTIATE

void crossentropy_finish(float* losses, float* lse, const float* rowmax, const float* sumexp,
                         const float* target_logit, int N, cudaStream_t stream) {
  if (N <= 0) return;
  crossentropy_finish_kernel<<<detail::grid_for(size_t(N)), detail::kThreads, 0, stream>>>(
      losses, lse, rowmax, sumexp, target_logit, N);
  detail::check_launch("crossentropy_finish");
}

}  // namespace triad::kernels::cuda
