// triad-preprocess: text -> a Megatron indexed dataset (PREFIX.bin + PREFIX.idx) of GPT-2 BPE
// tokens, what Megatron-LM's tools/preprocess_data.py --tokenizer-type GPT2BPETokenizer
// writes, for `data.kind: indexed` (or Megatron itself) to train on.
//
// Inputs (--input, one or more files, read in the order given):
//   JSON lines (a .jsonl or .json file, or --input-format jsonl): one document per line, its
//     text under --json-key (default "text"); blank lines are skipped.
//   plain text (any other file, or --input-format text): the whole file is one document, or
//     with --split-paragraphs each paragraph (runs of lines separated by blank lines; a
//     paragraph keeps the newlines between its lines, not the one after its last).
// Each document is encoded with triad::Gpt2Tokenizer and, with --append-eod (the default;
// --no-append-eod turns it off), followed by <|endoftext|> (50256), which keeps documents apart
// in GPT samples that run across them (Megatron's preprocess_data.py appends none unless given
// --append-eod: --no-append-eod writes its default). An empty document is kept as a document of
// no sequence and counted, as Megatron's builder records it (document index [0, 1, 1, 2] for
// documents of 1, 0 and 1 sequences), so the .idx is the same. Tokens are
// stored as uint16 (Megatron's dtype for a vocabulary under 65500 ids); each document is one
// sequence.
//
// --workers N threads encode batches of documents; one writer appends them in input order, so
// the files are the same for any N. Progress goes to stderr at most once per --log-interval
// seconds (rewritten in place on a terminal); a summary goes to stdout.
// Bad input (a missing input, a malformed JSON line (file:line), a line without the key,
// missing vocabulary files, an output folder that is missing or not writable) is one line on
// stderr and exit status 2, with no output file left behind.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "triad/core/cli.hpp"
#include "triad/core/data/indexed_dataset.hpp"
#include "triad/core/error.hpp"
#include "triad/core/io/files.hpp"
#include "triad/core/tokenizer/tokenizer.hpp"
#include "triad/core/train/stop_signals.hpp"

namespace {

// SIGINT / SIGTERM while reading: the inputs stop being read, the workers finish what they hold,
// and the writer, never finished, removes its temporary files (nothing half-written is left).
struct Interrupted {
  int signal;
};

using triad::UserError;
using Clock = std::chrono::steady_clock;

// A batch of documents as read: their text, or their JSON line still to be parsed (workers
// parse, so the reader is never the bottleneck).
struct Batch {
  int64_t id = 0;
  bool jsonl = false;
  std::string file;
  std::vector<std::string> items;
  std::vector<int64_t> lines;  // JSON lines: each item's line number
  size_t bytes = 0;
};

struct Encoded {
  std::vector<int32_t> tokens;   // the batch's documents back to back
  std::vector<int32_t> lengths;  // per document (0: an empty one, kept without a sequence)
  int64_t empty = 0;             // documents with no tokens
  size_t bytes = 0;
  std::string error;  // the first bad line of the batch
};

struct Options {
  std::vector<std::string> inputs;
  std::string output_prefix, input_format = "auto", json_key = "text";
  std::string vocab_file, merge_file;
  bool split_paragraphs = false, append_eod = true;
  bool vocab_given = false;  // --vocab-file or --merge-file on the command line
  bool overwrite = false;    // replace an existing PREFIX.bin / PREFIX.idx
  int workers = 1;
  double log_interval = 1.0;
};

std::string json_error_text(const std::string& what) {
  // "[json.exception.parse_error.101] parse error at ..." -> "parse error at ..."
  const size_t close = what.find("] ");
  std::string text =
      close != std::string::npos && what.starts_with("[json.") ? what.substr(close + 2) : what;
  // The parser sees one line: its "line 1" is the file's line the message already names.
  if (const size_t at = text.find(" at line 1, column "); at != std::string::npos)
    text.replace(at, 19, " at column ");
  return text;
}

const char* json_type(const nlohmann::json& j) {
  return j.type_name();
}

// The text under `key` of one JSON line; throws UserError naming the file and line.
std::string text_of(const std::string& line, const std::string& file, int64_t ln,
                    const std::string& key) {
  const std::string at = file + ":" + std::to_string(ln) + ": ";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(at + "not valid JSON (" + json_error_text(e.what()) +
                    "); each line must be one JSON object such as {\"" + key + "\": \"...\"}");
  }
  if (!j.is_object())
    throw UserError(at + "is a JSON " + json_type(j) + ", not an object; each line must be one " +
                    "JSON object such as {\"" + key + "\": \"...\"}");
  const auto it = j.find(key);
  if (it == j.end()) {
    std::string keys;
    for (auto k = j.begin(); k != j.end(); ++k) keys += (keys.empty() ? "" : ", ") + k.key();
    throw UserError(at + "has no \"" + key + "\" field (its fields: " +
                    (keys.empty() ? "none" : keys) + "); choose the field with --json-key");
  }
  if (!it->is_string())
    throw UserError(at + "field \"" + key + "\" is a JSON " + json_type(*it) +
                    ", not a string; the text to tokenize must be a string");
  return it->get<std::string>();
}

