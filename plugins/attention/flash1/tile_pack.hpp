// Copies strided (T, D) rows into padded, contiguous tiles the micro-kernel can stream, so
// the caller's strides and any D (not only multiples of 16) cost one copy per tile.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tile_gemm.hpp"

namespace triad::flash {

// dst[r][d] = scale * src[r * stride + d] for r < rows, d < D; columns D..ld-1 are zero.
inline void pack_rows(float* dst, int ld, const float* src, int64_t stride, int rows, int D,
                      float scale = 1.f) {
  for (int r = 0; r < rows; ++r) {
    const float* s = src + r * stride;
    float* d = dst + static_cast<ptrdiff_t>(r) * ld;
#pragma omp simd
    for (int c = 0; c < D; ++c) d[c] = scale * s[c];
    for (int c = D; c < ld; ++c) d[c] = 0.f;
  }
}

// dst[d][r] = scale * src[r * stride + d] for d < D, r < rows; columns rows..round_up(rows,
// kLane)-1 are zero, so a product against the padded tile gives 0 in the columns the caller
// ignores or masks.
inline void pack_transposed(float* dst, int ld, const float* src, int64_t stride, int rows, int D,
                            float scale = 1.f) {
  const int padded = round_up(rows, kLane) < ld ? round_up(rows, kLane) : ld;
  for (int d = 0; d < D; ++d)
    for (int r = rows; r < padded; ++r) dst[static_cast<ptrdiff_t>(d) * ld + r] = 0.f;
  for (int r = 0; r < rows; ++r) {
    const float* s = src + r * stride;
    for (int d = 0; d < D; ++d) dst[static_cast<ptrdiff_t>(d) * ld + r] = scale * s[d];
  }
}

// Rows a micro-kernel can stream as its B operand (round_up(D, kLane) readable columns).
struct RowsRef {
  const float* data;
  ptrdiff_t ld;
};

// The caller's own rows when D needs no padding (no copy at all), else a padded copy.
inline RowsRef padded_rows(const float* src, int64_t stride, int rows, int D, float* scratch) {
  if (D % kLane == 0) return {src, static_cast<ptrdiff_t>(stride)};
  pack_rows(scratch, round_up(D, kLane), src, stride, rows, D);
  return {scratch, round_up(D, kLane)};
}

// Copies the first D columns of a padded tile row by row into strided rows, times row_scale.
inline void unpack_rows(float* dst, int64_t stride, const float* src, int ld, int rows, int D,
                        const float* row_scale = nullptr) {
  for (int r = 0; r < rows; ++r) {
    const float s = row_scale ? row_scale[r] : 1.f;
    const float* a = src + static_cast<ptrdiff_t>(r) * ld;
    float* d = dst + r * stride;
#pragma omp simd
    for (int c = 0; c < D; ++c) d[c] = s * a[c];
  }
}

}  // namespace triad::flash
