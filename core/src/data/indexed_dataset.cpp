#include "triad/core/data/indexed_dataset.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <stdexcept>

#include "mapped_file.hpp"
#include "triad/core/error.hpp"

namespace triad {

static_assert(std::endian::native == std::endian::little,
              "indexed datasets are little-endian and are read in place");

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;  // magic, version, dtype, N, D

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::string str(int64_t v) {
  return std::to_string(v);
}

// Elements of type T at `src` (aligned: every sequence starts at a multiple of the item size in
// a page-aligned mapping), widened to int32 (ids were checked against the vocabulary).
template <typename T>
void widen(const uint8_t* src, int64_t count, int32_t* out) {
  const T* p = reinterpret_cast<const T*>(src);
  for (int64_t k = 0; k < count; ++k) out[k] = static_cast<int32_t>(p[k]);
}

template <typename T>
std::pair<int64_t, int64_t> min_max(const uint8_t* data, size_t bytes) {
  const T* p = reinterpret_cast<const T*>(data);
  const size_t n = bytes / sizeof(T);
  if (n == 0) return {0, -1};
  T lo = p[0], hi = p[0];
  for (size_t k = 0; k < n; ++k) {  // one vectorizable pass
    lo = std::min(lo, p[k]);
    hi = std::max(hi, p[k]);
  }
  return {static_cast<int64_t>(lo), static_cast<int64_t>(hi)};
}

// `path` is about to be opened: say clearly when it is missing, with the usual slip (a prefix
// given with its extension) spelled out.
void require_file(const std::string& prefix, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return;  // other problems: MappedFile's messages
  const int err = errno;
  std::string fix;
  for (const std::string ext : {".bin", ".idx"})
    if (prefix.size() > ext.size() && prefix.ends_with(ext))
      fix = "data.path is the prefix without .bin/.idx: write '" +
            prefix.substr(0, prefix.size() - ext.size()) + "'";
  if (fix.empty())
    fix =
        "an indexed dataset is a prefix P naming P.bin and P.idx (triad-preprocess "
        "--output-prefix P or Megatron's preprocess_data.py writes them); check the path";
  throw UserError("indexed dataset '" + prefix + "': " + path +
                  " cannot be opened: " + std::strerror(err) + "; " + fix);
}

}  // namespace

std::string dtype_name(uint8_t code) {
  switch (code) {
    case 1:
      return "uint8";
    case 2:
      return "int8";
    case 3:
      return "int16";
    case 4:
      return "int32";
    case 5:
      return "int64";
    case 6:
      return "float64";
    case 7:
      return "float32";
    case 8:
      return "uint16";
    default:
      return "code " + std::to_string(code);
  }
}

int dtype_size(uint8_t code) {
  switch (code) {
    case 1:
    case 2:
      return 1;
    case 3:
    case 8:
      return 2;
    case 4:
    case 7:
      return 4;
    case 5:
    case 6:
      return 8;
    default:
      return 0;
  }
}

IndexedDType optimal_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? IndexedDType::uint16 : IndexedDType::int32;
}

// ---------------------------------------------------------------------------------------------
// Reader

struct IndexedDataset::Impl {
  Impl(const std::string& p, const std::string& bin_path, const std::string& idx_path)
      : prefix(p),
        bin(bin_path, "indexed dataset data file"),
        idx(idx_path, "indexed dataset index file") {}

  [[noreturn]] void fail(const std::string& file, const std::string& what,
                         const std::string& fix) const {
    throw UserError("indexed dataset '" + prefix + "': " + file + " " + what + "; " + fix);
  }
  void validate();

  std::string prefix;
  data::MappedFile bin, idx;
  IndexedDType dtype = IndexedDType::uint16;
  int item = 2;
  int64_t n = 0, d = 0;  // sequences; document-index entries (documents + 1)
  const uint8_t* lengths = nullptr;
  const uint8_t* pointers = nullptr;
  const uint8_t* docs = nullptr;
  int64_t tokens = 0;
};

