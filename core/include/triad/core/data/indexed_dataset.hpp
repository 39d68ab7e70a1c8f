// Megatron-LM's indexed datasets (the MMIDIDX format that megatron/core/datasets/
// indexed_dataset.py reads and writes, and tools/preprocess_data.py produces): a dataset is a
// prefix naming two files.
//
//   PREFIX.bin  the tokens of every sequence, back to back, each token one `dtype` element.
//   PREFIX.idx  little-endian, packed (no padding):
//                 9 bytes   magic "MMIDIDX\0\0"
//                 u64       version, 1
//                 u8        dtype code (Megatron's DType enum): 1 uint8, 2 int8, 3 int16,
//                           4 int32, 5 int64, 6 float64, 7 float32, 8 uint16
//                 u64       sequence count N
//                 u64       document count D, which counts the leading 0 below (documents + 1)
//                 int32 × N the length of each sequence, in tokens
//                 int64 × N the byte offset of each sequence in PREFIX.bin
//                 int64 × D the document index: 0, then for each document the number of
//                           sequences up to its end (so the last entry is N)
//               The header is 34 bytes, so the arrays are not aligned; they are read with
//               memcpy. (A multimodal dataset appends one int8 mode per sequence; Triad reads
//               text datasets only and refuses the extra bytes.)
//
// Megatron's GPT datasets treat each sequence as a document (preprocess_data.py without
// --split-sentences writes one sequence per document). Token ids are integers; float dtypes are
// refused.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace triad {

enum class IndexedDType : uint8_t {
  uint8 = 1,
  int8 = 2,
  int16 = 3,
  int32 = 4,
  int64 = 5,
  float64 = 6,
  float32 = 7,
  uint16 = 8,
};

// "uint16", "int32", ...; "code N" for a code outside the enum.
std::string dtype_name(uint8_t code);
// Bytes per element; 0 for a code outside the enum.
int dtype_size(uint8_t code);
// Megatron's DType.optimal_dtype: uint16 for a vocabulary of fewer than 65500 ids, else int32.
IndexedDType optimal_dtype(int64_t vocab_size);

// A dataset mapped read-only (both files are memory-mapped and read in place). Opening
// validates the whole index against the two file sizes and throws UserError naming the file,
// what is wrong with it and the fix: a missing file, a wrong magic, version or dtype code, an
// .idx whose size disagrees with its counts, a document index that does not run from 0 to N,
// a sequence outside the .bin, a .bin longer than its sequences.
class IndexedDataset {
 public:
  explicit IndexedDataset(const std::string& prefix);
  ~IndexedDataset();
  IndexedDataset(IndexedDataset&&) noexcept;
  IndexedDataset& operator=(IndexedDataset&&) noexcept;

  const std::string& prefix() const;
  IndexedDType dtype() const;
  int64_t num_sequences() const;
  // Documents (the document index holds one entry more: its leading 0).
  int64_t num_documents() const;
  int64_t num_tokens() const;  // the sum of the sequence lengths
  int32_t sequence_length(int64_t i) const;
  int64_t sequence_pointer(int64_t i) const;  // byte offset in .bin
  int64_t document_index(int64_t i) const;    // i in [0, num_documents()]

  // Tokens [offset, offset + count) of sequence i, as int32 (ids are checked against the
  // vocabulary by the caller: see token_range()). Throws std::out_of_range past the sequence.
  void read(int64_t i, int64_t offset, int64_t count, int32_t* out) const;
  std::vector<int32_t> sequence(int64_t i) const;
  // The smallest and largest token id in the .bin (one pass over the file); {0, -1} when empty.
  std::pair<int64_t, int64_t> token_range() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes PREFIX.bin and PREFIX.idx as Megatron's IndexedDatasetBuilder does (same bytes for the
// same documents and dtype). Both are written under temporary names beside their final ones
// (PREFIX.bin.tmp-<pid>-<n>), flushed to disk (fsync) and renamed into place by finish(): a
// reader never sees a half-written file, and a writer destroyed without finish() (an error
// elsewhere) removes its temporary files and leaves nothing behind. Not thread-safe.
class IndexedDatasetWriter {
 public:
  // Throws UserError (naming the path and the fix) when the folder does not exist or cannot be
  // written. key: what named the prefix, for messages (triad-preprocess: "--output-prefix").
  IndexedDatasetWriter(const std::string& prefix, IndexedDType dtype,
                       const std::string& key = "output prefix");
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Appends one document of one sequence (Megatron's add_document(tokens, [len(tokens)])).
  // Throws UserError for an id the dtype cannot hold.
  void add_document(const int32_t* tokens, size_t count);
  void add_document(const std::vector<int32_t>& tokens) {
    add_document(tokens.data(), tokens.size());
  }
  // Appends one document of several sequences (lengths sum to count), as preprocess_data.py
  // --split-sentences does.
  void add_document(const int32_t* tokens, size_t count, const std::vector<int32_t>& lengths);

  // Writes the index, syncs both files and renames them into place (.bin first, then .idx).
  // Throws UserError when a write fails (the temporary files are removed).
  void finish();

  int64_t num_documents() const { return static_cast<int64_t>(doc_index_.size()) - 1; }
  int64_t num_tokens() const { return tokens_; }
  int64_t bytes_written() const { return bin_bytes_; }

 private:
  void write_bin(const void* data, size_t n);
  void discard() noexcept;

  std::string prefix_;
  IndexedDType dtype_;
  int item_;
  std::string bin_tmp_, idx_tmp_;
  int bin_fd_ = -1;
  std::vector<char> buf_;  // .bin bytes not yet written
  std::vector<int32_t> lengths_;
  std::vector<int64_t> pointers_;
  std::vector<int64_t> doc_index_{0};
  int64_t tokens_ = 0, bin_bytes_ = 0;
  bool finished_ = false;
};

}  // namespace triad
