// Issue 38's attacks against a real `deuteron dc` process, each ended by
// kill -9: the attack runs from some connections while a TC-like writer
// (DurableWriter, tests/dc/dc_server_kill_util.h) logs, applies and makes
// durable its keys from another. Mid-attack the test checks the writer kept
// making durable progress and the process's peak resident memory (VmHWM)
// is within the stated bound; the attack's connections close and its
// resident memory comes back within the DC's own bound; the attack starts
// again and the test SIGKILLs the server mid-attack, restarts it on the
// same directory and checks: every key below the RSSP the DC acknowledged
// is there as it recovered (dc/dc.md, "RSSP" and "Close and crashes"); a
// TC's restartTo its log's end and replay from the RSSP bring back every
// logged key; and after a clean shutdown the store opened in process passes
// the tree's Check with every key there. The in-process variants, which
// assert the server's accounted memory, are in dc_server_attack_test.cpp,
// dc_server_auth_test.cpp and dc_governance_test.cpp. Longer runs are tagged
// [.soak] (scripts/soak).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/dc/dc_server_kill_util.h"
#include "tests/protocol/wire_util.h"

namespace deuteron::dc::kill {
namespace {

namespace proto = ::deuteron::protocol;
using deuteron::testing::DecodeReply;
using deuteron::testing::EncodeCall;
using deuteron::testing::Frame;
using deuteron::testing::GetFrame;
using deuteron::testing::MultiGetFrame;
using deuteron::testing::RawSocket;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr auto kNewClientBound = std::chrono::milliseconds(3000);
#else
constexpr auto kNewClientBound = std::chrono::milliseconds(1000);
#endif

constexpr int64_t kTopLsn = INT64_MAX;  // 2^63 - 1, the poisoned value

// The attack side: threads started by an AttackFn, counting the rounds that
// went as governance says and the replies that should never come. Failures
// after `killed` are the kill's, not surprises.
struct Attack {
  std::atomic<bool> stop{false}, killed{false};
  std::atomic<uint64_t> rounds{0}, surprises{0};
  std::vector<std::thread> threads;

