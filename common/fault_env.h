// FaultInjectionEnv: an Env wrapper for tests that simulates crashes, injects
// I/O errors and corrupts bytes, deterministically from a seed.
//
// It wraps any base Env (NewMemEnv() for speed, Env::Posix() for realism) and
// only knows about what passes through it: files opened, written, renamed or
// created through this Env. Changes made directly on the base are invisible.
//
// Crash model (SimulateCrash):
//  * Data. Every WriteAt, Append and Truncate on a file (OpenFile(kTruncate)
//    of an existing file counts as a Truncate(0)) is recorded with the bytes
//    and size it replaced, until a successful Sync() of that file, through any
//    of its handles. kDropUnsynced reverts every unsynced change: exactly the
//    unsynced bytes are lost, synced ones stay (an overwrite of a synced
//    region gets the old bytes back). kTearUnsynced keeps a seeded-random
//    prefix of each file's unsynced changes, in order, cuts the last kept
//    write at a random byte (keeping its first bytes), and reverts the rest.
//  * Directory entries. A file that OpenFile created is removed at a crash
//    unless its parent directory was synced (SyncDir) after the creation.
//    A rename is undone at a crash (the file moves back, and a file it
//    replaced gets back its durable content) unless the directory of the
//    target was synced after it. Deletes are durable at once: a deleted file
//    never comes back (a real file system may or may not bring it back; the
//    code under test must cope with either, and "stays deleted" is the case
//    that loses data). Directories themselves are durable once created.
//    Undoing is best effort around later changes: an undone create of a path
//    that no longer exists, or an undone rename whose target no longer
//    exists, does nothing.
//  * After a crash every File opened before it returns kIOError ("crashed")
//    from every call, and the Env is usable again: the test reopens the files
//    and runs recovery. Locks from LockFile are not touched: release them (a
//    crashed process would have lost them).
//  Paths are compared after NormalizePath: use one spelling per file.
//
// Error injection. Calls are counted per Op: kOpen (OpenFile, LockFile),
// kRead (ReadAt), kWrite (WriteAt, Append, Truncate), kSync (Sync, SyncDir),
// kMetadata (DeleteFile, RenameFile, CreateDir, CreateDirs, DeleteDir); kAny
// counts them all. Size, Close, FileExists, GetFileSize, GetChildren and
// NowMicros are not counted and never fail by injection. An injected failure
// has the chosen code (kIOError for EIO, kNoSpace for ENOSPC, ...) and a
// message containing "injected"; the failed call has no effect (a failed
// write writes nothing, a failed Sync leaves the data unsynced).
// To crash at every I/O point: run the workload once and read
// OpCount(Op::kAny), then for n = 1..count run it on a fresh Env with
// FailNth(Op::kAny, n, ...).
//
// Determinism: one seeded generator serves random failures, tearing and
// corruption, so a single-threaded test replays exactly from its seed.
//
// Thread safety: thread-safe, like every Env; the Files it returns follow the
// File contract. A FaultInjectionEnv serializes the writes and syncs of each
// file (slower, never wrong), and takes one mutex per counted call.
// SimulateCrash and CorruptRange may run concurrently with other calls, which
// then fail or wait.
// REQUIRES: the base Env outlives this one, and this one outlives every File
// it returned.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "common/env.h"

namespace deuteron {

enum class CrashMode {
  kDropUnsynced,  // lose every unsynced change
  kTearUnsynced,  // keep a random prefix of each file's unsynced changes
};

class FaultInjectionEnv : public EnvWrapper {
 public:
  enum class Op : uint8_t { kOpen, kRead, kWrite, kSync, kMetadata, kAny };
  static constexpr size_t kNumOps = 6;
  // "open", "read", "write", "sync", "metadata", "any" (for messages).
  static const char* OpName(Op op);

  FaultInjectionEnv(Env* base, uint64_t seed);
  ~FaultInjectionEnv() override;

  uint64_t seed() const { return seed_; }

  // --- crashes ---

  // Applies the crash model above to the base Env and invalidates every File
  // opened before. Fails only if the base Env fails while undoing (the undo
  // goes on with the other files; the first error is returned).
  Status SimulateCrash(CrashMode mode);

  // Number of unsynced changes recorded for `path` (0 if none or unknown).
  size_t UnsyncedChangeCount(const std::string& path);

  // --- error injection ---

  // The n-th call of kind `op` from now (n = 1: the next one) fails with
  // `code`. Several may be armed at once; each fires once.
  // REQUIRES: n >= 1, code != Code::kOk.
  void FailNth(Op op, uint64_t n, Code code);

