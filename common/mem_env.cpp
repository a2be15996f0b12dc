// NewMemEnv(): a private in-memory file system with POSIX-like semantics.
//
// One mutex (Tree::mu) guards the namespace: the path -> file map, the set of
// directories and the set of held locks. Each file's bytes have their own
// mutex (FileData::mu), so I/O on different files runs in parallel. Lock
// order: Tree::mu before FileData::mu. Files and locks keep the state they
// need alive (shared_ptr), so they may outlive the Env, like descriptors.
//
// Paths are normalized (repeated and trailing '/' dropped). "/" and "." exist
// from the start, so both absolute and relative paths work; "." is not the
// same directory as any absolute path.
//
// A file's bytes live in fixed-size blocks allocated as writes reach them
// (FileBytes). A std::string grew by doubling: every growth copied all that
// was written and zero-filled the new capacity before the write copied over
// it, which was most of the LSS I/O thread's time in bwtree_bench (its 64 MiB
// segments are written 4 MiB at a time).
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/env.h"

namespace deuteron {
namespace {

// Bytes [0, size) are the file's; block bytes past size are unspecified, and
// growth (a write past the end, Resize) zero-fills [old size, new data) so
// that a hole reads as zeros. Not thread-safe: FileData::mu guards it.
class FileBytes {
 public:
  uint64_t size() const { return size_; }

  size_t Read(uint64_t offset, char* buf, size_t n) const {
    if (offset >= size_) return 0;
    n = static_cast<size_t>(std::min<uint64_t>(n, size_ - offset));
    ForEachPiece(offset, n, [&](char* block, size_t done, size_t len) {
      std::memcpy(buf + done, block, len);
    });
    return n;
  }

  void Write(uint64_t offset, const char* data, size_t n) {
    if (offset > size_) Zero(size_, offset);
    Reserve(offset + n);
    ForEachPiece(offset, n, [&](char* block, size_t done, size_t len) {
      std::memcpy(block, data + done, len);
    });
    size_ = std::max<uint64_t>(size_, offset + n);
  }

  void Resize(uint64_t n) {
    if (n > size_) Zero(size_, n);
    size_ = n;
    blocks_.resize(static_cast<size_t>((n + kBlock - 1) / kBlock));  // frees blocks past the end
  }

 private:
  static constexpr size_t kBlock = size_t{64} << 10;

  // Blocks covering [0, end), uninitialized.
  void Reserve(uint64_t end) {
    const auto need = static_cast<size_t>((end + kBlock - 1) / kBlock);
    while (blocks_.size() < need) blocks_.push_back(std::make_unique_for_overwrite<char[]>(kBlock));
  }

  // Calls f(block_ptr, bytes_done, len) for each block-bounded piece of
  // [offset, offset + n), in order.
  template <typename F>
  void ForEachPiece(uint64_t offset, size_t n, F&& f) const {
    size_t done = 0;
    while (done < n) {
      const uint64_t at = offset + done;
      const auto within = static_cast<size_t>(at % kBlock);
      const size_t len = std::min(n - done, kBlock - within);
      f(blocks_[static_cast<size_t>(at / kBlock)].get() + within, done, len);
      done += len;
    }
  }

  void Zero(uint64_t from, uint64_t to) {
    Reserve(to);
    ForEachPiece(from, static_cast<size_t>(to - from),
         [](char* block, size_t, size_t len) { std::memset(block, 0, len); });
  }

  std::vector<std::unique_ptr<char[]>> blocks_;
  uint64_t size_ = 0;
};

struct FileData {
  mutable std::mutex mu;
  FileBytes bytes;  // GUARDED_BY(mu)
};

struct Tree {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<FileData>> files;  // GUARDED_BY(mu)
  std::set<std::string> dirs{"/", "."};                     // GUARDED_BY(mu)
  std::set<std::string> locks;                              // GUARDED_BY(mu)
};

Status ClosedError(const std::string& path) {
  return Status::IOError("file " + path + " is closed");
}

Status Missing(const std::string& op, const std::string& path) {
  return Status::NotFound(op + " " + path + ": no such file or directory");
}

class MemFile final : public File {
 public:
  MemFile(std::string path, std::shared_ptr<FileData> data, bool writable)
      : path_(std::move(path)), data_(std::move(data)), writable_(writable) {}
  ~MemFile() override { Close().PermitUncheckedError(); }

  Result<size_t> ReadAt(uint64_t offset, char* buf, size_t n) const override {
    if (closed_) return ClosedError(path_);
    std::lock_guard<std::mutex> l(data_->mu);
    return data_->bytes.Read(offset, buf, n);
  }

