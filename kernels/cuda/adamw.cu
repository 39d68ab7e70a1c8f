// AdamW with PyTorch's (torch.optim.AdamW) order of operations, as kernels/cpu/adamw.cpp: decay
// first (p *= 1 - lr wd), then the bias-corrected step with denom = sqrt(v) / sqrt(1 - b2^t)
// + eps. The per-step scalars are computed on the host in double and rounded once. The mixed
// precision overload also writes the new parameter, rounded to bf16, into the compute copy in
// the same pass; `convert` is that rounding on its own.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common.cuh"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda {
namespace {

// q[0..4) = round-to-nearest-even(p): one 8-byte store where q is 8-byte aligned.
__device__ inline void store_bf16x4(bf16* q, float4 p, bool aligned8) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(p.x, p.y), hi = __floats2bfloat162_rn(p.z, p.w);
  if (aligned8) {
    uint2 w;
    memcpy(&w.x, &lo, sizeof(lo));
    memcpy(&w.y, &hi, sizeof(hi));
    *reinterpret_cast<uint2*>(q) = w;
  } else {
    q[0] = lo.x, q[1] = lo.y, q[2] = hi.x, q[3] = hi.y;
  }
}

// Whether the bf16 elements that go with the float4 groups of `s` (those at s.head + 4j) start
// 8-byte aligned in `dst`.
bool bf16x4_aligned(const bf16* dst, const detail::VecSplit& s) {
  return s.vec && ((reinterpret_cast<uintptr_t>(dst) + 2 * s.head) & 7u) == 0;
}

// kCompute: also compute[i] = bf16(new params[i]).
template <bool kCompute>
struct AdamW {
  static constexpr int kVec = 4;
  float* params;
  const float* grads;
  float* m;
  float* v;
  float beta1, beta2, one_minus_b1, one_minus_b2, eps, decay, neg_step, bc2_sqrt;
  bf16* compute;
  bool compute_aligned8;

  __device__ void one(float& p, float g, float& mi, float& vi) const {
    mi = beta1 * mi + one_minus_b1 * g;
    vi = beta2 * vi + one_minus_b2 * g * g;
    const float denom = sqrtf(vi) / bc2_sqrt + eps;
    p = p * decay;
    p = p + neg_step * mi / denom;  // addcdiv_'s order
  }
  __device__ void scalar(size_t i) const {
    float p = params[i], mi = m[i], vi = v[i];
    one(p, grads[i], mi, vi);
    params[i] = p;
    m[i] = mi;
    v[i] = vi;
    if constexpr (kCompute) compute[i] = __float2bfloat16_rn(p);
  }
  __device__ void vec(size_t i) const {
    float4 p = detail::load4(params + i), mi = detail::load4(m + i), vi = detail::load4(v + i);
    const float4 g = detail::load4(grads + i);
    one(p.x, g.x, mi.x, vi.x);
    one(p.y, g.y, mi.y, vi.y);
    one(p.z, g.z, mi.z, vi.z);
    one(p.w, g.w, mi.w, vi.w);
    detail::store4(params + i, p);
    detail::store4(m + i, mi);
    detail::store4(v + i, vi);
    if constexpr (kCompute) store_bf16x4(compute + i, p, compute_aligned8);
  }
};

template <bool kCompute>
void update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
            float beta2, float eps, float weight_decay, int t, bf16* compute, cudaStream_t stream) {
  const double bc1 = 1.0 - std::pow(double(beta1), t);
  const double bc2 = 1.0 - std::pow(double(beta2), t);
  const detail::VecSplit s = detail::vec_split(n, params, grads, m, v);
  AdamW<kCompute> op{params,
                     grads,
                     m,
                     v,
                     beta1,
                     beta2,
                     float(1.0 - double(beta1)),
                     float(1.0 - double(beta2)),
                     eps,
                     float(1.0 - double(lr) * double(weight_decay)),
                     float(-(double(lr) / bc1)),
                     float(std::sqrt(bc2)),
                     compute,
                     kCompute && bf16x4_aligned(compute, s)};
  detail::launch_elementwise("adamw_update", op, n, s, stream);
}

struct Convert {
  static constexpr int kVec = 4;
  bf16* dst;
  const float* src;
  bool dst_aligned8;
  __device__ void scalar(size_t i) const { dst[i] = __float2bfloat16_rn(src[i]); }
  __device__ void vec(size_t i) const {
    store_bf16x4(dst + i, detail::load4(src + i), dst_aligned8);
  }
};

}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int t,
                  cudaStream_t stream) {
  update<false>(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t, nullptr, stream);
}

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int t, bf16* compute,
                  cudaStream_t stream) {
  update<true>(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t, compute, stream);
}

void convert(bf16* dst, const float* src, size_t n, cudaStream_t stream) {
  const detail::VecSplit s = detail::vec_split(n, src);
  detail::launch_elementwise("convert", Convert{dst, src, bf16x4_aligned(dst, s)}, n, s, stream);
}

}  // namespace triad::kernels::cuda