  // Every call of kind `op` (kAny: of any kind) fails with `code` with
  // probability `probability`, drawn from the seeded generator. 0 turns it off.
  void SetRandomFailures(Op op, double probability, Code code);

  // Disarms FailNth and SetRandomFailures. Counters keep counting.
  void ClearFailures();

  // Calls of kind `op` counted since construction (failed ones included).
  uint64_t OpCount(Op op) const;

  // --- stalls ---

  // While held, every File::Sync (not SyncDir) waits, before it does
  // anything, until ReleaseSyncs: the window between a write and its sync,
  // held open for a test. A sync released after a SimulateCrash finds its
  // file crashed and fails (nothing becomes durable).
  void HoldSyncs();
  void ReleaseSyncs();
  // File::Sync calls waiting in HoldSyncs now.
  uint64_t held_syncs() const;

  // --- corruption ---

  // Flips exactly `bits` distinct, seeded-random bits within
  // [offset, offset + len) of `path`, in its current content and in every
  // older version a crash could bring back, so the damage survives any
  // SimulateCrash. The current content is synced on the base.
  // REQUIRES: offset + len <= current size, 0 <= bits <= 8 * len, and no
  // concurrent writes to the range.
  Status CorruptRange(const std::string& path, uint64_t offset, uint64_t len, int bits);

  // --- Env ---
  Result<std::unique_ptr<File>> OpenFile(const std::string& path, OpenMode mode) override;
  Status DeleteFile(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status CreateDir(const std::string& dir) override;
  Status CreateDirs(const std::string& dir) override;
  Status DeleteDir(const std::string& dir) override;
  Status SyncDir(const std::string& dir) override;
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override;

 private:
  class FaultFile;

  // One unsynced change: the file had `old_size` bytes and `old_bytes` at
  // `offset` before it. A write wrote `write_len` bytes at `offset`; a
  // truncate set the size to `offset`.
  struct Change {
    bool truncate = false;
    uint64_t offset = 0;
    uint64_t write_len = 0;
    uint64_t old_size = 0;
    std::string old_bytes;
  };

  // Shared by every handle of one file (a file, not a path: it follows renames).
  struct FileState {
    std::mutex mu;
    std::vector<Change> changes;  // GUARDED_BY(mu), oldest first
  };

  // A directory change not yet made durable by SyncDir(sync_dir).
  struct DirChange {
    bool rename = false;   // else: create of `path`
    std::string path;      // created file, or the rename's target
    std::string from;      // rename only
    bool replaced = false; // rename over an existing file
    std::string replaced_content;  // its durable content
    std::string sync_dir;
  };

  struct Failure {
    Op op;
    uint64_t at;  // fires when OpCount(op) reaches this
    Code code;
  };

  struct RandomFailure {
    double probability = 0;
    Code code = Code::kIOError;
  };

  Status Inject(Op op, const std::string& what);
  Status InjectLocked(Op op, const std::string& what);  // REQUIRES: mu_ held
  uint64_t NextRandomLocked(uint64_t bound);            // uniform in [0, bound)
  // The content of `path` as a crash now would leave it (all changes undone).
  Result<std::string> DurableContentLocked(const std::string& key);
  // Undoes `state`'s changes on the base file `key`, keeping the first `keep`
  // and `cut` bytes of the last kept write. REQUIRES: mu_ and state->mu held.
  Status UndoChangesLocked(const std::string& key, FileState* state, size_t keep, uint64_t cut);
  std::shared_ptr<FileState> StateLocked(const std::string& key);
  bool crashed_since(uint64_t epoch) const { return epoch_.load() != epoch; }

  const uint64_t seed_;
  std::atomic<uint64_t> epoch_{0};  // bumped by each SimulateCrash

  mutable std::mutex mu_;  // lock order: mu_ before any FileState::mu
  std::mt19937_64 rng_;                                       // GUARDED_BY(mu_)
  std::array<uint64_t, kNumOps> counts_{};                    // GUARDED_BY(mu_)
  std::vector<Failure> failures_;                             // GUARDED_BY(mu_)
  std::array<RandomFailure, kNumOps> random_{};               // GUARDED_BY(mu_)
  std::map<std::string, std::shared_ptr<FileState>> files_;  // GUARDED_BY(mu_), by path
  std::vector<DirChange> dir_changes_;                        // GUARDED_BY(mu_), oldest first

  // HoldSyncs: its own mutex (a held sync must not hold mu_).
  void WaitWhileSyncsHeld();
  mutable std::mutex hold_mu_;
  std::condition_variable hold_cv_;
  bool syncs_held_ = false;   // GUARDED_BY(hold_mu_)
  uint64_t held_syncs_ = 0;   // GUARDED_BY(hold_mu_)
};

}  // namespace deuteron
