// Residual connection: out = a + b (out may alias a or b: every element is read and written by
// the same thread, in that order); da += dout, db += dout. The forward also takes bf16 storage
// (common.cuh): the sum is float, rounded once.
#include <cstddef>

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

template <class T>
void forward(T* out, const T* a, const T* b, size_t n, cudaStream_t stream) {
  detail::launch_elementwise("residual_forward", ResidualForward<T>{out, a, b}, n,
                             detail::vec_split(n, out, a, b), stream);
}

}  // namespace

void residual_forward(float* out, const float* a, const float* b, size_t n, cudaStream_t stream) {
  forward(out, a, b, n, stream);
}
void residual_forward(bf16* out, const bf16* a, const bf16* b, size_t n, cudaStream_t stream) {
  forward(out, a, b, n, stream);
}

void residual_backward(float* da, float* db, const float* dout, size_t n, cudaStream_t stream) {
  detail::launch_elementwise("residual_backward", ResidualBackward{da, db, dout}, n,
                             detail::vec_split(n, da, db, dout), stream);
}

}  // namespace triad::kernels::cuda
