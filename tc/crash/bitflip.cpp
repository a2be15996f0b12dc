#include "tc/crash/bitflip.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "tc/crash/run_program.h"

namespace deuteron::crash {

namespace fs = std::filesystem;

std::string Flip::ToString() const {
  return file + " byte " + std::to_string(offset) + " bit " + std::to_string(bit);
}

namespace {

// One past the last non-zero byte of p[0, n), or 0 when all are zero. Word
// by word: segment files are mostly zeros past their used part, and a byte
// loop over them was most of the harness's time per bit flip.
size_t LastNonZero(const unsigned char* p, size_t n) {
  size_t end = n;
  while (end % 8 != 0) {
    if (p[end - 1] != 0) return end;
    --end;
  }
  while (end >= 8) {
    uint64_t w;
    std::memcpy(&w, p + end - 8, 8);
    if (w != 0) break;
    end -= 8;
  }
  while (end > 0 && p[end - 1] == 0) --end;
  return end;
}

}  // namespace

Result<uint64_t> UsedLength(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  std::vector<unsigned char> buf(1 << 20);
  uint64_t used = 0;
  off_t pos = 0;
  while (true) {
    // Skip holes: a sparse segment reads as zeros anyway.
    const off_t data = lseek(fd, pos, SEEK_DATA);
    if (data < 0) break;  // ENXIO: no data after pos
    const ssize_t n = pread(fd, buf.data(), buf.size(), data);
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Status::FromErrno(err, "read " + path);
    }
    if (n == 0) break;
    const size_t last = LastNonZero(buf.data(), static_cast<size_t>(n));
    if (last > 0) used = static_cast<uint64_t>(data) + last;
    pos = data + n;
  }
  ::close(fd);
  return used;
}

namespace {

struct Candidate {
  std::string path;
  uint64_t used;
};

std::vector<Candidate> Candidates(const std::string& dir, const std::string& extension) {
  std::vector<Candidate> out;
  std::error_code ec;
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != extension || name.rfind("spare-", 0) == 0) continue;
    names.push_back(e.path().string());
  }
  std::sort(names.begin(), names.end());  // directory order is not reproducible
  for (const std::string& path : names) {
    Result<uint64_t> used = UsedLength(path);
    if (used.ok() && *used > 0) out.push_back({path, *used});
  }
  return out;
}

}  // namespace

Result<Flip> FlipRandomBit(const std::string& tc_dir, const std::string& dc_dir, Random64& rng) {
  std::vector<Candidate> log = Candidates(tc_dir + "/log", ".wal");
  std::vector<Candidate> lss = Candidates(dc_dir + "/lss", ".seg");
  const bool use_log = lss.empty() || (!log.empty() && rng.Uniform(2) == 0);
  const std::vector<Candidate>& area = use_log ? log : lss;
  if (area.empty()) return Status::NotFound("no used log or LSS bytes to flip");
  uint64_t total = 0;
  for (const Candidate& c : area) total += c.used;
  uint64_t at = rng.Uniform(total);
  Flip f;
  for (const Candidate& c : area) {
    if (at < c.used) {
      f.file = c.path;
      f.offset = at;
      break;
    }
    at -= c.used;
  }
  f.bit = static_cast<int>(rng.Uniform(8));
  if (Status s = FlipBit(f); !s.ok()) return s;
  return f;
}

Status FlipBit(const Flip& flip) {
  const int fd = ::open(flip.file.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + flip.file);
  unsigned char b = 0;
  Status s;
  if (pread(fd, &b, 1, static_cast<off_t>(flip.offset)) != 1) {
    s = Status::FromErrno(errno, "read " + flip.ToString());
  } else {
    b = static_cast<unsigned char>(b ^ (1u << flip.bit));
    if (pwrite(fd, &b, 1, static_cast<off_t>(flip.offset)) != 1) {
      s = Status::FromErrno(errno, "write " + flip.ToString());
    } else if (fdatasync(fd) != 0) {
      s = Status::FromErrno(errno, "sync " + flip.file);
    }
  }
  ::close(fd);
  return s;
}

Status CopyTree(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::remove_all(to, ec);
  if (ec) return Status::IOError("remove " + to + ": " + ec.message());
  Result<int> rc = RunProgram("/bin/cp", {"-a", "--sparse=always", from, to}, "/dev/null");
  if (!rc.ok()) return rc.status();
  if (*rc != 0) return Status::IOError("cp -a " + from + " " + to + " failed");
  return Status::OK();
}

}  // namespace deuteron::crash