void IndexedDataset::Impl::validate() {
  const std::string& ip = idx.path();
  const std::string& bp = bin.path();
  const std::string regenerate =
      "regenerate the dataset (triad-preprocess or Megatron's preprocess_data.py)";
  if (idx.size() < kHeaderBytes)
    fail(ip,
         "is " + str(int64_t(idx.size())) + " bytes, shorter than the " + str(kHeaderBytes) +
             "-byte header of a Megatron index",
         "it is truncated or not an index; " + regenerate);
  const uint8_t* h = idx.data();
  if (std::memcmp(h, kMagic, sizeof kMagic) != 0) {
    std::string seen;
    for (size_t k = 0; k < sizeof kMagic; ++k) {
      const unsigned char c = h[k];
      if (c >= 0x20 && c < 0x7f && c != '\\') {
        seen += static_cast<char>(c);
      } else {
        static const char* hex = "0123456789abcdef";
        seen += std::string("\\x") + hex[c >> 4] + hex[c & 15];
      }
    }
    const bool fairseq = std::memcmp(h, "TNTIDX\0\0", 8) == 0;
    fail(ip, "does not start with the magic of Megatron's MMIDIDX format (found \"" + seen + "\")",
         fairseq ? "it is an older fairseq/Megatron 'TNTIDX' (lazy or cached) index, which Triad "
                   "does not read; " +
                       regenerate + " with the mmap implementation"
                 : "it is not a Megatron indexed dataset index, or it is corrupt; " + regenerate);
  }
  const uint64_t version = load<uint64_t>(h + 9);
  if (version != 1)
    fail(ip, "has format version " + std::to_string(version) + "; only version 1 is defined",
         regenerate);
  const uint8_t code = h[17];
  if (dtype_size(code) == 0)
    fail(ip, "has dtype code " + str(code) + ", not one of Megatron's codes 1-8",
         "the header is corrupt; " + regenerate);
  if (code == 6 || code == 7)
    fail(ip, "stores " + dtype_name(code) + " tokens; token ids must be integers",
         "write the dataset with an integer dtype (uint16, as preprocess_data.py picks for "
         "GPT-2, or int32)");
  dtype = static_cast<IndexedDType>(code);
  item = dtype_size(code);
  const uint64_t un = load<uint64_t>(h + 18), ud = load<uint64_t>(h + 26);
  // Counts beyond the file size cannot be honest; checking them first keeps the arithmetic
  // below from overflowing.
  const uint64_t isize = idx.size();
  if (un > isize || ud > isize)
    fail(ip,
         "is " + str(int64_t(isize)) + " bytes but its header declares " + std::to_string(un) +
             " sequences and " + std::to_string(ud) + " document-index entries",
         "the file is truncated or corrupt; " + regenerate);
  n = static_cast<int64_t>(un);
  d = static_cast<int64_t>(ud);
  const uint64_t expected = kHeaderBytes + 12 * un + 8 * ud;
  if (isize != expected) {
    const std::string counts = " (" + str(n) + " sequences, " + str(d) +
                               " document-index entries need " + std::to_string(expected) +
                               " bytes)";
    if (isize == expected + un && n > 0)
      fail(ip,
           "has " + str(n) +
               " bytes after the document index, one per sequence: the modes of a "
               "multimodal dataset" +
               counts,
           "Triad reads text (GPT) datasets only; preprocess the text without --multimodal");
    fail(ip, "is " + str(int64_t(isize)) + " bytes, not what its header's counts need" + counts,
         isize < expected ? "the file is truncated; " + regenerate
                          : "the file has trailing bytes or a corrupt header; " + regenerate);
  }
  lengths = h + kHeaderBytes;
  pointers = lengths + 4 * un;
  docs = pointers + 8 * un;
  // The document index: 0, then each document's end in sequences, ending at N.
  if (d < 1)
    fail(ip, "has an empty document index (it starts with 0 and ends with the sequence count)",
         regenerate);
  if (const int64_t first = load<int64_t>(docs); first != 0)
    fail(ip, "has a document index starting at " + str(first) + ", not 0",
         "the index is corrupt; " + regenerate);
  for (int64_t k = 1; k < d; ++k) {
    const int64_t prev = load<int64_t>(docs + 8 * (k - 1)), cur = load<int64_t>(docs + 8 * k);
    if (cur < prev)
      fail(ip,
           "has document-index entry " + str(k) + " = " + str(cur) + " after " + str(prev) +
               "; the entries must not decrease",
           "the index is corrupt; " + regenerate);
  }
  if (const int64_t last = load<int64_t>(docs + 8 * (d - 1)); last != n)
    fail(ip,
         "has a document index ending at sequence " + str(last) + " but holds " + str(n) +
             " sequences",
         "the index is corrupt; " + regenerate);
  // Every sequence inside the .bin, which holds them and nothing else.
  const int64_t bsize = static_cast<int64_t>(bin.size());
  if (bsize % item != 0)
    fail(bp,
         "is " + str(bsize) + " bytes, not a whole number of " + dtype_name(code) + " tokens (" +
             str(item) + " bytes each)",
         "the file is truncated; " + regenerate);
  int64_t end = 0;
  tokens = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = load<int32_t>(lengths + 4 * i), ptr = load<int64_t>(pointers + 8 * i);
    if (len < 0)
      fail(ip, "gives sequence " + str(i) + " a negative length " + str(len),
           "the index is corrupt; " + regenerate);
    if (ptr < 0 || ptr % item != 0 || ptr > bsize || len > (bsize - ptr) / item)
      fail(bp,
           "is " + str(bsize) + " bytes but " + ip + " puts sequence " + str(i) + " (" + str(len) +
               " tokens) at byte " + str(ptr),
           "the .bin is truncated or the two files do not belong together; " + regenerate);
    end = std::max(end, ptr + len * item);
    tokens += len;
  }
  if (end != bsize)
    fail(bp, "is " + str(bsize) + " bytes but the sequences of " + ip + " end at byte " + str(end),
         "the two files do not belong together; " + regenerate);
}

