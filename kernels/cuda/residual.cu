// Residual connection: out = a + b (out may alias a or b: every element is read and written by
// the same thread, in that order); da += dout, db += dout. The forward also takes bf16 storage
// (common.cuh): the sum is float, rounded once. And a bias broadcast over rows (added after the
// tensor-parallel reduction of a row-parallel matmul), with matmul_backward's dbias sums.
#include <cstddef>

#include "column_sums.cuh"
#include "common.cuh"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda {
namespace {

template <class T>
struct ResidualForward {
  static constexpr int kVec = detail::kVecOf<T>;
  T* out;
  const T* a;
  const T* b;
  __device__ void scalar(size_t i) const {
    out[i] = detail::from_float<T>(detail::to_float(a[i]) + detail::to_float(b[i]));
  }
  __device__ void vec(size_t i) const {
    float x[kVec], y[kVec];
    detail::load_vec(a + i, x);
    detail::load_vec(b + i, y);
    for (int k = 0; k < kVec; ++k) x[k] += y[k];
    detail::store_vec(out + i, x);
  }
};

struct ResidualBackward {
  static constexpr int kVec = 4;
  float* da;
  float* db;
  const float* dout;
  __device__ void scalar(size_t i) const {
    const float d = dout[i];
    da[i] += d;
    db[i] += d;
  }
  __device__ void vec(size_t i) const {
    const float4 d = detail::load4(dout + i);
    float4 x = detail::load4(da + i), y = detail::load4(db + i);
    x.x += d.x, x.y += d.y, x.z += d.z, x.w += d.w;
    y.x += d.x, y.y += d.y, y.z += d.z, y.w += d.w;
    detail::store4(da + i, x);
    detail::store4(db + i, y);
  }
};

// out (N,C) += bias (C). Vectors only when C is a multiple of the width and out and bias are
// 16-byte aligned: a vector of out is then kVec columns of one row, an aligned vector of bias.
template <class T>
struct BiasForward {
  static constexpr int kVec = detail::kVecOf<T>;
  T* out;
  const T* bias;
  int C;
  __device__ void scalar(size_t i) const {
    out[i] = detail::from_float<T>(detail::to_float(out[i]) + detail::to_float(bias[i % C]));
  }
  __device__ void vec(size_t i) const {
    float x[kVec], y[kVec];
    detail::load_vec(out + i, x);
    detail::load_vec(bias + i % C, y);
    for (int k = 0; k < kVec; ++k) x[k] += y[k];
    detail::store_vec(out + i, x);
  }
};

template <class T>
void forward(T* out, const T* a, const T* b, size_t n, cudaStream_t stream) {
  detail::launch_elementwise("residual_forward", ResidualForward<T>{out, a, b}, n,
                             detail::vec_split(n, out, a, b), stream);
}

template <class T>
void bias_add(T* out, const T* bias, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  const size_t n = size_t(N) * C;
  const bool vec =
      C % detail::kVecOf<T> == 0 && detail::misalign(out) == 0 && detail::misalign(bias) == 0;
  detail::launch_elementwise("bias_forward", BiasForward<T>{out, bias, C}, n,
                             vec ? detail::vec_split(n, out) : detail::VecSplit{}, stream);
}

}  // namespace

template <class E>
void residual_forward(E* out, const E* a, const E* b, size_t n, cudaStream_t stream) {
  forward(out, a, b, n, stream);
}

template <class E>
void bias_forward(E* out, const E* bias, int N, int C, cudaStream_t stream) {
  bias_add(out, bias, N, C, stream);
}

template <class E>
void bias_backward(float* dbias, const E* dout, int N, int C, cudaStream_t stream) {
  detail::add_bias_grad(dbias, dout, N, C, stream, "bias_backward");
}

#define TRIAD_INSTANTIATE(E)                                                    \
  template void residual_forward(E*, const E*, const E*, size_t, cudaStream_t); \
  template void bias_forward(E*, const E*, int, int, cudaStream_t);             \
  template void bias_backward(float*, const E*, int, int, cudaStream_t);
TRIAD_INSTANTIATE(float)
TRIAD_INSTANTIATE(bf16)
TRIAD_INSTANTIATE(f16)
#undef TRIAD_INSTANTIATE

void residual_backward(float* da, float* db, const float* dout, size_t n, cudaStream_t stream) {
  detail::launch_elementwise("residual_backward", ResidualBackward{da, db, dout}, n,
                             detail::vec_split(n, da, db, dout), stream);
}

}  // namespace triad::kernels::cuda
