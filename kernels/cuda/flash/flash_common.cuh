// Building blocks of the FlashAttention kernels: kernel parameters, tensor-core MMA
// (m16n8k16, fp32 accumulate), ldmatrix, cp.async and the swizzled shared-memory tile layout.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with 16-bit inputs), lane = 4*g + t:
//   A 16x16 (row-major): reg0 = (row g, cols 2t,2t+1), reg1 = (row g+8, cols 2t..), reg2 = (row g,
//     cols 2t+8..), reg3 = (row g+8, cols 2t+8..).
//   B 16x8 (k x n):      reg0 = (k 2t,2t+1, col g), reg1 = (k 2t+8, 2t+9, col g).
//   C 16x8 fp32:         c0,c1 = (row g, cols 2t,2t+1), c2,c3 = (row g+8, cols 2t,2t+1).
// Two C tiles side by side (cols 0..15) therefore form, packed to 16 bits, the A fragment of a
// 16x16 k-slice: the P and dS tiles go from accumulators straight into the next MMA.
//
// Shared-memory tiles are rows of N 16-bit elements (N = 64 or 128: 8 or 16 chunks of 16 bytes),
// chunk c of row r stored at chunk c ^ (r & 7): the 8 rows one ldmatrix phase reads, and the
// 16-byte cp.async stores of a row, fall in distinct banks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace triad::kernels::cuda::flash::detail {

struct Strides {
  int64_t b, h, t;
};

struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  Strides qs, ks, vs, os;
  int B, H, T;
  int causal;
  float scale_log2;  // scale * log2(e)
  // flash1: fp32 state written back after every K/V block.
  float* ws_o;   // (B*H, T, D)
  float* ws_ml;  // (B*H, T, 2): running max (log2 units) and running sum
  int q_blocks_per_cta;
};

struct BwdParams {
  const void* q;
  const void* k;
  const void* v;
  const void* o;
  const void* dout;
  void* dq;
  void* dk;
  void* dv;
  const float* lse;
  Strides qs, ks, vs, os, dos, dqs, dks, dvs;
  int B, H, T;
  int causal;
  float scale;
  float scale_log2;
  float* delta;   // (B*H, T): rowsum(dO * O)
  float* dq_acc;  // (B*H, T, D) fp32, or null
};

enum class DqMode { kNone, kAtomic, kRmw };

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <typename T>
struct Elem;

