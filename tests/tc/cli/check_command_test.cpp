// `deuteron check` as a process: clean on a store a server closed cleanly;
// a flipped byte in the log, a flipped byte in the LSS and a truncated LSS
// segment each reported with the file and offset and a nonzero exit; a
// directory a running server holds, one of another format and one whose DC
// belongs to another store refused or reported.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tc/client/client.h"
#include "tests/tc/cli/cli_util.h"

namespace deuteron::test {
namespace {

namespace fs = std::filesystem;

// A `serve` store in dir with `commits` one-key transactions, closed cleanly.
void BuildStore(const std::string& dir, int commits) {
  Child child({"serve", "--dir", dir, "--listen", "127.0.0.1:0"});
  const uint16_t port = ServingPort(child.ReadLine());
  {
    auto c = client::Client::Connect("127.0.0.1:" + std::to_string(port));
    REQUIRE(c.ok());
    for (int i = 0; i < commits; ++i) {
      const std::string key = "key" + std::to_string(i);
      REQUIRE((*c)->Run([&](client::Transaction& t) { return t.Put(key, std::string(100, 'v')); }).ok());
    }
  }
  REQUIRE(child.Stop(SIGTERM) == 0);
}

// The lowest-numbered file in `dir` whose name ends with `suffix` (spares
// excluded).
std::string LowestFile(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() > suffix.size() && name.ends_with(suffix) && !name.starts_with("spare-")) {
      names.push_back(name);
    }
  }
  REQUIRE_FALSE(names.empty());
  std::sort(names.begin(), names.end());
  return dir + "/" + names.front();
}

void FlipByte(const std::string& path, off_t offset) {
  const int fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  unsigned char b = 0;
  REQUIRE(::pread(fd, &b, 1, offset) == 1);
  b ^= 0x5a;
  REQUIRE(::pwrite(fd, &b, 1, offset) == 1);
  ::close(fd);
}

struct Outcome {
  int status;
  std::string output;
};

Outcome Check(const std::string& dir) {
  Child child({"check", "--dir", dir}, /*merge_stderr=*/true);
  Outcome o;
  o.output = child.ReadAll();
  o.status = child.Wait();
  return o;
}

TEST_CASE("deuteron check: a cleanly closed store is clean", "[tc][cli][check]") {
  const std::string dir = TempDir();
  BuildStore(dir, 20);
  const Outcome o = Check(dir);
  INFO(o.output);
  CHECK(o.status == 0);
  CHECK(o.output.find("deuteron check: clean") != std::string::npos);
  CHECK(o.output.find("Bw-tree Check: consistent") != std::string::npos);
  CHECK(o.output.find("the log and the DC belong to store") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("deuteron check finds a flipped byte in the log, with its place", "[tc][cli][check]") {
  const std::string dir = TempDir();
  BuildStore(dir, 20);
  const std::string segment = LowestFile(dir + "/log", ".wal");
  FlipByte(segment, 40);  // the payload of the segment's first record
  const Outcome o = Check(dir);
  INFO(o.output);
  CHECK(o.status == 1);
  CHECK(o.output.find("PROBLEM   " + segment + " offset 0: invalid record (payload checksum mismatch)") !=
        std::string::npos);
  CHECK(o.output.find("deuteron check: 1 problem") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("deuteron check finds a flipped byte in the LSS, with its place", "[tc][cli][check]") {
  const std::string dir = TempDir();
  BuildStore(dir, 20);
  const std::string segment = LowestFile(dir + "/dc/lss", ".seg");
  FlipByte(segment, 4096 + 64 + 8);  // a record in the segment's first buffer
  const Outcome o = Check(dir);
  INFO(o.output);
  CHECK(o.status == 1);
  CHECK(o.output.find("PROBLEM   " + segment + " offset 4096: ") != std::string::npos);
  CHECK(o.output.find("buffer records checksum mismatch") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("deuteron check finds a truncated LSS segment, with its place", "[tc][cli][check]") {
  const std::string dir = TempDir();
  BuildStore(dir, 20);
  const std::string segment = LowestFile(dir + "/dc/lss", ".seg");
  const auto size = fs::file_size(segment);
  REQUIRE(size > 8192);
  fs::resize_file(segment, 4096 + 100);  // inside the first buffer
  const Outcome o = Check(dir);
  INFO(o.output);
  CHECK(o.status == 1);
  CHECK(o.output.find("PROBLEM   " + segment + " offset 4096: ") != std::string::npos);
  CHECK(o.output.find("truncated or damaged") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("deuteron check refuses a directory a running server holds", "[tc][cli][check]") {
  const std::string dir = TempDir();
  Child server({"serve", "--dir", dir, "--listen", "127.0.0.1:0"});
  ServingPort(server.ReadLine());
  const Outcome o = Check(dir);
  INFO(o.output);
  CHECK(o.status == 1);
  CHECK(o.output.find("refused") != std::string::npos);
  CHECK(o.output.find("in use by another Deuteron process") != std::string::npos);
  CHECK(server.Stop(SIGTERM) == 0);
  fs::remove_all(dir);
}

TEST_CASE("deuteron check: another format, another store, a missing directory", "[tc][cli][check]") {
  const std::string dir = TempDir();
  {
    std::FILE* f = std::fopen((dir + "/notes.txt").c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("not a store\n", f);
    std::fclose(f);
    const Outcome o = Check(dir);
    INFO(o.output);
    CHECK(o.status == 1);
    CHECK(o.output.find("is not a Deuteron store") != std::string::npos);
  }
  {
    // Store a's log with store b's DC.
    BuildStore(dir + "/a", 2);
    BuildStore(dir + "/b", 2);
    fs::remove_all(dir + "/a/dc");
    fs::copy(dir + "/b/dc", dir + "/a/dc", fs::copy_options::recursive);
    const Outcome o = Check(dir + "/a");
    INFO(o.output);
    CHECK(o.status == 1);
    CHECK(o.output.find("PROBLEM   " + dir + "/a/dc/dc.meta offset 36: store id") != std::string::npos);
    CHECK(o.output.find("belongs to another store") != std::string::npos);
    // And the server will not open it either.
    Child serve({"serve", "--dir", dir + "/a", "--listen", "127.0.0.1:0"}, /*merge_stderr=*/true);
    const std::string out = serve.ReadAll();
    INFO(out);
    CHECK(serve.Wait() == 1);
    CHECK(out.find("StoreMismatch") != std::string::npos);
  }
  {
    Child missing({"check", "--dir", dir + "/no-such-dir"}, /*merge_stderr=*/true);
    const std::string out = missing.ReadAll();
    CHECK(missing.Wait() == 2);
    CHECK(out.find("deuteron check: --dir: Directory does not exist") != std::string::npos);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deuteron::test
