#include "triad/core/data/data.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "blend.hpp"
#include "gpt_samples.hpp"
#include "mapped_file.hpp"
#include "sample_order.hpp"
#include "token_file.hpp"
#include "triad/core/data/indexed_dataset.hpp"
#include "triad/core/error.hpp"
#include "triad/core/tokenizer/tokenizer.hpp"

namespace triad {

namespace {

using data::BatchLayout;
using data::MappedFile;
using data::WindowOrder;

// Windows of T+1 tokens over a token stream held in a mapping: text (bytes) or tokens
// (uint16). Window w is tokens [w*T, w*T+T+1): consecutive windows share one token, so
// every token but the first is a target exactly once per epoch.
template <typename Tok>
class WindowLoader final : public DataLoader {
 public:
  // Windows [first, end) of the stream (a part of data.split; all by default). The tokens are in
  // `file`, or in `owned` (a text tokenized when it was opened).
  WindowLoader(std::string label, MappedFile file, const Tok* tokens, int64_t count, int T,
               BatchLayout layout, bool shuffle, uint64_t seed, std::pair<int64_t, int64_t> windows,
               std::vector<Tok> owned = {})
      : label_(std::move(label)),
        file_(std::move(file)),
        owned_(std::move(owned)),
        tokens_(owned_.empty() ? tokens : owned_.data()),
        count_(count),
        T_(T),
        layout_(layout),
        first_(windows.first),
        order_(windows.second - windows.first, shuffle, seed),
        shuffle_(shuffle) {}

  void micro_batch(int64_t step, int micro, int32_t* inputs, int32_t* targets) override {
    for (int j = 0; j < layout_.micro_batch(); ++j) {
      const Tok* w = tokens_ + (first_ + order_.window(layout_.sample(step, micro, j))) * T_;
      std::copy(w, w + T_, inputs + int64_t{j} * T_);
      std::copy(w + 1, w + 1 + T_, targets + int64_t{j} * T_);
    }
  }
  int64_t num_tokens() const override { return count_; }
  std::string describe() const override {
    const int64_t all = (count_ - 1) / T_;
    return label_ + " (" + std::to_string(count_) + " tokens, " +
           (order_.num_windows() == all ? std::to_string(all)
                                        : "windows " + std::to_string(first_) + ".." +
                                              std::to_string(first_ + order_.num_windows()) +
                                              " of " + std::to_string(all) + ":") +
           " windows of " + std::to_string(T_) + "+1" + (shuffle_ ? ", shuffled" : "") + ")";
  }

 private:
  std::string label_;
  MappedFile file_;
  std::vector<Tok> owned_;
  const Tok* tokens_;
  int64_t count_;
  int T_;
  BatchLayout layout_;
  int64_t first_;
  WindowOrder order_;
  bool shuffle_;
};

// Uniform random tokens, each a hash of (seed, sample, position): any sample on any rank is
// produced without state, and the stream never repeats.
class SyntheticLoader final : public DataLoader {
 public:
  SyntheticLoader(int vocab, int T, BatchLayout layout, uint64_t seed)
      : V_(vocab), T_(T), layout_(layout), seed_(seed) {}

  void micro_batch(int64_t step, int micro, int32_t* inputs, int32_t* targets) override {
    for (int j = 0; j < layout_.micro_batch(); ++j) {
      const uint64_t key = data::mix(seed_, static_cast<uint64_t>(layout_.sample(step, micro, j)));
      int32_t* in = inputs + int64_t{j} * T_;
      int32_t* tg = targets + int64_t{j} * T_;
      for (int t = 0; t <= T_; ++t) {
        const int32_t tok = token(key, t);
        if (t < T_) in[t] = tok;
        if (t > 0) tg[t - 1] = tok;
      }
    }
  }
  int64_t num_tokens() const override { return 0; }
  std::string describe() const override {
    return "synthetic (uniform tokens in [0, " + std::to_string(V_) + "), seed " +
           std::to_string(seed_) + ", samples of " + std::to_string(T_) + "+1)";
  }

 private:
  // The high half of hash × V: uniform in [0, V) without the bias of hash % V.
  int32_t token(uint64_t key, int t) const {
    const unsigned __int128 h = data::splitmix64(key ^ static_cast<uint64_t>(t));
    return static_cast<int32_t>((h * static_cast<unsigned>(V_)) >> 64);
  }

