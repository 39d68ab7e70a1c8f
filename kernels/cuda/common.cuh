// Shared pieces of the CUDA kernels: error checks, launch shapes, warp/block reductions, the
// vectorised element-wise driver and stream-ordered scratch memory.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

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

// Sum over the block, in a fixed order (so deterministic); every thread gets the result.
// `shared` holds at least 32 values; blockDim.x is a multiple of 32. Ends with a barrier-free
// read of shared, so a second call needs a __syncthreads() before it.
template <class T>
__device__ inline T block_sum(T v, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : T(0);
  return warp_sum(v);
}

// --- vectorised element-wise driver -------------------------------------------------------
//
// Arena offsets are arbitrary element counts, so a float4 load is legal only where the pointer
// is 16-byte aligned. When every pointer of an operation has the same address mod 16, the
// first `head` (< 4) elements run scalar, the middle as float4 and the last (< 4) scalar;
// otherwise everything runs scalar. Op provides scalar(i) and vec4(i) (i 16-byte aligned).

struct VecSplit {
  bool vec = false;
  size_t head = 0;  // scalar elements before the first aligned one
  size_t nvec = 0;  // float4 groups after the head
};

inline unsigned misalign(const void* p) {
  return static_cast<unsigned>(reinterpret_cast<uintptr_t>(p) & 15u);
}

template <class... P>
VecSplit vec_split(size_t n, const float* first, const P*... rest) {
  VecSplit s;
  const unsigned m = misalign(first);
  if (m % 4 != 0 || ((misalign(rest) != m) || ...)) return s;
  s.vec = true;
  s.head = ((16u - m) & 15u) / 4;
  if (s.head > n) s.head = n;
  s.nvec = (n - s.head) / 4;
  return s;
}

template <class Op>
__global__ void elementwise_kernel(Op op, size_t n, VecSplit s) {
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  if (!s.vec) {
    for (size_t i = tid; i < n; i += stride) op.scalar(i);
    return;
  }
  const size_t tail0 = s.head + 4 * s.nvec;
  if (tid < s.head) op.scalar(tid);
  if (tid < n - tail0) op.scalar(tail0 + tid);
  for (size_t j = tid; j < s.nvec; j += stride) op.vec4(s.head + 4 * j);
}

template <class Op>
void launch_elementwise(const char* name, const Op& op, size_t n, VecSplit s, cudaStream_t stream) {
  if (n == 0) return;
  const size_t work = s.vec ? s.nvec + 4 : n;
  elementwise_kernel<<<grid_for(work), kThreads, 0, stream>>>(op, n, s);
  check_launch(name);
}

__device__ inline float4 load4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ inline void store4(float* p, float4 v) {
  *reinterpret_cast<float4*>(p) = v;
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
