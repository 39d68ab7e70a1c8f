// Shared pieces of the CUDA kernels: error checks, launch shapes, warp/block reductions, the
// element types (fp32, bf16 and fp16: loaded into float, computed in float, stored back as the
// type), the vectorised element-wise driver and stream-ordered scratch memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace triad::kernels::cuda::detail {

// --- errors -------------------------------------------------------------------------------

[[noreturn]] inline void fail(const char* what, const char* name, const char* why) {
  throw std::runtime_error(std::string(what) + " " + name + ": " + why);
}

// After every launch: a bad configuration or a sticky error from earlier work surfaces here.
inline void check_launch(const char* name) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail("cuda kernel", name, cudaGetErrorString(e));
}

inline void check_cuda(cudaError_t e, const char* name) {
  if (e != cudaSuccess) fail("cuda", name, cudaGetErrorString(e));
}

// --- launch shapes ------------------------------------------------------------------------

constexpr int kThreads = 256;
// Grid-stride kernels never need more blocks than this to fill an H100 many times over.
constexpr size_t kMaxBlocks = 8192;

inline int grid_for(size_t work, int threads = kThreads) {
  size_t blocks = (work + threads - 1) / threads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<int>(blocks < 1 ? 1 : blocks);
}

__host__ __device__ inline size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}

// --- reductions ---------------------------------------------------------------------------