  int V_, T_;
  BatchLayout layout_;
  uint64_t seed_;
};

void require_one_window(int64_t count, int T, const std::string& what) {
  if (count < int64_t{T} + 1)
    throw UserError(what + " has " + std::to_string(count) + " tokens but one sample of " +
                    "model.seq_length " + std::to_string(T) + " needs " +
                    std::to_string(int64_t{T} + 1) +
                    "; use a longer file or a smaller model.seq_length");
}

// The windows of a stream of `count` tokens that `part` of data.split gets; a part without
// one is refused.
std::pair<int64_t, int64_t> part_windows(const DataConfig& d, int64_t count, int T, DataPart part,
                                         const std::string& what) {
  const int64_t all = (count - 1) / T;
  const auto r = split_range(d.split, all, part, d.builder);
  if (r.second <= r.first)
    throw UserError("data.split '" + d.split + "' leaves the " + part_name(part) + " part of " +
                    what + " no sample (its " + std::to_string(all) + " windows of " +
                    std::to_string(T) + "+1 tokens are split by weight); give the " +
                    part_name(part) + " part a larger share, or use a longer file");
  return r;
}

std::unique_ptr<DataLoader> make_text(const DataConfig& d, const ModelConfig& m, BatchLayout layout,
                                      uint64_t seed, DataPart part) {
  if (m.vocab_size < 256)
    throw UserError("data.kind text uses byte tokens 0..255 but model.vocab_size is " +
                    std::to_string(m.vocab_size) + "; set vocab_size ≥ 256");
  MappedFile f(d.path, "data.path (data.kind text)");
  if (f.size() == 0)
    throw UserError("text file '" + d.path + "' is empty; point data.path at a text file");
  if (d.tokenizer == "gpt2") {
    // GPT-2's BPE over the whole file, once, as it opens (about 2 M tokens/s).
    const Gpt2Files files = gpt2_files(d.vocab_file, d.merge_file);
    const Gpt2Tokenizer tok = Gpt2Tokenizer::load(files.encoder_json, files.vocab_bpe);
    const std::vector<int32_t> ids =
        tok.encode(std::string_view(reinterpret_cast<const char*>(f.data()), f.size()));
    const auto count = static_cast<int64_t>(ids.size());
    require_one_window(count, m.seq_length, "text file '" + d.path + "' (GPT-2 tokens)");
    const auto windows = part_windows(d, count, m.seq_length, part, "text file '" + d.path + "'");
    return std::make_unique<WindowLoader<uint16_t>>(
        "text " + d.path + " [GPT-2 BPE]", std::move(f), nullptr, count, m.seq_length, layout,
        d.shuffle, seed, windows, std::vector<uint16_t>(ids.begin(), ids.end()));
  }
  const auto count = static_cast<int64_t>(f.size());
  require_one_window(count, m.seq_length, "text file '" + d.path + "'");
  const auto windows = part_windows(d, count, m.seq_length, part, "text file '" + d.path + "'");
  const uint8_t* bytes = f.data();
  return std::make_unique<WindowLoader<uint8_t>>("text " + d.path, std::move(f), bytes, count,
                                                 m.seq_length, layout, d.shuffle, seed, windows);
}

std::unique_ptr<DataLoader> make_tokens(const DataConfig& d, const ModelConfig& m,
                                        BatchLayout layout, uint64_t seed, DataPart part) {
  data::TokenFile t = data::open_token_file(d.path, m.vocab_size);
  require_one_window(t.count, m.seq_length, "tokens file '" + d.path + "'");
  const auto windows = part_windows(d, t.count, m.seq_length, part, "tokens file '" + d.path + "'");
  return std::make_unique<WindowLoader<uint16_t>>(
      std::string("tokens ") + d.path + " [" + t.format + "]", std::move(t.file), t.tokens, t.count,
      m.seq_length, layout, d.shuffle, seed, windows);
}

// Megatron GPT samples (data/gpt_samples.hpp) over one indexed dataset, or Megatron's blend of
// several: sample n of the run is the blend's pick n, that dataset's own sample number.
class IndexedLoader final : public DataLoader {
 public:
  struct Source {
    std::unique_ptr<IndexedDataset> ds;  // stable address: samples points at it
    std::unique_ptr<data::GptSamples> samples;
    double weight = 1;  // normalized
  };

