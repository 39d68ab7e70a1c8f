// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3),
// evaluated as x * sigmoid(2u) exactly as kernels/cpu/gelu.cpp does (same cap on exp(-2u)).
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

struct GeluForward {
  float* out;
  const float* inp;
  __device__ void scalar(size_t i) const { out[i] = gelu(inp[i]); }
  __device__ void vec4(size_t i) const {
    const float4 x = detail::load4(inp + i);
    detail::store4(out + i, make_float4(gelu(x.x), gelu(x.y), gelu(x.z), gelu(x.w)));
  }
};

struct GeluBackward {
  float* dinp;
  const float* inp;
  const float* dout;
  __device__ void scalar(size_t i) const { dinp[i] += gelu_grad(inp[i]) * dout[i]; }
  __device__ void vec4(size_t i) const {
    const float4 x = detail::load4(inp + i), d = detail::load4(dout + i);
    float4 g = detail::load4(dinp + i);
    g.x += gelu_grad(x.x) * d.x;
    g.y += gelu_grad(x.y) * d.y;
    g.z += gelu_grad(x.z) * d.z;
    g.w += gelu_grad(x.w) * d.w;
    detail::store4(dinp + i, g);
  }
};

}  // namespace

void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t stream) {
  detail::launch_elementwise("gelu_forward", GeluForward{out, inp}, n,
                             detail::vec_split(n, out, inp), stream);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n,
                   cudaStream_t stream) {
  detail::launch_elementwise("gelu_backward", GeluBackward{dinp, inp, dout}, n,
                             detail::vec_split(n, dinp, inp, dout), stream);
}

}  // namespace triad::kernels::cuda
