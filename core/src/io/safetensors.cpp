#include "triad/core/io/safetensors.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "triad/core/error.hpp"
#include "triad/core/io/files.hpp"
#include "triad/sdk/half.hpp"

namespace triad::safetensors {

namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian and tensor bytes are copied as they are");

// The dtypes of the reference implementation, with their sizes in bytes.
const std::map<std::string, uint64_t>& dtype_sizes() {
  static const std::map<std::string, uint64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  return sizes;
}

std::string known_dtypes() {
  std::string s;
  for (const auto& [name, size] : dtype_sizes()) s += (s.empty() ? "" : ", ") + name;
  return s;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw UserError("safetensors file '" + path_ + "' " + what);
  }

  // Reads exactly n bytes at off; a short read means the file shrank under us or lied.
  void read_at(int fd, void* buf, uint64_t n, uint64_t off) const {
    auto* p = static_cast<char*>(buf);
    while (n > 0) {
      const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail(std::string("cannot be read: ") + std::strerror(errno));
      if (r == 0) fail("is truncated: it ended while reading byte " + std::to_string(off));
      p += r;
      off += static_cast<uint64_t>(r);
      n -= static_cast<uint64_t>(r);
    }
  }

  uint64_t unsigned_int(const nlohmann::json& v, const std::string& where) const {
    if (!v.is_number_unsigned()) fail(where + " is " + v.dump() + ", not a non-negative integer");
    return v.get<uint64_t>();
  }

 private:
  std::string path_;
};

struct Entry {
  std::string name;
  uint64_t begin, end;
};

std::string offsets_str(const Entry& e) {
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "[" + std::string&&.
  std::string s = "[";
  s += std::to_string(e.begin);
  s += ", ";
  s += std::to_string(e.end);
  s += "]";
  return s;
}

TensorData parse_tensor(const Reader& r, const std::string& name, const nlohmann::json& v,
                        Entry& entry) {
  const std::string t = "tensor '" + name + "'";
  if (!v.is_object()) r.fail("header: " + t + " is " + v.dump() + ", not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) r.fail("header: " + t + " has no \"" + key + "\"");
  TensorData td;
  const auto& dt = v["dtype"];
  if (!dt.is_string()) r.fail("header: " + t + " dtype is " + dt.dump() + ", not a string");
  td.dtype = dt.get<std::string>();
  const auto size = dtype_sizes().find(td.dtype);
  if (size == dtype_sizes().end())
    r.fail("header: " + t + " has unknown dtype '" + td.dtype + "' (known: " + known_dtypes() +
           ")");
  const auto& shape = v["shape"];
  if (!shape.is_array()) r.fail("header: " + t + " shape is " + shape.dump() + ", not an array");
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto& d : shape) {
    const uint64_t n = r.unsigned_int(d, "header: " + t + " shape entry");
    td.shape.push_back(static_cast<int64_t>(n));
    overflow |= __builtin_mul_overflow(numel, n, &numel);
  }
  const auto& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2)
    r.fail("header: " + t + " data_offsets is " + off.dump() + ", not [begin, end]");
  entry = {name, r.unsigned_int(off[0], "header: " + t + " data_offsets begin"),
           r.unsigned_int(off[1], "header: " + t + " data_offsets end")};
  if (entry.end < entry.begin)
    r.fail("header: " + t + " data_offsets " + offsets_str(entry) + " end before they begin");
  uint64_t need = 0;
  overflow |= __builtin_mul_overflow(numel, size->second, &need);
  if (overflow || need != entry.end - entry.begin)
    r.fail("header: " + t + " (" + td.dtype + ", shape " + shape.dump() + ") needs " +
           (overflow ? std::string("more than 2^64") : std::to_string(need)) +
           " bytes but its data_offsets " + offsets_str(entry) + " hold " +
           std::to_string(entry.end - entry.begin));
  return td;
}

// The reference implementation's rule: tensors tile the data region exactly, in offset
// order, with no gap, no overlap and nothing after the last one.
void check_tiling(const Reader& r, std::vector<Entry>& entries, uint64_t data_size,
                  uint64_t file_size, uint64_t header_size) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t next = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < next)
      r.fail("header: tensors '" + prev->name + "' " + offsets_str(*prev) + " and '" + e.name +
             "' " + offsets_str(e) + " overlap");
    if (e.begin > next)
      r.fail("header: data bytes [" + std::to_string(next) + ", " + std::to_string(e.begin) +
             ") before tensor '" + e.name + "' belong to no tensor; the offsets are corrupt");
    next = e.end;
    prev = &e;
  }
  if (next > data_size)
    r.fail("is truncated: tensor '" + prev->name + "' data_offsets " + offsets_str(*prev) +
           " reach past the " + std::to_string(data_size) + " bytes of data present (file is " +
           std::to_string(file_size) + " bytes, its header needs " +
           std::to_string(8 + header_size + next) + ")");
  if (next < data_size)
    r.fail("has " + std::to_string(data_size - next) +
           " bytes after the last tensor's data that no data_offsets cover; the header or the "
           "file is corrupt");
}

}  // namespace

