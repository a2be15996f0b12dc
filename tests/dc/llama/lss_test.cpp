#include "dc/llama/lss.h"

#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "common/fault_env.h"
#include "common/random.h"

#include "tests/dc/llama/lss_test_util.h"

namespace deuteron::llama {
namespace {

using namespace lss_test;

TEST_CASE("records written and made stable are recovered in order", "[dc][llama][lss]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  std::unique_ptr<Env> env = NewMemEnv();
  std::map<LssAddress, Written> written;
  {
    std::vector<Seen> seen;
    auto lss = OpenAndRecover(env.get(), &seen);
    CHECK(seen.empty());
    CHECK(lss->HiStable() == FirstBufferBase(0, kSeg));
    CHECK(lss->Tail() == FirstBufferBase(0, kSeg) + kBufferHeaderSize);
    LssAddress last_end = 0;
    for (uint64_t i = 1; i <= 400; ++i) {
      const size_t len = rnd.Uniform(3000);
      Written w{TypeFor(i), i, MakePayload(i, len)};
      Result<LssAddress> a = Put(lss.get(), w.type, w.pid, w.payload, i);
      REQUIRE(a.ok());
      CHECK(*a >= last_end);
      last_end = *a + RecordSpan(len);
      written[*a] = w;
      if (rnd.OneIn(25)) {
        REQUIRE(lss->MakeStable(last_end).ok());
        CHECK(lss->HiStable() >= last_end);
        CheckRead(lss.get(), *a, w);
      }
    }
    CHECK(lss->Tail() >= last_end);
    REQUIRE(lss->MakeStable(lss->Tail()).ok());
    CHECK(lss->HiStable() >= last_end);
    // An empty open buffer is not written; MakeStable still returns.
    const uint64_t buffers = lss->GetStats().buffers_written;
    REQUIRE(lss->MakeStable(lss->Tail()).ok());
    REQUIRE(lss->MakeStable(lss->Tail() + 10 * kSeg).ok());
    CHECK(lss->GetStats().buffers_written == buffers);
    for (const auto& [a, w] : written) CheckRead(lss.get(), a, w);
    CHECK(lss->TailSegment() >= 2);  // crossed segments
    CHECK(lss->LowestSegment() == 0);
    const auto st = lss->GetStats();
    CHECK(st.reservations == 400);
    CHECK(st.voids == 0);
    // The open buffer may be the first of a segment not created yet.
    CHECK(st.segments_live >= lss->TailSegment());
    CHECK(st.segments_live <= lss->TailSegment() + 1);
    CHECK(st.live_bytes_on_disk > 0);
    CHECK(st.syncs >= st.buffers_written);
  }
  std::vector<Seen> seen;
  auto lss = OpenAndRecover(env.get(), &seen);
  REQUIRE(seen.size() == written.size());
  size_t i = 0;
  for (const auto& [a, w] : written) {
    INFO("record " << i);
    CHECK(seen[i].address == a);
    CHECK(seen[i].header.type == w.type);
    CHECK(seen[i].header.pid == w.pid);
    CHECK(seen[i].header.annotation == w.pid);
    CHECK(seen[i].payload == w.payload);
    CHECK_FALSE(seen[i].in_transaction);
    ++i;
  }
  // Writing goes on after recovery, where the log ended.
  const LssAddress hi = lss->HiStable();
  Result<LssAddress> a = Put(lss.get(), RecordType::kBase, 9999, "after");
  REQUIRE(a.ok());
  CHECK(*a == hi + kBufferHeaderSize);
  REQUIRE(lss->MakeStable(lss->Tail()).ok());
  lss.reset();
  seen.clear();
  lss = OpenAndRecover(env.get(), &seen);
  REQUIRE(seen.size() == written.size() + 1);
  CHECK(seen.back().address == *a);
  CHECK(seen.back().payload == "after");
}

TEST_CASE("void records are skipped by recovery", "[dc][llama][lss]") {
  std::unique_ptr<Env> env = NewMemEnv();
  std::vector<LssAddress> kept;
  {
    std::vector<Seen> seen;
    auto lss = OpenAndRecover(env.get(), &seen);
    for (uint64_t i = 1; i <= 300; ++i) {
      const std::string payload = MakePayload(i, 100 + i * 3);
      Result<Reservation> r = lss->Reserve(RecordSpan(payload.size()));
      REQUIRE(r.ok());
      if (i % 3 == 0) {
        // The flush's CAS failed after the payload was copied (or not).
        if (i % 2 == 0) std::memset(r->dst, 0xff, r->size);
        lss->Void(*r);
        continue;
      }
      RecordHeader h;
      h.type = RecordType::kBase;
      h.length = static_cast<uint32_t>(payload.size());
      h.pid = i;
      EncodeRecord(h, payload, r->dst);
      lss->Commit(*r);
      kept.push_back(r->address);
    }
    REQUIRE(lss->MakeStable(lss->Tail()).ok());
    CHECK(lss->GetStats().voids == 100);
    CHECK(lss->GetStats().void_bytes > 0);
  }
  std::vector<Seen> seen;
  auto lss = OpenAndRecover(env.get(), &seen);
  REQUIRE(seen.size() == kept.size());
  for (size_t i = 0; i < seen.size(); ++i) {
    CHECK(seen[i].address == kept[i]);
    CHECK(seen[i].header.type == RecordType::kBase);
    CHECK(seen[i].header.pid % 3 != 0);
  }
}

TEST_CASE("transaction records are expanded with the inner records' own addresses",
          "[dc][llama][lss]") {
  std::unique_ptr<Env> env = NewMemEnv();
  std::vector<Written> inner = {
      {RecordType::kAllocate, 10, ""},
      {RecordType::kBase, 10, MakePayload(1, 333)},
      {RecordType::kDelta, 11, MakePayload(2, 20)},
      {RecordType::kFree, 12, ""},
  };
  LssAddress outer = 0;
  LssAddress before = 0;
  LssAddress after = 0;
  {
    std::vector<Seen> seen;
    auto lss = OpenAndRecover(env.get(), &seen);
    Result<LssAddress> a = Put(lss.get(), RecordType::kBase, 1, "before");
    REQUIRE(a.ok());
    before = *a;
    std::string body;
    for (const Written& w : inner) {
      std::string rec(RecordSpan(w.payload.size()), '\0');
      RecordHeader h;
      h.type = w.type;
      h.length = static_cast<uint32_t>(w.payload.size());
      h.pid = w.pid;
      EncodeRecord(h, w.payload, rec.data());
      body += rec;
    }
    Result<Reservation> r = lss->Reserve(RecordSpan(body.size()));
    REQUIRE(r.ok());
    RecordHeader h;
    h.type = RecordType::kTransaction;
    h.length = static_cast<uint32_t>(body.size());
    h.count = static_cast<uint32_t>(inner.size());
    EncodeRecord(h, body, r->dst);
    lss->Commit(*r);
    outer = r->address;
    a = Put(lss.get(), RecordType::kBase, 2, "after");
    REQUIRE(a.ok());
    after = *a;
    REQUIRE(lss->MakeStable(lss->Tail()).ok());
  }
  std::vector<Seen> seen;
  auto lss = OpenAndRecover(env.get(), &seen);
  REQUIRE(seen.size() == inner.size() + 2);
  CHECK(seen.front().address == before);
  CHECK_FALSE(seen.front().in_transaction);
  CHECK(seen.back().address == after);
  CHECK_FALSE(seen.back().in_transaction);
  LssAddress expect = outer + kRecordHeaderSize;
  for (size_t i = 0; i < inner.size(); ++i) {
    const Seen& s = seen[i + 1];
    INFO("inner " << i);
    CHECK(s.in_transaction);
    CHECK(s.address == expect);
    CHECK(s.header.type == inner[i].type);
    CHECK(s.header.pid == inner[i].pid);
    CHECK(s.payload == inner[i].payload);
    CheckRead(lss.get(), s.address, inner[i]);  // the mapping table can point at it
    expect += RecordSpan(inner[i].payload.size());
  }
}

TEST_CASE("reservation limits and padding at the end of a segment", "[dc][llama][lss]") {
  std::unique_ptr<Env> env = NewMemEnv();
  std::vector<Seen> seen;
  auto lss = OpenAndRecover(env.get(), &seen);
  CHECK(lss->MaxReservation() == kBuf - kBufferHeaderSize);
  CHECK(lss->Reserve(kBuf).status().code() == Code::kTooLarge);
  CHECK(lss->Reserve(12).status().IsInvalidArgument());
  CHECK(lss->Reserve(52).status().IsInvalidArgument());

  // Buffers of one whole record each: 4096, 69632, 135168 and then 200704,
  // which is cut short by the end of the segment (61440 bytes left).
  std::vector<std::pair<LssAddress, Written>> all;
  for (uint64_t i = 0; i < 3; ++i) {
    Written w{RecordType::kBase, i + 1, MakePayload(i, kFullRecordPayload)};
    Result<LssAddress> a = Put(lss.get(), w.type, w.pid, w.payload);
    REQUIRE(a.ok());
    CHECK(*a == FirstBufferBase(0, kSeg) + i * kBuf + kBufferHeaderSize);
    all.emplace_back(*a, w);
  }
  // A record that does not fit in what is left of segment 0 goes to segment 1.
  Written big{RecordType::kBase, 4, MakePayload(4, kFullRecordPayload)};
  Result<LssAddress> a = Put(lss.get(), big.type, big.pid, big.payload);
  REQUIRE(a.ok());
  CHECK(*a == FirstBufferBase(1, kSeg) + kBufferHeaderSize);
  all.emplace_back(*a, big);
  // No buffer of at most kMinBufferSpan is ever cut short: no padding.
  CHECK(lss->GetStats().padding_bytes == 0);
  REQUIRE(lss->MakeStable(lss->Tail()).ok());
  for (const auto& [addr, w] : all) CheckRead(lss.get(), addr, w);
  lss.reset();
  seen.clear();
  lss = OpenAndRecover(env.get(), &seen);
  REQUIRE(seen.size() == all.size());
  for (size_t i = 0; i < all.size(); ++i) CHECK(seen[i].address == all[i].first);
}

TEST_CASE("a reservation too big for a short buffer pads it with a void record",
          "[dc][llama][lss]") {
  std::unique_ptr<Env> env = NewMemEnv();
  LssOptions o = SmallLssOptions();
  o.buffer_size = 96 * 1024;
  std::vector<Seen> seen;
  auto lss = OpenAndRecover(env.get(), &seen, o);
  const size_t full = o.buffer_size - kBufferHeaderSize - kRecordHeaderSize;
  std::vector<LssAddress> addrs;
  // Buffer 1 at 4096 is filled; buffer 2 at 102400 gets 77760 bytes, so that
  // buffer 3 starts at 180224 with only 81920 bytes left in the segment.
  for (size_t len : {full, size_t{77712}}) {
    Result<LssAddress> a = Put(lss.get(), RecordType::kBase, len, MakePayload(len, len));
    REQUIRE(a.ok());
    addrs.push_back(*a);
  }
  CHECK(addrs[1] == 102400 + kBufferHeaderSize);
  // 90048 bytes fit in no buffer at 180224 (capacity 81856): it is padded.
  Result<LssAddress> a = Put(lss.get(), RecordType::kBase, 3, MakePayload(3, 90000));
  REQUIRE(a.ok());
  CHECK(*a == FirstBufferBase(1, kSeg) + kBufferHeaderSize);
  addrs.push_back(*a);
  CHECK(lss->GetStats().padding_bytes == 81920 - kBufferHeaderSize);
  REQUIRE(lss->MakeStable(lss->Tail()).ok());
  lss.reset();
  seen.clear();
  // Reopened with smaller buffers: positions follow from the buffer headers.
  lss = OpenAndRecover(env.get(), &seen, SmallLssOptions());
  REQUIRE(seen.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(seen[i].address == addrs[i]);
  CHECK(lss->identity().buffer_size == 96 * 1024);
  CHECK(lss->options().buffer_size == kBuf);
}

// Several writers reserve, commit and void concurrently while another thread
// keeps calling MakeStable.
void ConcurrentWorkload(int io_threads, int per_thread) {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed << " io_threads " << io_threads);
  std::unique_ptr<Env> env = NewMemEnv();
  constexpr int kWriters = 4;
  struct Committed {
    LssAddress address;
    uint64_t id;
    size_t len;
  };
  std::vector<std::vector<Committed>> committed(kWriters);
  std::vector<std::vector<std::pair<LssAddress, LssAddress>>> stable_seen(kWriters);
  {
    std::vector<Seen> seen;
    auto lss = OpenAndRecover(env.get(), &seen, SmallLssOptions(io_threads));
    std::atomic<bool> done{false};
    std::atomic<int> errors{0};
    std::thread stabilizer([&] {
      while (!done.load()) {
        if (!lss->MakeStable(lss->Tail()).ok()) errors.fetch_add(1);
        std::this_thread::yield();
      }
    });
    std::vector<std::thread> writers;
    for (int t = 0; t < kWriters; ++t) {
      writers.emplace_back([&, t] {
        Random64 rnd(seed + t);
        for (int i = 0; i < per_thread; ++i) {
          const uint64_t id = static_cast<uint64_t>(t) << 32 | static_cast<uint64_t>(i);
          const size_t len = rnd.OneIn(50) ? rnd.Uniform(20000) : rnd.Uniform(1500);
          Result<Reservation> r = lss->Reserve(RecordSpan(len));
          if (!r.ok()) {
            errors.fetch_add(1);
            return;
          }
          if (rnd.OneIn(8)) {
            lss->Void(*r);
            continue;
          }
          RecordHeader h;
          h.type = RecordType::kBase;
          h.length = static_cast<uint32_t>(len);
          h.pid = id + 1;
          EncodeRecord(h, MakePayload(id, len), r->dst);
          lss->Commit(*r);
          committed[t].push_back({r->address, id, len});
          if (rnd.OneIn(30)) {
            const LssAddress end = r->address + RecordSpan(len);
            if (!lss->MakeStable(end).ok()) errors.fetch_add(1);
            stable_seen[t].emplace_back(end, lss->HiStable());
          }
        }
      });
    }
    for (std::thread& w : writers) w.join();
    done.store(true);
    stabilizer.join();
    REQUIRE(errors.load() == 0);
    for (const auto& v : stable_seen) {
      for (const auto& [end, hi] : v) CHECK(hi >= end);
    }
    REQUIRE(lss->MakeStable(lss->Tail()).ok());
    // Every committed record reads back before the restart, too.
    for (const auto& v : committed) {
      for (size_t i = 0; i < v.size(); i += 7) {
        CheckRead(lss.get(), v[i].address,
                  {RecordType::kBase, v[i].id + 1, MakePayload(v[i].id, v[i].len)});
      }
    }
  }
  std::vector<Seen> seen;
  auto lss = OpenAndRecover(env.get(), &seen, SmallLssOptions(io_threads));
  std::map<LssAddress, const Seen*> by_address;
  for (const Seen& s : seen) {
    REQUIRE(s.header.type == RecordType::kBase);  // no void surfaces
    REQUIRE(by_address.emplace(s.address, &s).second);
  }
  size_t total = 0;
  for (const auto& v : committed) {
    for (const Committed& c : v) {
      ++total;
      auto it = by_address.find(c.address);
      REQUIRE(it != by_address.end());
      CHECK(it->second->header.pid == c.id + 1);
      CHECK(it->second->payload == MakePayload(c.id, c.len));
    }
  }
  CHECK(seen.size() == total);  // exactly once, nothing else
}

TEST_CASE("concurrent reserve, commit, void and MakeStable, I/O threads",
          "[dc][llama][lss][concurrency]") {
  ConcurrentWorkload(/*io_threads=*/2, 600);
}

TEST_CASE("concurrent reserve, commit, void and MakeStable, inline I/O",
          "[dc][llama][lss][concurrency]") {
  ConcurrentWorkload(/*io_threads=*/0, 600);
}

TEST_CASE("concurrent workload, long", "[dc][llama][lss][concurrency][.]") {
  for (int i = 0; i < 5; ++i) {
    ConcurrentWorkload(1, 20000);
    ConcurrentWorkload(3, 20000);
  }
}

// An Env whose WriteAt to one file at one offset blocks until released.
class BlockingEnv : public EnvWrapper {
 public:
  BlockingEnv(Env* base, std::string path, uint64_t offset)
      : EnvWrapper(base), path_(std::move(path)), offset_(offset) {}

