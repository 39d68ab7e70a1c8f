// AdamW with PyTorch's (torch.optim.AdamW) order of operations, as kernels/cpu/adamw.cpp: decay
// first (p *= 1 - lr wd), then the bias-corrected step with denom = sqrt(v) / sqrt(1 - b2^t)
// + eps. The per-step scalars are computed on the host in double and rounded once.
#include <cmath>
#include <cstddef>

#include "common.cuh"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda {
namespace {

struct AdamW {
  float* params;
  const float* grads;
  float* m;
  float* v;
  float beta1, beta2, one_minus_b1, one_minus_b2, eps, decay, neg_step, bc2_sqrt;

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
  }
  __device__ void vec4(size_t i) const {
    float4 p = detail::load4(params + i), mi = detail::load4(m + i), vi = detail::load4(v + i);
    const float4 g = detail::load4(grads + i);
    one(p.x, g.x, mi.x, vi.x);
    one(p.y, g.y, mi.y, vi.y);
    one(p.z, g.z, mi.z, vi.z);
    one(p.w, g.w, mi.w, vi.w);
    detail::store4(params + i, p);
    detail::store4(m + i, mi);
    detail::store4(v + i, vi);
  }
};

}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int t,
                  cudaStream_t stream) {
  const double bc1 = 1.0 - std::pow(double(beta1), t);
  const double bc2 = 1.0 - std::pow(double(beta2), t);
  AdamW op{params,
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
           float(std::sqrt(bc2))};
  detail::launch_elementwise("adamw_update", op, n, detail::vec_split(n, params, grads, m, v),
                             stream);
}

}  // namespace triad::kernels::cuda
