// LayerNorm over the last dimension, one warp per row (llm.c's layout): lanes stride over the
// channels (coalesced), and warp shuffles reduce. The parameter gradients are deterministic
// column sums (column_sums.cuh), as the CPU's.
#include <cstddef>

#include "column_sums.cuh"
#include "common.cuh"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda {
namespace {

constexpr int kRowsPerBlock = detail::kThreads / 32;

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int N, int C,
                                         float eps) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= N) return;  // the whole warp leaves together
  const float* x = inp + size_t(row) * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) sum += x[c];
  const float m = detail::warp_sum(sum) / float(C);
  // Two passes: the variance about the mean does not cancel the way E[x^2] - m^2 does.
  float var = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = x[c] - m;
    var += d * d;
  }
  const float s = 1.0f / sqrtf(detail::warp_sum(var) / float(C) + eps);
  float* o = out + size_t(row) * C;
  for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * s * weight[c] + bias[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

__global__ void layernorm_backward_kernel(float* dinp, const float* dout, const float* inp,
                                          const float* weight, const float* mean, const float* rstd,
                                          int N, int C) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= N) return;
  const float* x = inp + size_t(row) * C;
  const float* d = dout + size_t(row) * C;
  const float m = mean[row], s = rstd[row];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float dnorm = weight[c] * d[c];
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * (x[c] - m) * s;
  }
  const float dnorm_mean = detail::warp_sum(dnorm_sum) / float(C);
  const float dnorm_norm_mean = detail::warp_sum(dnorm_norm_sum) / float(C);
  float* di = dinp + size_t(row) * C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (x[c] - m) * s;
    di[c] += (weight[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

// acc[0] -> dbias, acc[1] -> dweight.
struct ParamGradTerm {
  static constexpr int kSums = 2;
  const float* dout;
  const float* inp;
  const float* mean;
  const float* rstd;
  int C;
  __device__ void add(int n, int c, double* acc) const {
    const size_t i = size_t(n) * C + c;
    const float d = dout[i];
    acc[0] += d;
    acc[1] += d * (inp[i] - mean[n]) * rstd[n];
  }
};

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  layernorm_forward_kernel<<<static_cast<unsigned>(detail::ceil_div(N, kRowsPerBlock)),
                             detail::kThreads, 0, stream>>>(out, mean, rstd, inp, weight, bias, N,
                                                            C, eps);
  detail::check_launch("layernorm_forward");
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  layernorm_backward_kernel<<<static_cast<unsigned>(detail::ceil_div(N, kRowsPerBlock)),
                              detail::kThreads, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, N,
                                                             C);
  detail::check_launch("layernorm_backward");
  if (!dweight && !dbias) return;
  detail::ColumnDst<2> dst{{dbias, dweight}};
  detail::add_column_sums(dst, ParamGradTerm{dout, inp, mean, rstd, C}, N, C, stream,
                          "layernorm_backward dweight/dbias");
}

}  // namespace triad::kernels::cuda
