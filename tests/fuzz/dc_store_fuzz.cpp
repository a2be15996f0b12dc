// libFuzzer target for everything the DC parses when it opens a store
// (dc/llama/lss_format.md, dc/llama/checkpoint.h, dc/dc.md, the Bw-tree's
// page records in dc/bwtree/node_format.md): LSS segments (segment header,
// buffer headers, records, transaction records), the mapping-table
// checkpoints, dc.meta and IDENTITY.
//
// The store: a small real one (a few dozen keys over several pages,
// flushed, checkpointed, then more writes flushed after the checkpoint and
// a crash, so recovery replays LSS records too). Each input is one byte
// choosing a file of that store, then the bytes that replace it (or one of
// two files the store lacks, the other checkpoint slot and a second
// segment, then its bytes); the store is copied into a fresh in-memory Env
// with that change and opened with Dc::Open. Opening may fail with a
// typed error; when it opens, every key is read (loading every page from
// the LSS), the store is closed (a checkpoint) and must open again. A
// crash, hang, leak, over-allocation or abort is a bug.
//
// The store is the one the committed seeds hold (tests/fuzz/corpus/
// dc_store_fuzz: seed i is byte i and file i), so that a saved input means
// the same in every run: a store made at start would get a new random
// store id, which no saved segment or checkpoint would match.
// DEUTERON_FUZZ_WRITE_SEEDS=<dir>: makes a new store and writes one seed per
// file (the real bytes) into <dir>, then exits (tests/fuzz/make_corpus.py
// runs it).
//
// Built only by scripts/fuzz (clang, -fsanitize=fuzzer).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/env.h"
#include "common/logging.h"
#include "dc/dc.h"
#include "tests/fuzz/fuzz_dc_options.h"

namespace {

using deuteron::Env;
using deuteron::RecordOp;
using deuteron::RecordOpKind;
using deuteron::Result;
using deuteron::Slice;
using deuteron::Status;
namespace dc = ::deuteron::dc;

const std::string kDir = "/dc";

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "dc_store_fuzz: %s\n", what.c_str());
  std::abort();
}

void Check(const Status& s, const char* what) {
  if (!s.ok()) Fail(std::string(what) + ": " + s.ToString());
}

template <typename T>
void Ignore(const T& r) {
  (void)r.ok();
}

// Every file under `dir`, as paths, sorted.
void ListFiles(Env* env, const std::string& dir, std::vector<std::string>* out) {
  Result<std::vector<std::string>> names = env->GetChildren(dir);
  Check(names.status(), "list");
  for (const std::string& n : *names) {
    const std::string path = deuteron::JoinPath(dir, n);
    Result<std::vector<std::string>> sub = env->GetChildren(path);
    if (sub.ok()) {
      ListFiles(env, path, out);
    } else {
      out->push_back(path);
    }
  }
}

void Apply(dc::Dc* d, RecordOpKind kind, const std::string& key, const std::string& value,
           uint64_t lsn) {
  RecordOp op{kind, key, value, lsn};
  Result<deuteron::ApplyResult> r = d->Apply(std::span<const RecordOp>(&op, 1), lsn, 0);
  Check(r.status(), "apply");
}

struct Template {
  // (path, bytes) of every file of the store but the directory lock.
  std::vector<std::pair<std::string, std::string>> files;
};

