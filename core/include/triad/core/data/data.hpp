// Data loaders: synthetic (seeded random tokens), text (UTF-8 file, byte-level tokens),
// tokens (flat uint16 file, nanoGPT raw or llm.c with its 256-int32 header) and indexed
// (Megatron's .bin/.idx datasets, triad/core/data/indexed_dataset.hpp, alone or blended).
//
// text and tokens: sample n of the run covers tokens [n*T, n*T + T + 1) of the stream
// (wrapping at the end, window w = n mod number_of_windows); inputs are the first T, targets
// the last T. With shuffle: true the windows of each epoch are visited in a seeded permutation.
// indexed: Megatron GPTDataset's document, sample and shuffle indices, one epoch at a time, and
// BlendedDataset's greedy blend (core/src/data/gpt_samples.hpp); with shuffle: true the first
// epoch's order is Megatron's for the same seed.
// Step s's global batch is samples s*G .. s*G+G-1 (G = global batch). Micro-batch i on
// data-parallel rank r holds samples s*G + (i*dp + r)*B + j, j in [0,B): DP = 1, 2, 4 see the
// same global batch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "triad/core/config/config.hpp"

namespace triad {

class DataLoader {
 public:
  virtual ~DataLoader() = default;
  // Fills inputs and targets, each (B,T) int32, for micro-batch `micro` of step `step`
  // (both from 0) on this data-parallel rank.
  virtual void micro_batch(int64_t step, int micro, int32_t* inputs, int32_t* targets) = 0;
  virtual int64_t num_tokens() const = 0;  // tokens in the stream (0 for synthetic)
  virtual std::string describe() const = 0;
};

// Megatron's --split "969,30,1": each dataset's train, validation and test parts. Indexed
// datasets split their documents; text and tokens files (no documents) their windows; synthetic
// data draws each part from its own seed.
enum class DataPart { train = 0, valid = 1, test = 2 };
const char* part_name(DataPart p);  // "training", "validation", "test"

// Items [begin, end) of n that `part` of `split` gets, by Megatron's rule (weights a,b,c
// normalized, each part round(w·n) items, Python's rounding, the last part absorbing the
// difference). An empty split gives everything to training. Throws UserError naming data.split
// when it does not parse (up to three non-negative numbers separated by ',' or '/', not all 0).
std::pair<int64_t, int64_t> split_range(const std::string& split, int64_t n, DataPart part);

// Validates the source (file exists, not truncated, token ids < vocab, long enough for one
// window) and the batch layout (global a multiple of micro × dp) and throws UserError naming
// the file, the problem and the fix. Shuffling and synthetic tokens use data.seed, or `seed`
// (training.seed) when data.seed is 0.
// `part` of data.split: a part with fewer tokens than one sample is refused (naming the part,
// the file and data.split).
std::unique_ptr<DataLoader> make_data_loader(const DataConfig& data, const ModelConfig& model,
                                             int micro_batch_size, int global_batch_size,
                                             uint64_t seed, int dp_rank, int dp_size,
                                             DataPart part = DataPart::train);

}  // namespace triad
