// TensorBoard event files: TFRecord framing (each record: its length as a little-endian uint64,
// the masked CRC-32C of those 8 bytes, the data, the masked CRC-32C of the data) around Event
// messages (core/proto/tb_event.proto). The first record carries the file version
// "brain.Event:2"; each later one a Summary of scalars at one step.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "triad/core/io/files.hpp"

namespace triad {

// CRC-32C (Castagnoli) of `bytes`, and TFRecord's mask of a CRC (rotated right by 15 bits, plus
// 0xa282ead8), which keeps a CRC of data that holds CRCs from looking like one.
uint32_t crc32c(std::string_view bytes);
uint32_t masked_crc32c(std::string_view bytes);

// One TFRecord: the framing around `data`.
std::string tfrecord(std::string_view data);

using Scalars = std::vector<std::pair<std::string, double>>;

class EventFile {
 public:
  // A new file in `dir` (created if missing), named as TensorBoard names its own:
  // events.out.tfevents.<unix time>.<hostname>.<pid>.<n>, n the first number for which no such
  // file exists (an existing file is never opened), with the file-version record written.
  // key: the config key that chose the folder (for messages).
  EventFile(const std::filesystem::path& dir, const std::string& key);
  const std::filesystem::path& path() const { return file_->path(); }
  // One Event at `step` (and the current wall time) holding `values` as float scalars; nothing
  // when `values` is empty. In the page cache when this returns.
  void write_scalars(int64_t step, const Scalars& values);
  void close() { file_->close(); }

 private:
  std::optional<RecordFile> file_;
};

}  // namespace triad
