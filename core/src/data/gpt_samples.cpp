#include "gpt_samples.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "triad/core/error.hpp"

namespace triad::data {
namespace {

// helpers.cpp build_sample_idx, drop_last_partial_sequence, add_extra_token_to_sequence 1: the
// S + 1 (position, offset) pairs, flattened into si (2·(S+1) values).
template <typename T>
void build_sample_index(const IndexedDataset& ds, const std::vector<int32_t>& doc, int seq_length,
                        std::vector<T>& si) {
  const auto docs = static_cast<int64_t>(doc.size());
  const auto samples = static_cast<int64_t>(si.size() / 2) - 1;
  int64_t pos = 0, off = 0;
  for (int64_t k = 1; k <= samples; ++k) {
    int64_t remaining = int64_t{seq_length} + 1;
    for (;;) {
      const int64_t len = ds.sequence_length(doc[static_cast<size_t>(pos)]) - off;
      remaining -= len;
      if (remaining <= 0) {
        off += remaining + len - 1;  // sample k-1's last token, sample k's first
        break;
      }
      if (++pos == docs) throw std::logic_error("GptSamples: ran past the last document");
      off = 0;
    }
    si[static_cast<size_t>(2 * k)] = static_cast<T>(pos);
    si[static_cast<size_t>(2 * k + 1)] = static_cast<T>(off);
  }
}

}  // namespace

GptSamples::GptSamples(const IndexedDataset& ds, int seq_length, bool shuffle, uint64_t seed,
                       int64_t first_doc, int64_t end_doc, int64_t num_samples)
    : ds_(&ds),
      first_doc_(first_doc),
      end_doc_(end_doc < 0 ? ds.num_sequences() : end_doc),
      T_(seq_length),
      shuffle_(shuffle),
      seed_(seed) {
  if (T_ < 1) throw std::invalid_argument("GptSamples: seq_length must be at least 1");
  if (num_samples < 0) throw std::invalid_argument("GptSamples: negative num_samples");
  if (ds.num_sequences() > std::numeric_limits<int32_t>::max())
    throw UserError("indexed dataset '" + ds.prefix() + "' has " +
                    std::to_string(ds.num_sequences()) +
                    " sequences; Megatron's document index (int32) holds at most " +
                    std::to_string(std::numeric_limits<int32_t>::max()) +
                    "; split it into several datasets and blend them");
  if (first_doc_ < 0 || first_doc_ > end_doc_ || end_doc_ > ds.num_sequences())
    throw std::invalid_argument("GptSamples: documents out of range");
  if (first_doc_ == 0 && end_doc_ == ds.num_sequences()) {
    E_ = ds.num_tokens();
  } else {
    for (int64_t d = first_doc_; d < end_doc_; ++d) E_ += ds.sequence_length(d);
  }
  if (E_ < int64_t{T_} + 1)
    throw std::invalid_argument("GptSamples: the dataset is shorter than one sample");
  build(num_samples);
}

void GptSamples::build(int64_t num_samples) {
  // _get_num_epochs: enough epochs for num_samples samples of T tokens and the extra one.
  const int64_t want = num_samples * T_ + 1;
  epochs_ = want <= E_ ? 1 : (want + E_ - 1) / E_;
  const int64_t per_epoch = (E_ - 1) / T_;
  if (epochs_ > 1) {
    // separate_final_epoch: a final epoch that gives under 80% of an epoch's samples is
    // shuffled apart, so that its few samples are not all drawn from early documents.
    const int64_t before_final = ((epochs_ - 1) * E_ - 1) / T_;
    separate_ = num_samples - before_final < int64_t(0.80 * double(per_epoch));
  }
  // _build_document_index: numpy.random.RandomState(seed) is MT19937 with Knuth's 32-bit
  // initialisation; the first P (or P - 1) epochs shuffled together, then the final one.
  std::mt19937 rng(static_cast<uint32_t>(seed_));
  const int64_t N = end_doc_ - first_doc_;
  std::vector<int32_t>& doc = document_index_;
  doc.resize(static_cast<size_t>(N * epochs_));
  for (int64_t e = 0; e < epochs_; ++e)
    std::iota(doc.begin() + e * N, doc.begin() + (e + 1) * N, int32_t(first_doc_));
  const int64_t together = separate_ ? N * (epochs_ - 1) : N * epochs_;
  if (shuffle_) {
    numpy_shuffle(doc.data(), size_t(together), rng);
    numpy_shuffle(doc.data() + together, doc.size() - size_t(together), rng);
  }
  S_ = (epochs_ * E_ - 1) / T_;
  // Offsets are below a sequence's length (int32); positions below the document index's size.
  const bool wide_positions =
      force_wide_indices || doc.size() > size_t(std::numeric_limits<int32_t>::max());
  sample_index_.assign(static_cast<size_t>(2 * (S_ + 1)), wide_positions);
  sample_index_.visit([&](auto& si) { build_sample_index(*ds_, doc, T_, si); });
  // _build_shuffle_index: arange(S) (uint32 below 2^32 - 1 samples, int64 from there) shuffled,
  // or the samples before the final epoch and the rest each shuffled on their own.
  const bool wide_samples =
      force_wide_indices || S_ >= int64_t{std::numeric_limits<uint32_t>::max()} - 1;
  shuffle_index_.assign(shuffle_ ? static_cast<size_t>(S_) : 0, wide_samples);
  if (shuffle_) {
    const int64_t together_samples = separate_ ? ((epochs_ - 1) * E_ - 1) / T_ : S_;
    shuffle_index_.visit([&](auto& v) {
      std::iota(v.begin(), v.end(), typename std::decay_t<decltype(v)>::value_type{0});
      numpy_shuffle(v.data(), size_t(together_samples), rng);
      numpy_shuffle(v.data() + together_samples, size_t(S_ - together_samples), rng);
    });
  }
}

GptSamples::Indices GptSamples::indices() const {
  return {document_index_, sample_index_.widened(), shuffle_index_.widened()};
}

int64_t GptSamples::index_bytes() const {
  return int64_t(document_index_.size() * sizeof(int32_t)) + sample_index_.bytes() +
         shuffle_index_.bytes();
}

void GptSamples::sample(int64_t n, int32_t* out) const {
  if (n < 0) throw std::out_of_range("GptSamples: negative sample " + std::to_string(n));
  const int64_t i = n % S_;
  const int64_t j = shuffle_ ? shuffle_index_[static_cast<size_t>(i)] : i;
  const auto& si = sample_index_;
  const std::vector<int32_t>& doc = document_index_;
  const int64_t pb = si[size_t(2 * j)], ob = si[size_t(2 * j + 1)];
  const int64_t pe = si[size_t(2 * j + 2)], oe = si[size_t(2 * j + 3)];
  // GPTDataset._query_document_sample_shuffle_indices: the first document from its offset,
  // the ones between whole, the last up to and including the next sample's first token.
  if (pb == pe) {
    ds_->read(doc[size_t(pb)], ob, oe - ob + 1, out);
    return;
  }
  int32_t* w = out;
  for (int64_t p = pb; p <= pe; ++p) {
    const int32_t id = doc[size_t(p)];
    const int64_t from = p == pb ? ob : 0;
    const int64_t count = p == pe ? oe + 1 : ds_->sequence_length(id) - from;
    ds_->read(id, from, count, w);
    w += count;
  }
  if (w - out != int64_t{T_} + 1)
    throw std::logic_error("GptSamples: sample " + std::to_string(n) + " has " +
                           std::to_string(w - out) + " tokens");
}

BlendOrder::BlendOrder(std::vector<double> weights) : w_(std::move(weights)) {
  if (w_.empty()) throw std::invalid_argument("BlendOrder: no datasets");
  double sum = 0;
  for (double w : w_) {
    if (!(w > 0)) throw std::invalid_argument("BlendOrder: weights must be positive");
    sum += w;
  }
  for (double& w : w_) w /= sum;
  drawn_.assign(w_.size(), 0);
}

void BlendOrder::next_chunk() {
  begin_ = end_;
  chunk_.resize(static_cast<size_t>(kChunk));
  for (int64_t i = begin_; i < begin_ + kChunk; ++i) {
    const double x = std::max(static_cast<double>(i), 1.0);
    size_t best = 0;
    double best_error = w_[0] * x - static_cast<double>(drawn_[0]);
    for (size_t d = 1; d < w_.size(); ++d) {
      const double error = w_[d] * x - static_cast<double>(drawn_[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    chunk_[size_t(i - begin_)] = {static_cast<int>(best), drawn_[best]++};
  }
  end_ = begin_ + kChunk;
}

BlendOrder::Pick BlendOrder::at(int64_t n) {
  if (n < 0) throw std::out_of_range("BlendOrder: negative sample " + std::to_string(n));
  if (n < begin_) {  // asked for an earlier chunk: replay from the start
    std::fill(drawn_.begin(), drawn_.end(), 0);
    begin_ = end_ = 0;
  }
  while (n >= end_) next_chunk();
  return chunk_[size_t(n - begin_)];
}

}  // namespace triad::data