Template MakeTemplate() {
  std::unique_ptr<Env> env = deuteron::NewMemEnv();
  uint64_t lsn = 0;
  {
    Result<std::unique_ptr<dc::Dc>> d = dc::Dc::Open(env.get(), kDir, deuteron::fuzz::SmallDcOptions());
    Check(d.status(), "open the template");
    for (int i = 0; i < 40; ++i) {
      Apply(d->get(), RecordOpKind::kUpsert, "key" + std::to_string(i), std::string(i % 7 * 5, 'v'), ++lsn);
    }
    Check((*d)->ProposeRssp(lsn + 1, 0), "rssp");
    Check((*d)->Close(), "close");  // checkpoints
  }
  {
    Result<std::unique_ptr<dc::Dc>> d = dc::Dc::Open(env.get(), kDir, deuteron::fuzz::SmallDcOptions());
    Check(d.status(), "reopen the template");
    for (int i = 0; i < 40; i += 3) {
      Apply(d->get(), RecordOpKind::kDelete, "key" + std::to_string(i), "", ++lsn);
    }
    for (int i = 40; i < 50; ++i) {
      Apply(d->get(), RecordOpKind::kUpsert, "key" + std::to_string(i), "w", ++lsn);
    }
    Check((*d)->ProposeRssp(lsn + 1, 0), "rssp");
    (*d)->TEST_SkipCloseOnDestroy();  // a crash: recovery replays past the checkpoint
  }
  std::vector<std::string> paths;
  ListFiles(env.get(), kDir, &paths);
  Template t;
  for (const std::string& p : paths) {
    if (p.ends_with("LOCK") || p.ends_with(".tmp")) continue;
    Result<std::string> bytes = deuteron::ReadFileToString(env.get(), p);
    Check(bytes.status(), "read a template file");
    t.files.emplace_back(p, std::move(bytes).value());
  }
  if (t.files.empty()) Fail("empty template");
  return t;
}

// The seed's file name for a store file: its path under the store, '/' as '_'.
std::string SeedName(const std::string& path) {
  std::string name = path.substr(kDir.size() + 1);
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  return name;
}

// The template the committed seeds were made from: seed i is the selector
// byte i and store file i. A store made now would have another store id
// (random), which no seed's segment or checkpoint would match. Empty when
// the seeds are not there.
Template LoadTemplate(const std::string& corpus) {
  std::unique_ptr<Env> env = deuteron::NewMemEnv();
  Result<std::vector<std::string>> names = Env::Posix()->GetChildren(corpus);
  Template t;
  if (!names.ok()) return t;
  std::vector<std::pair<std::string, std::string>> seeds;
  for (const std::string& n : *names) {
    if (n.starts_with("regress-") || n.starts_with("add-")) continue;
    Result<std::string> bytes = deuteron::ReadFileToString(Env::Posix(), deuteron::JoinPath(corpus, n));
    Check(bytes.status(), "read a seed");
    if (bytes->empty()) Fail("empty seed " + n);
    seeds.emplace_back(n, std::move(bytes).value());
  }
  t.files.resize(seeds.size());
  for (auto& [name, bytes] : seeds) {
    const size_t i = static_cast<uint8_t>(bytes[0]);
    if (i >= seeds.size() || !t.files[i].first.empty()) Fail("seed " + name + ": bad selector byte");
    std::string path = name;
    if (path.starts_with("lss_")) path[3] = '/';
    t.files[i] = {deuteron::JoinPath(kDir, path), bytes.substr(1)};
  }
  return t;
}

bool WritingSeeds() { return std::getenv("DEUTERON_FUZZ_WRITE_SEEDS") != nullptr; }

const Template& GetTemplate() {
  static const Template* t = [] {
    deuteron::SetLogLevel(deuteron::LogLevel::kError);
    if (WritingSeeds()) return new Template(MakeTemplate());
    Template loaded = LoadTemplate(DEUTERON_FUZZ_CORPUS "/dc_store_fuzz");
    if (loaded.files.empty()) {
      std::fprintf(stderr, "dc_store_fuzz: no seeds in %s; fuzzing a store made now\n", DEUTERON_FUZZ_CORPUS);
      return new Template(MakeTemplate());
    }
    return new Template(std::move(loaded));
  }();
  return *t;
}

// Reads every key, in both directions.
void ReadAll(dc::Dc* d) {
  for (bool reverse : {false, true}) {
    deuteron::ScanRequest r;
    r.reverse = reverse;
    r.limit = 1000;
    Ignore(d->Scan(r));
  }
  for (int i = 0; i < 50; i += 7) Ignore(d->Get("key" + std::to_string(i)));
}

// Files a store may hold that the template has not: an input may add one.
const std::string kAdded[] = {"ckpt-0", "lss/0000000000000001.seg"};
constexpr size_t kAddedCount = sizeof(kAdded) / sizeof(kAdded[0]);