  Status WriteAt(uint64_t offset, Slice data) override {
    if (closed_) return ClosedError(path_);
    if (!writable_) return Status::InvalidArgument("write to " + path_ + ": opened read-only");
    std::lock_guard<std::mutex> l(data_->mu);
    WriteLocked(offset, data);
    return Status::OK();
  }

  Status Append(Slice data) override {
    if (closed_) return ClosedError(path_);
    if (!writable_) return Status::InvalidArgument("write to " + path_ + ": opened read-only");
    std::lock_guard<std::mutex> l(data_->mu);
    WriteLocked(data_->bytes.size(), data);
    return Status::OK();
  }

  Status Sync() override {
    if (closed_) return ClosedError(path_);
    return Status::OK();
  }

  Status Truncate(uint64_t size) override {
    if (closed_) return ClosedError(path_);
    if (!writable_) return Status::InvalidArgument("truncate " + path_ + ": opened read-only");
    std::lock_guard<std::mutex> l(data_->mu);
    data_->bytes.Resize(size);
    return Status::OK();
  }

  Result<uint64_t> Size() const override {
    if (closed_) return ClosedError(path_);
    std::lock_guard<std::mutex> l(data_->mu);
    return static_cast<uint64_t>(data_->bytes.size());
  }

  Status Close() override {
    closed_ = true;
    return Status::OK();
  }

  const std::string& path() const override { return path_; }

 private:
  void WriteLocked(uint64_t offset, Slice data) {
    data_->bytes.Write(offset, data.data(), data.size());
  }

  const std::string path_;
  const std::shared_ptr<FileData> data_;
  const bool writable_;
  bool closed_ = false;  // Close is not concurrent with other calls
};

class MemFileLock final : public FileLock {
 public:
  MemFileLock(std::shared_ptr<Tree> tree, std::string path)
      : tree_(std::move(tree)), path_(std::move(path)) {}
  ~MemFileLock() override {
    std::lock_guard<std::mutex> l(tree_->mu);
    tree_->locks.erase(path_);
  }

 private:
  const std::shared_ptr<Tree> tree_;
  const std::string path_;
};

class MemEnv final : public Env {
 public:
  Result<std::unique_ptr<File>> OpenFile(const std::string& path, OpenMode mode) override {
    const std::string n = NormalizePath(path);
    std::lock_guard<std::mutex> l(tree_->mu);
    if (tree_->dirs.count(n)) return Status::IOError("open " + path + ": is a directory");
    std::shared_ptr<FileData> data;
    auto it = tree_->files.find(n);
    if (it != tree_->files.end()) {
      if (mode == OpenMode::kCreateNew) {
        return Status::InvalidArgument("create " + path + ": file exists");
      }
      data = it->second;
      if (mode == OpenMode::kTruncate) {
        std::lock_guard<std::mutex> dl(data->mu);
        data->bytes.Resize(0);
      }
    } else {
      if (mode == OpenMode::kRead || mode == OpenMode::kReadWrite) return Missing("open", path);
      ASSIGN_OR_RETURN(data, CreateLocked(n, path));
    }
    return std::unique_ptr<File>(
        std::make_unique<MemFile>(path, std::move(data), mode != OpenMode::kRead));
  }

  Status DeleteFile(const std::string& path) override {
    const std::string n = NormalizePath(path);
    std::lock_guard<std::mutex> l(tree_->mu);
    if (tree_->dirs.count(n)) return Status::IOError("unlink " + path + ": is a directory");
    if (tree_->files.erase(n) == 0) return Missing("unlink", path);
    return Status::OK();
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    const std::string f = NormalizePath(from);
    const std::string t = NormalizePath(to);
    std::lock_guard<std::mutex> l(tree_->mu);
    if (tree_->dirs.count(f)) {
      return Status::NotSupported("rename " + from + ": the in-memory Env renames files only");
    }
    auto it = tree_->files.find(f);
    if (it == tree_->files.end()) return Missing("rename " + from + " to", to);
    if (!tree_->dirs.count(ParentDir(t))) return Missing("rename " + from + " to", to);
    if (tree_->dirs.count(t)) {
      return Status::IOError("rename " + from + " to " + to + ": is a directory");
    }
    if (f == t) return Status::OK();
    std::shared_ptr<FileData> data = std::move(it->second);
    tree_->files.erase(it);
    tree_->files[t] = std::move(data);
    return Status::OK();
  }

  bool FileExists(const std::string& path) override {
    const std::string n = NormalizePath(path);
    std::lock_guard<std::mutex> l(tree_->mu);
    return tree_->files.count(n) > 0 || tree_->dirs.count(n) > 0;
  }

