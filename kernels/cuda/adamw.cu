// AdamW with PyTorch's (torch.optim.AdamW) order of operations, as kernels/cpu/adamw.cpp: decay
// first (p *= 1 - lr wd), then the bias-corrected step with denom = sqrt(v) / sqrt(1 - b2^t)
// + eps. The per-step scalars are computed on the host in double and rounded once. The mixed
// precision overload also writes the new parameter, rounded to the compute copy's type H (bf16
// or fp16), into that copy in the same pass; `convert` is that rounding on its own.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common.cuh"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda {
namespace {

// q[0..4) = round-to-nearest-even(p), H a 16-bit type: one 8-byte store where q is 8-byte
// aligned.
template <class H>
__device__ inline void store_half4(H* q, float4 p, bool aligned8) {
  if (aligned8) {
    *reinterpret_cast<uint2*>(q) =
        make_uint2(detail::pack2<H>(p.x, p.y), detail::pack2<H>(p.z, p.w));
  } else {
    q[0] = detail::from_float<H>(p.x), q[1] = detail::from_float<H>(p.y);
    q[2] = detail::from_float<H>(p.z), q[3] = detail::from_float<H>(p.w);
  }
}

// Whether the 16-bit elements that go with the float4 groups of `s` (those at s.head + 4j)
// start 8-byte aligned in `dst`.
bool half4_aligned(const void* dst, const detail::VecSplit& s) {
  return s.vec && ((reinterpret_cast<uintptr_t>(dst) + 2 * s.head) & 7u) == 0;
}

// p *= decay_factor before the step: 1 - lr wd, rounded once from double.
float decay_factor(float lr, float weight_decay) {
  return float(1.0 - double(lr) * double(weight_decay));
}

// kCompute: also compute[i] = H(new params[i]).
template <class H, bool kCompute>
struct AdamW {
  static constexpr int kVec = 4;
  float* params;
  const float* grads;
  float* m;
  float* v;
  float beta1, beta2, one_minus_b1, one_minus_b2, eps, decay, neg_step, bc2_sqrt;
  H* compute;
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
    if constexpr (kCompute) compute[i] = detail::from_float<H>(p);
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
    if constexpr (kCompute) store_half4(compute + i, p, compute_aligned8);
  }
};

// The scalars every element's update shares; `decay` is per tensor.
template <class H, bool kCompute>
AdamW<H, kCompute> adamw_op(float* params, const float* grads, float* m, float* v, float lr,
                            float beta1, float beta2, float eps, float weight_decay, int t,
                            H* compute) {
  const double bc1 = 1.0 - std::pow(double(beta1), t);
  const double bc2 = 1.0 - std::pow(double(beta2), t);
  return AdamW<H, kCompute>{params,
                            grads,
                            m,
                            v,
                            beta1,
                            beta2,
                            float(1.0 - double(beta1)),
                            float(1.0 - double(beta2)),
                            eps,
                            decay_factor(lr, weight_decay),
                            float(-(double(lr) / bc1)),
                            float(std::sqrt(bc2)),
                            compute,
                            false};
}

template <class H, bool kCompute>
void update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
            float beta2, float eps, float weight_decay, int t, H* compute, cudaStream_t stream) {
  const detail::VecSplit s = detail::vec_split(n, params, grads, m, v);
  AdamW<H, kCompute> op =
      adamw_op<H, kCompute>(params, grads, m, v, lr, beta1, beta2, eps, weight_decay, t, compute);
  op.compute_aligned8 = kCompute && half4_aligned(compute, s);
  detail::launch_elementwise("adamw_update", op, n, s, stream);
}

// --- many tensors in one launch ------------------------------------------------------------

// One tensor of a multi-tensor launch: its elements walked as adamw_update's launch walks them
// (`head` scalars, `nvec` float4 groups, then the scalar tail), `items` of them in all, from
// block `first_block` on.
struct SegPlan {
  size_t begin = 0;
  size_t head = 0, nvec = 0, items = 0;
  float decay = 1.0f;
  bool vec = false, aligned8 = false;
  uint32_t first_block = 0;
};
constexpr int kMaxSegs = 64;  // 64 plans, 3 KiB: within the 4 KiB of a launch's parameters
constexpr int kItemsPerThread = 4;
constexpr size_t kItemsPerBlock = size_t(detail::kThreads) * kItemsPerThread;
struct SegTable {
  SegPlan seg[kMaxSegs];
  int count = 0;
};

