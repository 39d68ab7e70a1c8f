// Rotary position embedding, "rotate half" form (GPT-NeoX / LLaMA), in place on a strided
// (B,T,H,D) view. Angles are computed in double once per call and cast, so float and double
// rotate by the same (correctly rounded) cos/sin even at large positions.
#include <cmath>
#include <cstddef>
#include <vector>

#include "triad/kernels/cpu.hpp"

namespace triad::kernels::cpu {
namespace {

// cos and sin of (pos0 + t) * theta_i, (T, D/2) each.
template <class F>
void rope_table(std::vector<F>& cos_t, std::vector<F>& sin_t, int T, int D, double base,
                int64_t pos0) {
  const int half = D / 2;
  cos_t.resize(size_t(T) * half);
  sin_t.resize(size_t(T) * half);
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      const double angle = double(pos0 + t) * std::pow(base, -2.0 * i / D);
      cos_t[size_t(t) * half + i] = F(std::cos(angle));
      sin_t[size_t(t) * half + i] = F(std::sin(angle));
    }
  }
}

// sign = +1 rotates by +angle (forward), -1 by -angle (backward: the transpose).
template <class F>
void rope_apply(F* x, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh, double base,
                int64_t pos0, F sign) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  std::vector<F> cos_t, sin_t;
  rope_table(cos_t, sin_t, T, D, base, pos0);
  const int half = D / 2;
  const int BT = B * T;
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < BT; ++bt) {
    const int b = bt / T, t = bt % T;
    const F* c = cos_t.data() + size_t(t) * half;
    const F* s = sin_t.data() + size_t(t) * half;
    for (int h = 0; h < H; ++h) {
      F* x1 = x + b * sb + t * st + h * sh;
      F* x2 = x1 + half;
#pragma omp simd
      for (int i = 0; i < half; ++i) {
        const F a = x1[i], q = x2[i], si = sign * s[i];
        x1[i] = a * c[i] - q * si;
        x2[i] = q * c[i] + a * si;
      }
    }
  }
}

}  // namespace

template <class F>
void rope_forward(F* x, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh, double base,
                  int64_t pos0) {
  rope_apply(x, B, T, H, D, sb, st, sh, base, pos0, F(1));
}

template <class F>
void rope_backward(F* dx, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh,
                   double base, int64_t pos0) {
  rope_apply(dx, B, T, H, D, sb, st, sh, base, pos0, F(-1));
}

template void rope_forward<float>(float*, int, int, int, int, int64_t, int64_t, int64_t, double,
                                  int64_t);
template void rope_forward<double>(double*, int, int, int, int, int64_t, int64_t, int64_t, double,
                                   int64_t);
template void rope_backward<float>(float*, int, int, int, int, int64_t, int64_t, int64_t, double,
                                   int64_t);
template void rope_backward<double>(double*, int, int, int, int, int64_t, int64_t, int64_t, double,
                                    int64_t);

}  // namespace triad::kernels::cpu
