// Residual connection: out = a + b (out may alias a or b: every element is read and written by
// the same thread, in that order); da += dout, db += dout.
#include <cstddef>

#include "common.cuh"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda {
namespace {

struct ResidualForward {
  float* out;
  const float* a;
  const float* b;
  __device__ void scalar(size_t i) const { out[i] = a[i] + b[i]; }
  __device__ void vec4(size_t i) const {
    const float4 x = detail::load4(a + i), y = detail::load4(b + i);
    detail::store4(out + i, make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w));
  }
};

struct ResidualBackward {
  float* da;
  float* db;
  const float* dout;
  __device__ void scalar(size_t i) const {
    const float d = dout[i];
    da[i] += d;
    db[i] += d;
  }
  __device__ void vec4(size_t i) const {
    const float4 d = detail::load4(dout + i);
    float4 x = detail::load4(da + i), y = detail::load4(db + i);
    x.x += d.x, x.y += d.y, x.z += d.z, x.w += d.w;
    y.x += d.x, y.y += d.y, y.z += d.z, y.w += d.w;
    detail::store4(da + i, x);
    detail::store4(db + i, y);
  }
};

}  // namespace

void residual_forward(float* out, const float* a, const float* b, size_t n, cudaStream_t stream) {
  detail::launch_elementwise("residual_forward", ResidualForward{out, a, b}, n,
                             detail::vec_split(n, out, a, b), stream);
}

void residual_backward(float* da, float* db, const float* dout, size_t n, cudaStream_t stream) {
  detail::launch_elementwise("residual_backward", ResidualBackward{da, db, dout}, n,
                             detail::vec_split(n, da, db, dout), stream);
}

}  // namespace triad::kernels::cuda
