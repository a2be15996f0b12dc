#include "common/fault_hooks.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "common/env.h"
#include "common/fault_env.h"

namespace deuteron::fault {
namespace internal {
std::atomic<bool> g_kill_points_armed{false};
std::atomic<uint8_t> g_break{0};
}  // namespace internal

namespace {

constexpr size_t kNumPoints = static_cast<size_t>(KillPoint::kCount);

// Same order as KillPoint.
constexpr std::array<const char*, kNumPoints> kNames = {
    "dc.flush.before_write",
    "dc.flush.after_write",
    "dc.lss.buffer.sealed",
    "dc.lss.buffer.before_write",
    "dc.lss.buffer.after_write",
    "dc.lss.after_sync",
    "dc.clean.before_relocate",
    "dc.clean.after_relocate",
    "dc.clean.before_release",
    "dc.checkpoint.before_sync",
    "dc.checkpoint.after_sync",
    "dc.smo.before_commit",
    "dc.smo.after_commit",
    "dc.bwtree.split.install",
    "dc.bwtree.merge.install",
    "dc.rssp.after_flush",
    "dc.rssp.after_meta",
    "dc.restart_to.begin",
    "dc.restart_to.reopened",
    "dc.recovery.begin",
    "dc.recovery.buffer",
    "dc.recovery.end",
    "tc.log.group_commit.before_write",
    "tc.log.group_commit.before_sync",
    "tc.log.group_commit.after_sync",
    "tc.commit.before_ack",
    "tc.recovery.begin",
    "tc.replay.record",
    "tc.recovery.end",
};

constexpr std::array<const char*, 6> kBreakNames = {
    "none", "esl_check", "ack_before_sync", "idempotence", "rssp_before_flush", "scan_lock_early",
};

// ------------------------------------------------------------- kill points

struct KillState {
  std::array<std::atomic<uint64_t>, kNumPoints> hits{};
  // One of: a point and its Nth hit, or every point with a probability.
  // Set before arming (relaxed atomics only so that a test re-arming while
  // a background thread hits a point is not a data race).
  std::atomic<bool> any{false};                       // "*:P:SEED"
  std::atomic<KillPoint> point{KillPoint::kCount};    // "NAME:N"
  std::atomic<uint64_t> nth{0};
  double probability = 0;                             // GUARDED_BY(rng_mu)
  std::mutex rng_mu;
  std::mt19937_64 rng;                                // GUARDED_BY(rng_mu)
  std::atomic<void (*)(KillPoint)> on_fire{nullptr};  // tests: instead of dying
};

KillState& Kill() {
  static KillState* state = new KillState();  // never destroyed: hit from any thread until exit
  return *state;
}

// write(2) of one whole line; no allocation, no stdio lock.
void WriteLine(const std::string& line) {
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

[[noreturn]] void KillSelf() {
  ::kill(::getpid(), SIGKILL);
  for (;;) ::pause();
}

// ------------------------------------------------------------- the Env

// Power loss and torn writes in a real process. Every mutating call passes
// through FreezableEnv (and its files) before the FaultInjectionEnv; once
// frozen, a caller blocks there forever (the process is about to SIGKILL
// itself), so nothing reaches the disk after SimulateCrash undid the
// unsynced changes. It also counts write and sync calls for enospc:N/eio:N.
class FreezableEnv;

struct PowerState {
  FaultInjectionEnv* fault_env = nullptr;  // set once at start, never destroyed
  FreezableEnv* env = nullptr;
  bool powerloss = false;                  // powerloss or torn
  CrashMode mode = CrashMode::kDropUnsynced;
  uint64_t fail_at = 0;                    // enospc:N / eio:N (0: none)
  Code fail_code = Code::kOk;
  uint64_t stall_ms = 0;                   // stall:MS: frozen this long before the crash
  std::atomic<uint64_t> counted{0};        // write and sync calls so far
  std::atomic<bool> frozen{false};
  std::mutex crash_mu;                     // one power loss at a time
};

PowerState& Power() {
  static PowerState* state = new PowerState();
  return *state;
}

void BlockIfFrozen() {
  // acquire: pairs with the release in PowerLoss; a writer that sees the
  // flag late is stopped by the FaultInjectionEnv's crashed check instead.
  if (!Power().frozen.load(std::memory_order_acquire)) return;
  for (;;) ::pause();
}

// Counts a write or sync; the Nth fails (NoSpace or IOError, "injected").
Status CountWriteOrSync(const char* what, const std::string& path) {
  BlockIfFrozen();
  PowerState& p = Power();
  if (p.fail_at == 0) return Status::OK();
  const uint64_t n = p.counted.fetch_add(1, std::memory_order_relaxed) + 1;
  if (n != p.fail_at) return Status::OK();
  return Status(p.fail_code, std::string("injected ") +
                                 (p.fail_code == Code::kNoSpace ? "ENOSPC" : "EIO") + " at " +
                                 what + " " + path + " (call " + std::to_string(n) + ")");
}

class FreezableFile final : public File {
 public:
  explicit FreezableFile(std::unique_ptr<File> base) : base_(std::move(base)) {}
  Result<size_t> ReadAt(uint64_t offset, char* buf, size_t n) const override {
    return base_->ReadAt(offset, buf, n);
  }
  Status WriteAt(uint64_t offset, Slice data) override {
    RETURN_IF_ERROR(CountWriteOrSync("write", path()));
    return base_->WriteAt(offset, data);
  }
  Status Append(Slice data) override {
    RETURN_IF_ERROR(CountWriteOrSync("write", path()));
    return base_->Append(data);
  }
  Status Sync() override {
    RETURN_IF_ERROR(CountWriteOrSync("sync", path()));
    return base_->Sync();
  }
  Status Truncate(uint64_t size) override {
    RETURN_IF_ERROR(CountWriteOrSync("truncate", path()));
    return base_->Truncate(size);
  }
  Result<uint64_t> Size() const override { return base_->Size(); }
  Status Close() override { return base_->Close(); }
  const std::string& path() const override { return base_->path(); }

 private:
  const std::unique_ptr<File> base_;
};

class FreezableEnv final : public EnvWrapper {
 public:
  using EnvWrapper::EnvWrapper;
  Result<std::unique_ptr<File>> OpenFile(const std::string& path, OpenMode mode) override {
    BlockIfFrozen();
    ASSIGN_OR_RETURN(std::unique_ptr<File> f, target()->OpenFile(path, mode));
    return std::unique_ptr<File>(std::make_unique<FreezableFile>(std::move(f)));
  }
  Status DeleteFile(const std::string& path) override {
    BlockIfFrozen();
    return target()->DeleteFile(path);
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    BlockIfFrozen();
    return target()->RenameFile(from, to);
  }
  Status CreateDir(const std::string& dir) override {
    BlockIfFrozen();
    return target()->CreateDir(dir);
  }
  Status CreateDirs(const std::string& dir) override {
    BlockIfFrozen();
    return target()->CreateDirs(dir);
  }
  Status DeleteDir(const std::string& dir) override {
    BlockIfFrozen();
    return target()->DeleteDir(dir);
  }
  Status SyncDir(const std::string& dir) override {
    RETURN_IF_ERROR(CountWriteOrSync("sync", dir));
    return target()->SyncDir(dir);
  }
};

// Freezes every writer, undoes the unsynced changes, says so, dies.
[[noreturn]] void PowerLoss() {
  PowerState& p = Power();
  std::lock_guard<std::mutex> l(p.crash_mu);  // a second caller waits for the SIGKILL
  p.frozen.store(true, std::memory_order_release);
  // stall:MS: the disk takes no writes for a while before the power goes;
  // every other thread runs on meanwhile (network calls included), and a
  // writer blocks at the freeze.
  if (p.stall_ms != 0) std::this_thread::sleep_for(std::chrono::milliseconds(p.stall_ms));
  Status s = p.fault_env->SimulateCrash(p.mode);
  if (!s.ok()) WriteLine("deuteron: power loss simulation failed: " + s.ToString() + "\n");
  WriteLine(p.mode == CrashMode::kTearUnsynced ? "deuteron: torn write\n" : "deuteron: power loss\n");
  KillSelf();
}

// The SIGUSR2 thread: SIGUSR2 is blocked in every thread (the mask is set
// before any thread starts and inherited), and taken here with sigwait, so
// the crash runs as ordinary code, not in a signal handler.
// The thread itself starts with every signal blocked, so that it never
// takes a signal meant for the main thread (the servers' SIGINT/SIGTERM,
// blocked there later and taken with sigwait).
void StartPowerLossThread() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &before);
  std::thread([set] {
    int sig = 0;
    while (sigwait(&set, &sig) != 0 || sig != SIGUSR2) {
    }
    PowerLoss();
  }).detach();
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

// ------------------------------------------------------------- parsing

bool ParseU64(const std::string& text, uint64_t* out) {
  if (text.empty() || text.size() > 19) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

Status ParseKillPoint(const std::string& value) {
  KillState& k = Kill();
  const size_t colon = value.find(':');
  if (colon == std::string::npos) {
    return Status::InvalidArgument("DEUTERON_KILL_POINT='" + value + "': want NAME:N or *:P:SEED");
  }
  const std::string name = value.substr(0, colon);
  const std::string rest = value.substr(colon + 1);
  if (name == "*") {
    const size_t c2 = rest.find(':');
    uint64_t seed = 0;
    char* end = nullptr;
    const std::string p_text = rest.substr(0, c2);
    const double p = std::strtod(p_text.c_str(), &end);
    if (c2 == std::string::npos || p_text.empty() || end != p_text.c_str() + p_text.size() ||
        !(p > 0 && p <= 1) || !ParseU64(rest.substr(c2 + 1), &seed)) {
      return Status::InvalidArgument("DEUTERON_KILL_POINT='" + value +
                                     "': want *:P:SEED with P in (0,1] and SEED a number");
    }
    std::lock_guard<std::mutex> l(k.rng_mu);
    k.any = true;
    k.probability = p;
    k.rng.seed(seed);
    return Status::OK();
  }
  uint64_t n = 0;
  if (!ParseU64(rest, &n) || n == 0) {
    return Status::InvalidArgument("DEUTERON_KILL_POINT='" + value + "': N must be a number >= 1");
  }
  for (size_t i = 0; i < kNumPoints; ++i) {
    if (name == kNames[i]) {
      k.point = static_cast<KillPoint>(i);
      k.nth = n;
      return Status::OK();
    }
  }
  return Status::InvalidArgument("DEUTERON_KILL_POINT: no kill point named '" + name +
                                 "' (deuteron crashtest --list-kill-points)");
}

// What DEUTERON_FAULT_ENV asks for.
struct FaultEnvConfig {
  bool powerloss = false;
  CrashMode mode = CrashMode::kDropUnsynced;
  uint64_t fail_at = 0;
  Code fail_code = Code::kOk;
  uint64_t seed = 1;
  uint64_t stall_ms = 0;
};

Result<FaultEnvConfig> ParseFaultEnv(const std::string& value) {
  FaultEnvConfig c;
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    if (comma == std::string::npos) comma = value.size();
    const std::string mode = value.substr(start, comma - start);
    const size_t colon = mode.find(':');
    const std::string head = mode.substr(0, colon);
    uint64_t n = 0;
    const bool has_n = colon != std::string::npos && ParseU64(mode.substr(colon + 1), &n);
    if (mode == "powerloss" || mode == "torn") {
      c.powerloss = true;
      c.mode = mode == "torn" ? CrashMode::kTearUnsynced : CrashMode::kDropUnsynced;
    } else if ((head == "enospc" || head == "eio") && has_n && n >= 1) {
      c.fail_at = n;
      c.fail_code = head == "enospc" ? Code::kNoSpace : Code::kIOError;
    } else if (head == "seed" && has_n) {
      c.seed = n;
    } else if (head == "stall" && has_n && n <= 60000) {
      c.stall_ms = n;
    } else {
      return Status::InvalidArgument("DEUTERON_FAULT_ENV: unknown mode '" + mode +
                                     "' (want powerloss, torn, enospc:N, eio:N, seed:S, stall:MS)");
    }
    start = comma + 1;
  }
  if (c.stall_ms != 0 && !c.powerloss) {
    return Status::InvalidArgument("DEUTERON_FAULT_ENV: stall:MS needs powerloss or torn");
  }
  return c;
}

const char* Variable(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? v : nullptr;
}

}  // namespace

// ------------------------------------------------------------- public

std::vector<std::string> KillPointNames() {
  if (!HooksCompiled()) return {};
  return std::vector<std::string>(kNames.begin(), kNames.end());
}

const char* KillPointName(KillPoint p) {
  const size_t i = static_cast<size_t>(p);
  return i < kNumPoints ? kNames[i] : "unknown";
}

const char* BreakName(Break b) {
  const size_t i = static_cast<size_t>(b);
  return i < kBreakNames.size() ? kBreakNames[i] : "unknown";
}

Result<Break> ParseBreak(const std::string& name) {
  for (size_t i = 1; i < kBreakNames.size(); ++i) {
    if (name == kBreakNames[i]) return static_cast<Break>(i);
  }
  return Status::InvalidArgument("DEUTERON_BREAK: unknown contract break '" + name +
                                 "' (want esl_check, ack_before_sync, idempotence, "
                                 "rssp_before_flush, scan_lock_early)");
}

Result<Env*> SetUpFromEnvironment() {
  const char* kill = Variable("DEUTERON_KILL_POINT");
  const char* env = Variable("DEUTERON_FAULT_ENV");
  const char* brk = Variable("DEUTERON_BREAK");
  if (!HooksCompiled()) {
    const char* set = kill != nullptr ? "DEUTERON_KILL_POINT"
                      : env != nullptr ? "DEUTERON_FAULT_ENV"
                      : brk != nullptr ? "DEUTERON_BREAK"
                                       : nullptr;
    if (set != nullptr) {
      return Status::NotSupported(std::string(set) +
                                  " is set but this build has no fault hooks (configure with "
                                  "-DDEUTERON_FAULT_HOOKS=ON, e.g. the debug preset)");
    }
    return Env::Posix();
  }
  Break b = Break::kNone;
  if (brk != nullptr) {
    ASSIGN_OR_RETURN(b, ParseBreak(brk));
  }
  FaultEnvConfig fe;
  if (env != nullptr) {
    ASSIGN_OR_RETURN(fe, ParseFaultEnv(env));
  }
  if (kill != nullptr) RETURN_IF_ERROR(ParseKillPoint(kill));  // last: it arms on success

  if (b != Break::kNone) {
    SetBreakForTest(b);
    WriteLine(std::string("deuteron: contract broken on purpose: ") + BreakName(b) + "\n");
  }
  if (kill != nullptr) internal::g_kill_points_armed.store(true, std::memory_order_relaxed);
  if (env == nullptr) return Env::Posix();
  PowerState& p = Power();
  p.powerloss = fe.powerloss;
  p.mode = fe.mode;
  p.fail_at = fe.fail_at;
  p.fail_code = fe.fail_code;
  p.stall_ms = fe.stall_ms;
  p.fault_env = new FaultInjectionEnv(Env::Posix(), fe.seed);  // process-wide, never destroyed
  p.env = new FreezableEnv(p.fault_env);
  if (p.powerloss) StartPowerLossThread();
  return static_cast<Env*>(p.env);
}

void SetBreakForTest(Break b) {
  // relaxed: tests set it between calls, on the thread that makes them.
  internal::g_break.store(static_cast<uint8_t>(b), std::memory_order_relaxed);
}

void ArmKillPointForTest(KillPoint p, uint64_t nth, void (*on_fire)(KillPoint)) {
  KillState& k = Kill();
  for (auto& h : k.hits) h.store(0, std::memory_order_relaxed);
  k.any = false;
  k.point = p;
  k.nth = nth;
  k.on_fire = on_fire;
  internal::g_kill_points_armed.store(HooksCompiled(), std::memory_order_seq_cst);
}

void DisarmKillPointsForTest() {
  internal::g_kill_points_armed.store(false, std::memory_order_seq_cst);
  Kill().point.store(KillPoint::kCount, std::memory_order_relaxed);
  Kill().on_fire.store(nullptr, std::memory_order_relaxed);
}

uint64_t KillPointHits(KillPoint p) {
  return Kill().hits[static_cast<size_t>(p)].load(std::memory_order_relaxed);
}

void internal::KillPointHit(KillPoint point) {
  KillState& k = Kill();
  const size_t i = static_cast<size_t>(point);
  const uint64_t hit = k.hits[i].fetch_add(1, std::memory_order_relaxed) + 1;
  bool fire = false;
  if (k.any.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> l(k.rng_mu);
    fire = std::uniform_real_distribution<double>(0.0, 1.0)(k.rng) < k.probability;
  } else {
    fire = point == k.point.load(std::memory_order_relaxed) &&
           hit == k.nth.load(std::memory_order_relaxed);
  }
  if (!fire) return;
  if (void (*on_fire)(KillPoint) = k.on_fire.load(std::memory_order_relaxed); on_fire != nullptr) {
    on_fire(point);
    return;
  }
  WriteLine(std::string("deuteron: kill point ") + kNames[i] + "\n");
  if (Power().powerloss) PowerLoss();
  KillSelf();
}

}  // namespace deuteron::fault