  Result<uint64_t> GetFileSize(const std::string& path) override {
    const std::string n = NormalizePath(path);
    std::lock_guard<std::mutex> l(tree_->mu);
    if (tree_->dirs.count(n)) return Status::IOError("size of " + path + ": is a directory");
    auto it = tree_->files.find(n);
    if (it == tree_->files.end()) return Missing("stat", path);
    std::lock_guard<std::mutex> dl(it->second->mu);
    return static_cast<uint64_t>(it->second->bytes.size());
  }

  Result<std::vector<std::string>> GetChildren(const std::string& dir) override {
    const std::string n = NormalizePath(dir);
    std::lock_guard<std::mutex> l(tree_->mu);
    if (!tree_->dirs.count(n)) return Missing("opendir", dir);
    std::set<std::string> names;
    auto collect = [&](const std::string& p) {
      if (p != n && ParentDir(p) == n) names.insert(p.substr(p.rfind('/') + 1));
    };
    for (const auto& [p, data] : tree_->files) collect(p);
    for (const std::string& p : tree_->dirs) collect(p);
    return std::vector<std::string>(names.begin(), names.end());
  }

  Status CreateDir(const std::string& dir) override {
    const std::string n = NormalizePath(dir);
    std::lock_guard<std::mutex> l(tree_->mu);
    return CreateDirLocked(n, dir);
  }

  Status CreateDirs(const std::string& dir) override {
    const std::string n = NormalizePath(dir);
    std::lock_guard<std::mutex> l(tree_->mu);
    for (size_t pos = n.find('/', 1); pos != std::string::npos; pos = n.find('/', pos + 1)) {
      RETURN_IF_ERROR(CreateDirLocked(n.substr(0, pos), dir));
    }
    return CreateDirLocked(n, dir);
  }

  Status DeleteDir(const std::string& dir) override {
    const std::string n = NormalizePath(dir);
    std::lock_guard<std::mutex> l(tree_->mu);
    if (!tree_->dirs.count(n)) return Missing("rmdir", dir);
    for (const auto& [p, data] : tree_->files) {
      if (ParentDir(p) == n) return Status::IOError("rmdir " + dir + ": directory not empty");
    }
    for (const std::string& p : tree_->dirs) {
      if (p != n && ParentDir(p) == n) {
        return Status::IOError("rmdir " + dir + ": directory not empty");
      }
    }
    tree_->dirs.erase(n);
    return Status::OK();
  }

  Status SyncDir(const std::string& dir) override {
    const std::string n = NormalizePath(dir);
    std::lock_guard<std::mutex> l(tree_->mu);
    if (!tree_->dirs.count(n)) return Missing("open directory", dir);
    return Status::OK();
  }

  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    const std::string n = NormalizePath(path);
    std::lock_guard<std::mutex> l(tree_->mu);
    if (tree_->dirs.count(n)) return Status::IOError("open lock file " + path + ": is a directory");
    if (!tree_->files.count(n)) {
      Result<std::shared_ptr<FileData>> created = CreateLocked(n, path);
      if (!created.ok()) return std::move(created).status();
    }
    if (!tree_->locks.insert(n).second) {
      return Status::Busy("lock " + path + ": held by another owner");
    }
    return std::unique_ptr<FileLock>(std::make_unique<MemFileLock>(tree_, n));
  }

  uint64_t NowMicros() override { return Env::Posix()->NowMicros(); }

 private:
  // REQUIRES: tree_->mu held; `n` (normalized `path`) is not in the tree.
  Result<std::shared_ptr<FileData>> CreateLocked(const std::string& n, const std::string& path) {
    if (!tree_->dirs.count(ParentDir(n))) return Missing("open", path);
    auto data = std::make_shared<FileData>();
    tree_->files[n] = data;
    return data;
  }

  // REQUIRES: tree_->mu held.
  Status CreateDirLocked(const std::string& n, const std::string& dir) {
    if (tree_->dirs.count(n)) return Status::OK();
    if (tree_->files.count(n)) {
      return Status::IOError("mkdir " + dir + ": exists and is not a directory");
    }
    if (!tree_->dirs.count(ParentDir(n))) return Missing("mkdir", dir);
    tree_->dirs.insert(n);
    return Status::OK();
  }

  const std::shared_ptr<Tree> tree_ = std::make_shared<Tree>();
};

}  // namespace

std::unique_ptr<Env> NewMemEnv() { return std::make_unique<MemEnv>(); }

}  // namespace deuteron
