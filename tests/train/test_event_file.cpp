// TensorBoard's event files from the writer's side: CRC-32C against its published check value,
// the TFRecord framing byte by byte, and a new file for each writer even within one second and
// one process (an earlier file is never opened again). tensorboard_test.sh reads whole runs'
// files back with protobuf's Python module.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "triad/core/io/event_file.hpp"

using namespace triad;
namespace fs = std::filesystem;

namespace {

uint32_t le32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | uint8_t(s[at + size_t(i)]);
  return v;
}

std::string contents(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST(EventFile, Crc32cAndTheRecordFraming) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);  // CRC-32C's check value
  const uint32_t c = crc32c("abc");
  EXPECT_EQ(masked_crc32c("abc"), ((c >> 15) | (c << 17)) + 0xa282ead8u);
  const std::string r = tfrecord("abc");
  ASSERT_EQ(r.size(), 3u + 16u);
  EXPECT_EQ(r.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(le32(r, 8), masked_crc32c(r.substr(0, 8)));
  EXPECT_EQ(r.substr(12, 3), "abc");
  EXPECT_EQ(le32(r, 15), masked_crc32c("abc"));
}

TEST(EventFile, ANewFileEachTimeAndTheOldOneLeftAsItWas) {
  const fs::path dir = fs::temp_directory_path() / "triad-test-event-file";
  fs::remove_all(dir);
  EventFile first(dir / "tb", "logging.tensorboard_dir");
  first.write_scalars(1, {{"lm loss", 5.5}});
  first.write_scalars(2, {});  // nothing
  first.close();
  const std::string before = contents(first.path());
  EXPECT_EQ(first.path().filename().string().rfind("events.out.tfevents.", 0), 0u);
  EventFile second(dir / "tb", "logging.tensorboard_dir");
  second.write_scalars(3, {{"lm loss", 4.5}});
  second.close();
  EXPECT_NE(first.path(), second.path());
  EXPECT_EQ(contents(first.path()), before);
  // The version record and one scalar record: each is 16 bytes of framing around its Event.
  size_t at = 0, records = 0;
  while (at + 12 <= before.size()) {
    uint64_t n = 0;
    std::memcpy(&n, before.data() + at, 8);
    at += 16 + n;
    ++records;
  }
  EXPECT_EQ(at, before.size());
  EXPECT_EQ(records, 2u);
  fs::remove_all(dir);
}
