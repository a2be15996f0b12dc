// DataComponent: the interface through which a TC drives a data component
// (DESIGN.md, "The contracts"). Two bindings implement it:
//  - in-process: dc::Dc itself (dc/dc.h), direct calls, no serialization;
//  - remote: protocol::RemoteDataComponent (protocol/remote_dc.h), Thrift
//    framed binary over TCP to a DC server (dc/dc_server.h).
// Both bindings return the same typed Status codes for the same failures, so
// a TC (and every contract test) runs unchanged over either.
//
// LSNs are the TC's: every record operation carries a unique, nonzero LSN.
//
// Incarnations fence off a previous TC. RestartTo starts a new incarnation
// (DcReady::incarnation, one above the last, durable in the DC before
// RestartTo returns); Apply, SetEsl and ProposeRssp carry the caller's and
// succeed only with the DC's current one: an older one is StaleIncarnation
// (a later RestartTo superseded the caller: it must stop), a newer one
// InvalidArgument (never started here). So the requests of a crashed or
// superseded TC that reach the DC after the new TC's RestartTo change
// nothing, before or after a DC restart. A store no RestartTo has run on is
// at incarnation 0. Plain reads, GetStats and Health are not fenced: they change
// nothing in the DC.
//
// Read fences. The plain reads (Get, MultiGet, Scan) are not fenced: any
// client may read. A TC reads with the fenced forms (GetFenced, ...), which
// carry a ReadFence: the TC's incarnation and the DC instance (DcReady::
// instance) it restarted. The DC refuses a read whose incarnation is not its
// current one as Apply does (older: StaleIncarnation, newer:
// InvalidArgument), and one whose instance is not its own (the DC process
// reopened its store since: it lost what it held only in memory) with
// StaleIncarnation, so a TC never reads a DC that dropped committed
// operations behind its back (someone else's RestartTo, a DC process
// restarted faster than the TC noticed). A read checked against the fence
// runs wholly before any later RestartTo. A binding that does not fence (the
// default methods below) reads unfenced.
//
// Thread safety: every method of every binding is thread-safe. Slices in a
// call are borrowed for the call only.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/slice.h"
#include "common/status.h"
#include "common/store_id.h"

namespace deuteron {

// Mirrors protocol RecordOpKind value for value.
enum class RecordOpKind : uint8_t {
  kUpsert = 1,  // blind write of key -> value
  kDelete = 2,  // blind delete: leaves a tombstone carrying the LSN
};

// One LSN-tagged record operation (borrowed bytes).
struct RecordOp {
  RecordOpKind kind = RecordOpKind::kUpsert;
  Slice key;
  Slice value;  // empty for kDelete
  uint64_t lsn = 0;
};

// What a reader expects of the DC (see "Read fences" above).
struct ReadFence {
  uint64_t incarnation = 0;  // the reader's TC incarnation
  uint64_t instance = 0;     // the DC instance it restarted; 0: not checked
};

struct ApplyResult {
  uint32_t applied = 0;  // operations whose effect is now in the DC
  uint32_t skipped = 0;  // at or below the key's LSN: acknowledged, not applied
};

// A point read. Absent and deleted keys both read as !found; `lsn` is the
// LSN the DC holds for the key (a tombstone's too), 0 when it holds none.
struct ReadResult {
  bool found = false;
  std::string value;
  uint64_t lsn = 0;
};

struct ScanRequest {
  std::optional<std::string> lower;  // none: from the first key
  bool lower_inclusive = true;
  std::optional<std::string> upper;  // none: to the last key
  bool upper_inclusive = false;
  bool reverse = false;              // descending
  uint32_t limit = 0;                // most items to return; 0: the DC's maximum
};

struct ScanItem {
  std::string key;
  std::string value;
  uint64_t lsn = 0;
};

struct ScanResult {
  std::vector<ScanItem> items;  // in scan order, tombstones excluded
  // True when the range holds more items than were returned; continue from
  // the last item's key, exclusive.
  bool more = false;
};

// Where the DC stands after its own recovery or a restart-to.
struct DcReady {
  // Every operation the DC received with LSN below this is durable in its
  // LSS (the last RSSP it acknowledged, kept across crashes).
  uint64_t rssp = 0;
  // No operation above this LSN is durable in the DC (the highest flush
  // bound in its LSS): redo below it may find its effect already there.
  uint64_t max_durable_lsn = 0;
  // The DC's current TC incarnation: from RestartTo, the one it started
  // (pass it on every fenced call); after an open, the last one started.
  uint64_t incarnation = 0;
  // The store this DC belongs to (nil: none recorded yet, or a binding
  // without store ids).
  StoreId store_id;
  // Changes every time the DC process opens its store (a random nonzero
  // value; 0: a binding that does not say): a TC that sees it change knows
  // the DC restarted and lost what it held only in memory.
  uint64_t instance = 0;
};

enum class DcState : uint8_t {
  kServing = 1,
  kRestarting = 2,     // restart-to in progress: record calls get Unavailable
  kShuttingDown = 3,
};

struct DcHealth {
  DcState state = DcState::kServing;
  uint64_t esl = 0;   // latest ESL received
  uint64_t rssp = 0;  // latest RSSP acknowledged
  uint64_t max_durable_lsn = 0;
  uint64_t incarnation = 0;  // the current TC incarnation
  StoreId store_id;          // as DcReady
  uint64_t instance = 0;     // as DcReady
};

// Counters (monotonic since open unless said otherwise) and gauges.
struct DcStats {
  uint64_t applies = 0;          // Apply calls
  uint64_t ops_applied = 0;
  uint64_t ops_skipped = 0;      // idempotent no-ops
  uint64_t gets = 0;             // keys read by Get and MultiGet
  uint64_t scans = 0;
  uint64_t scan_items = 0;
  uint64_t rssp_proposals = 0;
  uint64_t restarts = 0;         // RestartTo calls completed
  uint64_t esl = 0, rssp = 0, max_durable_lsn = 0;
  uint64_t pages = 0;            // LLAMA pages allocated
  uint64_t memory_bytes = 0;     // LLAMA cache memory in use
  uint64_t flushes = 0;          // LLAMA page flushes
  uint64_t flush_bytes = 0;
  uint64_t lss_bytes_written = 0;
  uint32_t tree_height = 0;
  // For `deuteron stats` (0 from a server that does not send them).
  uint64_t memory_budget = 0;    // the cache's budget (0: none)
  uint64_t node_bytes = 0;       // page nodes in memory
  uint64_t checkpoints = 0;
  uint64_t segments_cleaned = 0;
  uint64_t pages_relocated = 0;
  uint64_t bytes_relocated = 0;
  uint64_t lss_disk_bytes = 0;   // LSS segment files held
  uint64_t lss_segments = 0;
  uint64_t page_loads = 0;
  uint64_t swap_outs = 0;
  // LSS bytes the pages' current states need (0 from older servers).
  uint64_t live_bytes = 0;
};

class DataComponent {
 public:
  virtual ~DataComponent() = default;