volatile size_t touched[8];
[[gnu::noinline]] void Touch(size_t i) { touched[i] = touched[i] + 1; }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  const Template& t = GetTemplate();
  if (const char* dir = std::getenv("DEUTERON_FUZZ_WRITE_SEEDS")) {
    for (size_t i = 0; i < t.files.size(); ++i) {
      const std::string name = SeedName(t.files[i].first);
      const std::string seed = std::string(1, static_cast<char>(i)) + t.files[i].second;
      FILE* f = std::fopen((std::string(dir) + "/" + name).c_str(), "wb");
      if (f == nullptr || std::fwrite(seed.data(), 1, seed.size(), f) != seed.size()) Fail("write seed");
      std::fclose(f);
      std::printf("%s: %zu bytes\n", name.c_str(), seed.size());
    }
    // Seeds adding a file: a copy of the template's file of that kind.
    for (size_t a = 0; a < kAddedCount; ++a) {
      const std::string name = "add-" + SeedName(deuteron::JoinPath(kDir, kAdded[a]));
      const std::string kind = name.substr(4, 4);  // "ckpt", "lss_"
      for (const auto& [path, bytes] : t.files) {
        if (SeedName(path).substr(0, 4) != kind) continue;
        const std::string seed = std::string(1, static_cast<char>(t.files.size() + a)) + bytes;
        FILE* f = std::fopen((std::string(dir) + "/" + name).c_str(), "wb");
        if (f == nullptr || std::fwrite(seed.data(), 1, seed.size(), f) != seed.size()) Fail("write seed");
        std::fclose(f);
        break;
      }
    }
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Template& t = GetTemplate();
  // Selector i < files: file i replaced; files + a: kAdded[a] added.
  const size_t which = data[0] % (t.files.size() + kAddedCount);
  // A distinct edge per selector, so that libFuzzer keeps one seed per
  // file (each seed of a replaced file alone is the template itself: the
  // same coverage) and mutates every file's bytes, not only one seed's.
  if (which == 0) {
    Touch(0);
  } else if (which == 1) {
    Touch(1);
  } else if (which == 2) {
    Touch(2);
  } else if (which == 3) {
    Touch(3);
  } else if (which == 4) {
    Touch(4);
  } else if (which == 5) {
    Touch(5);
  } else {
    Touch(6);
  }
  const Slice input(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::unique_ptr<Env> env = deuteron::NewMemEnv();
  for (size_t i = 0; i < t.files.size(); ++i) {
    const std::string& path = t.files[i].first;
    Check(env->CreateDirs(deuteron::ParentDir(path)), "mkdir");
    Check(deuteron::WriteStringToFile(env.get(), i == which ? input : Slice(t.files[i].second), path, false),
          "write");
  }
  if (which >= t.files.size()) {
    const std::string path = deuteron::JoinPath(kDir, kAdded[which - t.files.size()]);
    Check(env->CreateDirs(deuteron::ParentDir(path)), "mkdir");
    Check(deuteron::WriteStringToFile(env.get(), input, path, false), "write");
  }
  Result<std::unique_ptr<dc::Dc>> d = dc::Dc::Open(env.get(), kDir, deuteron::fuzz::SmallDcOptions());
  if (!d.ok()) return 0;  // a typed error: the right answer to a damaged store
  ReadAll(d->get());
  // Opened, the store must close cleanly (closing checkpoints) and open
  // again; what it serves may differ from the template's (an accepted file
  // may hold other valid state).
  const Status closed = (*d)->Close();
  d->reset();
  if (!closed.ok()) return 0;  // an error found while flushing or checkpointing
  Result<std::unique_ptr<dc::Dc>> again = dc::Dc::Open(env.get(), kDir, deuteron::fuzz::SmallDcOptions());
  if (!again.ok()) Fail("a store that opened and closed cleanly does not reopen: " + again.status().ToString());
  ReadAll(again->get());
  Ignore((*again)->Close());
  return 0;
}