Encoded encode(const Batch& b, const triad::Gpt2Tokenizer& tok, const Options& o) {
  Encoded out;
  out.bytes = b.bytes;
  for (size_t k = 0; k < b.items.size(); ++k) {
    std::vector<int32_t> ids;
    try {
      ids = tok.encode(b.jsonl ? text_of(b.items[k], b.file, b.lines[k], o.json_key) : b.items[k]);
    } catch (const UserError& e) {
      out.error = e.what();
      return out;
    }
    if (ids.empty()) {  // kept, as Megatron's builder keeps it: a document of no sequence
      ++out.empty;
      out.lengths.push_back(0);
      continue;
    }
    if (o.append_eod) ids.push_back(tok.eot());
    out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
    out.lengths.push_back(static_cast<int32_t>(ids.size()));
  }
  return out;
}

// Counts and the progress line.
class Progress {
 public:
  explicit Progress(double interval)
      : interval_(interval), start_(Clock::now()), last_(start_), tty_(::isatty(2) == 1) {}

  void add(const Encoded& e) {
    docs_ += static_cast<int64_t>(e.lengths.size()) - e.empty;
    empty_ += e.empty;
    tokens_ += static_cast<int64_t>(e.tokens.size());
    bytes_ += static_cast<int64_t>(e.bytes);
    const auto now = Clock::now();
    if (std::chrono::duration<double>(now - last_).count() < interval_) return;
    last_ = now;
    const double s = seconds();
    char line[256];
    std::snprintf(line, sizeof line,
                  "triad-preprocess: %lld documents, %.2f M tokens, %.3g M tokens/s, %.3g MB/s "
                  "(%.0f s)",
                  static_cast<long long>(docs_), tokens_ / 1e6, tokens_ / 1e6 / s, bytes_ / 1e6 / s,
                  s);
    std::cerr << (tty_ ? "\r\033[K" : "") << line << (tty_ ? "" : "\n") << std::flush;
    shown_ = true;
  }
  void end_line() const {
    if (tty_ && shown_) std::cerr << "\n" << std::flush;
  }
  double seconds() const {
    return std::max(1e-9, std::chrono::duration<double>(Clock::now() - start_).count());
  }
  int64_t docs_ = 0, empty_ = 0, tokens_ = 0, bytes_ = 0;

 private:
  double interval_;
  Clock::time_point start_, last_;
  bool tty_;
  bool shown_ = false;
};