template <>
struct Elem<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t r;
    memcpy(&r, &v, 4);
    return r;
  }
  static __device__ __forceinline__ float2 unpack(uint32_t x) {
    __nv_bfloat162 v;
    memcpy(&v, &x, 4);
    return __bfloat1622float2(v);
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct Elem<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    uint32_t r;
    memcpy(&r, &v, 4);
    return r;
  }
  static __device__ __forceinline__ float2 unpack(uint32_t x) {
    __half2 v;
    memcpy(&v, &x, 4);
    return __half22float2(v);
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Byte offset of element (row, col) of a swizzled tile with rows of N elements; col % 8 == 0.
template <int N>
__device__ __forceinline__ uint32_t swz(int row, int col) {
  static_assert(N == 64 || N == 128, "swizzle needs 8 or 16 chunks per row");
  return static_cast<uint32_t>((row * N + ((((col >> 3) ^ (row & 7))) << 3)) * 2);
}

__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Lane addresses of ldmatrix.x4 for the three operand shapes used here.
//  a_addr: A 16x16 at (r0, c0) of a row-major tile (rows = M, cols = K)       -> ldsm4
//  bn_addr: B of two n-blocks (n0..n0+15) x k-slice c0, tile rows = n, cols = k -> ldsm4:
//           r0,r1 = n-block n0, r2,r3 = n-block n0+8 (also: A from a transposed tile, ldsm4t)
//  bt_addr: B of a k-slice r0..r0+15 x two n-blocks c0..c0+15, tile rows = k   -> ldsm4t:
//           r0,r1 = n-block c0, r2,r3 = n-block c0+8
template <int N>
__device__ __forceinline__ uint32_t a_addr(uint32_t base, int r0, int c0, int lane) {
  return base + swz<N>(r0 + (lane & 15), c0 + ((lane >> 4) << 3));
}
template <int N>
__device__ __forceinline__ uint32_t bn_addr(uint32_t base, int n0, int c0, int lane) {
  return base + swz<N>(n0 + (lane & 7) + ((lane >> 4) << 3), c0 + (((lane >> 3) & 1) << 3));
}
template <int N>
__device__ __forceinline__ uint32_t bt_addr(uint32_t base, int r0, int c0, int lane) {
  return base + swz<N>(r0 + (lane & 15), c0 + ((lane >> 4) << 3));
}

__device__ __forceinline__ void cp_async16(uint32_t saddr, const void* g, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(g),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(uint32_t saddr, const void* g, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(saddr), "l"(g),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

// Rows [0, R) of an R x D tile whose row r starts at g + r * ld (elements) into a swizzled tile;
// rows >= nvalid are zero-filled (nvalid >= 1, so g itself is a valid address).
template <int R, int D, int NT, typename T>
__device__ __forceinline__ void load_tile(uint32_t sbase, const T* g, int64_t ld, int nvalid,
                                          int tid) {
  // A thread copies one 16-byte chunk column c of rows r0, r0 + kStep, ...; kStep is a multiple
  // of 8, so every one of its rows has the same swizzle and the addresses step by constants.
  constexpr int kChunks = D / 8, kStep = NT / kChunks;
  static_assert(NT % kChunks == 0 && kStep % 8 == 0 && R % kStep == 0, "tile / thread shape");
  const int r0 = tid / kChunks, c = tid % kChunks;
  const uint32_t s0 = sbase + swz<D>(r0, c * 8);
  const T* src = g + static_cast<int64_t>(r0) * ld + c * 8;
  const int64_t step = static_cast<int64_t>(kStep) * ld;
#pragma unroll
  for (int it = 0; it < R / kStep; ++it) {
    const bool ok = r0 + it * kStep < nvalid;
    cp_async16(s0 + it * kStep * D * 2, ok ? src : g, ok);
    src += step;
  }
}

__device__ __forceinline__ void atomic_add2(float* p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(p), make_float2(a, b));
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

// Launchers (explicitly instantiated for T in {__nv_bfloat16, __half}, D in {64, 128}).
template <typename T, int D>
void launch_flash2_fwd(const FwdParams& p, cudaStream_t stream);
template <typename T, int D>
void launch_flash1_fwd(const FwdParams& p, int num_sms, cudaStream_t stream);
// Backward: prep (delta, zeroed dq_acc), dK/dV (+ dQ per mode), then dq (kernel or convert).
template <typename T, int D>
void launch_bwd_prep(const BwdParams& p, cudaStream_t stream);
// kv_ctas_per_bh: thread blocks per (b, h) over the K/V blocks (0: one per K/V block).
template <typename T, int D>
void launch_bwd_dkdv(const BwdParams& p, DqMode mode, int kv_ctas_per_bh, cudaStream_t stream);
template <typename T, int D>
void launch_bwd_dq(const BwdParams& p, cudaStream_t stream);
template <typename T, int D>
void launch_bwd_dq_convert(const BwdParams& p, cudaStream_t stream);
// K/V block of the dK/dV kernel, 16 keys per warp (settable at build time for tuning runs):
// 128 keys (8 warps) halves the dQ atomics and the Q/dO reloads; without the dQ product (the
// deterministic mode) at D = 64, 64 keys (4 warps, two thread blocks per SM) measured faster.
#ifndef TRIAD_FLASH_BWD_BC
#define TRIAD_FLASH_BWD_BC 128
#endif
#ifndef TRIAD_FLASH_BWD_BC_D64_NODQ
#define TRIAD_FLASH_BWD_BC_D64_NODQ 64
#endif
template <int D, DqMode kDq>
constexpr int bwd_kv_block() {
  return D == 64 && kDq == DqMode::kNone ? TRIAD_FLASH_BWD_BC_D64_NODQ : TRIAD_FLASH_BWD_BC;
}

}  // namespace triad::kernels::cuda::flash::detail
