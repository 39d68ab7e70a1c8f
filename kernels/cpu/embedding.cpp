// Token + position embedding (llm.c encoder_forward/backward).
#include <algorithm>
#include <cstddef>

#include "triad/kernels/cpu.hpp"

namespace triad::kernels::cpu {

template <class F>
void embedding_forward(F* out, const int32_t* tokens, const F* wte, const F* wpe, int B, int T,
                       int C, int64_t vocab_start, int vocab_rows) {
  const int BT = B * T;
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < BT; ++bt) {
    F* o = out + size_t(bt) * C;
    const int64_t row = tokens[bt] - vocab_start;
    if (vocab_rows >= 0 && (row < 0 || row >= vocab_rows)) {  // another rank's row: zero
      if (wpe)
        std::copy(wpe + size_t(bt % T) * C, wpe + size_t(bt % T + 1) * C, o);
      else
        std::fill(o, o + C, F(0));
      continue;
    }
    const F* w = wte + size_t(row) * C;
    if (wpe) {
      const F* p = wpe + size_t(bt % T) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = w[c] + p[c];
    } else {
      std::copy(w, w + C, o);
    }
  }
}

template <class F>
void embedding_backward(F* dwte, F* dwpe, const F* dout, const int32_t* tokens, int B, int T, int C,
                        int64_t vocab_start, int vocab_rows) {
  const int BT = B * T;
  // A token may repeat within the batch, so threads split the channels, not the tokens:
  // no two threads ever touch the same dwte element, and the sum order is fixed.
  constexpr int kBlock = 32;
  const int blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * kBlock;
    const int c1 = std::min(C, c0 + kBlock);
    for (int bt = 0; bt < BT; ++bt) {
      const int64_t row = tokens[bt] - vocab_start;
      if (vocab_rows >= 0 && (row < 0 || row >= vocab_rows)) continue;
      F* dw = dwte + size_t(row) * C;
      const F* d = dout + size_t(bt) * C;
#pragma omp simd
      for (int c = c0; c < c1; ++c) dw[c] += d[c];
    }
  }
  if (!dwpe) return;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t) {
    F* dp = dwpe + size_t(t) * C;
    for (int b = 0; b < B; ++b) {
      const F* d = dout + (size_t(b) * T + t) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) dp[c] += d[c];
    }
  }
}

template void embedding_forward<float>(float*, const int32_t*, const float*, const float*, int, int,
                                       int, int64_t, int);
template void embedding_forward<double>(double*, const int32_t*, const double*, const double*, int,
                                        int, int, int64_t, int);
template void embedding_backward<float>(float*, float*, const float*, const int32_t*, int, int, int,
                                        int64_t, int);
template void embedding_backward<double>(double*, double*, const double*, const int32_t*, int, int,
                                         int, int64_t, int);

}  // namespace triad::kernels::cpu
