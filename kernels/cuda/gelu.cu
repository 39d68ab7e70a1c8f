// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3),
// evaluated as x * sigmoid(2u) exactly as kernels/cpu/gelu.cpp does (same cap on exp(-2u)).
// fp32 and bf16 storage (common.cuh): the arithmetic is float either way.
#include <cstddef>

#include "common.cuh"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda {
namespace {

constexpr float kScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kCubic = 0.044715f;
// exp(-2u) is capped: beyond it sigmoid(2u) < 2e-35, and the cap keeps exp finite so the
// backward's e * sigmoid^2 never becomes inf * 0.
constexpr float kMaxExp = 80.0f;

__device__ inline float gelu(float x) {
  const float u = kScale * (x + kCubic * x * x * x);
  const float e = expf(fminf(-2.0f * u, kMaxExp));
  return x / (1.0f + e);
}

// d/dx [x sig(2u)] = sig + x * 2 sig (1 - sig) du/dx, with 1 - sig = e sig (no cancellation).
// e * sig = e / (1 + e) <= 1 is formed first: x * 2 * e would overflow for x < -3000.
__device__ inline float gelu_grad(float x) {
  const float u = kScale * (x + kCubic * x * x * x);
  const float e = expf(fminf(-2.0f * u, kMaxExp));
  const float sig = 1.0f / (1.0f + e);
  const float du = kScale * (1.0f + 3.0f * kCubic * x * x);
  return sig + x * 2.0f * (e * sig) * sig * du;
}

template <class T>
struct GeluForward {
  static constexpr int kVec = detail::kVecOf<T>;
  T* out;
  const T* inp;
  __device__ void scalar(size_t i) const {
    out[i] = detail::from_float<T>(gelu(detail::to_float(inp[i])));
  }
  __device__ void vec(size_t i) const {
    float x[kVec];
    detail::load_vec(inp + i, x);
    for (int k = 0; k < kVec; ++k) x[k] = gelu(x[k]);
    detail::store_vec(out + i, x);
  }
};

// accumulate = false: dinp is overwritten, never read.
template <class T>
struct GeluBackward {
  static constexpr int kVec = detail::kVecOf<T>;
  T* dinp;
  const T* inp;
  const T* dout;
  bool accumulate;
  __device__ void scalar(size_t i) const {
    float g = accumulate ? detail::to_float(dinp[i]) : 0.0f;
    g += gelu_grad(detail::to_float(inp[i])) * detail::to_float(dout[i]);
    dinp[i] = detail::from_float<T>(g);
  }
  __device__ void vec(size_t i) const {
    float x[kVec], d[kVec], g[kVec];
    detail::load_vec(inp + i, x);
    detail::load_vec(dout + i, d);
    if (accumulate)
      detail::load_vec(dinp + i, g);
    else
      for (int k = 0; k < kVec; ++k) g[k] = 0.0f;
    for (int k = 0; k < kVec; ++k) g[k] += gelu_grad(x[k]) * d[k];
    detail::store_vec(dinp + i, g);
  }
};

template <class T>
void forward(T* out, const T* inp, size_t n, cudaStream_t stream) {
  detail::launch_elementwise("gelu_forward", GeluForward<T>{out, inp}, n,
                             detail::vec_split(n, out, inp), stream);
}

template <class T>
void backward(T* dinp, const T* inp, const T* dout, size_t n, bool accumulate,
              cudaStream_t stream) {
  detail::launch_elementwise("gelu_backward", GeluBackward<T>{dinp, inp, dout, accumulate}, n,
                             detail::vec_split(n, dinp, inp, dout), stream);
}

}  // namespace

template <class E>
void gelu_forward(E* out, const E* inp, size_t n, cudaStream_t stream) {
  forward(out, inp, n, stream);
}

template <class E>
void gelu_backward(E* dinp, const E* inp, const E* dout, size_t n, cudaStream_t stream,
                   bool accumulate) {
  backward(dinp, inp, dout, n, accumulate, stream);
}

#define TRIAD_INSTANTIATE(E)                                      \
  template void gelu_forward(E*, const E*, size_t, cudaStream_t); \
  template void gelu_backward(E*, const E*, const E*, size_t, cudaStream_t, bool);
TRIAD_INSTANTIATE(float)
TRIAD_INSTANTIATE(bf16)
TRIAD_INSTANTIATE(f16)
#undef TRIAD_INSTANTIATE

}  // namespace triad::kernels::cuda
