// History (tc/crash/history/history.h): recording and the JSON-lines form.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/random.h"
#include "tc/crash/history/history.h"
#include "tc/crash/history/history_check.h"

namespace deuteron::crash {
namespace {

std::string TempPath(const char* name) {
  return (std::filesystem::temp_directory_path() /
          (std::string("deuteron-history-") + std::to_string(::getpid()) + "-" + name))
      .string();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

TEST_CASE("history: save and load keep every field", "[history]") {
  History h;
  HistoryTxn a;
  a.id = h.NextId();
  a.client = 3;
  a.outcome = TxnOutcome::kOk;
  a.start_us = 10;
  a.end_us = 25;
  a.ops = {HistoryOp::Append("la/0", h.NextValue()), HistoryOp::Read("la/1", std::vector<uint64_t>{}),
           HistoryOp::Read("la/0", std::vector<uint64_t>{1, 18446744073709551615u})};
  HistoryTxn b;
  b.id = h.NextId();
  b.client = 0;
  b.outcome = TxnOutcome::kInfo;
  b.ops = {HistoryOp::Read("we\"ird\\key\n\x01", std::nullopt), HistoryOp::Append("k", 7)};
  HistoryTxn c;
  c.id = h.NextId();
  c.outcome = TxnOutcome::kFail;
  c.start_us = 0;
  c.end_us = 0;  // no ops at all
  h.Add(a);
  h.Add(b);
  h.Add(c);

  const std::string path = TempPath("roundtrip");
  REQUIRE(h.Save(path).ok());
  auto loaded = History::Load(path);
  REQUIRE(loaded.ok());
  CHECK((*loaded)->transactions() == h.transactions());
  // Ids and values go on above every loaded one.
  CHECK((*loaded)->NextId() == 4);
  CHECK((*loaded)->NextValue() == 8);
  std::filesystem::remove(path);
}

TEST_CASE("history: the line format is Elle's list-append form", "[history]") {
  HistoryTxn t;
  t.id = 5;
  t.client = 2;
  t.outcome = TxnOutcome::kOk;
  t.start_us = 1;
  t.end_us = 2;
  t.ops = {HistoryOp::Append("x", 9), HistoryOp::Read("y", std::vector<uint64_t>{1, 2}),
           HistoryOp::Read("z", std::nullopt)};
  CHECK(History::ToJson(t) ==
        R"({"id":5,"client":2,"status":"ok","start":1,"end":2,"ops":[["append","x",9],["r","y",[1,2]],["r","z",null]]})");
  // Written by hand, with spacing and without the optional fields.
  auto parsed = History::FromJson(R"( { "status" : "info", "ops" : [ ["r", "y", [ ] ] ], "id" : 8, "extra": {"a":[1]} } )");
  REQUIRE(parsed.ok());
  CHECK(parsed->id == 8);
  CHECK(parsed->outcome == TxnOutcome::kInfo);
  CHECK(parsed->start_us == -1);
  REQUIRE(parsed->ops.size() == 1);
  CHECK(parsed->ops[0] == HistoryOp::Read("y", std::vector<uint64_t>{}));
}

TEST_CASE("history: a malformed line is a typed error naming the line", "[history]") {
  for (const char* bad : {
           "{\"id\":1,\"status\":\"ok\"}",                              // no ops
           "{\"id\":1,\"status\":\"maybe\",\"ops\":[]}",                // unknown status
           "{\"id\":-1,\"status\":\"ok\",\"ops\":[]}",                  // negative id
           "{\"id\":1,\"status\":\"ok\",\"ops\":[[\"w\",\"x\",1]]}",      // unknown f
           "{\"id\":1,\"status\":\"ok\",\"ops\":[[\"r\",\"x\",[1.5]]]}",  // fraction
           "{\"id\":1,\"status\":\"ok\",\"ops\":[[\"append\",\"x\"]]}",   // short op
           "{\"id\":1,\"status\":\"ok\",\"ops\":[]",                    // unterminated
           "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",    // deep
           "{\"id\":1,\"status\":\"ok\",\"ops\":[]} trailing",
           "\"just a string\"",
       }) {
    INFO(bad);
    auto t = History::FromJson(bad);
    REQUIRE_FALSE(t.ok());
    CHECK(t.status().IsInvalidArgument());
  }
  const std::string path = TempPath("bad");
  WriteFile(path, "{\"id\":1,\"status\":\"ok\",\"ops\":[]}\n\n{\"id\":2,\"status\":\"ok\",\"ops\":[[\"r\"]]}\n");
  auto loaded = History::Load(path);
  REQUIRE_FALSE(loaded.ok());
  CHECK(loaded.status().IsInvalidArgument());
  CHECK(loaded.status().message().find(":3") != std::string_view::npos);
  std::filesystem::remove(path);
  auto missing = History::Load(path);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().IsNotFound());
}

TEST_CASE("history: mangled lines load or fail with InvalidArgument, never crash", "[history]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rng(seed);
  const std::string good =
      R"({"id":5,"client":2,"status":"ok","start":1,"end":2,"ops":[["append","x",9],["r","y",[1,2]],["r","z",null]]})";
  const std::string alphabet = "{}[]\",:-0123456789nulltruefalse \\u";
  for (int i = 0; i < 3000; ++i) {
    std::string line = good;
    const int edits = 1 + static_cast<int>(rng.Uniform(4));
    for (int e = 0; e < edits && !line.empty(); ++e) {
      const size_t pos = rng.Uniform(line.size());
      switch (rng.Uniform(3)) {
        case 0: line[pos] = alphabet[rng.Uniform(alphabet.size())]; break;
        case 1: line.erase(pos, 1 + rng.Uniform(8)); break;
        default: line.resize(pos); break;
      }
    }
    auto t = History::FromJson(line);
    if (!t.ok()) {
      INFO(line);
      CHECK(t.status().IsInvalidArgument());
    }
  }
}

TEST_CASE("history: concurrent recording keeps every transaction and value", "[history]") {
  History h;
  constexpr int kThreads = 4, kEach = 500;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&h, i] {
      for (int j = 0; j < kEach; ++j) {
        HistoryTxn t;
        t.id = h.NextId();
        t.client = static_cast<uint64_t>(i);
        t.start_us = h.Now();
        t.ops.push_back(HistoryOp::Append("k", h.NextValue()));
        t.end_us = h.Now();
        h.Add(std::move(t));
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(h.size() == kThreads * kEach);
  std::vector<uint64_t> values;
  for (const HistoryTxn& t : h.transactions()) values.push_back(t.ops[0].value);
  std::sort(values.begin(), values.end());
  CHECK(std::adjacent_find(values.begin(), values.end()) == values.end());
}

// The offline check behind `history_check FILE`: its exit status and output.
TEST_CASE("history: a saved history is checked offline", "[history]") {
  const std::string path = TempPath("offline");
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  REQUIRE(out != nullptr);
  REQUIRE(err != nullptr);
  auto read_back = [](std::FILE* f) {
    std::string text(4096, '\0');
    std::rewind(f);
    text.resize(std::fread(text.data(), 1, text.size(), f));
    std::rewind(f);
    return text;
  };
  // Write skew: two transactions each read what the other appends to.
  WriteFile(path,
            "{\"id\":1,\"status\":\"ok\",\"ops\":[[\"r\",\"x\",[]],[\"append\",\"y\",2]]}\n"
            "{\"id\":2,\"status\":\"ok\",\"ops\":[[\"r\",\"y\",[]],[\"append\",\"x\",1]]}\n");
  CHECK(CheckHistoryFile(path, out, err) == 0);  // nothing read the appends yet
  CHECK(read_back(out).find("\"anomalies\":[]") != std::string::npos);
  WriteFile(path,
            "{\"id\":1,\"status\":\"ok\",\"ops\":[[\"r\",\"x\",[]],[\"append\",\"y\",2]]}\n"
            "{\"id\":2,\"status\":\"ok\",\"ops\":[[\"r\",\"y\",[]],[\"append\",\"x\",1]]}\n"
            "{\"id\":3,\"status\":\"ok\",\"ops\":[[\"r\",\"x\",[1]],[\"r\",\"y\",[2]]]}\n");
  std::FILE* out2 = std::tmpfile();
  REQUIRE(out2 != nullptr);
  CHECK(CheckHistoryFile(path, out2, err) == 1);
  CHECK(read_back(out2).find("G2: cycle T1 -rw-> T2 -rw-> T1") != std::string::npos);
  WriteFile(path, "{\"id\":1\n");
  CHECK(CheckHistoryFile(path, out, err) == 2);
  CHECK(read_back(err).find("InvalidArgument") != std::string::npos);
  std::fclose(out);
  std::fclose(out2);
  std::fclose(err);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace deuteron::crash
