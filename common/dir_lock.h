// DirLock: exclusive ownership of a data directory by one Deuteron process.
//
// Acquire takes Env::LockFile on "<dir>/LOCK" (flock on POSIX: released by the
// kernel when the process dies, so a crash never leaves a stale lock) and
// writes the owner's pid into that file, for the message a second opener
// gets. The file itself is left in place on release: deleting a lock file
// that another process may be opening would let two owners in.
//
// Thread safety: Acquire is thread-safe; a DirLock is owned by one thread
// at a time (it has no methods that change it).
#pragma once

#include <memory>
#include <string>

#include "common/env.h"

namespace deuteron {

class DirLock {
  struct Token {  // only Acquire can construct a DirLock
    explicit Token() = default;
  };

 public:
  DirLock(Token, std::string dir, std::unique_ptr<FileLock> lock);
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();  // releases the lock

  // Locks `dir`. Held by another process, or by another DirLock in this one:
  // kBusy, "data directory <dir> is in use by another Deuteron process (pid N)"
  // (the pid when the LOCK file names one). Other failures keep their code.
  // REQUIRES: dir exists; env outlives the DirLock.
  static Result<std::unique_ptr<DirLock>> Acquire(Env* env, const std::string& dir);

  const std::string& dir() const { return dir_; }

  // The lock file's name inside the directory.
  static constexpr const char* kFileName = "LOCK";

 private:
  const std::string dir_;
  std::unique_ptr<FileLock> lock_;
};

}  // namespace deuteron
