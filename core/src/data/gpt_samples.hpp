// GPT training samples over an indexed dataset, built as Megatron-LM's GPTDataset builds them
// (megatron/core/datasets/gpt_dataset.py and helpers.cpp), and Megatron's blend of several
// datasets (BlendedDataset, helpers.cpp build_blending_indices).
//
// One epoch is every sequence of the dataset's part once (Megatron's GPT "documents" are the
// index's sequences). With E tokens in an epoch, samples of T+1 tokens (inputs and targets overlap
// by T) and a run that draws `num_samples` samples, Megatron builds every epoch the run needs at
// once (core gpt_dataset.py _build_document_sample_shuffle_indices; Megatron-DeepSpeed's
// megatron/data/gpt_dataset.py _build_index_mappings is the same algorithm):
//   epochs          the fewest P with P·E ≥ num_samples·T + 1 (_get_num_epochs)
//   document index  the documents P times over, shuffled together; when P > 1 and the final
//                   epoch gives fewer than 80% of an epoch's (E - 1) / T samples, the first P - 1
//                   epochs are shuffled together and the final one apart (separate_final_epoch)
//   sample index    S + 1 entries, S = (P·E - 1) / T, (position in the document index, token
//                   offset): sample k starts at token k·T of the concatenated stream and runs T+1
//                   tokens, across document and epoch boundaries (helpers.cpp build_sample_idx)
//   shuffle index   the order the S samples are drawn in: one permutation, or (final epoch
//                   apart) one of the samples before the final epoch then one of the rest
// In memory, as Megatron keeps them: the document index int32, the sample index int32 pairs
// while the positions fit (int64 otherwise), the shuffle index uint32 while S < 2^32 - 1 (int64
// otherwise): 4 bytes a document of every epoch, 8 + 4 a sample (16 + 8 when wide).
// Sample n of the run is shuffle-index entry n mod S (a run past num_samples starts over).
//
// Randomness: with shuffle, MT19937 seeded with the seed (below 2^32, as numpy's RandomState
// requires; the config check refuses larger ones) and NumPy's legacy RandomState.shuffle, first
// over the document index(es), then over the shuffle index(es), exactly as GPTDataset does with
// numpy.random.RandomState(seed): the order is Megatron's sample for sample for any run length
// (tests/data/indexed_interop.py and test_indexed_dataset's MultiEpoch tests check it).
// Without shuffle the document index is 0..N-1 repeated and the shuffle index the identity.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "triad/core/data/indexed_dataset.hpp"

namespace triad::data {

// NumPy's legacy RandomState.shuffle (mtrand.pyx _shuffle_raw with random_interval) driven by a
// std::mt19937, whose seeding and output equal RandomState(seed)'s for a 32-bit seed.
template <typename T>
void numpy_shuffle(T* v, size_t size, std::mt19937& rng) {
  for (size_t i = size > 0 ? size - 1 : 0; i > 0; --i) {
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
template <typename T>
void numpy_shuffle(std::vector<T>& v, std::mt19937& rng) {
  numpy_shuffle(v.data(), v.size(), rng);
}

// Non-negative integers held as Narrow while the values fit, as Wide otherwise, chosen once by
// assign: Megatron keeps its sample index in int32 and its shuffle index in uint32 when they fit,
// which at a run's length (a few bytes a sample, every epoch, on every rank) matters.
template <typename Narrow, typename Wide>
class CompactIndex {
 public:
  void assign(size_t size, bool wide) {
    wide_ = wide;
    narrow_ = wide ? std::vector<Narrow>() : std::vector<Narrow>(size);
    wide_values_ = wide ? std::vector<Wide>(size) : std::vector<Wide>();
  }
  int64_t operator[](size_t i) const {
    return wide_ ? int64_t(wide_values_[i]) : int64_t(narrow_[i]);
  }
  size_t size() const { return wide_ ? wide_values_.size() : narrow_.size(); }
  int64_t bytes() const {
    return int64_t(narrow_.size() * sizeof(Narrow) + wide_values_.size() * sizeof(Wide));
  }
  // f(v) on the vector in use, a std::vector<Narrow> or std::vector<Wide>.
  template <typename F>
  void visit(F&& f) {
    if (wide_)
      f(wide_values_);
    else
      f(narrow_);
  }
  std::vector<int64_t> widened() const {
    std::vector<int64_t> out(size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = (*this)[i];
    return out;
  }

 private:
  bool wide_ = false;
  std::vector<Narrow> narrow_;
  std::vector<Wide> wide_values_;
};

class GptSamples {
 public:
  // The dataset must outlive this object, and its documents [first_doc, end_doc) (all of them
  // by default; a part of Megatron's --split otherwise) hold at least T+1 tokens (the caller
  // checks, with a message naming the file). num_samples: the samples the run will draw (0: not
  // known, one epoch).
  GptSamples(const IndexedDataset& ds, int seq_length, bool shuffle, uint64_t seed,
             int64_t first_doc = 0, int64_t end_doc = -1, int64_t num_samples = 0);

  int64_t samples_per_epoch() const { return (E_ - 1) / T_; }
  int64_t tokens_per_epoch() const { return E_; }
  int64_t num_epochs() const { return epochs_; }
  bool separate_final_epoch() const { return separate_; }
  int64_t size() const { return S_; }  // samples built, over every epoch
  // The T+1 tokens of sample n (n counts on; past size() the order starts over).
  void sample(int64_t n, int32_t* out) const;

  // The indices as Megatron names them, widened to int64 (a copy, for tests): the document index
  // (sequence numbers), the sample index (S+1 pairs, flattened) and the shuffle index (empty
  // without shuffle).
  struct Indices {
    std::vector<int32_t> document_index;
    std::vector<int64_t> sample_index;
    std::vector<int64_t> shuffle_index;
  };
  Indices indices() const;
  // The bytes the three indices hold in memory (every rank holds its own).
  int64_t index_bytes() const;
  // Tests only: build the wide (int64) sample and shuffle indices whatever the run's size.
  static inline bool force_wide_indices = false;

 private:
  void build(int64_t num_samples);

  const IndexedDataset* ds_;
  int64_t first_doc_ = 0, end_doc_ = 0;
  int T_;
  bool shuffle_;
  uint64_t seed_;
  int64_t E_ = 0, S_ = 0, epochs_ = 1;
  bool separate_ = false;
  std::vector<int32_t> document_index_;
  CompactIndex<int32_t, int64_t> sample_index_;    // narrow: positions below 2^31 (offsets are)
  CompactIndex<uint32_t, int64_t> shuffle_index_;  // narrow: S below 2^32 - 1, as Megatron
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
