// Which sample goes where: the global-batch layout across micro-batches and data-parallel
// ranks, and the (optionally shuffled) order in which samples visit the stream's windows.
#pragma once

#include <cstdint>
#include <vector>

namespace triad::data {

// Counter-based mixing (splitmix64's finalizer): a pure function of its input, so any
// sample can be generated alone, in any order, on any rank.
constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
constexpr uint64_t mix(uint64_t a, uint64_t b) {
  return splitmix64(splitmix64(a) ^ b);
}

// Step s's global batch of G samples is split into G / (B*dp) micro-batches per rank;
// micro-batch i on rank r holds samples s*G + (i*dp + r)*B + j, j in [0, B).
class BatchLayout {
 public:
  // Throws UserError when G is not a multiple of B × dp or a size is not positive.
  BatchLayout(int micro_batch, int global_batch, int dp_rank, int dp_size);
  int micro_batch() const { return B_; }
  int micro_batches_per_step() const { return micro_per_step_; }
  // Throws std::out_of_range for a negative step or a micro-batch past the step's last.
  int64_t sample(int64_t step, int micro, int j) const;

 private:
  int B_, G_, rank_, dp_, micro_per_step_;
};

// Maps sample n to its window: n mod W, or, when shuffled, position n mod W of epoch
// n / W's permutation (Fisher-Yates driven by mt19937_64 seeded with mix(seed, epoch)).
// Keeps the last epoch's permutation: samples are asked for in order, so an epoch is
// built once per W samples.
class WindowOrder {
 public:
  WindowOrder(int64_t num_windows, bool shuffle, uint64_t seed);
  int64_t window(int64_t sample);
  int64_t num_windows() const { return W_; }

 private:
  int64_t W_;
  bool shuffle_;
  uint64_t seed_;
  int64_t epoch_ = -1;
  std::vector<int64_t> perm_;
};

}  // namespace triad::data
