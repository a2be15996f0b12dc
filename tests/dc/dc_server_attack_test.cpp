// The DC server under the attacks of issue 38's table, scaled to seconds,
// each with a healthy TC-like client beside it whose keys are checked
// afterwards: reply amplification, peers that never read their replies,
// many connections writing big batches, idle and trickling connections
// against a new client. The robust assertion is the server's accounted
// request memory (ServerStats::memory_peak); resident memory is only
// reported. Longer versions are tagged [.soak] (scripts/soak).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/dc/dc_server_attack_util.h"

namespace deuteron::dc::attack {
namespace {

namespace proto = ::deuteron::protocol;
using deuteron::testing::DecodeReply;
using deuteron::testing::EncodeCall;
using deuteron::testing::Frame;
using deuteron::testing::GetFrame;
using deuteron::testing::MultiGetFrame;
using Clock = std::chrono::steady_clock;

constexpr size_t kMiB = size_t{1} << 20;

void PutBig(FakeDataComponent& fake, const std::string& key, size_t size, uint64_t lsn) {
  const std::string value(size, 'x');
  const RecordOp op{RecordOpKind::kUpsert, Slice(key), Slice(value), lsn};
  REQUIRE(fake.Apply(std::span<const RecordOp>(&op, 1), 0, 0).ok());
}

// Reply amplification: a small request asking for one large value many
// times fails TOO_LARGE once its reply reaches the frame limit, without
// building the rest. Issue 38 measured 3.44 GB peak for one 64 KiB value
// x16,384; here one 256 KiB value (the fake DC's maximum) x16,384 asks for
// a 4 GiB reply, and four such calls run at once.
TEST_CASE("Reply amplification fails TOO_LARGE within the frame limit", "[dc][server][attack]") {
  DcServerOptions o = AttackOptions();
  o.max_frame_size = 16 * kMiB;
  o.request_memory_limit = 32 * kMiB;
  AttackServed s(o);
  PutBig(s.fake, "big", FakeDataComponent::kMaxValue, 1);
  HealthyClient healthy(s.server.port(), 1000);

  const auto start = Clock::now();
  std::vector<std::thread> attackers;
  std::atomic<int> too_large{0};
  for (int a = 0; a < 4; ++a) {
    attackers.emplace_back([&, a] {
      RawSocket raw = RawSocket::Connect(s.server.port());
      if (!raw.valid() || !raw.WriteAll(MultiGetFrame(a, "big", 16384))) return;
      auto payload = raw.ReadFrame(10000);
      if (!payload) return;
      const auto r = DecodeReply<proto::DataComponentService_multiGet_result>(*payload);
      if (r.result.__isset.error && r.result.error.code == proto::ErrorCode::TOO_LARGE) ++too_large;
    });
  }
  for (auto& t : attackers) t.join();
  const auto took = Clock::now() - start;
  healthy.Stop();

  CHECK(too_large.load() == 4);
  CHECK(took < std::chrono::seconds(5));
  const server::ServerStats st = s.server.stats();
  // Each of the two io loops builds at most one reply up to the frame limit
  // (plus one slice of 64 values) at a time.
  const size_t bound = o.request_memory_limit + 2 * (o.max_frame_size + 64 * FakeDataComponent::kMaxValue);
  INFO("accounted peak " << st.memory_peak << " bound " << bound << " VmHWM " << PeakRss());
  CHECK(st.memory_peak <= bound);
  CHECK(s.WaitStats([](const server::ServerStats& x) { return x.memory_used == 0; }));
  CHECK(healthy.errors() == 0);
  CHECK(healthy.written() > 0);
  healthy.CheckKeys();
}

// Peers that pipeline requests and never read the replies: each holds at
// most one frame limit (plus kReplySlack) of unsent replies, is then not
// read from, and is closed when a reply is not taken within the frame
// deadline; the memory comes back. Issue 38: 16 such peers took 2.07 GB.
TEST_CASE("Peers that never read their replies hold at most a frame each",
          "[dc][server][attack]") {
  DcServerOptions o = AttackOptions();
  o.max_frame_size = 1 * kMiB;
  o.request_memory_limit = 8 * kMiB;
  o.frame_deadline = std::chrono::milliseconds(1000);
  AttackServed s(o);
  PutBig(s.fake, "v", 200 * 1024, 1);
  HealthyClient healthy(s.server.port(), 1000);

  constexpr int kPeers = 16;
  std::vector<RawSocket> peers;
  std::string burst;
  for (int i = 0; i < 200; ++i) burst += GetFrame(i, "v");
  for (int p = 0; p < kPeers; ++p) {
    // A small receive window: how soon the server stalls must not depend on
    // how fast it can fill megabytes of loopback buffers (under TSan on a
    // loaded machine that took over 5 s).
    peers.push_back(RawSocket::Connect(s.server.port(), 64 * 1024));
    REQUIRE(peers.back().valid());
    REQUIRE(peers.back().WriteAll(burst));  // 200 x 200 KiB of replies asked for
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const size_t stalled = s.server.stats().memory_used;
  // Per peer: unsent replies up to kReplySlack plus one reply, and queued
  // requests (small here).
  const size_t per_peer = 256 * 1024 + o.max_frame_size + 64 * 1024;
  INFO("accounted while stalled " << stalled);
  CHECK(stalled <= kPeers * per_peer);
  // The replies not taken close the peers: each a frame deadline after its
  // write stalls. When that is depends on how fast the server fills the
  // socket buffers with replies: about 3 s here, over 6 s under TSan beside
  // other builds, so the wait is generous; the property is that they close.
  CHECK(s.WaitStats([&](const server::ServerStats& x) { return x.deadline_closed >= kPeers; },
                    30000));
  CHECK(s.WaitStats([](const server::ServerStats& x) { return x.memory_used == 0; }));
  const server::ServerStats st = s.server.stats();
  INFO("accounted peak " << st.memory_peak << " VmHWM " << PeakRss());
  CHECK(st.memory_peak <= o.request_memory_limit + kPeers * per_peer);
  healthy.Stop();
  CHECK(healthy.errors() == 0);
  CHECK(healthy.written() > 0);
  healthy.CheckKeys();
}

// Sixteen connections writing big batches at once: frames are granted
// within the request memory limit and the rest wait unread (TCP
// backpressure). Issue 38: 16 x ~60 MB batches took 1.78 GB; here 16 x
// 1 MiB batches (16 values of 64 KiB) against a 4 MiB limit, the same four
// times oversubscribed as 16 x 4 MiB against 16 MiB, with a quarter of the
// bytes to copy (under TSan on a busy machine the 4 MiB batches took 20 s
// and their frames could outlive the 5 s frame deadline).
TEST_CASE("Sixteen connections writing big batches stay within the request limit",
          "[dc][server][attack]") {
  constexpr size_t kValue = 64 * 1024;
  DcServerOptions o = AttackOptions();
  o.max_frame_size = 2 * kMiB;
  o.request_memory_limit = 4 * kMiB;
  AttackServed s(o);
  HealthyClient healthy(s.server.port(), 1'000'000);

  constexpr int kWriters = 16;
  constexpr int kBatches = 3;
  constexpr int kOps = 16;  // x 64 KiB values: 1 MiB a batch
  std::atomic<int> applied{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      RawSocket raw = RawSocket::Connect(s.server.port());
      if (!raw.valid()) return;
      for (int b = 0; b < kBatches; ++b) {
        proto::DataComponentService_apply_args args;
        for (int i = 0; i < kOps; ++i) {
          proto::RecordOp op;
          op.kind = proto::RecordOpKind::UPSERT;
          op.key = fmt::format("w{}/{}", w, i);
          op.value = std::string(kValue, static_cast<char>('a' + b));
          op.lsn = static_cast<int64_t>(1 + (w * kBatches + b) * kOps + i);
          args.request.ops.push_back(std::move(op));
        }
        if (!raw.WriteAll(Frame(EncodeCall("apply", b, args)))) return;
        auto payload = raw.ReadFrame(20000);
        if (!payload) return;
        const auto r = DecodeReply<proto::DataComponentService_apply_result>(*payload);
        if (r.result.__isset.success) ++applied;
      }
    });
  }
  for (auto& t : writers) t.join();
  healthy.Stop();
  CHECK(applied.load() == kWriters * kBatches);
  const server::ServerStats st = s.server.stats();
  // Granted frames stay within the limit; running calls (one per io loop)
  // add their decoded-request estimate; reads in flight a chunk each.
  const size_t batch = kOps * (kValue + 64);
  const size_t bound = o.request_memory_limit + 2 * batch + 2 * 64 * 1024;
  INFO("accounted peak " << st.memory_peak << " bound " << bound << " VmHWM " << PeakRss()
                         << " healthy p99 us " << healthy.p99().count() << " max us "
                         << healthy.max_latency().count());
  CHECK(st.memory_peak <= bound);
  CHECK(s.WaitStats([](const server::ServerStats& x) { return x.memory_used == 0; }));
  CHECK(healthy.errors() == 0);
  CHECK(healthy.written() > 0);
  // Frames are granted first come first served, so the healthy client's
  // small calls wait behind the big frames granted before them: with 4 MiB
  // batches about 1.4 s at worst in a debug build, 11 s under TSan on 2 busy
  // cores. This bound only catches a stall.
  CHECK(healthy.max_latency() < std::chrono::seconds(30));
  healthy.CheckKeys();
  auto last = s.fake.Get(Slice("w15/15"));
  REQUIRE(last.ok());
  CHECK(last->value == std::string(kValue, 'a' + kBatches - 1));
}

// Idle and trickling peers against a new client: admission evicts the
// longest-idle connection when full, so a new client is served within a
// second. Issue 38: 1,200 idle + 256 connections sending one byte a second
// filled the 255 slots and refused everyone else.
void IdleAndTrickling(int idle_count, int trickle_count, std::chrono::milliseconds duration) {
  REQUIRE(RaiseFdLimit(8192) >= static_cast<rlim_t>(2 * (idle_count + trickle_count) + 256));
  DcServerOptions o = AttackOptions();  // max_connections 256, frame deadline 5 s
  AttackServed s(o);
  HealthyClient healthy(s.server.port(), 1000);

  std::vector<RawSocket> idle;
  for (int i = 0; i < idle_count; ++i) {
    idle.push_back(RawSocket::Connect(s.server.port()));
  }
  std::atomic<bool> stop{false};
  std::thread trickler([&] {
    std::vector<RawSocket> trickle;
    for (int i = 0; i < trickle_count; ++i) trickle.push_back(RawSocket::Connect(s.server.port()));
    const std::string frame = GetFrame(1, "never-whole");
    size_t at = 0;
    while (!stop.load()) {
      for (auto& t : trickle) {
        if (t.valid() && !t.WriteAll(frame.substr(at % frame.size(), 1))) t.Close();
      }
      ++at;
      for (int i = 0; i < 20 && !stop.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  });

  // The attack is in place once the server has taken every connection
  // (admitted, evicting an older one); then new clients are timed.
  const uint64_t attackers = static_cast<uint64_t>(idle_count + trickle_count);
  CHECK(s.WaitStats(
      [&](const server::ServerStats& x) {
        return x.connections + x.evicted_connections + x.refused_connections >= attackers;
      },
      10000));
  std::chrono::milliseconds worst{0};
  int probes = 0;
  const auto end = Clock::now() + duration;
  while (Clock::now() < end) {
    const auto start = Clock::now();
    RemoteOptions ro;
    ro.port = s.server.port();
    ro.max_connections = 1;
    auto c = RemoteDataComponent::Connect(ro);
    Status health = c.ok() ? (*c)->Health().status() : c.status();
    const bool ok = health.ok();
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    INFO("probe " << probes << ": " << health.ToString() << " in " << took.count() << " ms");
    CHECK(ok);
    worst = std::max(worst, took);
    ++probes;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  stop.store(true);
  trickler.join();
  healthy.Stop();
  const server::ServerStats st = s.server.stats();
  INFO("worst new-client time " << worst.count() << " ms over " << probes << " probes; evicted "
                                << st.evicted_connections << " refused " << st.refused_connections);
  CHECK(probes > 0);
  CHECK(worst < std::chrono::seconds(1));
  CHECK(st.evicted_connections > 0);
  CHECK(healthy.errors() == 0);
  healthy.CheckKeys();
}

TEST_CASE("1,200 idle and 256 trickling connections do not lock out a new client",
          "[dc][server][attack]") {
  // Seven probes or so, each timed against the 1 s bound (three seconds of
  // probes were most of this case's time).
  IdleAndTrickling(1200, 256, std::chrono::milliseconds(1500));
}

TEST_CASE("Idle and trickling connections, long", "[dc][server][attack][.soak]") {
  IdleAndTrickling(1200, 256, std::chrono::seconds(60));
}

TEST_CASE("A frame must arrive whole within the frame deadline", "[dc][server][attack]") {
  DcServerOptions o = AttackOptions();
  o.frame_deadline = std::chrono::milliseconds(300);
  AttackServed s(o);
  RawSocket slow = RawSocket::Connect(s.server.port());
  REQUIRE(slow.valid());
  const std::string frame = GetFrame(1, "k");
  const auto start = Clock::now();
  // One byte every 50 ms: bytes keep coming, the frame never completes in time.
  bool closed = false;
  for (size_t i = 0; i < frame.size() && !closed; ++i) {
    if (!slow.WriteAll(frame.substr(i, 1))) closed = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (s.server.stats().deadline_closed > 0) closed = true;
  }
  CHECK(closed);
  CHECK(slow.WaitClosed(2000));
  CHECK(Clock::now() - start >= std::chrono::milliseconds(300));
  CHECK(s.server.stats().deadline_closed == 1);
}

TEST_CASE("The idle timeout counts whole requests, not bytes", "[dc][server][attack]") {
  DcServerOptions o = AttackOptions();
  o.idle_timeout = std::chrono::milliseconds(400);
  o.frame_deadline = std::chrono::milliseconds(0);  // off: the idle timer alone
  AttackServed s(o);
  RawSocket slow = RawSocket::Connect(s.server.port());
  REQUIRE(slow.valid());
  const std::string frame = GetFrame(1, "k");
  const auto start = Clock::now();
  // One byte every 40 ms, never the last one: closed while bytes still come.
  bool closed_while_trickling = false;
  for (size_t i = 0; i + 1 < frame.size(); ++i) {
    if (!slow.WriteAll(frame.substr(i, 1))) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    if (s.server.stats().idle_closed > 0) {
      closed_while_trickling = true;
      break;
    }
  }
  CHECK(closed_while_trickling);
  CHECK(slow.WaitClosed(2000));
  CHECK(Clock::now() - start >= std::chrono::milliseconds(400));
  CHECK(s.server.stats().idle_closed == 1);
}

}  // namespace
}  // namespace deuteron::dc::attack