IndexedDataset::IndexedDataset(const std::string& prefix) {
  if (prefix.empty())
    throw UserError(
        "indexed dataset: the prefix is empty; give the path of P.bin/P.idx without "
        "the extension");
  const std::string bin_path = prefix + ".bin", idx_path = prefix + ".idx";
  require_file(prefix, idx_path);
  require_file(prefix, bin_path);
  impl_ = std::make_unique<Impl>(prefix, bin_path, idx_path);
  impl_->validate();
}

IndexedDataset::~IndexedDataset() = default;
IndexedDataset::IndexedDataset(IndexedDataset&&) noexcept = default;
IndexedDataset& IndexedDataset::operator=(IndexedDataset&&) noexcept = default;

const std::string& IndexedDataset::prefix() const {
  return impl_->prefix;
}
IndexedDType IndexedDataset::dtype() const {
  return impl_->dtype;
}
int64_t IndexedDataset::num_sequences() const {
  return impl_->n;
}
int64_t IndexedDataset::num_documents() const {
  return impl_->d - 1;
}
int64_t IndexedDataset::num_tokens() const {
  return impl_->tokens;
}

int32_t IndexedDataset::sequence_length(int64_t i) const {
  if (i < 0 || i >= impl_->n)
    throw std::out_of_range("indexed dataset: sequence " + str(i) + " of " + str(impl_->n));
  return load<int32_t>(impl_->lengths + 4 * i);
}

int64_t IndexedDataset::sequence_pointer(int64_t i) const {
  if (i < 0 || i >= impl_->n)
    throw std::out_of_range("indexed dataset: sequence " + str(i) + " of " + str(impl_->n));
  return load<int64_t>(impl_->pointers + 8 * i);
}