// Each block finds its tensor (the last whose first_block it reaches) and updates its part of
// it with the same per-element arithmetic as adamw_update: the same bits.
template <class H, bool kCompute>
__global__ void __launch_bounds__(detail::kThreads)
    adamw_segments_kernel(AdamW<H, kCompute> base, const __grid_constant__ SegTable table) {
  int lo = 0, hi = table.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table.seg[mid].first_block <= blockIdx.x)
      lo = mid;
    else
      hi = mid - 1;
  }
  const SegPlan& s = table.seg[lo];
  AdamW<H, kCompute> op = base;
  op.params += s.begin, op.grads += s.begin, op.m += s.begin, op.v += s.begin;
  if constexpr (kCompute) op.compute += s.begin;
  op.decay = s.decay;
  op.compute_aligned8 = s.aligned8;
  const size_t first = size_t(blockIdx.x - s.first_block) * kItemsPerBlock + threadIdx.x;
  for (int r = 0; r < kItemsPerThread; ++r) {
    const size_t item = first + size_t(r) * detail::kThreads;
    if (item >= s.items) return;
    if (!s.vec || item < s.head)
      op.scalar(item);
    else if (item < s.head + s.nvec)
      op.vec(s.head + 4 * (item - s.head));
    else
      op.scalar(s.head + 4 * s.nvec + (item - s.head - s.nvec));
  }
}

template <class H, bool kCompute>
void update_segments(float* params, const float* grads, float* m, float* v,
                     const AdamwSegment* segs, size_t count, float lr, float beta1, float beta2,
                     float eps, int t, H* compute, cudaStream_t stream) {
  const AdamW<H, kCompute> base =
      adamw_op<H, kCompute>(params, grads, m, v, lr, beta1, beta2, eps, 0.0f, t, compute);
  SegTable table;
  size_t blocks = 0;
  auto launch = [&] {
    if (table.count == 0) return;
    adamw_segments_kernel<H, kCompute>
        <<<static_cast<unsigned>(blocks), detail::kThreads, 0, stream>>>(base, table);
    detail::check_launch("adamw_update_segments");
    table.count = 0;
    blocks = 0;
  };
  for (size_t i = 0; i < count; ++i) {
    const AdamwSegment& g = segs[i];
    if (g.n == 0) continue;
    const size_t b = g.offset;
    const detail::VecSplit vs = detail::vec_split(g.n, params + b, grads + b, m + b, v + b);
    SegPlan p;
    p.begin = b;
    p.vec = vs.vec;
    p.head = vs.head;
    p.nvec = vs.nvec;
    p.items = vs.vec ? g.n - 3 * vs.nvec : g.n;
    p.decay = decay_factor(lr, g.weight_decay);
    p.aligned8 = kCompute && half4_aligned(compute + b, vs);
    const size_t need = detail::ceil_div(p.items, kItemsPerBlock);
    if (table.count == kMaxSegs || blocks + need > size_t(std::numeric_limits<int32_t>::max()))
      launch();
    p.first_block = static_cast<uint32_t>(blocks);
    table.seg[table.count++] = p;
    blocks += need;
  }
  launch();
}

template <class H>
struct Convert {
  static constexpr int kVec = 4;
  H* dst;
  const float* src;
  bool dst_aligned8;
  __device__ void scalar(size_t i) const { dst[i] = detail::from_float<H>(src[i]); }
  __device__ void vec(size_t i) const {
    store_half4(dst + i, detail::load4(src + i), dst_aligned8);
  }
};

}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int t,
                  cudaStream_t stream) {
  update<bf16, false>(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t, nullptr,
                      stream);
}

template <class H>
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int t, H* compute,
                  cudaStream_t stream) {
  update<H, true>(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t, compute, stream);
}

template <class H>
void adamw_update_segments(float* params, const float* grads, float* m, float* v,
                           const AdamwSegment* segs, size_t count, float lr, float beta1,
                           float beta2, float eps, int t, H* compute, cudaStream_t stream) {
  if (compute)
    update_segments<H, true>(params, grads, m, v, segs, count, lr, beta1, beta2, eps, t, compute,
                             stream);
  else  // no compute copy: the same instantiation whatever H
    update_segments<bf16, false>(params, grads, m, v, segs, count, lr, beta1, beta2, eps, t,
                                 nullptr, stream);
}

template <class H>
void convert(H* dst, const float* src, size_t n, cudaStream_t stream) {
  const detail::VecSplit s = detail::vec_split(n, src);
  detail::launch_elementwise("convert", Convert<H>{dst, src, half4_aligned(dst, s)}, n, s, stream);
}

#define TRIAD_INSTANTIATE(H)                                                                      \
  template void adamw_update(float*, const float*, float*, float*, size_t, float, float, float,   \
                             float, float, int, H*, cudaStream_t);                                \
  template void adamw_update_segments(float*, const float*, float*, float*, const AdamwSegment*,  \
                                      size_t, float, float, float, float, int, H*, cudaStream_t); \
  template void convert(H*, const float*, size_t, cudaStream_t);
TRIAD_INSTANTIATE(bf16)
TRIAD_INSTANTIATE(f16)
#undef TRIAD_INSTANTIATE

}  // namespace triad::kernels::cuda
