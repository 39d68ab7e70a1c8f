// dst[c] += sum_n term(n, c) for an (N,C) row-major operand, threaded over column blocks.
// Each block is summed by one thread in row order, so the result does not depend on the
// thread count and no atomics or per-thread copies of dst are needed. Sums run in double:
// N is every token of the micro-batch, and this pass is far from the hot path.
#pragma once

#include <algorithm>

namespace triad::kernels::cpu::detail {

template <class F, class Term>
void add_column_sums(F* dst, int N, int C, Term term) {
  constexpr int kBlock = 32;  // two cache lines of float per row
  const int blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * kBlock;
    const int width = std::min(kBlock, C - c0);
    double acc[kBlock] = {};
    for (int n = 0; n < N; ++n) {
#pragma omp simd
      for (int j = 0; j < width; ++j) acc[j] += term(n, c0 + j);
    }
    for (int j = 0; j < width; ++j) dst[c0 + j] += F(acc[j]);
  }
}

// Two column sums of one sweep: term(n, c, a, b) adds its terms of column c into a (for da)
// and b (for db). Each sum comes out as add_column_sums would give it alone.
template <class F, class Term>
void add_column_sums2(F* da, F* db, int N, int C, Term term) {
  constexpr int kBlock = 32;
  const int blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * kBlock;
    const int width = std::min(kBlock, C - c0);
    double a[kBlock] = {}, b[kBlock] = {};
    for (int n = 0; n < N; ++n) {
#pragma omp simd
      for (int j = 0; j < width; ++j) term(n, c0 + j, a[j], b[j]);
    }
    for (int j = 0; j < width; ++j) {
      da[c0 + j] += F(a[j]);
      db[c0 + j] += F(b[j]);
    }
  }
}

}  // namespace triad::kernels::cpu::detail
