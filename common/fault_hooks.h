// Fault hooks: faults from INSIDE the server processes, for the crash harness
// (issue 32; `deuteron crashtest`). Three kinds, all chosen by environment
// variables that `deuteron dc`, `deuteron tc` and `deuteron serve` read at
// start (SetUpFromEnvironment), and all present only in builds with the CMake
// option DEUTERON_FAULT_HOOKS (default ON unless CMAKE_BUILD_TYPE is Release):
//
//  * Kill points. DEUTERON_KILL_POINT(kName) marks a place in the code where
//    the process may kill itself (SIGKILL) on purpose: DEUTERON_KILL_POINT=
//    NAME:N kills at the Nth hit (1-based) of the point NAME,
//    DEUTERON_KILL_POINT=*:P:SEED at any hit of any point with probability P
//    from a generator seeded with SEED. Just before dying the process writes
//    `deuteron: kill point NAME` to stderr with one write(2).
//  * The fault-injecting Env. DEUTERON_FAULT_ENV=MODE[,MODE...] (powerloss,
//    torn, enospc:N, eio:N, seed:S) makes the Env the server uses a
//    FaultInjectionEnv over Env::Posix() (common/fault_env.h). With powerloss
//    (torn), SIGUSR2 or a kill point freezes every writer, drops (tears) the
//    unsynced data, writes `deuteron: power loss` (`deuteron: torn write`) and
//    SIGKILLs the process.
//  * Contract breaks. DEUTERON_BREAK=NAME disables exactly one check of one
//    of DESIGN.md's contracts (see Break), so that a test can prove that the
//    harness notices. BrokenOnPurpose(b) is the one question the code asks.
//
// Cost. Compiled out (DEUTERON_FAULT_HOOKS=0) a kill point expands to nothing
// and BrokenOnPurpose is a constant false. Compiled in but unused, a kill
// point is one relaxed atomic load and an untaken branch, a break one relaxed
// load. common/fault_hooks.md has the design and the list of points.
//
// Thread safety: everything here is thread-safe. SetUpFromEnvironment runs
// once, at the start of main, before the threads that hit kill points.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

#ifndef DEUTERON_FAULT_HOOKS
#define DEUTERON_FAULT_HOOKS 0
#endif

namespace deuteron {
class Env;
}