int64_t IndexedDataset::document_index(int64_t i) const {
  if (i < 0 || i >= impl_->d)
    throw std::out_of_range("indexed dataset: document-index entry " + str(i) + " of " +
                            str(impl_->d));
  return load<int64_t>(impl_->docs + 8 * i);
}

void IndexedDataset::read(int64_t i, int64_t offset, int64_t count, int32_t* out) const {
  const int64_t len = sequence_length(i);
  if (offset < 0 || count < 0 || offset > len || count > len - offset)
    throw std::out_of_range("indexed dataset: tokens [" + str(offset) + ", " + str(offset + count) +
                            ") of sequence " + str(i) + " (length " + str(len) + ")");
  const uint8_t* src =
      impl_->bin.data() + load<int64_t>(impl_->pointers + 8 * i) + offset * impl_->item;
  if (count == 0) return;
  switch (impl_->dtype) {
    case IndexedDType::uint8:
      return widen<uint8_t>(src, count, out);
    case IndexedDType::int8:
      return widen<int8_t>(src, count, out);
    case IndexedDType::int16:
      return widen<int16_t>(src, count, out);
    case IndexedDType::int32:
      return widen<int32_t>(src, count, out);
    case IndexedDType::int64:
      return widen<int64_t>(src, count, out);
    case IndexedDType::uint16:
      return widen<uint16_t>(src, count, out);
    default:
      throw std::logic_error("indexed dataset: float dtype after validation");
  }
}

std::vector<int32_t> IndexedDataset::sequence(int64_t i) const {
  std::vector<int32_t> out(static_cast<size_t>(sequence_length(i)));
  read(i, 0, static_cast<int64_t>(out.size()), out.data());
  return out;
}

std::pair<int64_t, int64_t> IndexedDataset::token_range() const {
  const uint8_t* p = impl_->bin.data();
  const size_t s = impl_->bin.size();
  switch (impl_->dtype) {
    case IndexedDType::uint8:
      return min_max<uint8_t>(p, s);
    case IndexedDType::int8:
      return min_max<int8_t>(p, s);
    case IndexedDType::int16:
      return min_max<int16_t>(p, s);
    case IndexedDType::int32:
      return min_max<int32_t>(p, s);
    case IndexedDType::int64:
      return min_max<int64_t>(p, s);
    case IndexedDType::uint16:
      return min_max<uint16_t>(p, s);
    default:
      throw std::logic_error("indexed dataset: float dtype after validation");
  }
}

// ---------------------------------------------------------------------------------------------
// Writer