template <class T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Reduces v over the block with warp_reduce (warp_sum, warp_max), in a fixed order (so
// deterministic); every thread gets the result. `none` is the reduction's identity. `shared`
// holds at least 32 values; blockDim.x is a multiple of 32. Ends with a barrier-free read of
// shared, so a second call needs a __syncthreads() before it.
template <class T, class WarpReduce>
__device__ inline T block_reduce(T v, T* shared, T none, WarpReduce warp_reduce) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = warp_reduce(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : none;
  return warp_reduce(v);
}

template <class T>
__device__ inline T block_sum(T v, T* shared) {
  return block_reduce(v, shared, T(0), [](T x) { return warp_sum(x); });
}

__device__ inline float block_max(float v, float* shared) {
  return block_reduce(v, shared, -INFINITY, [](float x) { return warp_max(x); });
}

// --- element types ------------------------------------------------------------------------
//
// Kernels are templated on the storage type T of their activations (float, bf16 or f16, IEEE
// half): every value is read into a float, the arithmetic is float, and the result is rounded
// once (to nearest even) when stored as T. For T = float the conversions are the identity, so
// the fp32 kernels compile to what they were before the templates.

using bf16 = __nv_bfloat16;
using f16 = __half;

__device__ inline float to_float(float x) {
  return x;
}
__device__ inline float to_float(bf16 x) {
  return __bfloat162float(x);
}
__device__ inline float to_float(f16 x) {
  return __half2float(x);
}

template <class T>
__device__ inline T from_float(float x);
template <>
__device__ inline float from_float<float>(float x) {
  return x;
}
template <>
__device__ inline bf16 from_float<bf16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ inline f16 from_float<f16>(float x) {
  return __float2half_rn(x);
}

// Two 16-bit elements in one 32-bit word: the lower-addressed element is the low half (.x).
template <class H>
__device__ inline uint32_t pack2(float lo, float hi);
template <>
__device__ inline uint32_t pack2<bf16>(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  uint32_t w;
  memcpy(&w, &h, sizeof(h));
  return w;
}
template <>
__device__ inline uint32_t pack2<f16>(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  uint32_t w;
  memcpy(&w, &h, sizeof(h));
  return w;
}
__device__ inline float2 unpack2(uint32_t w, bf16) {
  __nv_bfloat162 h;
  memcpy(&h, &w, sizeof(h));
  return __bfloat1622float2(h);
}
__device__ inline float2 unpack2(uint32_t w, f16) {
  __half2 h;
  memcpy(&h, &w, sizeof(h));
  return __half22float2(h);
}

// Elements of T in one 16-byte vector: 4 floats or 8 16-bit elements.
template <class T>
constexpr int kVecOf = static_cast<int>(16 / sizeof(T));

__device__ inline float4 load4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ inline void store4(float* p, float4 v) {
  *reinterpret_cast<float4*>(p) = v;
}

// x[0..kVecOf<T>) = the 16 bytes at p (16-byte aligned), as floats.
__device__ inline void load_vec(const float* p, float (&x)[4]) {
  const float4 v = load4(p);
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
template <class H>
__device__ inline void load_vec(const H* p, float (&x)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  for (int k = 0; k < 4; ++k) {
    const float2 f = unpack2(w[k], H{});
    x[2 * k] = f.x;
    x[2 * k + 1] = f.y;
  }
}
__device__ inline void store_vec(float* p, const float (&x)[4]) {
  store4(p, make_float4(x[0], x[1], x[2], x[3]));
}
template <class H>
__device__ inline void store_vec(H* p, const float (&x)[8]) {
  uint32_t w[4];
  for (int k = 0; k < 4; ++k) w[k] = pack2<H>(x[2 * k], x[2 * k + 1]);
  *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

// --- vectorised element-wise driver -------------------------------------------------------
//
// Arena offsets are arbitrary element counts, so a 16-byte load is legal only where the
// pointer is 16-byte aligned. When every pointer of an operation has the same element type T
// and the same address mod 16, the first `head` (< W) elements run scalar, the middle as
// 16-byte vectors of W = kVecOf<T> elements and the last (< W) scalar; otherwise everything
// runs scalar. Op provides `static constexpr int kVec` (= W), scalar(i) and vec(i) (i the first
// of W elements, 16-byte aligned).

struct VecSplit {
  bool vec = false;
  size_t head = 0;  // scalar elements before the first aligned one
  size_t nvec = 0;  // W-element groups after the head
};

inline unsigned misalign(const void* p) {
  return static_cast<unsigned>(reinterpret_cast<uintptr_t>(p) & 15u);
}

template <class T, class... P>
VecSplit vec_split(size_t n, const T* first, const P*... rest) {
  static_assert((std::is_same_v<T, P> && ...), "vec_split: operands of one element type");
  constexpr unsigned kSize = sizeof(T), kW = 16 / sizeof(T);
  VecSplit s;
  const unsigned m = misalign(first);
  if (m % kSize != 0 || ((misalign(rest) != m) || ...)) return s;
  s.vec = true;
  s.head = ((16u - m) & 15u) / kSize;
  if (s.head > n) s.head = n;
  s.nvec = (n - s.head) / kW;
  return s;
}

template <class Op>
__global__ void elementwise_kernel(Op op, size_t n, VecSplit s) {
  constexpr int W = Op::kVec;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  if (!s.vec) {
    for (size_t i = tid; i < n; i += stride) op.scalar(i);
    return;
  }
  const size_t tail0 = s.head + W * s.nvec;
  if (tid < s.head) op.scalar(tid);
  if (tid < n - tail0) op.scalar(tail0 + tid);
  for (size_t j = tid; j < s.nvec; j += stride) op.vec(s.head + W * j);
}

template <class Op>
void launch_elementwise(const char* name, const Op& op, size_t n, VecSplit s, cudaStream_t stream) {
  if (n == 0) return;
  const size_t work = s.vec ? s.nvec + Op::kVec : n;
  elementwise_kernel<<<grid_for(work), kThreads, 0, stream>>>(op, n, s);
  check_launch(name);
}

// --- scratch ------------------------------------------------------------------------------

// Stream-ordered device scratch (cudaMallocAsync / cudaFreeAsync from the device's default
// pool): valid for work queued on `stream` between construction and destruction, and never
// shared between calls or streams, so concurrent calls on different streams cannot race.
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t stream, const char* name) : stream_(stream) {
    if (bytes) check_cuda(cudaMallocAsync(&ptr_, bytes, stream), name);
  }
  ~Scratch() {
    if (ptr_) cudaFreeAsync(ptr_, stream_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace triad::kernels::cuda::detail