// Reader (the calling thread) -> workers (encode) -> writer (input order).
class Pipeline {
 public:
  Pipeline(const Options& o, const triad::Gpt2Tokenizer& tok, triad::IndexedDatasetWriter& out,
           Progress& progress)
      : o_(o), tok_(tok), out_(out), progress_(progress) {
    for (int w = 0; w < o.workers; ++w) workers_.emplace_back([this] { work(); });
    writer_ = std::thread([this] { write(); });
  }
  // Stops every thread: after finish() the writer has written everything; otherwise (an
  // error) the work in flight is dropped.
  ~Pipeline() {
    {
      std::lock_guard<std::mutex> l(m_);
      closing_ = true;
      if (!finished_) failed_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    if (writer_.joinable()) writer_.join();
  }

  // Blocks while too much is in flight; throws the first error a worker or the writer met.
  void submit(Batch b) {
    std::unique_lock<std::mutex> l(m_);
    cv_.wait(l, [&] { return failed_ || submitted_ - written_ < 4 * int64_t(o_.workers) + 2; });
    if (failed_) throw UserError(error_);
    b.id = submitted_++;
    work_.push_back(std::move(b));
    cv_.notify_all();
  }

  // Waits for everything submitted to be written; throws the first error.
  void finish() {
    std::unique_lock<std::mutex> l(m_);
    closing_ = true;
    cv_.notify_all();
    cv_.wait(l, [&] { return failed_ || written_ == submitted_; });
    if (failed_) throw UserError(error_);
    finished_ = true;
  }

 private:
  void fail(const std::string& msg) {  // with m_ held
    if (!failed_) error_ = msg;
    failed_ = true;
    cv_.notify_all();
  }

  void work() {
    for (;;) {
      Batch b;
      {
        std::unique_lock<std::mutex> l(m_);
        cv_.wait(l, [&] { return failed_ || !work_.empty() || closing_; });
        if (failed_ || work_.empty()) return;
        b = std::move(work_.front());
        work_.pop_front();
      }
      Encoded e;
      try {
        e = encode(b, tok_, o_);
      } catch (const std::exception& ex) {
        e.error = ex.what();
      }
      std::lock_guard<std::mutex> l(m_);
      done_.emplace(b.id, std::move(e));
      cv_.notify_all();
    }
  }

  void write() {
    for (;;) {
      Encoded e;
      {
        std::unique_lock<std::mutex> l(m_);
        cv_.wait(l, [&] {
          return failed_ || done_.count(written_) || (closing_ && written_ == submitted_);
        });
        if (failed_ || !done_.count(written_)) return;
        auto it = done_.find(written_);
        e = std::move(it->second);
        done_.erase(it);
        if (!e.error.empty()) return fail(e.error);
      }
      try {
        size_t at = 0;
        for (int32_t len : e.lengths) {
          if (len == 0)
            out_.add_document(e.tokens.data() + at, 0, {});
          else
            out_.add_document(e.tokens.data() + at, static_cast<size_t>(len));
          at += static_cast<size_t>(len);
        }
        progress_.add(e);
      } catch (const std::exception& ex) {
        std::lock_guard<std::mutex> l(m_);
        return fail(ex.what());
      }
      std::lock_guard<std::mutex> l(m_);
      ++written_;
      cv_.notify_all();
    }
  }

  const Options& o_;
  const triad::Gpt2Tokenizer& tok_;
  triad::IndexedDatasetWriter& out_;
  Progress& progress_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Batch> work_;
  std::map<int64_t, Encoded> done_;
  int64_t submitted_ = 0, written_ = 0;
  bool closing_ = false, failed_ = false, finished_ = false;
  std::string error_;
  std::vector<std::thread> workers_;
  std::thread writer_;
};

constexpr size_t kBatchBytes = 256 * 1024;
constexpr size_t kBatchDocs = 2048;

bool is_jsonl(const Options& o, const std::string& path) {
  if (o.input_format != "auto") return o.input_format == "jsonl";
  const std::string ext = std::filesystem::path(path).extension().string();
  return ext == ".jsonl" || ext == ".json";
}

std::ifstream open_input(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UserError("input '" + path + "' is a folder; give the files in it (e.g. " + path +
                    "/*.txt)");
  // A FIFO, a socket or a device is refused by name before the stream opens it (a FIFO's open
  // would wait for a writer forever).
  ::close(triad::open_regular_file(path, "input", "give text or JSON-lines files"));
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw UserError("input '" + path + "' cannot be opened: " + std::strerror(errno) +
                    "; check the path");
  return f;
}

bool blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\f\v") == std::string::npos;
}

