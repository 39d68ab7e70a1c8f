// The layout moves and the log-sum-exp merge of context-parallel attention (ring and Ulysses).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "triad/kernels/cpu.hpp"

namespace triad::kernels::cpu {

template <class F>
void copy_rows(F* dst, const RowStrides& ds, const F* src, const RowStrides& ss, const RowBox& box,
               bool accumulate) {
  for (int64_t i = 0; i < box.n[0]; ++i)
    for (int64_t j = 0; j < box.n[1]; ++j)
      for (int64_t k = 0; k < box.n[2]; ++k) {
        F* d = dst + i * ds.s[0] + j * ds.s[1] + k * ds.s[2];
        if (!src) {
          std::fill(d, d + box.row, F(0));
          continue;
        }
        const F* s = src + i * ss.s[0] + j * ss.s[1] + k * ss.s[2];
        if (accumulate)
          for (int64_t c = 0; c < box.row; ++c) d[c] += s[c];
        else
          std::memcpy(d, s, size_t(box.row) * sizeof(F));
      }
}

template <class F>
void attention_merge(F* out, const RowStrides& os, F* lse, const RowStrides& ls, const F* part,
                     const F* part_lse, int64_t B, int64_t H, int64_t S, int64_t D, bool first) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s) {
        F* o = out + b * os.s[0] + h * os.s[1] + s * os.s[2];
        F& l = lse[b * ls.s[0] + h * ls.s[1] + s * ls.s[2]];
        const F* po = part + ((b * H + h) * S + s) * D;
        const F pl = part_lse[(b * H + h) * S + s];
        // A part that saw no keys (lse -inf) adds nothing; output that has seen none yet takes
        // the part as it is (the formula below would give NaN from -inf - -inf).
        if (!first && pl == -std::numeric_limits<F>::infinity()) continue;
        if (first || l == -std::numeric_limits<F>::infinity()) {
          std::memcpy(o, po, size_t(D) * sizeof(F));
          l = pl;
          continue;
        }
        const F m = std::max(l, pl);
        const F merged = m + std::log(std::exp(l - m) + std::exp(pl - m));
        const F a = std::exp(l - merged), c = std::exp(pl - merged);
        for (int64_t d = 0; d < D; ++d) o[d] = a * o[d] + c * po[d];
        l = merged;
      }
}

template void copy_rows<float>(float*, const RowStrides&, const float*, const RowStrides&,
                               const RowBox&, bool);
template void copy_rows<double>(double*, const RowStrides&, const double*, const RowStrides&,
                                const RowBox&, bool);
template void attention_merge<float>(float*, const RowStrides&, float*, const RowStrides&,
                                     const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                     bool);
template void attention_merge<double>(double*, const RowStrides&, double*, const RowStrides&,
                                      const double*, const double*, int64_t, int64_t, int64_t,
                                      int64_t, bool);

}  // namespace triad::kernels::cpu
