// LayerNorm over the last dimension, one warp per row (llm.c's layout): lanes stride over the
// channels (coalesced), and warp shuffles reduce. The parameter gradients are deterministic
// column sums (column_sums.cuh), as the CPU's. Templated on the storage type T of the
// activations and of weight/bias (float, or bf16 with its compute copy of the weights); the
// statistics, the arithmetic and the parameter gradients are fp32 either way. bf16 rows load
// and store 8 elements at a time where every operand is 16-byte aligned.
#include <cstddef>
#include <type_traits>

#include "column_sums.cuh"
#include "common.cuh"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda {
namespace {

using detail::from_float;
using detail::to_float;

constexpr int kRowsPerBlock = detail::kThreads / 32;

// W consecutive elements at p as floats, and back: W = 1 (any T) or W = kVecOf<T> (one 16-byte
// vector, p 16-byte aligned).
template <int W, class T>
__device__ inline void load(const T* p, float (&x)[W]) {
  if constexpr (W == 1)
    x[0] = to_float(*p);
  else
    detail::load_vec(p, x);
}
template <int W, class T>
__device__ inline void store(T* p, const float (&x)[W]) {
  if constexpr (W == 1)
    *p = from_float<T>(x[0]);
  else
    detail::store_vec(p, x);
}

// Lane `lane` takes the W-element chunks lane, lane + 32, ... of its row (W divides C). W = 1 is
// the element-strided loop (the only one for fp32); bf16 rows whose operands are all 16-byte
// aligned take 8-element vectors.
// With res (the residual-fused form), the input row is a + b, written to res (rounded to T, as
// residual_forward rounds it) in the first sweep; the later sweeps read back what this lane
// wrote. res may alias a or b: each element is read, then written, by one lane.
template <class T, int W>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp,
                                         const T* weight, const T* bias, int N, int C, float eps,
                                         T* res, const T* a, const T* b) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= N) return;  // the whole warp leaves together
  const int chunks = C / W;
  const T* x = (res ? res : inp) + size_t(row) * C;
  float sum = 0.0f;
  if (res) {
    const size_t r0 = size_t(row) * C;
    for (int j = lane; j < chunks; j += 32) {
      float v[W], u[W];
      load<W>(a + r0 + j * W, v);
      load<W>(b + r0 + j * W, u);
      for (int k = 0; k < W; ++k) v[k] = to_float(from_float<T>(v[k] + u[k]));
      store<W>(res + r0 + j * W, v);
      for (int k = 0; k < W; ++k) sum += v[k];
    }
  } else {
    for (int j = lane; j < chunks; j += 32) {
      float v[W];
      load<W>(x + j * W, v);
      for (int k = 0; k < W; ++k) sum += v[k];
    }
  }
  const float m = detail::warp_sum(sum) / float(C);
  // Two passes: the variance about the mean does not cancel the way E[x^2] - m^2 does.
  float var = 0.0f;
  for (int j = lane; j < chunks; j += 32) {
    float v[W];
    load<W>(x + j * W, v);
    for (int k = 0; k < W; ++k) {
      const float d = v[k] - m;
      var += d * d;
    }
  }
  const float s = 1.0f / sqrtf(detail::warp_sum(var) / float(C) + eps);
  T* o = out + size_t(row) * C;
  for (int j = lane; j < chunks; j += 32) {
    float v[W], w[W], b[W];
    load<W>(x + j * W, v);
    load<W>(weight + j * W, w);
    load<W>(bias + j * W, b);
    for (int k = 0; k < W; ++k) v[k] = (v[k] - m) * s * w[k] + b[k];
    store<W>(o + j * W, v);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

template <class T, int W>
__global__ void layernorm_backward_kernel(T* dinp, const T* dout, const T* inp, const T* weight,
                                          const float* mean, const float* rstd, int N, int C,
                                          bool accumulate) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= N) return;
  const int chunks = C / W;
  const T* x = inp + size_t(row) * C;
  const T* d = dout + size_t(row) * C;
  const float m = mean[row], s = rstd[row];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int j = lane; j < chunks; j += 32) {
    float w[W], dv[W], xv[W];
    load<W>(weight + j * W, w);
    load<W>(d + j * W, dv);
    load<W>(x + j * W, xv);
    for (int k = 0; k < W; ++k) {
      const float dnorm = w[k] * dv[k];
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * (xv[k] - m) * s;
    }
  }
  const float dnorm_mean = detail::warp_sum(dnorm_sum) / float(C);
  const float dnorm_norm_mean = detail::warp_sum(dnorm_norm_sum) / float(C);
  T* di = dinp + size_t(row) * C;
  for (int j = lane; j < chunks; j += 32) {
    float w[W], dv[W], xv[W], g[W];
    load<W>(weight + j * W, w);
    load<W>(d + j * W, dv);
    load<W>(x + j * W, xv);
    if (accumulate)
      load<W>(di + j * W, g);
    else
      for (int k = 0; k < W; ++k) g[k] = 0.0f;
    for (int k = 0; k < W; ++k) {
      const float norm = (xv[k] - m) * s;
      g[k] += (w[k] * dv[k] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
    store<W>(di + j * W, g);
  }
}

// Whether bf16 rows can take 16-byte vectors: C a multiple of 8 (so every row starts where row
// 0 does, mod 16) and every operand 16-byte aligned. fp32 always runs the W = 1 loops.
template <class T, class... P>
bool use_vectors(int C, const P*... p) {
  if constexpr (std::is_same_v<T, float>) {
    return false;
  } else {
    return C % detail::kVecOf<T> == 0 && ((detail::misalign(p) == 0) && ...);
  }
}

// acc[0] -> dbias, acc[1] -> dweight.
template <class T>
struct ParamGradTerm {
  static constexpr int kSums = 2;
  static constexpr int kVec = detail::kVecOf<T>;
  const T* dout;
  const T* inp;
  const float* mean;
  const float* rstd;
  int C;
  bool vectors(int cols) const {
    return cols % kVec == 0 && detail::misalign(dout) == 0 && detail::misalign(inp) == 0;
  }
  template <int V>
  __device__ void add(int n, int c, double (&acc)[2][V]) const {
    const size_t i = size_t(n) * C + c;
    float d[V], x[V];
    detail::load_n<V>(dout + i, d);
    detail::load_n<V>(inp + i, x);
    const float m = mean[n], r = rstd[n];
    for (int v = 0; v < V; ++v) {
      acc[0][v] += d[v];
      acc[1][v] += d[v] * (x[v] - m) * r;
    }
  }
};

// res, a, b: null, or the residual-fused form (inp is then res).
template <class T>
void forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias, int N,
             int C, float eps, cudaStream_t stream, T* res = nullptr, const T* a = nullptr,
             const T* b = nullptr) {
  if (N <= 0 || C <= 0) return;
  constexpr int W = detail::kVecOf<T>;
  const unsigned blocks = static_cast<unsigned>(detail::ceil_div(N, kRowsPerBlock));
  const bool vectors = res ? use_vectors<T>(C, out, res, a, b, weight, bias)
                           : use_vectors<T>(C, out, inp, weight, bias);
  if (vectors)
    layernorm_forward_kernel<T, W><<<blocks, detail::kThreads, 0, stream>>>(
        out, mean, rstd, inp, weight, bias, N, C, eps, res, a, b);
  else
    layernorm_forward_kernel<T, 1><<<blocks, detail::kThreads, 0, stream>>>(
        out, mean, rstd, inp, weight, bias, N, C, eps, res, a, b);
  detail::check_launch(res ? "residual_layernorm_forward" : "layernorm_forward");
}