  // Applies `ops` in order. An operation whose LSN is at or below the LSN
  // the DC holds for its key is acknowledged and skipped (contract 2). `esl`,
  // when nonzero, is an ESL piggy-backed on the call (as SetEsl, first).
  // Errors: StaleIncarnation (`incarnation` is older than the DC's: nothing
  // applied, the ESL not moved), InvalidArgument (LSN 0, unknown kind, a
  // value on a delete, an incarnation never started), TooLarge (key/value
  // over the limits, batch over the maximum), Unavailable (restarting). An
  // error stops the batch: the operations before the failing one are
  // applied, the rest are not; redo may resend.
  virtual Result<ApplyResult> Apply(std::span<const RecordOp> ops, uint64_t esl,
                                    uint64_t incarnation) = 0;

  virtual Result<ReadResult> Get(Slice key) = 0;
  // One result per key, in order. TooLarge above the batch maximum.
  virtual Result<std::vector<ReadResult>> MultiGet(std::span<const Slice> keys) = 0;
  virtual Result<ScanResult> Scan(const ScanRequest& request) = 0;

  // The reads above, fenced: StaleIncarnation when `fence.incarnation` is
  // older than the DC's or `fence.instance` (nonzero) is not the DC's
  // instance; InvalidArgument when the incarnation is newer. A binding
  // without fences (these defaults) reads unfenced.
  virtual Result<ReadResult> GetFenced(Slice key, const ReadFence& fence) {
    (void)fence;
    return Get(key);
  }
  virtual Result<std::vector<ReadResult>> MultiGetFenced(std::span<const Slice> keys,
                                                         const ReadFence& fence) {
    (void)fence;
    return MultiGet(keys);
  }
  virtual Result<ScanResult> ScanFenced(const ScanRequest& request, const ReadFence& fence) {
    (void)fence;
    return Scan(request);
  }

  // The TC's end of stable log: everything at or below it is durable in the
  // TC log. Never moves back (a lower value is ignored). Fenced as Apply.
  virtual Status SetEsl(uint64_t esl, uint64_t incarnation) = 0;
  // RSSP proposal `rssp` (contract 3): returns once every operation with LSN
  // below it is stable in the LSS. InvalidArgument when rssp > ESL + 1.
  // Fenced as Apply.
  virtual Status ProposeRssp(uint64_t rssp, uint64_t incarnation) = 0;
  // Starts a new TC incarnation: from here on only DcReady::incarnation is
  // accepted. Drops every effect of operations above `stable_end` (the end
  // of the TC's stable log) and reports the DC ready. The ESL becomes
  // `stable_end`. A TC calls it once when it starts, before any fenced call.
  virtual Result<DcReady> RestartTo(uint64_t stable_end) = 0;
  // RestartTo by a TC of store `store_id` (not nil): a DC that has no store
  // id yet adopts it (durably, before anything else changes); a DC of
  // another store refuses with StoreMismatch and changes nothing. A binding
  // without store ids (the default) ignores the id.
  virtual Result<DcReady> RestartToStore(uint64_t stable_end, const StoreId& store_id) {
    (void)store_id;
    return RestartTo(stable_end);
  }

  virtual Result<DcStats> GetStats() = 0;
  virtual Result<DcHealth> Health() = 0;
};

}  // namespace deuteron
