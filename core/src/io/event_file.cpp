#include "triad/core/io/event_file.hpp"

#include <unistd.h>

#include <boost/crc.hpp>
#include <chrono>
#include <climits>
#include <cstring>

#include "proto/tb_event.pb.h"
#include "triad/core/error.hpp"

namespace triad {

namespace fs = std::filesystem;

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}

std::string serialized(const tb::Event& event) {
  std::string data;
  if (!event.SerializeToString(&data))
    throw std::logic_error("a TensorBoard event could not be serialized");
  return data;
}

}  // namespace

uint32_t crc32c(std::string_view bytes) {
  // Castagnoli's polynomial, reflected, initial value and final xor all ones.
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(bytes.data(), bytes.size());
  return crc.checksum();
}

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out), 4);
  out.append(data);
  put_le(out, masked_crc32c(data), 4);
  return out;
}

EventFile::EventFile(const fs::path& dir, const std::string& key) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw UserError(key + " '" + dir.string() + "' cannot be created: " + ec.message() +
                    "; choose a folder you can write");
  const std::string stem = "events.out.tfevents." + std::to_string(int64_t(now_seconds())) + "." +
                           host_name() + "." + std::to_string(::getpid()) + ".";
  for (int n = 0; !file_ || !file_->is_open(); ++n)
    file_.emplace(dir / (stem + std::to_string(n)), RecordFile::Open::create_new, key);
  tb::Event version;
  version.set_wall_time(now_seconds());
  version.set_file_version("brain.Event:2");
  file_->write(tfrecord(serialized(version)));
}

void EventFile::write_scalars(int64_t step, const Scalars& values) {
  if (values.empty()) return;
  tb::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(step);
  tb::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : values) {
    tb::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(float(value));
  }
  file_->write(tfrecord(serialized(event)));
}

}  // namespace triad
