// Rotary position embedding, "rotate half" form (GPT-NeoX / LLaMA), in place on a strided
// (B,T,H,D) view, as kernels/cpu/rope.cpp: the (T, D/2) cos/sin table is computed in double
// and rounded once, so both devices rotate by the same float angles. bf16 views rotate in
// float and round once per element.
#include <cstddef>
#include <cstdint>

#include "common.cuh"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda {
namespace {

__global__ void rope_table_kernel(float* cos_t, float* sin_t, int T, int D, double base,
                                  int64_t pos0) {
  const int half = D / 2;
  const size_t total = size_t(T) * half;
  for (size_t j = size_t(blockIdx.x) * blockDim.x + threadIdx.x; j < total;
       j += size_t(gridDim.x) * blockDim.x) {
    const int t = static_cast<int>(j / half), i = static_cast<int>(j % half);
    const double angle = double(pos0 + t) * pow(base, -2.0 * i / D);
    cos_t[j] = float(cos(angle));
    sin_t[j] = float(sin(angle));
  }
}

// sign = +1 rotates by +angle (forward), -1 by -angle (backward: the transpose).
template <class E>
__global__ void rope_apply_kernel(E* x, const float* cos_t, const float* sin_t, int T, int H,
                                  int half, int64_t sb, int64_t st, int64_t sh, float sign,
                                  size_t total) {
  for (size_t j = size_t(blockIdx.x) * blockDim.x + threadIdx.x; j < total;
       j += size_t(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(j % half);
    const size_t rest = j / half;
    const int h = static_cast<int>(rest % H);
    const size_t bt = rest / H;
    const int t = static_cast<int>(bt % T);
    const int64_t b = static_cast<int64_t>(bt / T);
    E* x1 = x + b * sb + t * st + h * sh;
    const size_t k = size_t(t) * half + i;
    const float c = cos_t[k], si = sign * sin_t[k];
    const float a = detail::to_float(x1[i]), q = detail::to_float(x1[i + half]);
    x1[i] = detail::from_float<E>(a * c - q * si);
    x1[i + half] = detail::from_float<E>(q * c + a * si);
  }
}

template <class E>
void rope_apply(E* x, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh, double base,
                int64_t pos0, float sign, cudaStream_t stream, const char* name) {
  const int half = D / 2;
  if (B <= 0 || T <= 0 || H <= 0 || half <= 0) return;
  const size_t table = size_t(T) * half;
  detail::Scratch scratch(2 * table * sizeof(float), stream, name);
  float* cos_t = scratch.as<float>();
  float* sin_t = cos_t + table;
  rope_table_kernel<<<detail::grid_for(table), detail::kThreads, 0, stream>>>(cos_t, sin_t, T, D,
                                                                              base, pos0);
  detail::check_launch(name);
  const size_t total = size_t(B) * T * H * half;
  rope_apply_kernel<E><<<detail::grid_for(total), detail::kThreads, 0, stream>>>(
      x, cos_t, sin_t, T, H, half, sb, st, sh, sign, total);
  detail::check_launch(name);
}

}  // namespace

template <class E>
void rope_forward(E* x, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh, double base,
                  cudaStream_t stream, int64_t pos0) {
  rope_apply(x, B, T, H, D, sb, st, sh, base, pos0, 1.0f, stream, "rope_forward");
}

template <class E>
void rope_backward(E* dx, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh,
                   double base, cudaStream_t stream, int64_t pos0) {
  rope_apply(dx, B, T, H, D, sb, st, sh, base, pos0, -1.0f, stream, "rope_backward");
}

#define TRIAD_INSTANTIATE(E)                                                             \
  template void rope_forward(E*, int, int, int, int, int64_t, int64_t, int64_t, double,  \
                             cudaStream_t, int64_t);                                     \
  template void rope_backward(E*, int, int, int, int, int64_t, int64_t, int64_t, double, \
                              cudaStream_t, int64_t);
TRIAD_INSTANTIATE(float)
TRIAD_INSTANTIATE(bf16)
TRIAD_INSTANTIATE(f16)
#undef TRIAD_INSTANTIATE

}  // namespace triad::kernels::cuda