namespace deuteron::fault {

// Every kill point compiled into the project (the static registry: the name
// of each is in KillPointNames(), same order). Add new ones at the end of a
// group; names are dotted, lowercase, component first.
enum class KillPoint : uint16_t {
  // DC: LLAMA flush of one page (dc/llama/llama_flush.cpp).
  kDcFlushBeforeWrite,       // dc.flush.before_write: records chosen, nothing reserved yet
  kDcFlushAfterWrite,        // dc.flush.after_write: in the flush buffer, mapping updated
  // DC: the LSS flush-buffer ring (dc/llama/lss.cpp).
  kDcLssBufferSealed,        // dc.lss.buffer.sealed: a full buffer handed on to the I/O thread
  kDcLssBufferBeforeWrite,   // dc.lss.buffer.before_write: before pwrite of a buffer
  kDcLssBufferAfterWrite,    // dc.lss.buffer.after_write: written, not synced
  kDcLssAfterSync,           // dc.lss.after_sync: a segment fdatasync done
  // DC: cleaning (dc/llama/llama_clean.cpp).
  kDcCleanBeforeRelocate,    // dc.clean.before_relocate
  kDcCleanAfterRelocate,     // dc.clean.after_relocate
  kDcCleanBeforeRelease,     // dc.clean.before_release: segments about to be deleted
  // DC: checkpoint file, written over the older of two slots (dc/llama/checkpoint.cpp).
  kDcCheckpointBeforeSync,   // dc.checkpoint.before_sync: slot truncated and written, not synced
  kDcCheckpointAfterSync,    // dc.checkpoint.after_sync: synced, directory not synced
  // DC: system transactions (dc/llama/llama_txn.cpp, dc/bwtree).
  kDcSmoBeforeCommit,        // dc.smo.before_commit: LLAMA system transaction commit
  kDcSmoAfterCommit,         // dc.smo.after_commit
  kDcBwtreeSplitInstall,     // dc.bwtree.split.install: a split's system transaction
  kDcBwtreeMergeInstall,     // dc.bwtree.merge.install: a merge's system transaction
  // DC: the contract calls (dc/dc.cpp).
  kDcRsspAfterFlush,         // dc.rssp.after_flush: flushed and stable, not acknowledged
  kDcRsspAfterMeta,          // dc.rssp.after_meta: dc.meta written, not acknowledged
  kDcRestartToBegin,         // dc.restart_to.begin: checks passed, new incarnation not written
  kDcRestartToReopened,      // dc.restart_to.reopened: store reopened, not acknowledged
  // DC: recovery (dc/llama/lss_recovery.cpp, dc/dc.cpp).
  kDcRecoveryBegin,          // dc.recovery.begin
  kDcRecoveryBuffer,         // dc.recovery.buffer: each valid LSS buffer, before replaying it
  kDcRecoveryEnd,            // dc.recovery.end
  // TC: the log's group commit (tc/wal/log.cpp).
  kTcLogGroupCommitBeforeWrite,  // tc.log.group_commit.before_write
  kTcLogGroupCommitBeforeSync,   // tc.log.group_commit.before_sync
  kTcLogGroupCommitAfterSync,    // tc.log.group_commit.after_sync
  // TC: commit and recovery (tc/txn_manager.cpp, tc/txn_recovery.cpp).
  kTcCommitBeforeAck,        // tc.commit.before_ack: durable, client not told
  kTcRecoveryBegin,          // tc.recovery.begin
  kTcReplayRecord,           // tc.replay.record: each log record replayed
  kTcRecoveryEnd,            // tc.recovery.end
  kCount
};

// Contract breaks, DEUTERON_BREAK's values (DESIGN.md, "The contracts").
enum class Break : uint8_t {
  kNone,
  kEslCheck,         // esl_check: the DC flushes records above the ESL (contract 1)
  kAckBeforeSync,    // ack_before_sync: the TC acknowledges before fdatasync (4)
  kIdempotence,      // idempotence: the DC reapplies an LSN it holds (2)
  kRsspBeforeFlush,  // rssp_before_flush: the DC acks an RSSP unflushed (3)
  kScanLockEarly,    // scan_lock_early: a scan's range lock freed before commit (6)
};

// True when this build has the hooks (DEUTERON_FAULT_HOOKS).
constexpr bool HooksCompiled() { return DEUTERON_FAULT_HOOKS != 0; }

// The name of every kill point compiled in, in KillPoint order (empty
// without hooks).
std::vector<std::string> KillPointNames();
const char* KillPointName(KillPoint p);

// "esl_check", ... ("none" for kNone); ParseBreak is its inverse.
const char* BreakName(Break b);
Result<Break> ParseBreak(const std::string& name);

// Reads DEUTERON_KILL_POINT, DEUTERON_FAULT_ENV and DEUTERON_BREAK and arms
// what they ask for. Returns the Env the server must use: Env::Posix(), or
// a process-wide fault-injecting Env over it (never destroyed). Malformed
// values are kInvalidArgument; any of them set in a build without hooks is
// kNotSupported. The caller prints the error in one line and exits 2. With a break set it
// prints `deuteron: contract broken on purpose: NAME` to stderr.
// REQUIRES: called once, before any thread hits a kill point.
Result<Env*> SetUpFromEnvironment();

// Test hooks (in-process; not in builds without hooks, where they do
// nothing). SetBreakForTest: the break now in force (kNone: none).
// ArmKillPointForTest: like DEUTERON_KILL_POINT=NAME:N but calls `on_fire`
// instead of dying (null: die). KillPointHits: hits counted since arming.
void SetBreakForTest(Break b);
void ArmKillPointForTest(KillPoint p, uint64_t nth, void (*on_fire)(KillPoint));
void DisarmKillPointsForTest();
uint64_t KillPointHits(KillPoint p);

namespace internal {
extern std::atomic<bool> g_kill_points_armed;
extern std::atomic<uint8_t> g_break;
void KillPointHit(KillPoint p);
}  // namespace internal

// True when `b` is the break in force: the one question a contract's check
// asks. Compiled out: always false.
inline bool BrokenOnPurpose(Break b) {
#if DEUTERON_FAULT_HOOKS
  // relaxed: set once before the server starts (or by a test between calls).
  return internal::g_break.load(std::memory_order_relaxed) == static_cast<uint8_t>(b);
#else
  (void)b;
  return false;
#endif
}

}  // namespace deuteron::fault

// A kill point (see above). `id` is a KillPoint enumerator without the
// scope, e.g. DEUTERON_KILL_POINT(kDcFlushAfterWrite).
#if DEUTERON_FAULT_HOOKS
#define DEUTERON_KILL_POINT(id)                                                        \
  do {                                                                                 \
    /* relaxed: arming happens before the threads start; a late view only delays */    \
    if (::deuteron::fault::internal::g_kill_points_armed.load(std::memory_order_relaxed)) \
      ::deuteron::fault::internal::KillPointHit(::deuteron::fault::KillPoint::id);     \
  } while (0)
#else
#define DEUTERON_KILL_POINT(id) \
  do {                          \
  } while (0)
#endif