// Reads every input into batches of documents and hands them to the pipeline.
void read_inputs(const Options& o, Pipeline& p) {
  Batch b;
  auto flush = [&] {
    if (b.items.empty()) return;
    p.submit(std::move(b));
    b = Batch{};
  };
  auto add = [&](const std::string& file, bool jsonl, std::string item, int64_t line) {
    if (const int sig = triad::stop_signal()) throw Interrupted{sig};
    if (b.file != file || b.jsonl != jsonl) flush();
    b.file = file;
    b.jsonl = jsonl;
    b.bytes += item.size();
    b.items.push_back(std::move(item));
    b.lines.push_back(line);
    if (b.bytes >= kBatchBytes || b.items.size() >= kBatchDocs) flush();
  };
  for (const std::string& path : o.inputs) {
    std::ifstream f = open_input(path);
    if (is_jsonl(o, path)) {
      std::string line;
      for (int64_t ln = 1; std::getline(f, line); ++ln)
        if (!blank(line)) add(path, true, std::move(line), ln);
    } else if (o.split_paragraphs) {
      std::string line, para;
      while (std::getline(f, line)) {
        if (blank(line)) {
          if (!para.empty()) add(path, false, std::move(para), 0);
          para.clear();
        } else {
          if (!para.empty()) para += '\n';
          para += line;
        }
      }
      if (!para.empty()) add(path, false, std::move(para), 0);
    } else {
      std::ostringstream all;
      all << f.rdbuf();
      std::string text = std::move(all).str();
      if (f.bad()) throw UserError("input '" + path + "' cannot be read: " + std::strerror(errno));
      add(path, false, std::move(text), 0);
    }
    if (f.bad()) throw UserError("input '" + path + "' cannot be read: " + std::strerror(errno));
  }
  flush();
}

