// The bitflip fault's file side: the used part of a sparse file, a seeded
// flip inside it, undone by a second flip; copies that keep holes.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "tc/crash/bitflip.h"
#include "tests/tc/crash/crash_test_util.h"

namespace deuteron::crash {
namespace {

namespace fs = std::filesystem;

// A 1 MiB sparse file with `used` bytes of 0xAB at its start.
void WriteSparse(const std::string& path, size_t used) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  const std::string data(used, '\xab');
  REQUIRE(pwrite(fd, data.data(), data.size(), 0) == static_cast<ssize_t>(data.size()));
  REQUIRE(ftruncate(fd, 1 << 20) == 0);
  ::close(fd);
}

TEST_CASE("a flip lands in the used part of a log or LSS file and a second flip undoes it", "[crash]") {
  const std::string root = TempDir();
  fs::create_directories(root + "/tc/log");
  fs::create_directories(root + "/dc/lss");
  WriteSparse(root + "/tc/log/0000000000000001.wal", 3000);
  WriteSparse(root + "/tc/log/spare-0000000000000000.wal", 1 << 20);  // never a target
  WriteSparse(root + "/dc/lss/0000000000000000.seg", 5000);
  CHECK(*UsedLength(root + "/tc/log/0000000000000001.wal") == 3000);
  CHECK(*UsedLength(root + "/dc/lss/0000000000000000.seg") == 5000);
  const std::string spare = ReadAll(root + "/tc/log/spare-0000000000000000.wal");
  bool saw_log = false, saw_lss = false;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    Random64 rng(seed);
    Result<Flip> f = FlipRandomBit(root + "/tc", root + "/dc", rng);
    REQUIRE(f.ok());
    Random64 again(seed);
    Result<Flip> g = FlipRandomBit(root + "/tc", root + "/dc", again);  // the same seed: the same bit
    REQUIRE(g.ok());
    CHECK(g->file == f->file);
    CHECK(g->offset == f->offset);
    CHECK(g->bit == f->bit);
    // Two flips of one bit: back as it was.
    const std::string content = ReadAll(f->file);
    const bool log = f->file.find("/log/") != std::string::npos;
    saw_log |= log;
    saw_lss |= !log;
    CHECK(f->offset < (log ? 3000u : 5000u));
    CHECK(content[f->offset] == '\xab');
    REQUIRE(FlipBit(*f).ok());
    const std::string flipped = ReadAll(f->file);
    CHECK(static_cast<unsigned char>(flipped[f->offset]) == (0xab ^ (1u << f->bit)));
    CHECK(flipped.substr(0, f->offset) == content.substr(0, f->offset));
    REQUIRE(FlipBit(*f).ok());
  }
  CHECK(saw_log);
  CHECK(saw_lss);
  CHECK(ReadAll(root + "/tc/log/spare-0000000000000000.wal") == spare);
  fs::remove_all(root);
}

TEST_CASE("the used length of a file ends at its last non-zero byte", "[crash]") {
  const std::string root = TempDir();
  for (size_t used : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{4095},
                      size_t{4096}, size_t{(1 << 20) - 1}, size_t{1 << 20}}) {
    WriteSparse(root + "/f", used);
    INFO(used);
    CHECK(*UsedLength(root + "/f") == used);
  }
  // A zero byte inside the used part does not end it.
  WriteSparse(root + "/f", 100);
  const int fd = ::open((root + "/f").c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  const char zeros[16] = {};
  REQUIRE(pwrite(fd, zeros, sizeof zeros, 50) == 16);
  ::close(fd);
  CHECK(*UsedLength(root + "/f") == 100);
  fs::remove_all(root);
}

TEST_CASE("with nothing used there is nothing to flip", "[crash]") {
  const std::string root = TempDir();
  fs::create_directories(root + "/tc/log");
  fs::create_directories(root + "/dc/lss");
  WriteSparse(root + "/dc/lss/0000000000000000.seg", 0);
  Random64 rng(1);
  CHECK(FlipRandomBit(root + "/tc", root + "/dc", rng).status().code() == Code::kNotFound);
  fs::remove_all(root);
}

TEST_CASE("a copied store keeps its contents and its holes, and replaces the target", "[crash]") {
  const std::string root = TempDir();
  fs::create_directories(root + "/a/lss");
  WriteSparse(root + "/a/lss/x.seg", 100);
  fs::create_directories(root + "/b");
  { std::ofstream(root + "/b/stale") << "old"; }
  REQUIRE(CopyTree(root + "/a", root + "/b").ok());
  CHECK(ReadAll(root + "/b/lss/x.seg") == ReadAll(root + "/a/lss/x.seg"));
  CHECK_FALSE(fs::exists(root + "/b/stale"));
  struct stat st = {};
  REQUIRE(stat((root + "/b/lss/x.seg").c_str(), &st) == 0);
  CHECK(st.st_blocks * 512 < (1 << 20));  // still sparse
  fs::remove_all(root);
}

}  // namespace
}  // namespace deuteron::crash