  Result<std::unique_ptr<File>> OpenFile(const std::string& path, OpenMode mode) override {
    ASSIGN_OR_RETURN(std::unique_ptr<File> f, target()->OpenFile(path, mode));
    if (path != path_) return f;
    return std::unique_ptr<File>(std::make_unique<BlockingFile>(this, std::move(f)));
  }

  void Release() {
    std::lock_guard<std::mutex> l(mu_);
    released_ = true;
    cv_.notify_all();
  }
  bool blocked() {
    std::lock_guard<std::mutex> l(mu_);
    return blocked_;
  }

 private:
  class BlockingFile : public File {
   public:
    BlockingFile(BlockingEnv* env, std::unique_ptr<File> f) : env_(env), f_(std::move(f)) {}
    Result<size_t> ReadAt(uint64_t o, char* b, size_t n) const override { return f_->ReadAt(o, b, n); }
    Status WriteAt(uint64_t o, Slice d) override {
      if (o == env_->offset_) {
        std::unique_lock<std::mutex> l(env_->mu_);
        env_->blocked_ = true;
        env_->cv_.wait(l, [this] { return env_->released_; });
      }
      return f_->WriteAt(o, d);
    }
    Status Append(Slice d) override { return f_->Append(d); }
    Status Sync() override { return f_->Sync(); }
    Status Truncate(uint64_t s) override { return f_->Truncate(s); }
    Result<uint64_t> Size() const override { return f_->Size(); }
    Status Close() override { return f_->Close(); }
    const std::string& path() const override { return f_->path(); }

