// GPT training samples over an indexed dataset, built as Megatron-LM's GPTDataset builds them
// (megatron/core/datasets/gpt_dataset.py and helpers.cpp), and Megatron's blend of several
// datasets (BlendedDataset, helpers.cpp build_blending_indices).
//
// One epoch is every sequence of the dataset once (Megatron's GPT "documents" are the index's
// sequences; all of them, as Megatron's --split 100,0,0). With E tokens in the epoch and samples
// of T+1 tokens (inputs and targets overlap by T), the epoch has S = (E - 1) / T samples:
//   document index  the sequences in epoch order (shuffled, or 0..N-1 without shuffle)
//   sample index    S + 1 entries (position in the document index, token offset): sample k
//                   starts at token k*T of the epoch's concatenated stream and runs T+1 tokens,
//                   across document boundaries (entry k+1 is where sample k's last token is)
//   shuffle index   the order the S samples are drawn in (a permutation, or 0..S-1)
// Sample n of the run is shuffle-index entry n mod S of epoch n / S.
//
// Randomness: with shuffle, epoch 0 uses MT19937 seeded with (seed mod 2^32) and NumPy's legacy
// RandomState.shuffle algorithm, first over the document index, then over the shuffle index,
// exactly as GPTDataset does with numpy.random.RandomState(seed): for a run within one epoch the
// order is Megatron's sample for sample (tests/data/indexed_interop.py checks it against NumPy).
// Beyond one epoch Triad differs from Megatron, which knows the run's length and builds all its
// epochs at once (one document index over every epoch, shuffled together unless the final epoch
// is short, one shuffle over every sample, samples straddling epoch boundaries): Triad builds
// each epoch alone, epoch e > 0 seeded with the low 32 bits of mix(seed, e), and drops each
// epoch's last (E - 1) mod T tokens rather than only the last epoch's.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "triad/core/data/indexed_dataset.hpp"

namespace triad::data {

// NumPy's legacy RandomState.shuffle (mtrand.pyx _shuffle_raw with random_interval) driven by a
// std::mt19937, whose seeding and output equal RandomState(seed)'s for a 32-bit seed.
template <typename T>
void numpy_shuffle(std::vector<T>& v, std::mt19937& rng) {
  for (size_t i = v.size() > 0 ? v.size() - 1 : 0; i > 0; --i) {
    uint64_t mask = i;  // the smallest all-ones mask >= i
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    uint64_t j;
    if (i <= 0xffffffffULL) {
      do j = rng() & mask;
      while (j > i);
    } else {
      do {
        const uint64_t hi = rng();
        j = ((hi << 32) | rng()) & mask;
      } while (j > i);
    }
    std::swap(v[i], v[j]);
  }
}

class GptSamples {
 public:
  // The dataset must outlive this object, and its documents [first_doc, end_doc) (all of them
  // by default; a part of Megatron's --split otherwise) hold at least T+1 tokens (the caller
  // checks, with a message naming the file).
  GptSamples(const IndexedDataset& ds, int seq_length, bool shuffle, uint64_t seed,
             int64_t first_doc = 0, int64_t end_doc = -1);

  int64_t samples_per_epoch() const { return S_; }
  int64_t tokens_per_epoch() const { return E_; }
  // The T+1 tokens of sample n (n counts on through the epochs).
  void sample(int64_t n, int32_t* out);

  // The indices of epoch e, as Megatron names them (for tests): the document index (sequence
  // numbers), the sample index (S+1 pairs, flattened) and the shuffle index.
  struct Epoch {
    std::vector<int32_t> document_index;
    std::vector<int64_t> sample_index;
    std::vector<int64_t> shuffle_index;
  };
  Epoch epoch(int64_t e) const;

 private:
  void build(int64_t e, Epoch& out) const;

  const IndexedDataset* ds_;
  int64_t first_doc_ = 0, end_doc_ = 0;
  int T_;
  bool shuffle_;
  uint64_t seed_;
  int64_t E_ = 0, S_ = 0;
  int64_t cached_ = -1;  // the epoch held in cache_
  Epoch cache_;
};

// Megatron's blend: sample i of the run comes from the dataset whose share so far lags its
// weight most (the greedy of build_blending_indices: the largest weight[d] * max(i, 1) -
// drawn[d], the first dataset on a tie), and is that dataset's next sample. Computed in chunks as
// samples are asked for (in increasing order, as the loader asks), so no run length is needed.
class BlendOrder {
 public:
  // Weights are normalized to sum to 1 (each must be positive).
  explicit BlendOrder(std::vector<double> weights);
  struct Pick {
    int dataset;
    int64_t sample;  // the dataset's own sample number
  };
  Pick at(int64_t n);

 private:
  static constexpr int64_t kChunk = 4096;
  void next_chunk();

  std::vector<double> w_;
  std::vector<int64_t> drawn_;   // per dataset, after samples [0, end_)
  int64_t begin_ = 0, end_ = 0;  // the chunk held: samples [begin_, end_)
  std::vector<Pick> chunk_;
};

}  // namespace triad::data
