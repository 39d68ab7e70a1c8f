// Softmax + cross-entropy fused over the vocabulary. Forward keeps only the log-sum-exp of
// each row; backward recomputes the probabilities from it, so no (N,V) softmax buffer exists.
// Vocab-parallel (tensor parallelism) splits the forward in three steps around the group's
// reductions of the row max and sums; the backward is the same kernel with the whole row's lse.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "triad/kernels/cpu.hpp"
#include "vexp.hpp"

namespace triad::kernels::cpu {

namespace {

template <class F>
F row_max(const F* z, int valid) {
  F zmax = -std::numeric_limits<F>::infinity();
#pragma omp simd reduction(max : zmax)
  for (int v = 0; v < valid; ++v) zmax = z[v] > zmax ? z[v] : zmax;
  return zmax;
}

template <class F>
F row_sumexp(const F* z, int valid, F zmax) {
  F sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int v = 0; v < valid; ++v) sum += detail::vexp(z[v] - zmax);
  return sum;
}

// log(sum exp z) over a row in one pass over memory (online softmax, Milakov & Gimelshein
// 2018), a chunk at a time: the chunk's max, then its exponentials against the running max,
// while the chunk is still in L1; the running sum is rescaled when the max grows. A row that
// fits one chunk is summed exactly as the two-pass form sums it.
template <class F>
F row_lse(const F* z, int valid) {
  constexpr int kChunk = 2048;  // 8 KiB of float: L1-resident between its two sweeps
  F zmax = -std::numeric_limits<F>::infinity(), sum = 0;
  for (int v0 = 0; v0 < valid; v0 += kChunk) {
    const int n = std::min(kChunk, valid - v0);
    const F cmax = row_max(z + v0, n);
    if (cmax > zmax) {
      if (sum != F(0)) sum *= detail::vexp(zmax - cmax);
      zmax = cmax;
    }
    sum += row_sumexp(z + v0, n, zmax);
  }
  return zmax + std::log(sum);
}

}  // namespace

template <class F>
void crossentropy_forward(F* losses, F* lse, const F* logits, const int32_t* targets, int N, int V,
                          int valid) {
  if (valid < 0) valid = V;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const F* z = logits + size_t(n) * V;
    lse[n] = row_lse(z, valid);
    losses[n] = lse[n] - z[targets[n]];
  }
}

template <class F>
void crossentropy_backward(F* dlogits, const F* logits, const F* lse, const int32_t* targets,
                           F dloss, int N, int V, int valid, int64_t vocab_start) {
  if (valid < 0) valid = V;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    // Each element is read before it is written, so dlogits may alias logits.
    const F* z = logits + size_t(n) * V;
    F* dz = dlogits + size_t(n) * V;
    const F l = lse[n];
#pragma omp simd
    for (int v = 0; v < valid; ++v) dz[v] = dloss * detail::vexp(z[v] - l);
    for (int v = valid; v < V; ++v) dz[v] = F(0);
    const int64_t t = targets[n] - vocab_start;
    if (t >= 0 && t < valid) dz[t] -= dloss;
  }
}

template <class F>
void crossentropy_row_max(F* rowmax, const F* logits, int N, int V, int valid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) rowmax[n] = row_max(logits + size_t(n) * V, valid);
}

template <class F>
void crossentropy_row_sums(F* sumexp, F* target_logit, const F* logits, const F* rowmax,
                           const int32_t* targets, int N, int V, int valid, int64_t vocab_start) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const F* z = logits + size_t(n) * V;
    sumexp[n] = row_sumexp(z, valid, rowmax[n]);
    const int64_t t = targets[n] - vocab_start;
    target_logit[n] = t >= 0 && t < valid ? z[t] : F(0);
  }
}

template <class F>
void crossentropy_finish(F* losses, F* lse, const F* rowmax, const F* sumexp, const F* target_logit,
                         int N) {
  for (int n = 0; n < N; ++n) {
    lse[n] = rowmax[n] + std::log(sumexp[n]);
    losses[n] = lse[n] - target_logit[n];
  }
}

#define TRIAD_CE(F)                                                                                \
  template void crossentropy_forward<F>(F*, F*, const F*, const int32_t*, int, int, int);          \
  template void crossentropy_backward<F>(F*, const F*, const F*, const int32_t*, F, int, int, int, \
                                         int64_t);                                                 \
  template void crossentropy_row_max<F>(F*, const F*, int, int, int);                              \
  template void crossentropy_row_sums<F>(F*, F*, const F*, const F*, const int32_t*, int, int,     \
                                         int, int64_t);                                            \
  template void crossentropy_finish<F>(F*, F*, const F*, const F*, const F*, int);
TRIAD_CE(float)
TRIAD_CE(double)
#undef TRIAD_CE

}  // namespace triad::kernels::cpu
