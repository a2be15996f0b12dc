// Env: the one seam through which Deuteron touches the file system.
//
// Every file operation of the project (LLAMA segment files, the WAL,
// checkpoints, the data-directory lock) goes through an Env, so that tests can
// substitute an in-memory Env (NewMemEnv) or wrap any Env in one that injects
// errors and simulates crashes (common/fault_env.h).
//
// Implementations: Env::Posix() (the real file system), NewMemEnv() (a private
// in-memory tree), EnvWrapper (forwards every call; subclass it to override
// one method in a test), FaultInjectionEnv.
//
// Errors. A path that does not exist gives Code::kNotFound; disk full
// (ENOSPC, EDQUOT) gives Code::kNoSpace; a lock held elsewhere gives
// Code::kBusy; OpenFile(kCreateNew) on an existing path gives
// Code::kInvalidArgument ("exists": the caller asked for something that cannot
// be done, nobody else holds anything, so kBusy would mislead); any other OS
// failure gives Code::kIOError. Messages name the operation and the path.
//
// Thread safety. An Env is thread-safe. A File allows ReadAt, ReadExactAt,
// WriteAt, Size and path concurrently from any threads (WriteAt callers keep
// their ranges disjoint from each other and from concurrent reads); Append,
// Truncate and Sync need external serialization against each other and
// against WriteAt that extends the file; Close (and destruction) must not race
// with any other call on the same File. A FileLock is not shared.
//
// Semantics follow POSIX in both the real and the in-memory Env: an open File
// keeps its data when the path is deleted or renamed over, a rename moves the
// file under open handles, writing past the end leaves a hole of zeros.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/slice.h"
#include "common/status.h"

namespace deuteron {

enum class OpenMode {
  kRead,       // must exist; read only (writes return kInvalidArgument)
  kReadWrite,  // must exist; read and write
  kCreate,     // create if missing, keep existing content
  kCreateNew,  // create; an existing path is kInvalidArgument
  kTruncate,   // create if missing, otherwise cut to size 0
};

// An open file. See the header comment for which calls may run concurrently.
// After Close, every call other than Close and path returns kIOError.
class File {
 public:
  File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  virtual ~File();

  // Reads up to n bytes at `offset` into buf. Returns fewer than n only when
  // the file ends first (0 at or past the end).
  virtual Result<size_t> ReadAt(uint64_t offset, char* buf, size_t n) const = 0;

  // Reads exactly n bytes; a short read (the file ends first) is
  // kCorruption naming the path and the offset.
  Status ReadExactAt(uint64_t offset, char* buf, size_t n) const;

  // Writes all of `data` at `offset`, extending the file if needed.
  virtual Status WriteAt(uint64_t offset, Slice data) = 0;

  // Writes all of `data` at the current end of the file.
  virtual Status Append(Slice data) = 0;

  // fdatasync semantics: written data (and the size) is durable on return.
  // It does not make a new directory entry durable: see Env::SyncDir.
  virtual Status Sync() = 0;

  // Sets the size; growing fills with zeros.
  virtual Status Truncate(uint64_t size) = 0;

  virtual Result<uint64_t> Size() const = 0;

  // Idempotent; the destructor closes (ignoring errors).
  virtual Status Close() = 0;

  // The path the file was opened with.
  virtual const std::string& path() const = 0;
};

// An exclusive lock on a path, held until destruction.
class FileLock {
 public:
  FileLock() = default;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  virtual ~FileLock();
};

class Env {
 public:
  Env() = default;
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;
  virtual ~Env();

  // The real file system. Process-wide and never destroyed.
  static Env* Posix();

  virtual Result<std::unique_ptr<File>> OpenFile(const std::string& path, OpenMode mode) = 0;
  virtual Status DeleteFile(const std::string& path) = 0;
  // Atomically replaces `to` if it exists.
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // True if a file or directory exists at `path`.
  virtual bool FileExists(const std::string& path) = 0;
  virtual Result<uint64_t> GetFileSize(const std::string& path) = 0;
  // Names (not paths) of the entries of `dir`, sorted, without "." and "..".
  virtual Result<std::vector<std::string>> GetChildren(const std::string& dir) = 0;
  // OK if the directory already exists; the parent must exist.
  virtual Status CreateDir(const std::string& dir) = 0;
  // Like mkdir -p.
  virtual Status CreateDirs(const std::string& dir) = 0;
  // REQUIRES: the directory is empty (otherwise kIOError).
  virtual Status DeleteDir(const std::string& dir) = 0;
  // Makes the creates, renames and deletes of entries in `dir` durable.
  virtual Status SyncDir(const std::string& dir) = 0;
  // Takes an exclusive, non-blocking lock on `path` (created if missing).
  // Held by anyone else (another process, or another LockFile call in this
  // process) -> kBusy naming the path.
  virtual Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) = 0;
  // Microseconds on a monotonic clock with an arbitrary origin: for
  // durations and deadlines, not for wall-clock timestamps.
  virtual uint64_t NowMicros() = 0;
};

// Forwards every call to target(). A test derives from it and overrides the
// one method it wants to change.
// REQUIRES: target outlives the wrapper.
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}
  Env* target() const { return target_; }

  Result<std::unique_ptr<File>> OpenFile(const std::string& path, OpenMode mode) override {
    return target_->OpenFile(path, mode);
  }
  Status DeleteFile(const std::string& path) override { return target_->DeleteFile(path); }
  Status RenameFile(const std::string& from, const std::string& to) override {
    return target_->RenameFile(from, to);
  }
  bool FileExists(const std::string& path) override { return target_->FileExists(path); }
  Result<uint64_t> GetFileSize(const std::string& path) override {
    return target_->GetFileSize(path);
  }
  Result<std::vector<std::string>> GetChildren(const std::string& dir) override {
    return target_->GetChildren(dir);
  }
  Status CreateDir(const std::string& dir) override { return target_->CreateDir(dir); }
  Status CreateDirs(const std::string& dir) override { return target_->CreateDirs(dir); }
  Status DeleteDir(const std::string& dir) override { return target_->DeleteDir(dir); }
  Status SyncDir(const std::string& dir) override { return target_->SyncDir(dir); }
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    return target_->LockFile(path);
  }
  uint64_t NowMicros() override { return target_->NowMicros(); }

 private:
  Env* const target_;
};

// A fresh, empty in-memory file system (only "/" exists). Thread-safe. Files
// and locks it hands out may outlive it.
std::unique_ptr<Env> NewMemEnv();

// Writes `data` as the whole content of `path` (created or truncated), and
// syncs it if `sync`. Does not sync the directory.
Status WriteStringToFile(Env* env, Slice data, const std::string& path, bool sync);

// The whole content of `path`.
Result<std::string> ReadFileToString(Env* env, const std::string& path);

// "a/b"; no doubled '/' if a ends with one; b alone if a is empty.
std::string JoinPath(const std::string& a, const std::string& b);

// "/x/y" for "/x/y/z", "/" for "/z", "." for "z"; trailing '/' ignored.
std::string ParentDir(const std::string& path);

// The spelling Envs use to compare paths: repeated '/' collapsed, a trailing
// '/' dropped, "" becomes ".". Does not resolve ".", ".." or symbolic links.
std::string NormalizePath(const std::string& path);

}  // namespace deuteron
