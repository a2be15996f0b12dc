// Env::Posix(): the real file system through open/pread/pwrite/fdatasync.
//
// Every descriptor is opened O_CLOEXEC. Reads and writes loop over short
// transfers and EINTR. Append is fstat + pwrite: O_APPEND is not used because
// on Linux it makes pwrite ignore its offset, which WriteAt needs.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/env.h"

namespace deuteron {
namespace {

// Status for errno `err` during "<op> <path>": ENOENT (and ENOTDIR: a path
// component is a file) is kNotFound, the rest as Status::FromErrno
// (ENOSPC/EDQUOT kNoSpace, otherwise kIOError).
Status PosixError(int err, const std::string& op, const std::string& path) {
  std::string context = op + " " + path;
  if (err == ENOENT || err == ENOTDIR) {
    return Status::NotFound(context + ": no such file or directory");
  }
  return Status::FromErrno(err, context);
}

Status ClosedError(const std::string& path) {
  return Status::IOError("file " + path + " is closed");
}

class PosixFile final : public File {
 public:
  PosixFile(std::string path, int fd, bool writable)
      : path_(std::move(path)), fd_(fd), writable_(writable) {}
  ~PosixFile() override { Close().PermitUncheckedError(); }

  Result<size_t> ReadAt(uint64_t offset, char* buf, size_t n) const override {
    if (fd_ < 0) return ClosedError(path_);
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd_, buf + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return PosixError(errno, "pread", path_);
      }
      if (r == 0) break;  // end of file
      done += static_cast<size_t>(r);
    }
    return done;
  }

  Status WriteAt(uint64_t offset, Slice data) override {
    if (fd_ < 0) return ClosedError(path_);
    if (!writable_) return Status::InvalidArgument("write to " + path_ + ": opened read-only");
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t r = ::pwrite(fd_, data.data() + done, data.size() - done,
                                 static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return PosixError(errno, "pwrite", path_);
      }
      done += static_cast<size_t>(r);
    }
    return Status::OK();
  }

  Status Append(Slice data) override {
    ASSIGN_OR_RETURN(uint64_t end, Size());
    return WriteAt(end, data);
  }

  Status Sync() override {
    if (fd_ < 0) return ClosedError(path_);
    while (::fdatasync(fd_) != 0) {
      if (errno != EINTR) return PosixError(errno, "fdatasync", path_);
    }
    return Status::OK();
  }

  Status Truncate(uint64_t size) override {
    if (fd_ < 0) return ClosedError(path_);
    if (!writable_) return Status::InvalidArgument("truncate " + path_ + ": opened read-only");
    while (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      if (errno != EINTR) return PosixError(errno, "ftruncate", path_);
    }
    return Status::OK();
  }

  Result<uint64_t> Size() const override {
    if (fd_ < 0) return ClosedError(path_);
    struct stat st;
    if (::fstat(fd_, &st) != 0) return PosixError(errno, "fstat", path_);
    return static_cast<uint64_t>(st.st_size);
  }

  Status Close() override {
    if (fd_ < 0) return Status::OK();
    const int fd = fd_;
    fd_ = -1;
    // Linux releases the descriptor even when close fails (EINTR included),
    // so it is never retried.
    if (::close(fd) != 0) return PosixError(errno, "close", path_);
    return Status::OK();
  }

  const std::string& path() const override { return path_; }

 private:
  const std::string path_;
  int fd_;  // -1 once closed
  const bool writable_;
};

class PosixFileLock final : public FileLock {
 public:
  explicit PosixFileLock(int fd) : fd_(fd) {}
  // Closing the only descriptor of this open file description drops the flock.
  ~PosixFileLock() override { ::close(fd_); }

 private:
  const int fd_;
};