   private:
    BlockingEnv* const env_;
    std::unique_ptr<File> f_;
  };

  const std::string path_;
  const uint64_t offset_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool blocked_ = false;   // GUARDED_BY(mu_)
  bool released_ = false;  // GUARDED_BY(mu_)
};

bool WaitFor(const std::function<bool()>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Buffers of one whole record each: 4096, 69632, 135168 in segment 0, then
// 266240 and 331776 in segment 1.
constexpr LssAddress kThirdBuffer = 135168;
constexpr LssAddress kFourthBuffer = kSeg + 4096;
constexpr LssAddress kFifthBuffer = kSeg + 4096 + kBuf;

// Unblocks the Env when a test ends early, before the store waits for its I/O.
struct ReleaseAtExit {
  BlockingEnv* env;
  ~ReleaseAtExit() { env->Release(); }
};

// Writes one whole-buffer record into each of five buffers; buffer 3's write
// blocks. Buffers 1 and 2 are made stable first: their Syncs would otherwise
// wait for the blocked write to the same file (the Env serializes them).
std::vector<LssAddress> PutFiveBuffers(LogStructuredStore* lss) {
  std::vector<LssAddress> addrs;
  for (uint64_t i = 0; i < 5; ++i) {
    if (i == 3) REQUIRE(WaitFor([&] { return lss->HiStable() == kThirdBuffer; }));
    Result<LssAddress> a = Put(lss, RecordType::kBase, i + 1, MakePayload(i, kFullRecordPayload));
    REQUIRE(a.ok());
    addrs.push_back(*a);
  }
  return addrs;
}

TEST_CASE("Hi-Stable does not jump over a buffer whose I/O completes late",
          "[dc][llama][lss][concurrency]") {
  std::unique_ptr<Env> mem = NewMemEnv();
  BlockingEnv env(mem.get(), SegPath(0), kThirdBuffer);
  std::vector<Seen> seen;
  auto lss = OpenAndRecover(&env, &seen, SmallLssOptions(/*io_threads=*/2));
  ReleaseAtExit release{&env};
  const std::vector<LssAddress> addrs = PutFiveBuffers(lss.get());
  CHECK(addrs[2] == kThirdBuffer + kBufferHeaderSize);
  CHECK(addrs[3] == kFourthBuffer + kBufferHeaderSize);
  CHECK(addrs[4] == kFifthBuffer + kBufferHeaderSize);
  // Buffers 1, 2 and 4 are written; 3 is stuck.
  REQUIRE(WaitFor([&] { return lss->GetStats().buffers_written == 3 && env.blocked(); }));
  REQUIRE(WaitFor([&] { return lss->HiStable() == kThirdBuffer; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(lss->HiStable() == kThirdBuffer);
  std::thread waiter([&] { CHECK(lss->MakeStable(addrs[3] + 8).ok()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(lss->HiStable() == kThirdBuffer);
  env.Release();
  waiter.join();
  CHECK(lss->HiStable() == kFifthBuffer);  // the gap closed: both buffers at once
  CHECK(lss->GetStats().buffers_written == 4);
}

TEST_CASE("a buffer written after one lost in a crash is cut, not taken for corruption",
          "[dc][llama][lss][concurrency]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  std::unique_ptr<Env> mem = NewMemEnv();
  FaultInjectionEnv fault(mem.get(), seed);
  std::vector<LssAddress> addrs;
  {
    BlockingEnv env(&fault, SegPath(0), kThirdBuffer);
    std::vector<Seen> seen;
    auto lss = OpenAndRecover(&env, &seen, SmallLssOptions(/*io_threads=*/2));
    ReleaseAtExit release{&env};
    addrs = PutFiveBuffers(lss.get());
    REQUIRE(WaitFor([&] { return lss->GetStats().buffers_written == 3 && env.blocked(); }));
    // The process dies while buffer 3's write is stuck and buffer 4 is durable.
    REQUIRE(fault.SimulateCrash(CrashMode::kDropUnsynced).ok());
    env.Release();
    REQUIRE(WaitFor([&] { return !lss->MakeStable(addrs[4]).ok(); }));
  }
  CHECK(fault.FileExists(SegPath(1)));
  std::vector<Seen> seen;
  auto lss = OpenAndRecover(&fault, &seen);
  REQUIRE(seen.size() == 2);
  CHECK(seen[0].address == addrs[0]);
  CHECK(seen[1].address == addrs[1]);
  CHECK(lss->HiStable() == kThirdBuffer);
  CHECK_FALSE(fault.FileExists(SegPath(1)));  // cut
  Result<LssAddress> a = Put(lss.get(), RecordType::kBase, 7, "again");
  REQUIRE(a.ok());
  CHECK(*a == kThirdBuffer + kBufferHeaderSize);
  REQUIRE(lss->MakeStable(lss->Tail()).ok());
}

TEST_CASE("a full disk fails the store with NoSpace", "[dc][llama][lss]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  std::unique_ptr<Env> mem = NewMemEnv();
  FaultInjectionEnv fault(mem.get(), seed);
  std::vector<Seen> seen;
  auto lss = OpenAndRecover(&fault, &seen);
  Result<LssAddress> a = Put(lss.get(), RecordType::kBase, 1, "stable");
  REQUIRE(a.ok());
  REQUIRE(lss->MakeStable(lss->Tail()).ok());
  const LssAddress hi = lss->HiStable();
  fault.FailNth(FaultInjectionEnv::Op::kWrite, 1, Code::kNoSpace);
  a = Put(lss.get(), RecordType::kBase, 2, "lost");
  REQUIRE(a.ok());
  Status s = lss->MakeStable(lss->Tail());
  CHECK(s.IsNoSpace());
  CHECK(lss->HiStable() == hi);  // stopped
  CHECK(lss->Reserve(64).status().IsNoSpace());
  CHECK(lss->MakeStable(lss->Tail()).IsNoSpace());
  lss.reset();
  // Reopening recovers the stable record only.
  seen.clear();
  lss = OpenAndRecover(&fault, &seen);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].payload == "stable");
}

TEST_CASE("an I/O error in the I/O threads fails the store", "[dc][llama][lss]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  std::unique_ptr<Env> mem = NewMemEnv();
  FaultInjectionEnv fault(mem.get(), seed);
  std::vector<Seen> seen;
  auto lss = OpenAndRecover(&fault, &seen, SmallLssOptions(/*io_threads=*/2));
  fault.FailNth(FaultInjectionEnv::Op::kSync, 3, Code::kIOError);
  Status s;
  for (int i = 0; i < 200 && s.ok(); ++i) {
    Result<LssAddress> a = Put(lss.get(), RecordType::kBase, 1, MakePayload(i, 5000));
    s = a.ok() ? Status::OK() : a.status();
  }
  CHECK(s.IsIOError());
  CHECK(lss->MakeStable(lss->Tail()).IsIOError());
}

TEST_CASE("opening checks IDENTITY, segment files and options", "[dc][llama][lss]") {
  std::unique_ptr<Env> env = NewMemEnv();
  uint64_t store_id;
  {
    std::vector<Seen> seen;
    auto lss = OpenAndRecover(env.get(), &seen);
    store_id = lss->identity().store_id;
    CHECK(store_id != 0);
    CHECK(lss->identity().segment_size == kSeg);
    REQUIRE(Put(lss.get(), RecordType::kBase, 1, "x").ok());
    REQUIRE(lss->MakeStable(lss->Tail()).ok());
  }
  CHECK(env->FileExists(kDir + "/IDENTITY"));
  CHECK(env->FileExists(SegPath(0)));
  {
    auto lss = MustOpen(env.get());
    CHECK(lss->identity().store_id == store_id);  // kept
  }

  SECTION("bad options") {
    LssOptions o = SmallLssOptions();
    o.segment_size = kSeg + 4096;
    CHECK(LogStructuredStore::Open(env.get(), "/other", o).status().IsInvalidArgument());
    o = SmallLssOptions();
    o.buffer_size = kSeg;  // more than half a segment
    CHECK(LogStructuredStore::Open(env.get(), "/other", o).status().IsInvalidArgument());
    o = SmallLssOptions();
    o.buffer_size = kBuf + 100;
    CHECK(LogStructuredStore::Open(env.get(), "/other", o).status().IsInvalidArgument());
    o = SmallLssOptions();
    o.buffer_count = 1;
    CHECK(LogStructuredStore::Open(env.get(), "/other", o).status().IsInvalidArgument());
  }
  SECTION("another segment size than the store's") {
    LssOptions o = SmallLssOptions();
    o.segment_size = 2 * kSeg;
    CHECK(LogStructuredStore::Open(env.get(), kDir, o).status().IsInvalidArgument());
  }
  SECTION("a foreign IDENTITY is StoreMismatch") {
    REQUIRE(WriteStringToFile(env.get(), std::string(64, 'z'), kDir + "/IDENTITY", true).ok());
    CHECK(LogStructuredStore::Open(env.get(), kDir, SmallLssOptions()).status().code() ==
          Code::kStoreMismatch);
  }
  SECTION("a newer IDENTITY is NotSupported") {
    StoreIdentity id;
    id.format_version = kFormatVersion + 1;
    id.store_id = store_id;
    id.segment_size = kSeg;
    id.buffer_size = kBuf;
    REQUIRE(WriteStringToFile(env.get(), EncodeIdentity(id), kDir + "/IDENTITY", true).ok());
    CHECK(LogStructuredStore::Open(env.get(), kDir, SmallLssOptions()).status().code() ==
          Code::kNotSupported);
  }
  SECTION("a damaged IDENTITY is Corruption") {
    Result<std::string> data = ReadFileToString(env.get(), kDir + "/IDENTITY");
    REQUIRE(data.ok());
    (*data)[20] ^= 1;
    REQUIRE(WriteStringToFile(env.get(), *data, kDir + "/IDENTITY", true).ok());
    CHECK(LogStructuredStore::Open(env.get(), kDir, SmallLssOptions()).status().IsCorruption());
  }
  SECTION("the IDENTITY of another store is StoreMismatch") {
    // Another store's IDENTITY put in front of these segment files.
    StoreIdentity id;
    id.store_id = store_id + 1;
    id.segment_size = kSeg;
    id.buffer_size = kBuf;
    REQUIRE(WriteStringToFile(env.get(), EncodeIdentity(id), kDir + "/IDENTITY", true).ok());
    CHECK(LogStructuredStore::Open(env.get(), kDir, SmallLssOptions()).status().code() ==
          Code::kStoreMismatch);
  }
}

TEST_CASE("released segments are deleted or recycled", "[dc][llama][lss]") {
  std::unique_ptr<Env> env = NewMemEnv();
  LssOptions o = SmallLssOptions();
  o.recycle_pool = 1;
  std::vector<Seen> seen;
  auto lss = OpenAndRecover(env.get(), &seen, o);
  std::vector<LssAddress> addrs;
  // Three full buffers per segment: 6 segments.
  for (uint64_t i = 0; i < 18; ++i) {
    Result<LssAddress> a =
        Put(lss.get(), RecordType::kBase, i + 1, MakePayload(i, kFullRecordPayload));
    REQUIRE(a.ok());
    addrs.push_back(*a);
  }
  REQUIRE(lss->MakeStable(lss->Tail()).ok());
  CHECK(lss->LowestSegment() == 0);
  CHECK(lss->TailSegment() == 6);
  CHECK(lss->GetStats().segments_live == 6);

  // Nothing below the frontier's segment start is released if not whole.
  REQUIRE(lss->ReleaseSegmentsBelow(kSeg - 1).ok());
  CHECK(lss->LowestSegment() == 0);
  REQUIRE(lss->ReleaseSegmentsBelow(3 * kSeg + 100).ok());
  CHECK(lss->LowestSegment() == 3);
  auto st = lss->GetStats();
  CHECK(st.segments_released == 3);
  CHECK(st.segments_live == 3);
  CHECK_FALSE(env->FileExists(SegPath(0)));
  CHECK_FALSE(env->FileExists(SegPath(1)));
  CHECK_FALSE(env->FileExists(SegPath(2)));
  Result<std::vector<std::string>> names = env->GetChildren(kDir + "/lss");
  REQUIRE(names.ok());
  CHECK(names->size() == 4);  // 3 segments and 1 recycled file

  std::string payload;
  CHECK(lss->ReadRecord(addrs[4], &payload).status().IsNotFound());
  CheckRead(lss.get(), addrs[9], {RecordType::kBase, 10, MakePayload(9, kFullRecordPayload)});

  // The segment being written (and anything not yet stable) is never released.
  REQUIRE(lss->ReleaseSegmentsBelow(100 * kSeg).ok());
  CHECK(lss->LowestSegment() == 6 - 0);
  CHECK(lss->GetStats().segments_live == 0);  // 6 holds no buffer yet
  CHECK(lss->GetStats().segments_released == 6);
  // Segment 6 is made from the recycled file.
  Result<LssAddress> a = Put(lss.get(), RecordType::kBase, 100, "recycled");
  REQUIRE(a.ok());
  REQUIRE(lss->MakeStable(lss->Tail()).ok());
  CHECK(lss->GetStats().segments_recycled == 1);
  CHECK(lss->GetStats().segments_live == 1);
  names = env->GetChildren(kDir + "/lss");
  REQUIRE(names.ok());
  REQUIRE(names->size() == 1);
  CHECK((*names)[0] == SegmentFileName(6));
  lss.reset();

  // The recycled file's old buffers are never taken for this segment's.
  seen.clear();
  lss = OpenAndRecover(env.get(), &seen, o);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].address == *a);
  CHECK(seen[0].payload == "recycled");
}

TEST_CASE("scanning a stable segment visits its records", "[dc][llama][lss]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  std::unique_ptr<Env> mem = NewMemEnv();
  FaultInjectionEnv fault(mem.get(), seed);
  std::vector<Seen> seen;
  auto lss = OpenAndRecover(&fault, &seen);
  std::map<LssAddress, std::string> written;
  Random64 rnd(seed);
  for (int i = 0; i < 200; ++i) {
    const std::string payload = MakePayload(i, rnd.Uniform(8000));
    Result<LssAddress> a = Put(lss.get(), RecordType::kBase, 1, payload);
    REQUIRE(a.ok());
    written[*a] = payload;
    if (rnd.OneIn(4)) {
      Result<Reservation> r = lss->Reserve(64 + 8 * rnd.Uniform(100));
      REQUIRE(r.ok());
      lss->Void(*r);
    }
  }
  REQUIRE(lss->MakeStable(lss->Tail()).ok());
  REQUIRE(lss->TailSegment() >= 3);
  for (uint64_t n = 0; n <= lss->TailSegment(); ++n) {
    std::vector<LssAddress> got;
    Status s = lss->ScanSegment(n, [&](LssAddress a, const RecordHeader&, Slice p, bool) {
      CHECK(written[a] == p.ToString());
      got.push_back(a);
      return Status::OK();
    });
    INFO("segment " << n << ": " << s.ToString());
    // The open buffer may be the first of a segment not created yet.
    if (n == lss->TailSegment() && s.IsNotFound()) continue;
    REQUIRE(s.ok());
    std::vector<LssAddress> expect;
    for (const auto& [a, p] : written) {
      if (SegmentOf(a, kSeg) == n) expect.push_back(a);
    }
    CHECK(got == expect);
  }
  // Damage in a stable segment is Corruption, never a torn tail.
  REQUIRE(fault.CorruptRange(SegPath(1), 4096 + 200, 8, 2).ok());
  Status s = lss->ScanSegment(1, [](LssAddress, const RecordHeader&, Slice, bool) {
    return Status::OK();
  });
  CHECK(s.IsCorruption());
  CHECK(s.ToString().find("segment 1 offset 4096") != std::string::npos);
  REQUIRE(lss->ReleaseSegmentsBelow(kSeg).ok());
  CHECK(lss->ScanSegment(0, [](LssAddress, const RecordHeader&, Slice, bool) {
               return Status::OK();
             }).IsNotFound());
}

TEST_CASE("recovery from a start position", "[dc][llama][lss]") {
  std::unique_ptr<Env> env = NewMemEnv();
  LssAddress rsp = kNullAddress;
  std::vector<LssAddress> addrs;
  {
    std::vector<Seen> seen;
    auto lss = OpenAndRecover(env.get(), &seen);
    for (int i = 0; i < 10; ++i) {
      Result<LssAddress> a = Put(lss.get(), RecordType::kBase, 1, MakePayload(i, 9000));
      REQUIRE(a.ok());
      addrs.push_back(*a);
      if (i == 4) {
        REQUIRE(lss->MakeStable(lss->Tail()).ok());
        rsp = lss->HiStable();  // what a checkpoint records
      }
    }
    REQUIRE(lss->MakeStable(lss->Tail()).ok());
  }
  auto lss = MustOpen(env.get());
  CHECK(lss->Recover(rsp + 8, [](LssAddress, const RecordHeader&, Slice, bool) {
               return Status::OK();
             }).IsInvalidArgument());
  // A start past the segment after the last one held is a damaged
  // checkpoint, not a torn tail (found by dc_store_fuzz).
  const uint64_t seg = lss->options().segment_size;
  CHECK(lss->Recover(rsp + 4 * seg, [](LssAddress, const RecordHeader&, Slice, bool) {
               return Status::OK();
             }).IsCorruption());
  lss.reset();
  lss = MustOpen(env.get());
  std::vector<Seen> seen;
  REQUIRE(Collect(lss.get(), &seen, rsp).ok());
  REQUIRE(seen.size() == 5);
  CHECK(seen[0].address == addrs[5]);
  // A visitor's error stops recovery and is returned.
  lss.reset();
  lss = MustOpen(env.get());
  Status s = lss->Recover(kNullAddress, [](LssAddress, const RecordHeader&, Slice, bool) {
    return Status::Aborted("stop");
  });
  CHECK(s.code() == Code::kAborted);
}

TEST_CASE("the LSS works on the real file system", "[dc][llama][lss]") {
  char tmpl[] = "/tmp/deuteron_lss_test_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  Env* env = Env::Posix();
  std::map<LssAddress, std::string> written;
  {
    Result<std::unique_ptr<LogStructuredStore>> r =
        LogStructuredStore::Open(env, dir, SmallLssOptions(/*io_threads=*/1));
    REQUIRE(r.ok());
    std::unique_ptr<LogStructuredStore> lss = std::move(r).value();
    std::vector<Seen> seen;
    REQUIRE(Collect(lss.get(), &seen).ok());
    for (int i = 0; i < 60; ++i) {
      const std::string payload = MakePayload(i, 7000);
      Result<LssAddress> a = Put(lss.get(), RecordType::kBase, 1, payload);
      REQUIRE(a.ok());
      written[*a] = payload;
    }
    REQUIRE(lss->MakeStable(lss->Tail()).ok());
  }
  {
    Result<std::unique_ptr<LogStructuredStore>> r =
        LogStructuredStore::Open(env, dir, SmallLssOptions(/*io_threads=*/1));
    REQUIRE(r.ok());
    std::unique_ptr<LogStructuredStore> lss = std::move(r).value();
    std::vector<Seen> seen;
    REQUIRE(Collect(lss.get(), &seen).ok());
    REQUIRE(seen.size() == written.size());
    for (const Seen& s : seen) CHECK(written[s.address] == s.payload);
  }
  // Best-effort cleanup.
  Result<std::vector<std::string>> names = env->GetChildren(dir + "/lss");
  if (names.ok()) {
    for (const std::string& n : *names) env->DeleteFile(dir + "/lss/" + n).PermitUncheckedError();
  }
  env->DeleteDir(dir + "/lss").PermitUncheckedError();
  env->DeleteFile(dir + "/IDENTITY").PermitUncheckedError();
  env->DeleteDir(dir).PermitUncheckedError();
}

}  // namespace
}  // namespace deuteron::llama
