// Data loaders: synthetic (seeded random tokens), text (UTF-8 file, byte-level tokens),
// tokens (flat uint16 file, nanoGPT raw or llm.c with its 256-int32 header) and indexed
// (Megatron's .bin/.idx datasets, triad/core/data/indexed_dataset.hpp, alone or blended).
//
// text and tokens: sample n of the run covers tokens [n*T, n*T + T + 1) of the stream
// (wrapping at the end, window w = n mod number_of_windows); inputs are the first T, targets
// the last T. With shuffle: true the windows of each epoch are visited in a seeded permutation.
// indexed: Megatron GPTDataset's document, sample and shuffle indices over every epoch the run
// needs, and BlendedDataset's greedy blend (core/src/data/gpt_samples.hpp); with shuffle: true
// the order is Megatron's for the same seed and run length.
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

// Items [begin, end) of n that `part` of `split` gets (weights a,b,c normalized), by the rule of
// data.builder: megatron-deepspeed (Megatron-DeepSpeed's get_train_valid_test_split_: each part
// round(w·n) items, Python's rounding, all shifted to end at n) or megatron-lm (Megatron-LM
// core's round(c·n) of each cumulative boundary c). An empty split gives everything to training.
// Throws UserError naming data.split when it does not parse (up to three non-negative numbers
// separated by ',' or '/', not all 0).
std::pair<int64_t, int64_t> split_range(const std::string& split, int64_t n, DataPart part,
                                        const std::string& builder = "megatron-deepspeed");

// Validates the source (file exists, not truncated, token ids < vocab, long enough for one
// window) and the batch layout (global a multiple of micro × dp) and throws UserError naming
// the file, the problem and the fix. Shuffling and synthetic tokens use data.seed, or `seed`
// (training.seed) when data.seed is 0.
// `part` of data.split: a part with fewer tokens than one sample is refused (naming the part,
// the file and data.split).
// num_samples (data.kind indexed): the samples the run will draw from this part, which decide
// how many epochs Megatron's indices span and so the order (megatron_num_samples); 0: not known,
// one epoch.
std::unique_ptr<DataLoader> make_data_loader(const DataConfig& data, const ModelConfig& model,
                                             int micro_batch_size, int global_batch_size,
                                             uint64_t seed, int dp_rank, int dp_size,
                                             DataPart part = DataPart::train,
                                             int64_t num_samples = 0);

// The samples Megatron builds a part's dataset for (training.py
// build_train_valid_test_data_loaders): train train_iters × global batch; valid
// (train_iters / eval_interval + 1) × eval_iters × global batch (0 without evaluation); test
// eval_iters × global batch.
int64_t megatron_num_samples(const TrainingConfig& t, DataPart part);

}  // namespace triad