  IndexedLoader(std::vector<Source> sources, int T, BatchLayout layout, bool shuffle)
      : sources_(std::move(sources)), T_(T), layout_(layout), shuffle_(shuffle), buf_(T + 1) {
    if (sources_.size() > 1) {
      std::vector<double> w;
      for (const Source& s : sources_) w.push_back(s.weight);
      blend_ = std::make_unique<data::BlendOrder>(std::move(w));
    }
  }

  void micro_batch(int64_t step, int micro, int32_t* inputs, int32_t* targets) override {
    for (int j = 0; j < layout_.micro_batch(); ++j) {
      const int64_t n = layout_.sample(step, micro, j);
      const data::BlendOrder::Pick p = blend_ ? blend_->at(n) : data::BlendOrder::Pick{0, n};
      sources_[size_t(p.dataset)].samples->sample(p.sample, buf_.data());
      std::copy(buf_.begin(), buf_.begin() + T_, inputs + int64_t{j} * T_);
      std::copy(buf_.begin() + 1, buf_.end(), targets + int64_t{j} * T_);
    }
  }
  int64_t num_tokens() const override {
    int64_t n = 0;
    for (const Source& s : sources_) n += s.ds->num_tokens();
    return n;
  }
  std::string describe() const override {
    std::ostringstream o;
    o << "indexed ";
    if (sources_.size() > 1) o << "blend of " << sources_.size() << ": ";
    for (size_t k = 0; k < sources_.size(); ++k) {
      const Source& s = sources_[k];
      if (k) o << ", ";
      if (sources_.size() > 1) o << std::setprecision(4) << s.weight << " ";
      o << s.ds->prefix() << " (" << s.ds->num_documents() << " documents, " << s.ds->num_tokens()
        << " tokens, " << dtype_name(uint8_t(s.ds->dtype())) << ", "
        << s.samples->samples_per_epoch() << " samples of " << T_ << "+1 per epoch)";
    }
    if (shuffle_) o << ", shuffled";
    return o.str();
  }

