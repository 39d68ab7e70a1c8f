// Reads that never block on what is not a file, and writes that either complete or leave the
// previous state: every error is a UserError naming the file and the system's reason (a full
// disk included), never a silent truncation.
#pragma once

#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace triad {

// What a file of this st_mode is, for messages: "a directory", "a FIFO (named pipe)", ...
std::string file_type_name(unsigned mode);

// Opens `path` for reading without ever blocking on it: the open is non-blocking and anything
// but a regular file (a FIFO, a socket, a device, a directory) is refused by name before a
// read. Throws UserError "WHAT 'PATH' cannot be opened: REASON; check the path" or "WHAT 'PATH'
// is a FIFO (named pipe), not a regular file; FIX". Returns the descriptor; the caller closes it.
// size: the file's size in bytes, when wanted.
int open_regular_file(const std::string& path, const std::string& what, const std::string& fix,
                      size_t* size = nullptr);
// The whole of a (small) regular file, opened by open_regular_file.
std::string read_regular_file(const std::string& path, const std::string& what,
                              const std::string& fix);

// Whether `path` is a symbolic link to nothing: a file a tool writes is refused then, at once
// (writing through it fails, or creates a file wherever the link points).
bool is_dangling_link(const std::string& path);

// A folder a program creates (if missing) and writes into, checked before anything is written:
// the folder itself or, when it does not exist yet, its nearest existing ancestor must be a
// directory in which a folder can be created (probed with a folder removed at once). Throws
// UserError "KEY 'DIR' cannot be created: ...; FIX" or "KEY 'DIR' is a regular file, not a
// folder; FIX". key: the flag or config key that named it (output.dir, --to-hf).
void check_output_folder(const std::string& key, const std::string& dir, const std::string& fix);

// A folder's entries reach the disk (renames into it survive a crash).
void fsync_dir(const std::filesystem::path& dir);

// `parts`, one after the other, into `path` whole or not at all: a temporary file beside it
// (named with the process id, so concurrent writers never share one), written, fsynced, renamed
// over `path`, and the folder fsynced. A failure removes the temporary file.
void write_file_atomic(const std::filesystem::path& path,
                       const std::vector<std::string_view>& parts);
inline void write_file_atomic(const std::filesystem::path& path, std::string_view text) {
  write_file_atomic(path, std::vector<std::string_view>{text});
}

// A file written record by record (metrics lines, TensorBoard events): every write is checked,
// fails naming the file and the reason, and is in the page cache when it returns (a run killed
// afterwards keeps it).
class RecordFile {
 public:
  enum class Open {
    truncate,   // start empty
    append,     // keep what is there
    create_new  // a new file; an existing one is never opened (is_open() is false then)
  };
  RecordFile() = default;
  // key: the config key that chose the folder, for the fix of a failed write.
  RecordFile(const std::filesystem::path& path, Open how, std::string key = "output.dir");
  ~RecordFile();
  RecordFile(const RecordFile&) = delete;
  RecordFile& operator=(const RecordFile&) = delete;
  bool is_open() const { return fd_ >= 0; }
  const std::filesystem::path& path() const { return path_; }
  void write(std::string_view bytes);
  // One line (a '\n' is added).
  void write_line(const std::string& line) { write(line + "\n"); }
  // Flushed to the disk and closed (errors the disk reports only now, too).
  void close();

 private:
  std::filesystem::path path_;
  std::string key_;
  int fd_ = -1;
};

}  // namespace triad
