// One run per folder: two runs writing one output.dir (or checkpoint.save) at once interleave
// their metrics.jsonl and remove each other's half-written checkpoints. The launcher that runs
// rank 0 holds an exclusive lock on a file in each folder for the run's life; a second run is
// refused in one line naming the folder and the process that holds it.
#pragma once

#include <string>

namespace triad::launch {

class FolderLock {
 public:
  // Creates `dir` if missing and takes the lock on DIR/.triad-run.lock (flock: the kernel
  // releases it when this process ends, however it ends, so it is never left stale). Throws
  // UserError "KEY 'DIR' is in use by another run (pid P on HOST); ..." when another holds it.
  FolderLock(const std::string& key, const std::string& dir);
  // Releases the lock; a folder this lock created that holds nothing else is removed again
  // (a run refused after the lock was taken leaves nothing behind).
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  std::string dir_, file_;
  std::string created_top_;  // the highest folder of dir_ this lock created; "" if none
  int fd_ = -1;
};

}  // namespace triad::launch