 private:
  std::vector<Source> sources_;
  int T_;
  BatchLayout layout_;
  bool shuffle_;
  std::vector<int32_t> buf_;
  std::unique_ptr<data::BlendOrder> blend_;
};

// The samples a blend asks of a dataset of normalized weight w when the run draws n (each
// dataset's epochs follow from them): Megatron-LM's _get_size_per_split_per_dataset
// ceil(ceil(n·w)·1.005), Megatron-DeepSpeed's ceil(n·w·1.005).
int64_t blend_share(int64_t n, double w, const std::string& builder) {
  const double x = double(n) * w;
  return int64_t(std::ceil(builder == "megatron-lm" ? std::ceil(x) * 1.005 : x * 1.005));
}

std::unique_ptr<DataLoader> make_indexed(const DataConfig& d, const ModelConfig& m,
                                         BatchLayout layout, uint64_t seed, DataPart part,
                                         int64_t num_samples) {
  std::vector<data::BlendEntry> entries;
  if (d.path_list.empty()) {
    entries.push_back({0.0, d.path});
  } else if (const data::BlendProblem bad = data::parse_blend(d.path_list, entries); !bad.ok()) {
    throw UserError(bad.message(""));
  }
  // Megatron normalizes the weights given (numpy's float64 sum, in order).
  double given = 0;
  for (const data::BlendEntry& e : entries) given += e.weight;
  std::vector<IndexedLoader::Source> sources;
  for (const data::BlendEntry& e : entries) {
    IndexedLoader::Source s;
    s.ds = std::make_unique<IndexedDataset>(e.prefix);
    const IndexedDataset& ds = *s.ds;
    const std::string name = "indexed dataset '" + e.prefix + "'";
    require_one_window(ds.num_tokens(), m.seq_length, name);
    // Every id below the vocabulary: one pass over the .bin, skipped when the dtype is
    // unsigned and cannot hold an id that large.
    const bool fits = (ds.dtype() == IndexedDType::uint8 && m.vocab_size > 0xff) ||
                      (ds.dtype() == IndexedDType::uint16 && m.vocab_size > 0xffff);
    const auto [lo, hi] = fits ? std::pair<int64_t, int64_t>{0, 0} : ds.token_range();
    if (lo < 0)
      throw UserError(name + ": " + e.prefix + ".bin holds the negative token id " +
                      std::to_string(lo) +
                      "; token ids run from 0, so the file is corrupt or "
                      "was written with another dtype; regenerate it");
    if (hi >= m.vocab_size)
      throw UserError(name + ": the largest token id in " + e.prefix + ".bin is " +
                      std::to_string(hi) + ", not below model.vocab_size " +
                      std::to_string(m.vocab_size) + "; set model.vocab_size ≥ " +
                      std::to_string(hi + 1) +
                      " (GPT-2's tokenizer needs 50257) or use a dataset from a matching "
                      "tokenizer");
    // Megatron splits each dataset's documents; this part's must hold one sample.
    const auto [first, end] = split_range(d.split, ds.num_sequences(), part, d.builder);
    int64_t tokens = 0;
    for (int64_t k = first; k < end; ++k) tokens += ds.sequence_length(k);
    if (tokens < int64_t{m.seq_length} + 1)
      throw UserError("data.split '" + d.split + "' leaves the " + part_name(part) + " part of " +
                      name + " " + std::to_string(end - first) + " documents with " +
                      std::to_string(tokens) + " tokens, fewer than one sample of " +
                      std::to_string(m.seq_length + 1) + "; give the " + part_name(part) +
                      " part a larger share");
    // One dataset draws the run's samples; a weighted blend its share and a surplus; prefixes
    // without weights one epoch each (Megatron builds them with num_samples None).
    const int64_t wanted = entries.size() == 1 ? num_samples
                           : e.weight > 0 ? blend_share(num_samples, e.weight / given, d.builder)
                                          : 0;
    s.samples =
        std::make_unique<data::GptSamples>(ds, m.seq_length, d.shuffle, seed, first, end, wanted);
    // Prefixes without weights blend in proportion to their size, as Megatron's do.
    s.weight = e.weight > 0 ? e.weight : double(s.samples->samples_per_epoch());
    sources.push_back(std::move(s));
  }
  double sum = 0;
  for (const auto& s : sources) sum += s.weight;
  for (auto& s : sources) s.weight /= sum;
  return std::make_unique<IndexedLoader>(std::move(sources), m.seq_length, layout, d.shuffle);
}

}  // namespace

int64_t megatron_num_samples(const TrainingConfig& t, DataPart part) {
  const int64_t batch = t.global_batch_size;
  switch (part) {
    case DataPart::train:
      return t.train_samples > 0 ? t.train_samples : int64_t{t.train_iters} * batch;
    case DataPart::valid:
      return t.eval_interval > 0
                 ? (int64_t{t.train_iters} / t.eval_interval + 1) * t.eval_iters * batch
                 : 0;
    case DataPart::test:
      return int64_t{t.eval_iters} * batch;
  }
  return 0;
}

std::unique_ptr<DataLoader> make_data_loader(const DataConfig& data, const ModelConfig& model,
                                             int micro_batch_size, int global_batch_size,
                                             uint64_t seed, int dp_rank, int dp_size, DataPart part,
                                             int64_t num_samples) {
  if (model.seq_length < 1)
    throw UserError("model.seq_length is " + std::to_string(model.seq_length) +
                    "; set it to at least 1");
  if (model.vocab_size < 1)
    throw UserError("model.vocab_size is " + std::to_string(model.vocab_size) +
                    "; set it to at least 1");
  const BatchLayout layout(micro_batch_size, global_batch_size, dp_rank, dp_size);
  const uint64_t base = data.seed != 0 ? data.seed : seed;
  // Synthetic data has no parts to split: validation and test draw from their own seeds.
  const uint64_t s =
      data.kind == "synthetic" && part != DataPart::train ? data::mix(base, uint64_t(part)) : base;
  if (data.kind == "synthetic")
    return std::make_unique<SyntheticLoader>(model.vocab_size, model.seq_length, layout, s);
  if (data.kind != "text" && data.kind != "tokens" && data.kind != "indexed")
    throw UserError("data.kind '" + data.kind +
                    "' is unknown; use synthetic, text, tokens or indexed");
  if (data.path.empty() && data.path_list.empty())
    throw UserError("data.kind " + data.kind + " needs data.path; set it to the " +
                    (data.kind == "text"     ? "text file"
                     : data.kind == "tokens" ? "uint16 token file"
                                             : "prefix of the .bin/.idx pair") +
                    " to train on");
  if (data.kind == "indexed") return make_indexed(data, model, layout, s, part, num_samples);
  if (!data.path_list.empty())
    throw UserError(
        "data.path is a list, which only data.kind indexed takes (a blend of "
        "datasets); give data.kind " +
        data.kind + " one file");
  return data.kind == "text" ? make_text(data, model, layout, s, part)
                             : make_tokens(data, model, layout, s, part);
}

}  // namespace triad