int run(const Options& o) {
  for (const std::string& path : o.inputs) open_input(path);  // every input before any work
  namespace fs = std::filesystem;
  // An input that is the output would be read while it is replaced, even with --overwrite.
  for (const std::string& path : o.inputs)
    for (const char* ext : {".bin", ".idx"}) {
      std::error_code ec;
      if (fs::equivalent(path, o.output_prefix + ext, ec))
        throw UserError("input '" + path + "' is the output " + o.output_prefix + ext +
                        " itself; give another --output-prefix");
    }
  // A dataset already there is replaced only when asked to; a link, even one to nothing, too.
  if (!o.overwrite)
    for (const char* ext : {".bin", ".idx"}) {
      const std::string file = o.output_prefix + ext;
      std::error_code ec;
      if (!fs::exists(fs::symlink_status(file, ec))) continue;
      const bool dangling = triad::is_dangling_link(file);
      throw UserError("--output-prefix '" + o.output_prefix + "' " +
                      (dangling ? "has " + file + ", a symbolic link to nothing"
                                : "already holds a dataset (" + file + ")") +
                      "; add --overwrite to replace it, or choose another prefix");
    }
  const triad::Gpt2Tokenizer tok = [&] {
    try {
      return triad::Gpt2Tokenizer::load(o.vocab_file, o.merge_file);
    } catch (const UserError& e) {
      if (!o.vocab_given) throw;
      throw UserError(std::string(e.what()) +
                      " (or point --vocab-file and --merge-file at GPT-2's encoder.json and "
                      "vocab.bpe)");
    }
  }();
  triad::IndexedDatasetWriter out(o.output_prefix, triad::optimal_dtype(tok.vocab_size()),
                                  "--output-prefix");
  Progress progress(o.log_interval);
  {
    Pipeline p(o, tok, out, progress);
    try {
      read_inputs(o, p);
      p.finish();
    } catch (...) {
      progress.end_line();
      throw;
    }
  }
  if (const int sig = triad::stop_signal()) throw Interrupted{sig};
  // A dataset of no documents is one the launcher refuses: said here, and not written.
  if (progress.docs_ == 0)
    throw UserError("the inputs hold no documents (" + std::to_string(progress.empty_) +
                    " empty ones); nothing was written: give inputs with text");
  out.finish();
  progress.end_line();
  const double s = progress.seconds();
  const std::string empty = progress.empty_
                                ? " (and " + std::to_string(progress.empty_) +
                                      " empty ones, kept without a sequence as Megatron does)"
                                : "";
  const std::string dtype =
      triad::dtype_name(static_cast<uint8_t>(triad::optimal_dtype(tok.vocab_size())));
  std::printf(
      "wrote %s.bin and %s.idx: %lld documents%s, %lld tokens (%s%s) from %.2f MB of input in "
      "%.2f s: %.0f tokens/s, %.2f MB/s\n",
      o.output_prefix.c_str(), o.output_prefix.c_str(), static_cast<long long>(progress.docs_),
      empty.c_str(), static_cast<long long>(progress.tokens_), dtype.c_str(),
      o.append_eod ? ", <|endoftext|> after each document" : "", progress.bytes_ / 1e6, s,
      progress.tokens_ / s, progress.bytes_ / 1e6 / s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Before the workers exist (they inherit the blocked mask): signals go to one thread.
  triad::take_stop_signals();
  CLI::App app{
      "Tokenizes text with GPT-2 BPE into a Megatron indexed dataset (PREFIX.bin + PREFIX.idx) "
      "for data.kind: indexed."};
  Options o;
  const std::string vocab_dir = TRIAD_GPT2_VOCAB_DIR;
  o.vocab_file = vocab_dir + "/encoder.json";
  o.merge_file = vocab_dir + "/vocab.bpe";
  o.workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app.add_option("--input,-i", o.inputs,
                 "input files, in order: JSON lines (.jsonl/.json) or plain text")
      ->required();
  app.add_option("--output-prefix,-o", o.output_prefix,
                 "writes OUTPUT_PREFIX.bin and OUTPUT_PREFIX.idx")
      ->required();
  app.add_flag("--overwrite", o.overwrite, "replace OUTPUT_PREFIX.bin/.idx if they exist");
  app.add_option("--input-format", o.input_format,
                 "auto (by extension: .jsonl/.json are JSON lines), jsonl or text")
      ->check(CLI::IsMember({"auto", "jsonl", "text"}))
      ->capture_default_str();
  app.add_option("--json-key,--json-keys", o.json_key, "the field holding each line's text")
      ->capture_default_str();
  app.add_flag("--split-paragraphs", o.split_paragraphs,
               "plain text: one document per blank-line-separated paragraph, not per file");
  app.add_flag("--append-eod,!--no-append-eod", o.append_eod,
               "append <|endoftext|> after each document (default on)");
  app.add_option("--workers", o.workers, "threads that tokenize")
      ->check(triad::cli::in_range(1, 1024))
      ->capture_default_str();
  app.add_option("--vocab-file", o.vocab_file, "GPT-2 encoder.json")->capture_default_str();
  app.add_option("--merge-file", o.merge_file, "GPT-2 vocab.bpe (the merges)")
      ->capture_default_str();
  app.add_option("--log-interval", o.log_interval,
                 "seconds between progress lines on stderr (0: after every batch)")
      ->check(triad::cli::at_least_number(0))
      ->capture_default_str();
  return triad::cli::run_main("triad-preprocess", app, [&] {
    triad::cli::parse(app, argc, argv);
    o.vocab_given = app.count("--vocab-file") + app.count("--merge-file") > 0;
    try {
      const triad::StopSignalsArmed armed;
      return run(o);
    } catch (const Interrupted& i) {
      std::fprintf(stderr, "triad-preprocess: stopped on %s; nothing was written\n",
                   i.signal == SIGINT ? "SIGINT" : "SIGTERM");
      return 128 + i.signal;
    }
  });
}