  void Surprise() {
    if (!killed.load()) ++surprises;
  }
  void Pause(int ms) {
    for (int i = 0; i < ms / 5 && !stop.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
};
using AttackFn = std::function<void(uint16_t port, Attack*)>;

struct KillRun {
  ServerConfig config;
  std::vector<std::pair<std::string, std::string>> preload;
  uint64_t min_rounds = 2;  // attack rounds before the durable progress is timed
  int attack_ms = 600;      // how long the attack then runs before the kill
};

struct KillSummary {
  uint64_t rounds = 0, stale = 0, retakes = 0, keys = 0, durable = 0;
};

// The harness: serve, write, attack, check progress and peak memory; close
// the attack's connections and check the process comes back within the DC's
// bound; attack again and kill -9 mid-attack; restart, check recovery, shut
// down cleanly, check offline.
KillSummary KillMidAttack(const KillRun& run, const AttackFn& start_attack) {
  DcProcess server(test::TempDir(), run.config);
  server.Start();
  DurableWriter writer(server.port(), run.config.secret, run.preload);
  REQUIRE(writer.WaitFor([](const DurableWriter& w) { return w.applied() >= 20; }));

  const auto t0 = Clock::now();
  Attack attack;
  start_attack(server.port(), &attack);
  const auto engaged_by = Clock::now() + std::chrono::seconds(20);
  while (attack.rounds.load() < run.min_rounds && Clock::now() < engaged_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  INFO("attack rounds " << attack.rounds.load() << ", surprises " << attack.surprises.load());
  CHECK(attack.rounds.load() >= run.min_rounds);
  // The writer keeps making keys durable under the attack.
  const uint64_t durable_before = writer.durable();
  std::this_thread::sleep_for(std::chrono::milliseconds(run.attack_ms));
  // (At least one more RSSP: under the big batches its calls wait behind the
  // frames granted before them, first come first served.)
  const uint64_t durable_wanted = durable_before + DurableWriter::kRsspEvery;
  CHECK(writer.WaitFor([&](const DurableWriter& w) { return w.durable() >= durable_wanted; },
                       60000));
  const uint64_t peak = server.peak_rss();
  fmt::print(stderr,
             "[dc_kill] attack rounds {} in {:.2f} s; writer durable {} -> {}; server VmHWM "
             "{:.1f} MiB, bound {:.1f} MiB (at start {:.1f})\n",
             attack.rounds.load(), std::chrono::duration<double>(Clock::now() - t0).count(),
             durable_before, writer.durable(), peak / double(kMiB),
             server.RssBound() / double(kMiB), server.start_rss() / double(kMiB));
  if (kCheckRss) {
    INFO("server VmHWM " << peak << " bound " << server.RssBound() << " (at start "
                         << server.start_rss() << ")");
    CHECK(peak > 0);
    CHECK(peak <= server.RssBound());
  }

  // The attack's connections close: the process comes back within the DC's
  // own bound (request memory and the server's allowance are released).
  attack.stop.store(true);
  for (auto& t : attack.threads) t.join();
  const uint64_t surprises = attack.surprises.load();
  const auto closed_at = Clock::now();
  const auto released_by = closed_at + std::chrono::seconds(10);
  while (kCheckRss && server.rss() > server.DcBound() && Clock::now() < released_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const uint64_t rss_after = server.rss();
  fmt::print(stderr,
             "[dc_kill] after the close: VmRSS {:.1f} MiB in {:.2f} s, DC bound {:.1f} MiB\n",
             rss_after / double(kMiB),
             std::chrono::duration<double>(Clock::now() - closed_at).count(),
             server.DcBound() / double(kMiB));
  if (kCheckRss) {
    INFO("VmRSS after the attack's connections closed " << rss_after << ", DC bound "
                                                        << server.DcBound());
    CHECK(rss_after <= server.DcBound());
  }

  // The attack again, and kill -9 in the middle of it.
  Attack again;
  start_attack(server.port(), &again);
  const auto again_by = Clock::now() + std::chrono::seconds(20);
  while (again.rounds.load() < 1 && Clock::now() < again_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(again.rounds.load() >= 1);
  writer.ExpectFailures();
  again.killed.store(true);
  server.Kill();
  again.stop.store(true);
  for (auto& t : again.threads) t.join();
  writer.Stop();
  INFO("writer: applied " << writer.applied() << " durable " << writer.durable() << " stale "
                          << writer.stale() << " retakes " << writer.retakes() << "; "
                          << writer.last_error());
  CHECK(writer.unexpected_errors() == 0);
  CHECK(surprises == 0);
  CHECK(again.surprises.load() == 0);

  const auto t1 = Clock::now();
  server.Start();
  CheckRecovered(server.port(), writer);
  const auto t2 = Clock::now();
  CHECK(server.Terminate() == 0);
  CheckOffline(server.dir(), writer);
  fmt::print(stderr,
             "[dc_kill] {} keys, {} durable; restart and checks {:.2f} s, offline {:.2f} s\n",
             writer.log().size(), writer.durable(), std::chrono::duration<double>(t2 - t1).count(),
             std::chrono::duration<double>(Clock::now() - t2).count());
  return {attack.rounds.load() + again.rounds.load(), writer.stale(), writer.retakes(),
          writer.log().size(), writer.durable()};
}

std::unique_ptr<RemoteDataComponent> AttackClient(uint16_t port, const std::string& secret = "") {
  auto r = RemoteDataComponent::Connect(ClientOptions(port, secret));
  return r.ok() ? std::move(r).value() : nullptr;
}

uint64_t IncarnationOf(RemoteDataComponent* dc) {
  Result<DcHealth> h = dc->Health();
  return h.ok() ? h->incarnation : 0;
}

const std::string kBigValue(64 << 10, 'B');  // the tree's largest value

// Reply amplification: multiGet of one 64 KiB value x16,384 (a 1 GiB reply
// asked for with a 213 KB request), from four connections over and over.
void Amplify(uint16_t port, Attack* a) {
  for (int t = 0; t < 4; ++t) {
    a->threads.emplace_back([port, a, t] {
      const std::string frame = MultiGetFrame(t, "big", 16384);
      while (!a->stop.load()) {
        RawSocket raw = RawSocket::Connect(port);
        if (!raw.valid() || !raw.WriteAll(frame)) {
          a->Pause(10);
          continue;
        }
        auto payload = raw.ReadFrame(30000);
        if (!payload) {
          a->Surprise();
          continue;
        }
        const auto r = DecodeReply<proto::DataComponentService_multiGet_result>(*payload);
        if (r.result.__isset.error && r.result.error.code == proto::ErrorCode::TOO_LARGE) {
          ++a->rounds;
        } else {
          a->Surprise();
        }
      }
    });
  }
}

TEST_CASE("kill -9 during reply amplification", "[dc][server][kill]") {
  KillRun run;
  run.preload = {{"big", kBigValue}};
  const KillSummary s = KillMidAttack(run, Amplify);
  INFO("rounds " << s.rounds);
}

// Sixteen peers that ask for 200 replies of 64 KiB each (12.8 MB) and never
// read them; a peer closed by the frame deadline comes back.
void NeverRead(uint16_t port, Attack* a) {
  for (int t = 0; t < 16; ++t) {
    a->threads.emplace_back([port, a] {
      std::string burst;
      for (int i = 0; i < 200; ++i) burst += GetFrame(i, "big");
      while (!a->stop.load()) {
        RawSocket raw = RawSocket::Connect(port);
        if (!raw.valid() || !raw.WriteAll(burst)) {
          a->Pause(10);
          continue;
        }
        ++a->rounds;
        a->Pause(1500);  // past the frame deadline: the server closed it
      }
    });
  }
}

TEST_CASE("kill -9 while peers never read their replies", "[dc][server][kill]") {
  KillRun run;
  run.preload = {{"big", kBigValue}};
  run.config.frame_deadline_ms = 1000;
  run.min_rounds = 16;
  run.attack_ms = 1200;
  KillMidAttack(run, NeverRead);
}

// Sixteen connections applying 512 KiB batches (8 values of 64 KiB) with the
// current incarnation and an LSN below the ESL, over and over.
void BigBatches(uint16_t port, Attack* a) {
  for (int t = 0; t < 16; ++t) {
    a->threads.emplace_back([port, a, t] {
      std::vector<std::string> keys;
      for (int i = 0; i < 8; ++i) keys.push_back(fmt::format("w{:02}/{:02}", t, i));
      std::unique_ptr<RemoteDataComponent> dc = AttackClient(port);
      if (dc == nullptr) {
        a->Surprise();
        return;
      }
      uint64_t incarnation = IncarnationOf(dc.get());
      while (!a->stop.load()) {
        std::vector<RecordOp> ops;
        for (const std::string& k : keys) {
          ops.push_back(RecordOp{RecordOpKind::kUpsert, Slice(k), Slice(kBigValue), 1});
        }
        const Status s = dc->Apply(ops, 0, incarnation).status();
        if (s.ok() || s.IsBusy()) {
          ++a->rounds;
        } else if (s.IsStaleIncarnation()) {
          incarnation = IncarnationOf(dc.get());
        } else {
          a->Surprise();
          a->Pause(10);
        }
      }
    });
  }
}

TEST_CASE("kill -9 while sixteen connections write big batches", "[dc][server][kill]") {
  KillRun run;
  run.min_rounds = 16;
  KillMidAttack(run, BigBatches);
}

// Writes far above the ESL (which the DC may not flush) from four
// connections: Busy once the backlog is full, while the writer's RSSPs go on.
void AboveEsl(uint16_t port, Attack* a) {
  for (int t = 0; t < 4; ++t) {
    a->threads.emplace_back([port, a, t] {
      std::unique_ptr<RemoteDataComponent> dc = AttackClient(port);
      if (dc == nullptr) {
        a->Surprise();
        return;
      }
      const uint64_t incarnation = IncarnationOf(dc.get());
      const std::string value(4000, 'x');  // 240 KB a batch: the backlog fills in a few dozen
      uint64_t lsn = (uint64_t{1} << 40) + (static_cast<uint64_t>(t) << 32);
      while (!a->stop.load()) {
        std::vector<std::string> keys;
        std::vector<RecordOp> ops;
        for (int i = 0; i < 60; ++i) keys.push_back(fmt::format("zhi/{}", ++lsn));
        for (int i = 0; i < 60; ++i) {
          ops.push_back(
              RecordOp{RecordOpKind::kUpsert, Slice(keys[i]), Slice(value), lsn - 59 + i});
        }
        const Status s = dc->Apply(ops, 0, incarnation).status();
        if (s.IsBusy()) {
          ++a->rounds;  // the bound holds
          a->Pause(2);
        } else if (!s.ok()) {
          a->Surprise();
          a->Pause(10);
        }
      }
    });
  }
}

TEST_CASE("kill -9 while writes pile up above the ESL", "[dc][server][kill]") {
  KillRun run;
  run.min_rounds = 8;
  KillMidAttack(run, AboveEsl);
}

// 300 idle connections and 64 sending one byte every 100 ms (never a whole
// frame), against a 64-connection limit and a 1 s frame deadline; a prober
// times a new client's connect and health call.
void IdleAndTrickling(uint16_t port, Attack* a) {
  a->threads.emplace_back([port, a] {
    std::vector<RawSocket> idle, trickle;
    for (int i = 0; i < 300 && !a->stop.load(); ++i) idle.push_back(RawSocket::Connect(port));
    for (int i = 0; i < 64 && !a->stop.load(); ++i) trickle.push_back(RawSocket::Connect(port));
    const std::string frame = GetFrame(1, "never-whole");
    for (size_t at = 0; !a->stop.load(); ++at) {
      for (RawSocket& t : trickle) {
        if (!t.valid() || !t.WriteAll(frame.substr(at % (frame.size() - 1), 1))) {
          t = RawSocket::Connect(port);  // closed by the deadline or evicted: back again
        }
      }
      a->Pause(100);
    }
  });
  a->threads.emplace_back([port, a] {
    a->Pause(300);  // let the connections pile up first
    while (!a->stop.load()) {
      const auto start = Clock::now();
      std::unique_ptr<RemoteDataComponent> dc = AttackClient(port);
      const bool ok = dc != nullptr && dc->Health().ok();
      if (ok && Clock::now() - start < kNewClientBound) {
        ++a->rounds;
      } else {
        a->Surprise();
      }
      a->Pause(100);
    }
  });
}

TEST_CASE("kill -9 while idle and trickling connections fill the server", "[dc][server][kill]") {
  KillRun run;
  run.config.max_connections = 64;
  run.config.frame_deadline_ms = 1000;
  run.min_rounds = 5;
  run.attack_ms = 1200;
  KillMidAttack(run, IdleAndTrickling);
}

// Oversize and malformed frames: length words past the frame limit (one
// past it, 2^31 - 1, and 0xffffffff, which is negative as an i32), and a
// zero-length frame. Each gets one reply and the close.
void Oversize(uint16_t port, Attack* a, uint32_t max_frame) {
  for (int t = 0; t < 4; ++t) {
    a->threads.emplace_back([port, a, t, max_frame] {
      const uint32_t lengths[] = {max_frame + 1, 0x7fffffffu, 0xffffffffu, 0};
      for (uint64_t round = static_cast<uint64_t>(t); !a->stop.load(); ++round) {
        RawSocket raw = RawSocket::Connect(port);
        if (!raw.valid()) {
          a->Pause(10);
          continue;
        }
        const uint32_t n = lengths[round % 4];
        std::string bytes = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                             static_cast<char>(n >> 8), static_cast<char>(n)};
        bytes += std::string(1000, '\x7f');
        raw.WriteAll(bytes);  // the server may close before taking it all
        auto reply = raw.ReadFrame(10000);
        if (reply && raw.WaitClosed(10000)) {
          ++a->rounds;
        } else {
          a->Surprise();
        }
      }
    });
  }
}

TEST_CASE("kill -9 during oversize and malformed frames", "[dc][server][kill]") {
  KillRun run;
  run.min_rounds = 20;
  KillMidAttack(run, [&](uint16_t port, Attack* a) { Oversize(port, a, run.config.max_frame); });
}

// Peers without the shared secret try to steer the DC: setEsl and
// proposeRssp with the poisoned value, restartTo and apply, each as the
// first call of a connection (UNAUTHENTICATED, then the close); and the
// client library with a wrong secret.
void Unauthenticated(uint16_t port, Attack* a) {
  for (int t = 0; t < 4; ++t) {
    a->threads.emplace_back([port, a, t] {
      for (uint64_t round = static_cast<uint64_t>(t); !a->stop.load(); ++round) {
        std::string frame;
        switch (round % 5) {
          case 0: {
            proto::DataComponentService_setEsl_args args;
            args.esl = kTopLsn;
            frame = Frame(EncodeCall("setEsl", 1, args));
            break;
          }
          case 1: {
            proto::DataComponentService_proposeRssp_args args;
            args.rssp = kTopLsn;
            frame = Frame(EncodeCall("proposeRssp", 1, args));
            break;
          }
          case 2: {
            proto::DataComponentService_restartTo_args args;
            args.stable_end = 0;
            frame = Frame(EncodeCall("restartTo", 1, args));
            break;
          }
          case 3: {
            proto::DataComponentService_apply_args args;
            proto::RecordOp op;
            op.kind = proto::RecordOpKind::UPSERT;
            op.key = "h/0000001";
            op.value = "rogue";
            op.lsn = 1;
            args.request.ops.push_back(op);
            frame = Frame(EncodeCall("apply", 1, args));
            break;
          }
          default: {
            RemoteOptions o = ClientOptions(port, "not the secret");
            auto r = RemoteDataComponent::Connect(o);
            if (r.status().code() == Code::kUnauthenticated) {
              ++a->rounds;
            } else {
              a->Surprise();
            }
            continue;
          }
        }
        RawSocket raw = RawSocket::Connect(port);
        if (!raw.valid() || !raw.WriteAll(frame)) {
          a->Pause(10);
          continue;
        }
        auto payload = raw.ReadFrame(10000);
        if (!payload) {
          a->Surprise();
          continue;
        }
        const auto r = DecodeReply<proto::DataComponentService_setEsl_result>(*payload);
        if (r.result.__isset.error && r.result.error.code == proto::ErrorCode::UNAUTHENTICATED &&
            raw.WaitClosed(10000)) {
          ++a->rounds;
        } else {
          a->Surprise();
        }
      }
    });
  }
}

TEST_CASE("kill -9 while peers without the secret try to steer the DC",
          "[dc][server][kill][auth]") {
  KillRun run;
  run.config.secret = "correct horse battery staple";
  run.min_rounds = 20;
  const KillSummary s = KillMidAttack(run, Unauthenticated);
  CHECK(s.stale == 0);  // nobody took the DC from the writer
}

// A client with access restarts the DC (to its durable bound, the most it
// can) every 20-50 ms: the writer is fenced off, takes the DC back and
// replays, as a TC does.
void RogueRestarts(uint16_t port, Attack* a) {
  a->threads.emplace_back([port, a] {
    std::unique_ptr<RemoteDataComponent> dc = AttackClient(port);
    if (dc == nullptr) {
      a->Surprise();
      return;
    }
    for (int i = 0; !a->stop.load(); ++i) {
      a->Pause(20 + (i * 7) % 30);
      Result<DcHealth> h = dc->Health();
      if (!h.ok()) {
        a->Surprise();
        continue;
      }
      const Status s = dc->RestartTo(h->max_durable_lsn).status();
      // Unavailable: another restart runs; InvalidArgument: a flush raised
      // the durable bound after Health read it.
      if (s.ok()) {
        ++a->rounds;
      } else if (!s.IsUnavailable() && !s.IsInvalidArgument()) {
        a->Surprise();
      }
    }
  });
}

TEST_CASE("kill -9 during rogue restartTo calls", "[dc][server][kill][rogue]") {
  KillRun run;
  run.min_rounds = 3;
  const KillSummary s = KillMidAttack(run, RogueRestarts);
  CHECK(s.stale >= 1);
  CHECK(s.retakes >= 1);
}

// A client with access sends values in the reserved top of the LSN range
// with the current incarnation: setEsl, proposeRssp and restartTo of
// 2^63 - 1, and an apply at the reserved floor. Each is InvalidArgument.
void Poison(uint16_t port, Attack* a) {
  a->threads.emplace_back([port, a] {
    std::unique_ptr<RemoteDataComponent> dc = AttackClient(port);
    if (dc == nullptr) {
      a->Surprise();
      return;
    }
    const uint64_t top = static_cast<uint64_t>(kTopLsn);
    while (!a->stop.load()) {
      const uint64_t incarnation = IncarnationOf(dc.get());
      const RecordOp op{RecordOpKind::kUpsert, Slice("h/0000001"), Slice("poison"),
                        kReservedLsnFloor};
      const bool refused = dc->SetEsl(top, incarnation).IsInvalidArgument() &&
                           dc->ProposeRssp(top, incarnation).IsInvalidArgument() &&
                           dc->RestartTo(top).status().IsInvalidArgument() &&
                           dc->Apply(std::span<const RecordOp>(&op, 1), 0, incarnation)
                               .status()
                               .IsInvalidArgument();
      if (refused) {
        ++a->rounds;
      } else {
        a->Surprise();
      }
      a->Pause(5);
    }
  });
}

TEST_CASE("kill -9 while a client sends poisoned LSNs", "[dc][server][kill][rogue]") {
  KillRun run;
  run.min_rounds = 5;
  const KillSummary s = KillMidAttack(run, Poison);
  CHECK(s.stale == 0);
}

// The table's last row, 32 well-behaved clients: each its own connection,
// calls drawn from dc_server_load's mix (get, multiGet of 16, apply of 16
// upserts of 256 bytes below the ESL, scan of up to 50) over 10,000 keys.
void WellBehaved(uint16_t port, Attack* a) {
  for (int t = 0; t < 32; ++t) {
    a->threads.emplace_back([port, a, t] {
      std::unique_ptr<RemoteDataComponent> dc = AttackClient(port);
      if (dc == nullptr) {
        a->Surprise();
        return;
      }
      uint64_t incarnation = IncarnationOf(dc.get());
      const std::string value(256, static_cast<char>('a' + t % 26));
      uint64_t x = static_cast<uint64_t>(t) * 7919 + 1;
      auto next = [&x] {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        return x >> 33;
      };
      auto key = [&next] { return fmt::format("m/{:05}", next() % 10000); };
      while (!a->stop.load()) {
        const uint64_t dice = next() % 100;
        Status s;
        if (dice < 50) {
          s = dc->Get(Slice(key())).status();
        } else if (dice < 90) {
          std::vector<std::string> keys;
          for (int i = 0; i < 16; ++i) keys.push_back(key());
          if (dice < 70) {
            const std::vector<Slice> slices(keys.begin(), keys.end());
            s = dc->MultiGet(slices).status();
          } else {
            std::vector<RecordOp> ops;
            for (const std::string& k : keys) {
              ops.push_back(RecordOp{RecordOpKind::kUpsert, Slice(k), Slice(value), 1});
            }
            s = dc->Apply(ops, 0, incarnation).status();
            if (s.IsStaleIncarnation()) {
              incarnation = IncarnationOf(dc.get());
              continue;
            }
          }
        } else {
          ScanRequest r;
          r.lower = key();
          r.limit = 50;
          s = dc->Scan(r).status();
        }
        if (s.ok()) {
          ++a->rounds;
        } else {
          a->Surprise();
        }
      }
    });
  }
}

TEST_CASE("kill -9 under 32 well-behaved clients", "[dc][server][kill]") {
  KillRun run;
  run.min_rounds = 500;
  KillMidAttack(run, WellBehaved);
}

// The long versions (scripts/soak): each attack runs 20 s before the kill.
TEST_CASE("kill -9 after long attacks", "[dc][server][kill][.soak]") {
  KillRun run;
  run.attack_ms = 20000;
  run.preload = {{"big", kBigValue}};
  SECTION("amplification") { KillMidAttack(run, Amplify); }
  SECTION("big batches") { KillMidAttack(run, BigBatches); }
  SECTION("above the ESL") { KillMidAttack(run, AboveEsl); }
  SECTION("rogue restarts") { KillMidAttack(run, RogueRestarts); }
  SECTION("32 well-behaved clients") { KillMidAttack(run, WellBehaved); }
}

}  // namespace
}  // namespace deuteron::dc::kill
