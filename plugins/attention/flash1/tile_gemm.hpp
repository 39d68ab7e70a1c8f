// Register-blocked GEMM on small tiles, shared by the flash1 and flash2 plugins (plugins may
// not link BLAS). Every product the attention kernels need has the same shape: a scalar of A
// broadcast against a contiguous row of B, so one micro-kernel serves S = Q K^T (B = K^T
// packed), O += P V, dV += P^T dO, dK += dS^T Q and dQ += dS K (A read transposed through its
// strides).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace triad::flash {

// Rows of B are padded to a multiple of this many floats, so the micro-kernel never needs a
// column tail on B.
constexpr int kLane = 16;

inline int round_up(int n, int m) {
  return (n + m - 1) / m * m;
}

// a * b + c, fused (one rounding) where the CPU has FMA. Written out rather than left to the
// compiler's contraction, which may or may not happen, so that sums computed in two places
// (see row_deltas) round the same way.
inline float fmadd(float a, float b, float c) {
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

enum class Init {
  zero,        // C = A B
  accumulate,  // C += A B
  rescale,     // C = diag(row_scale) C + A B
};

namespace detail {

// C[MR x NR] (op)= A[MR x K] B[K x NR]. `nc` < NR: only the first nc columns of C exist.
// The accumulators are a local array the compiler keeps in vector registers once both loops
// over it are unrolled (MR * NR / 16 zmm registers). Each element sums its K terms in order
// with fmadd (row_deltas in flash_backward.hpp relies on that).
template <int MR, int NR>
inline void micro_kernel(int K, const float* __restrict A, ptrdiff_t am, ptrdiff_t ak,
                         const float* __restrict B, ptrdiff_t ldb, float* __restrict C,
                         ptrdiff_t ldc, int nc, Init init, const float* row_scale) {
  float c[MR][NR];
  if (init == Init::zero) {
    for (int r = 0; r < MR; ++r)
#pragma omp simd
      for (int n = 0; n < NR; ++n) c[r][n] = 0.f;
  } else if (nc == NR) {
    for (int r = 0; r < MR; ++r) {
      const float s = row_scale ? row_scale[r] : 1.f;
#pragma omp simd
      for (int n = 0; n < NR; ++n) c[r][n] = s * C[r * ldc + n];
    }
  } else {
    for (int r = 0; r < MR; ++r) {
      const float s = row_scale ? row_scale[r] : 1.f;
#pragma omp simd
      for (int n = 0; n < NR; ++n) c[r][n] = n < nc ? s * C[r * ldc + n] : 0.f;
    }
  }
  for (int k = 0; k < K; ++k) {
    const float* b = B + k * ldb;
    for (int r = 0; r < MR; ++r) {
      const float a = A[r * am + k * ak];
#pragma omp simd
      for (int n = 0; n < NR; ++n) c[r][n] = fmadd(a, b[n], c[r][n]);
    }
  }
  if (nc == NR) {
    for (int r = 0; r < MR; ++r)
#pragma omp simd
      for (int n = 0; n < NR; ++n) C[r * ldc + n] = c[r][n];
  } else {
    for (int r = 0; r < MR; ++r)
      for (int n = 0; n < nc; ++n) C[r * ldc + n] = c[r][n];
  }
}

constexpr int kMR = 8;

// Row tails dispatch to smaller instances of the same kernel.
template <int NR>
inline void row_block(int mr, int K, const float* A, ptrdiff_t am, ptrdiff_t ak, const float* B,
                      ptrdiff_t ldb, float* C, ptrdiff_t ldc, int nc, Init init, const float* rs) {
  switch (mr) {
#define TRIAD_FLASH_ROWS(R) \
  case R:                   \
    return micro_kernel<R, NR>(K, A, am, ak, B, ldb, C, ldc, nc, init, rs);
    TRIAD_FLASH_ROWS(8)
    TRIAD_FLASH_ROWS(7)
    TRIAD_FLASH_ROWS(6)
    TRIAD_FLASH_ROWS(5)
    TRIAD_FLASH_ROWS(4)
    TRIAD_FLASH_ROWS(3)
    TRIAD_FLASH_ROWS(2)
    TRIAD_FLASH_ROWS(1)
#undef TRIAD_FLASH_ROWS
    default:
      return;
  }
}

}  // namespace detail

// The part of a product that a tile crossing the causal diagonal needs, as a relation between
// a row m of C and an index j, either a column of C or the summed index k: needed where
// j <= m + shift (upper) or j >= m + shift (!upper). Work no row of a row block needs is
// skipped: columns of C (left unwritten: the caller masks them) or terms of the sum (whose A
// values are zero, so the result is bit for bit the same as adding them).
struct Band {
  enum class On { nothing, columns, sum };
  On on = On::nothing;
  bool upper = false;
  int shift = 0;
};

// C (M x nc) (op)= A (M x K) B (K x N), with A(m, k) = A[m * am + k * ak] (so a transposed A
// is just other strides), B row-major with ldb >= N, N a multiple of kLane and B readable
// over all N columns (padding included), and C holding nc <= N valid columns: columns past
// nc are neither read nor written, so C may be a caller's unpadded row.
// row_scale (M) is read only with Init::rescale (and must then be given).
inline void tile_gemm(int M, int N, int K, const float* A, ptrdiff_t am, ptrdiff_t ak,
                      const float* B, ptrdiff_t ldb, float* C, ptrdiff_t ldc, int nc, Init init,
                      const float* row_scale = nullptr, Band band = {}) {
  if (M <= 0 || nc <= 0) return;
  for (int n0 = 0; n0 < N && n0 < nc; n0 += 32) {
    const int width = N - n0 >= 32 ? 32 : kLane;
    const int valid = nc - n0 < width ? nc - n0 : width;
    for (int m0 = 0; m0 < M; m0 += detail::kMR) {
      const int mr = M - m0 < detail::kMR ? M - m0 : detail::kMR;
      int k0 = 0, k1 = K;
      if (band.on == Band::On::columns) {
        // Rows m0..m0+mr-1 need columns up to m0 + mr - 1 + shift, or from m0 + shift.
        if (band.upper ? n0 > m0 + mr - 1 + band.shift : n0 + width <= m0 + band.shift) continue;
      } else if (band.on == Band::On::sum) {
        if (band.upper)
          k1 = std::clamp(m0 + mr + band.shift, 0, K);
        else
          k0 = std::clamp(m0 + band.shift, 0, K);
        if (k1 < k0) k1 = k0;
      }
      const float* a = A + m0 * am + k0 * ak;
      float* c = C + m0 * ldc + n0;
      const float* rs = init == Init::rescale ? row_scale + m0 : nullptr;
      const float* b = B + k0 * ldb + n0;
      if (width == 32)
        detail::row_block<32>(mr, k1 - k0, a, am, ak, b, ldb, c, ldc, valid, init, rs);
      else
        detail::row_block<kLane>(mr, k1 - k0, a, am, ak, b, ldb, c, ldc, valid, init, rs);
    }
  }
}

}  // namespace triad::flash