template <class T>
void backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp, const T* weight,
              const float* mean, const float* rstd, int N, int C, bool accumulate,
              cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  constexpr int W = detail::kVecOf<T>;
  const unsigned blocks = static_cast<unsigned>(detail::ceil_div(N, kRowsPerBlock));
  if (use_vectors<T>(C, dinp, dout, inp, weight))
    layernorm_backward_kernel<T, W><<<blocks, detail::kThreads, 0, stream>>>(
        dinp, dout, inp, weight, mean, rstd, N, C, accumulate);
  else
    layernorm_backward_kernel<T, 1><<<blocks, detail::kThreads, 0, stream>>>(
        dinp, dout, inp, weight, mean, rstd, N, C, accumulate);
  detail::check_launch("layernorm_backward");
  if (!dweight && !dbias) return;
  detail::ColumnDst<2> dst{{dbias, dweight}};
  detail::add_column_sums(dst, ParamGradTerm<T>{dout, inp, mean, rstd, C}, N, C, stream,
                          "layernorm_backward dweight/dbias");
}

}  // namespace

template <class E>
void layernorm_forward(E* out, float* mean, float* rstd, const E* inp, const E* weight,
                       const E* bias, int N, int C, float eps, cudaStream_t stream) {
  forward(out, mean, rstd, inp, weight, bias, N, C, eps, stream);
}

template <class E>
void residual_layernorm_forward(E* res, E* out, float* mean, float* rstd, const E* a, const E* b,
                                const E* weight, const E* bias, int N, int C, float eps,
                                cudaStream_t stream) {
  forward(out, mean, rstd, static_cast<const E*>(res), weight, bias, N, C, eps, stream, res, a, b);
}

template <class E>
void layernorm_backward(E* dinp, float* dweight, float* dbias, const E* dout, const E* inp,
                        const E* weight, const float* mean, const float* rstd, int N, int C,
                        cudaStream_t stream, bool accumulate) {
  backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, accumulate, stream);
}

#define TRIAD_INSTANTIATE(E)                                                                       \
  template void layernorm_forward(E*, float*, float*, const E*, const E*, const E*, int, int,      \
                                  float, cudaStream_t);                                            \
  template void residual_layernorm_forward(E*, E*, float*, float*, const E*, const E*, const E*,   \
                                           const E*, int, int, float, cudaStream_t);               \
  template void layernorm_backward(E*, float*, float*, const E*, const E*, const E*, const float*, \
                                   const float*, int, int, cudaStream_t, bool);
TRIAD_INSTANTIATE(float)
TRIAD_INSTANTIATE(bf16)
TRIAD_INSTANTIATE(f16)
#undef TRIAD_INSTANTIATE

}  // namespace triad::kernels::cuda