class PosixEnv final : public Env {
 public:
  Result<std::unique_ptr<File>> OpenFile(const std::string& path, OpenMode mode) override {
    int flags = O_CLOEXEC;
    switch (mode) {
      case OpenMode::kRead: flags |= O_RDONLY; break;
      case OpenMode::kReadWrite: flags |= O_RDWR; break;
      case OpenMode::kCreate: flags |= O_RDWR | O_CREAT; break;
      case OpenMode::kCreateNew: flags |= O_RDWR | O_CREAT | O_EXCL; break;
      case OpenMode::kTruncate: flags |= O_RDWR | O_CREAT | O_TRUNC; break;
    }
    int fd;
    do {
      fd = ::open(path.c_str(), flags, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
      if (errno == EEXIST) return Status::InvalidArgument("create " + path + ": file exists");
      if (errno == EISDIR) return Status::IOError("open " + path + ": is a directory");
      return PosixError(errno, "open", path);
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return PosixError(err, "fstat", path);
    }
    if (S_ISDIR(st.st_mode)) {  // open(O_RDONLY) accepts a directory
      ::close(fd);
      return Status::IOError("open " + path + ": is a directory");
    }
    return std::unique_ptr<File>(
        std::make_unique<PosixFile>(path, fd, mode != OpenMode::kRead));
  }

  Status DeleteFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return PosixError(errno, "unlink", path);
    return Status::OK();
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return PosixError(errno, "rename " + from + " to", to);
    }
    return Status::OK();
  }

  bool FileExists(const std::string& path) override {
    return ::access(path.c_str(), F_OK) == 0;
  }

  Result<uint64_t> GetFileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return PosixError(errno, "stat", path);
    if (S_ISDIR(st.st_mode)) return Status::IOError("size of " + path + ": is a directory");
    return static_cast<uint64_t>(st.st_size);
  }

  Result<std::vector<std::string>> GetChildren(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return PosixError(errno, "opendir", dir);
    std::vector<std::string> names;
    errno = 0;
    while (struct dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    const int err = errno;
    ::closedir(d);
    if (err != 0) return PosixError(err, "readdir", dir);
    std::sort(names.begin(), names.end());
    return names;
  }

  Status CreateDir(const std::string& dir) override {
    if (::mkdir(dir.c_str(), 0755) == 0) return Status::OK();
    const int err = errno;
    struct stat st;
    if (err == EEXIST && ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return Status::OK();
    if (err == EEXIST) return Status::IOError("mkdir " + dir + ": exists and is not a directory");
    return PosixError(err, "mkdir", dir);
  }

  Status CreateDirs(const std::string& dir) override {
    // Create each prefix ending before a '/', then the whole path.
    for (size_t pos = dir.find('/', 1); pos != std::string::npos; pos = dir.find('/', pos + 1)) {
      if (dir[pos - 1] == '/') continue;  // "a//b"
      RETURN_IF_ERROR(CreateDir(dir.substr(0, pos)));
    }
    return CreateDir(dir);
  }

  Status DeleteDir(const std::string& dir) override {
    if (::rmdir(dir.c_str()) != 0) return PosixError(errno, "rmdir", dir);
    return Status::OK();
  }

  Status SyncDir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PosixError(errno, "open directory", dir);
    Status s;
    while (::fsync(fd) != 0) {
      if (errno != EINTR) {
        s = PosixError(errno, "fsync directory", dir);
        break;
      }
    }
    ::close(fd);
    return s;
  }

  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    // A fresh open file description per call: flock conflicts between
    // descriptions, so two lockers in this process exclude each other too.
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return PosixError(errno, "open lock file", path);
    int r;
    do {
      r = ::flock(fd, LOCK_EX | LOCK_NB);
    } while (r != 0 && errno == EINTR);
    if (r != 0) {
      const int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK) return Status::Busy("lock " + path + ": held by another owner");
      return PosixError(err, "flock", path);
    }
    return std::unique_ptr<FileLock>(std::make_unique<PosixFileLock>(fd));
  }

  uint64_t NowMicros() override {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  }
};

}  // namespace

Env* Env::Posix() {
  // Deliberately leaked: usable from static destructors and other threads
  // at exit. PosixEnv has no state, so nothing is lost.
  static Env* const env = new PosixEnv();
  return env;
}

}  // namespace deuteron
