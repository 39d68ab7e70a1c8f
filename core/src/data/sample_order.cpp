#include "sample_order.hpp"

#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

#include "triad/core/error.hpp"

namespace triad::data {

namespace {

// Uniform in [0, n) by rejection, not std::uniform_int_distribution: its algorithm is up
// to the standard library, and the order must be the same wherever Triad is built.
uint64_t below(std::mt19937_64& rng, uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = rng();
  while (x >= limit);
  return x % n;
}

}  // namespace

BatchLayout::BatchLayout(int micro_batch, int global_batch, int dp_rank, int dp_size)
    : B_(micro_batch), G_(global_batch), rank_(dp_rank), dp_(dp_size) {
  if (B_ < 1 || G_ < 1)
    throw UserError("data loader: micro-batch size " + std::to_string(B_) +
                    " and global batch size " + std::to_string(G_) + " must both be at least 1");
  if (dp_ < 1 || rank_ < 0 || rank_ >= dp_)
    throw UserError("data loader: data-parallel rank " + std::to_string(rank_) + " is not in [0, " +
                    std::to_string(dp_) + ")");
  const int64_t per_pass = int64_t{B_} * dp_;
  if (G_ % per_pass != 0)
    throw UserError("data loader: global batch size " + std::to_string(G_) +
                    " is not a multiple of micro-batch size " + std::to_string(B_) +
                    " × data-parallel size " + std::to_string(dp_) + " = " +
                    std::to_string(per_pass) +
                    "; set global = micro × gradient_accumulation_steps × data-parallel size");
  micro_per_step_ = static_cast<int>(G_ / per_pass);
}

int64_t BatchLayout::sample(int64_t step, int micro, int j) const {
  if (step < 0 || micro < 0 || micro >= micro_per_step_ || j < 0 || j >= B_)
    throw std::out_of_range("data loader: step " + std::to_string(step) + " micro-batch " +
                            std::to_string(micro) + " row " + std::to_string(j) +
                            " is outside the layout (" + std::to_string(micro_per_step_) +
                            " micro-batches of " + std::to_string(B_) + ")");
  return step * G_ + (int64_t{micro} * dp_ + rank_) * B_ + j;
}

WindowOrder::WindowOrder(int64_t num_windows, bool shuffle, uint64_t seed)
    : W_(num_windows), shuffle_(shuffle), seed_(seed) {
  if (W_ < 1) throw std::invalid_argument("WindowOrder needs at least one window");
}

int64_t WindowOrder::window(int64_t sample) {
  const int64_t epoch = sample / W_, i = sample % W_;
  if (!shuffle_) return i;
  if (epoch != epoch_) {
    perm_.resize(static_cast<size_t>(W_));
    std::iota(perm_.begin(), perm_.end(), int64_t{0});
    std::mt19937_64 rng(mix(seed_, static_cast<uint64_t>(epoch)));
    for (int64_t k = W_ - 1; k > 0; --k)
      std::swap(perm_[k], perm_[below(rng, static_cast<uint64_t>(k) + 1)]);
    epoch_ = epoch;
  }
  return perm_[i];
}

}  // namespace triad::data