namespace {

constexpr size_t kFlushBytes = size_t{1} << 20;

std::string folder_of(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// A fresh file beside `final_path` that no other writer uses (O_EXCL), readable as the final
// file would be (the umask applies).
int create_temp(const std::string& final_path, std::string& temp) {
  static std::atomic<unsigned> counter{0};
  for (;;) {
    temp = final_path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
}

template <typename T>
void append_as(std::vector<char>& buf, const int32_t* tokens, size_t count, IndexedDType dtype) {
  const size_t at = buf.size();
  buf.resize(at + count * sizeof(T));
  char* out = buf.data() + at;
  for (size_t k = 0; k < count; ++k) {
    const int32_t v = tokens[k];
    if (static_cast<int64_t>(v) < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        static_cast<int64_t>(v) > static_cast<int64_t>(std::numeric_limits<T>::max())) {
      buf.resize(at);
      throw UserError("token id " + std::to_string(v) + " does not fit the dataset's dtype " +
                      dtype_name(static_cast<uint8_t>(dtype)) + " (" +
                      std::to_string(static_cast<int64_t>(std::numeric_limits<T>::min())) + ".." +
                      std::to_string(static_cast<int64_t>(std::numeric_limits<T>::max())) +
                      "); write the dataset with int32");
    }
    const T t = static_cast<T>(v);
    std::memcpy(out + k * sizeof(T), &t, sizeof(T));
  }
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw UserError("writing '" + path + "' failed: " + std::strerror(errno) +
                      "; free space or choose another output folder");
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void sync_close(int& fd, const std::string& path) {
  const int rc = ::fsync(fd);
  const int err = errno;
  const int rc2 = ::close(fd);
  fd = -1;
  if (rc != 0 || rc2 != 0)
    throw UserError("writing '" + path + "' failed: " + std::strerror(rc != 0 ? err : errno) +
                    "; free space or choose another output folder");
}

}  // namespace

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, IndexedDType dtype,
                                           const std::string& key)
    : prefix_(prefix), dtype_(dtype), item_(dtype_size(static_cast<uint8_t>(dtype))) {
  const auto code = static_cast<uint8_t>(dtype);
  if (item_ == 0 || code == 6 || code == 7)
    throw UserError("indexed dataset writer: dtype " + dtype_name(code) +
                    " cannot hold token ids; use uint16 or int32");
  if (prefix.empty() || prefix.back() == '/')
    throw UserError(key + " '" + prefix +
                    "' names a folder; give a prefix such as data/corpus (for data/corpus.bin "
                    "and data/corpus.idx)");
  const std::string dir = folder_of(prefix);
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw UserError(key + " '" + prefix + "': the folder '" + dir +
                    (std::filesystem::exists(dir, ec) ? "' is not a folder" : "' does not exist") +
                    "; create it first or choose another prefix");
  for (const char* ext : {".bin", ".idx"})
    if (std::filesystem::is_directory(prefix + ext, ec))
      throw UserError(key + " '" + prefix + "': '" + prefix + ext +
                      "' is a folder; choose another prefix");
  bin_fd_ = create_temp(prefix + ".bin", bin_tmp_);
  if (bin_fd_ < 0)
    throw UserError(key + " '" + prefix + "': cannot create a file in '" + dir +
                    "': " + std::strerror(errno) + "; choose a folder you can write");
  // The index's temporary name is taken now, so that a folder that fills up or turns read-only
  // is seen before any work, and both names are known for the cleanup.
  int idx_fd = create_temp(prefix + ".idx", idx_tmp_);
  if (idx_fd < 0) {
    const int err = errno;
    discard();
    throw UserError(key + " '" + prefix + "': cannot create a file in '" + dir +
                    "': " + std::strerror(err) + "; choose a folder you can write");
  }
  ::close(idx_fd);
  buf_.reserve(kFlushBytes + 4096);
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (!finished_) discard();
}

void IndexedDatasetWriter::discard() noexcept {
  if (bin_fd_ >= 0) ::close(bin_fd_);
  bin_fd_ = -1;
  if (!bin_tmp_.empty()) ::unlink(bin_tmp_.c_str());
  if (!idx_tmp_.empty()) ::unlink(idx_tmp_.c_str());
  bin_tmp_.clear();
  idx_tmp_.clear();
}

void IndexedDatasetWriter::write_bin(const void* data, size_t n) {
  try {
    write_all(bin_fd_, data, n, bin_tmp_);
  } catch (...) {
    discard();
    throw;
  }
}

void IndexedDatasetWriter::add_document(const int32_t* tokens, size_t count) {
  if (count > size_t(std::numeric_limits<int32_t>::max()))
    throw UserError("a document of " + std::to_string(count) +
                    " tokens is too long for one sequence of Megatron's index (int32 lengths, " +
                    std::to_string(std::numeric_limits<int32_t>::max()) +
                    " tokens at most); split it");
  add_document(tokens, count, std::vector<int32_t>{static_cast<int32_t>(count)});
}

void IndexedDatasetWriter::add_document(const int32_t* tokens, size_t count,
                                        const std::vector<int32_t>& lengths) {
  if (finished_ || bin_fd_ < 0)
    throw std::logic_error("IndexedDatasetWriter::add_document after finish() or a failure");
  int64_t sum = 0;
  for (int32_t l : lengths) {
    if (l < 0) throw std::invalid_argument("IndexedDatasetWriter: a negative sequence length");
    sum += l;
  }
  if (static_cast<uint64_t>(sum) != count)
    throw std::invalid_argument("IndexedDatasetWriter: sequence lengths sum to " +
                                std::to_string(sum) + ", not the document's " +
                                std::to_string(count) + " tokens");
  switch (dtype_) {
    case IndexedDType::uint8:
      append_as<uint8_t>(buf_, tokens, count, dtype_);
      break;
    case IndexedDType::int8:
      append_as<int8_t>(buf_, tokens, count, dtype_);
      break;
    case IndexedDType::int16:
      append_as<int16_t>(buf_, tokens, count, dtype_);
      break;
    case IndexedDType::int32:
      append_as<int32_t>(buf_, tokens, count, dtype_);
      break;
    case IndexedDType::int64:
      append_as<int64_t>(buf_, tokens, count, dtype_);
      break;
    case IndexedDType::uint16:
      append_as<uint16_t>(buf_, tokens, count, dtype_);
      break;
    default:
      throw std::logic_error("IndexedDatasetWriter: float dtype");
  }
  for (int32_t l : lengths) {
    lengths_.push_back(l);
    pointers_.push_back(bin_bytes_);
    bin_bytes_ += int64_t{l} * item_;
  }
  doc_index_.push_back(static_cast<int64_t>(lengths_.size()));
  tokens_ += sum;
  if (buf_.size() >= kFlushBytes) {
    write_bin(buf_.data(), buf_.size());
    buf_.clear();
  }
}

void IndexedDatasetWriter::finish() {
  if (finished_ || bin_fd_ < 0)
    throw std::logic_error("IndexedDatasetWriter::finish twice or after a failure");
  try {
    write_all(bin_fd_, buf_.data(), buf_.size(), bin_tmp_);
    buf_.clear();
    sync_close(bin_fd_, bin_tmp_);
    int fd = ::open(idx_tmp_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0)
      throw UserError("writing '" + idx_tmp_ + "' failed: " + std::strerror(errno) +
                      "; choose a folder you can write");
    try {
      std::vector<char> head(kHeaderBytes);
      std::memcpy(head.data(), kMagic, sizeof kMagic);
      const uint64_t version = 1, n = lengths_.size(), d = doc_index_.size();
      std::memcpy(head.data() + 9, &version, 8);
      head[17] = static_cast<char>(dtype_);
      std::memcpy(head.data() + 18, &n, 8);
      std::memcpy(head.data() + 26, &d, 8);
      write_all(fd, head.data(), head.size(), idx_tmp_);
      write_all(fd, lengths_.data(), lengths_.size() * sizeof(int32_t), idx_tmp_);
      write_all(fd, pointers_.data(), pointers_.size() * sizeof(int64_t), idx_tmp_);
      write_all(fd, doc_index_.data(), doc_index_.size() * sizeof(int64_t), idx_tmp_);
      sync_close(fd, idx_tmp_);
    } catch (...) {
      if (fd >= 0) ::close(fd);
      throw;
    }
    const std::string bin = prefix_ + ".bin", idx = prefix_ + ".idx";
    if (::rename(bin_tmp_.c_str(), bin.c_str()) != 0)
      throw UserError("cannot rename '" + bin_tmp_ + "' to '" + bin + "': " + std::strerror(errno) +
                      "; choose a folder you can write");
    bin_tmp_.clear();
    if (::rename(idx_tmp_.c_str(), idx.c_str()) != 0)
      throw UserError("cannot rename '" + idx_tmp_ + "' to '" + idx + "': " + std::strerror(errno) +
                      "; choose a folder you can write");
    idx_tmp_.clear();
    // The renames themselves reach the disk with the folder's entry.
    const int dfd = ::open(folder_of(prefix_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  } catch (...) {
    discard();
    throw;
  }
  finished_ = true;
}

}  // namespace triad