std::vector<float> TensorData::to_f32() const {
  const uint64_t elem = dtype == "F32" ? 4 : (dtype == "F16" || dtype == "BF16") ? 2 : 0;
  if (elem == 0)
    throw UserError("a " + dtype +
                    " tensor cannot be read as float32; only F32, F16 and BF16 convert");
  if (bytes.size() % elem != 0)
    throw UserError("a " + dtype + " tensor holds " + std::to_string(bytes.size()) +
                    " bytes, not a whole number of elements");
  std::vector<float> out(bytes.size() / elem);
  if (dtype == "F32") {
    // An empty tensor's data() may be null, which memcpy must never be given.
    if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t v;
    std::memcpy(&v, bytes.data() + 2 * i, 2);
    out[i] = dtype == "F16" ? sdk::fp16_to_float(v) : sdk::bf16_to_float(v);
  }
  return out;
}

namespace {

// What the header says: the tensors (without their bytes) and where the data region begins.
struct Parsed {
  File file;  // tensors' dtype and shape; bytes left empty
  std::vector<Entry> entries;
  uint64_t data_begin = 0, file_size = 0;
};

// Opens `path` into fd and checks everything but the tensor bytes themselves.
Parsed parse(const Reader& r, const std::string& path, Fd& fd) {
  // Non-blocking: a FIFO would otherwise wait for a writer forever before the type check below
  // refuses it (O_NONBLOCK changes nothing for a regular file's reads).
  fd.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd.fd < 0)
    r.fail(std::string("cannot be opened: ") + std::strerror(errno) + "; check the path");
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) r.fail(std::string("cannot be read: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) r.fail("is not a regular file");
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8)
    r.fail("is " + std::to_string(file_size) +
           " bytes, shorter than its 8-byte header length; it is truncated or not safetensors");
  uint64_t n = 0;
  r.read_at(fd.fd, &n, 8, 0);
  if (n > file_size - 8)
    r.fail("has header length " + std::to_string(n) + ", past the end of the file (" +
           std::to_string(file_size) + " bytes); it is truncated or not safetensors");
  std::string text(n, '\0');
  r.read_at(fd.fd, text.data(), n, 8);

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    r.fail(std::string("has a header that is not valid JSON (") + e.what() +
           "): the file is damaged or not safetensors; write it again or use another copy");
  }
  if (!header.is_object()) r.fail("has a header that is not a JSON object");

  Parsed p;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) r.fail("header: __metadata__ is " + v.dump() + ", not an object");
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string())
          r.fail("header: __metadata__ '" + k + "' is " + s.dump() + ", not a string");
        p.file.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    p.entries.emplace_back();
    p.file.tensors[name] = parse_tensor(r, name, v, p.entries.back());
  }
  p.data_begin = 8 + n;
  p.file_size = file_size;
  check_tiling(r, p.entries, file_size - p.data_begin, file_size, n);
  return p;
}

}  // namespace

File read(const std::string& path) {
  const Reader r(path);
  Fd fd;
  Parsed p = parse(r, path, fd);
  for (const Entry& e : p.entries) {
    auto& bytes = p.file.tensors[e.name].bytes;
    bytes.resize(e.end - e.begin);
    r.read_at(fd.fd, bytes.data(), bytes.size(), p.data_begin + e.begin);
  }
  return std::move(p.file);
}

Mapped::Mapped(const std::string& path) {
  const Reader r(path);
  Fd fd;
  Parsed p = parse(r, path, fd);
  size_ = p.file_size;
  void* at = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (at == MAP_FAILED) r.fail(std::string("cannot be mapped: ") + std::strerror(errno));
  base_ = static_cast<const uint8_t*>(at);
  metadata_ = std::move(p.file.metadata);
  for (const Entry& e : p.entries) {
    const TensorData& t = p.file.tensors[e.name];
    tensors_[e.name] = {t.dtype, t.shape, base_ + p.data_begin + e.begin, e.end - e.begin};
  }
}

Mapped::~Mapped() {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

void write_f32(const std::string& path, const std::vector<TensorRef>& tensors,
               const std::map<std::string, std::string>& metadata) {
  const std::string where = "cannot write safetensors file '" + path + "': ";
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const TensorRef& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second)
      throw UserError(where + "tensor name '" + t.name + "' is empty, reserved or repeated");
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) throw UserError(where + "tensor '" + t.name + "' has a negative dimension");
      numel *= static_cast<uint64_t>(d);
    }
    if (numel > 0 && t.data == nullptr)
      throw UserError(where + "tensor '" + t.name + "' has no data");
    sizes.push_back(numel * sizeof(float));
    header[t.name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + sizes.back()}}};
    offset += sizes.back();
  }
  // Spaces pad the header so the data starts 8-byte aligned, as the reference writer does.
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // a name or value that is not UTF-8
    throw UserError(where + "the header cannot be encoded: " + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();

  std::vector<std::string_view> parts{{reinterpret_cast<const char*>(&n), 8},
                                      {text.data(), text.size()}};
  for (size_t i = 0; i < tensors.size(); ++i)
    if (sizes[i] > 0) parts.emplace_back(reinterpret_cast<const char*>(tensors[i].data), sizes[i]);
  try {
    write_file_atomic(path, parts);
  } catch (const UserError& e) {
    throw UserError(where + e.what());
  }
}

}  // namespace triad::safetensors
