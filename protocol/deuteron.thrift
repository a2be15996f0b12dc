// Deuteron wire protocol: the TC and DC services and their shared types.
//
// Rules (see ../shared/STYLE.md, section 4): explicit field ids that are never
// reused, no `required` fields, errors carried as a typed ErrorCode that
// mirrors deuteron::Code (common/status.h) value for value.

namespace cpp deuteron.protocol

// One-to-one with deuteron::Code. Never renumber; add at the end.
enum ErrorCode {
  OK = 0,
  NOT_FOUND = 1,
  INVALID_ARGUMENT = 2,
  TOO_LARGE = 3,
  CORRUPTION = 4,
  IO_ERROR = 5,
  NO_SPACE = 6,
  BUSY = 7,
  ABORTED = 8,
  DEADLOCK = 9,
  TIMED_OUT = 10,
  UNAVAILABLE = 11,
  NOT_SUPPORTED = 12,
  STORE_MISMATCH = 13,
  UNKNOWN_TRANSACTION = 14,
  TRANSACTION_FINISHED = 15,
  SHUTTING_DOWN = 16,
  INTERNAL = 17,
  ALREADY_EXISTS = 18,
  // The call carries a TC incarnation older than the DC's: a later restartTo
  // fenced it off (see DcReady.incarnation).
  STALE_INCARNATION = 19,
  // A server that requires a shared secret got a call before a successful
  // authenticate, or a wrong token (protocol/protocol.md, "Authentication").
  UNAUTHENTICATED = 20,
}

// Every service call that can fail throws this; `code` says why.
exception DeuteronError {
  1: ErrorCode code,
  2: string message,
}

// ---- The data component service (protocol/data_component.h) ----
// Record operations carry TC LSNs (i64, never 0). Every call is answered in
// order on its connection; a client may pipeline calls.
//
// Incarnations (protocol/protocol.md, "Incarnations"): restartTo starts a new
// TC incarnation and returns its number; apply, setEsl and proposeRssp carry
// the caller's, and the DC refuses any but its current one (an older one
// with STALE_INCARNATION). 0 (the default of an absent field) is the
// incarnation of a store no restartTo has ever run on.

// Mirrors deuteron::RecordOpKind. A kind this DC does not know is rejected
// with INVALID_ARGUMENT.
enum RecordOpKind {
  UPSERT = 1,
  DELETE = 2,
}

struct RecordOp {
  1: RecordOpKind kind,
  2: binary key,
  3: binary value,
  4: i64 lsn,
}

struct ApplyRequest {
  1: list<RecordOp> ops,
  // An ESL piggy-backed on the call; 0: none.
  2: i64 esl,
  // The caller's TC incarnation.
  3: i64 incarnation,
}

struct ApplyResult {
  1: i32 applied,
  2: i32 skipped,
}

struct ReadResult {
  1: bool found,
  2: binary value,
  3: i64 lsn,
}

struct ScanRequest {
  1: optional binary lower,
  2: bool lower_inclusive = true,
  3: optional binary upper,
  4: bool upper_inclusive = false,
  5: bool reverse = false,
  6: i32 limit = 0,
}

struct ScanItem {
  1: binary key,
  2: binary value,
  3: i64 lsn,
}

struct ScanResult {
  1: list<ScanItem> items,
  2: bool more,
}

// What a reading TC expects of the DC (protocol/protocol.md, "Read fences"):
// its incarnation and the DC instance (DcReady.instance) it restarted. An
// absent incarnation: an unfenced read (older clients, tools). With it, the
// DC refuses a read of another incarnation as it refuses apply (older:
// STALE_INCARNATION, newer: INVALID_ARGUMENT), and one of another instance
// (absent or 0: not checked) with STALE_INCARNATION.
struct ReadFence {
  1: optional i64 incarnation,
  2: optional i64 instance,
}

struct DcReady {
  1: i64 rssp,
  2: i64 max_durable_lsn,
  // The incarnation this restartTo started (durable in the DC before the
  // reply); the TC passes it on every later apply, setEsl and proposeRssp.
  3: i64 incarnation,
  // The store the DC belongs to: 16 bytes (absent: none recorded).
  4: optional binary store_id,
  // Changes every time the DC process opens its store (absent or 0: not
  // said); a TC that sees it change knows the DC lost what it held in memory.
  5: optional i64 instance,
}

enum DcState {
  SERVING = 1,
  RESTARTING = 2,
  SHUTTING_DOWN = 3,
}

struct DcHealth {
  1: DcState state,
  2: i64 esl,
  3: i64 rssp,
  4: i64 max_durable_lsn,
  // The DC's current incarnation (the last restartTo's).
  5: i64 incarnation,
  6: optional binary store_id,  // as DcReady
  7: optional i64 instance,     // as DcReady
}

struct DcStats {
  1: i64 applies,
  2: i64 ops_applied,
  3: i64 ops_skipped,
  4: i64 gets,
  5: i64 scans,
  6: i64 scan_items,
  7: i64 rssp_proposals,
  8: i64 restarts,
  9: i64 esl,
  10: i64 rssp,
  11: i64 max_durable_lsn,
  12: i64 pages,
  13: i64 memory_bytes,
  14: i64 flushes,
  15: i64 flush_bytes,
  16: i64 lss_bytes_written,
  17: i32 tree_height,
  // Appended for `deuteron stats` (absent from older servers).
  18: optional i64 memory_budget,     // the cache's budget (0: none)
  19: optional i64 node_bytes,        // page nodes in memory
  20: optional i64 checkpoints,
  21: optional i64 segments_cleaned,
  22: optional i64 pages_relocated,
  23: optional i64 bytes_relocated,
  24: optional i64 lss_disk_bytes,    // LSS segment files held
  25: optional i64 lss_segments,      // LSS segment files held
  26: optional i64 page_loads,        // pages (or parts) read back from the LSS
  27: optional i64 swap_outs,         // pages that left memory entirely
  // LSS bytes the pages' current states need (dc/llama/llama.md, "Live
  // bytes"): space amplification is lss_disk_bytes over this.
  28: optional i64 live_bytes,
}

service DataComponentService {
  ApplyResult apply(1: ApplyRequest request) throws (1: DeuteronError error),
  // fence (absent: an unfenced read): see ReadFence.
  ReadResult get(1: binary key, 2: ReadFence fence) throws (1: DeuteronError error),
  list<ReadResult> multiGet(1: list<binary> keys, 2: ReadFence fence) throws (1: DeuteronError error),
  ScanResult scan(1: ScanRequest request, 2: ReadFence fence) throws (1: DeuteronError error),
  void setEsl(1: i64 esl, 2: i64 incarnation) throws (1: DeuteronError error),
  void proposeRssp(1: i64 rssp, 2: i64 incarnation) throws (1: DeuteronError error),
  // store_id (16 bytes, absent: no check): the restarting TC's store. A DC
  // with none adopts it; a DC of another store throws STORE_MISMATCH.
  DcReady restartTo(1: i64 stable_end, 2: binary store_id) throws (1: DeuteronError error),
  DcStats stats() throws (1: DeuteronError error),
  DcHealth health() throws (1: DeuteronError error),
  // Presents the shared secret; answered by the server layer itself, and
  // required first on a connection when the server has a secret
  // (protocol/protocol.md, "Authentication"). Every served service ends
  // with this method.
  void authenticate(1: binary token) throws (1: DeuteronError error),
}

// ---- The transactional component service (tc/server/tc_service.h) ----
// What clients call (tc/client/client.h is the C++ client). A transaction
// lives on the connection that began it: its id is unique in the server, but
// only that connection may use it, and when the connection closes (or is
// closed for idleness) its open transactions are aborted and their locks
// released. Errors (protocol/protocol.md, "The TC service"): DEADLOCK and
// TIMED_OUT from a lock (the transaction is then aborted; begin a new one),
// UNKNOWN_TRANSACTION for an id this connection does not hold,
// TRANSACTION_FINISHED for one it committed or aborted, INVALID_ARGUMENT,
// TOO_LARGE (a key or value over the TC's limits, or a list over the
// server's), BUSY (too many open transactions on this connection),
// UNAVAILABLE (the DC is unreachable: retry), SHUTTING_DOWN.
// `begin` and `delete` are reserved words in Thrift: the calls are named
// beginTransaction and remove.

struct TcReadResult {
  1: bool found,
  2: binary value,
}

struct KeyValue {
  1: binary key,
  2: binary value,
}

// One page of a transaction's scan. When `more`, the next page is the same
// request with its bound moved past `resume_key` (exclusive): lower for a
// forward scan, upper for a reverse one.
struct TcScanPage {
  1: list<KeyValue> items,
  2: bool more,
  3: binary resume_key,
}

enum TcOpKind {
  GET = 1,
  PUT = 2,
  REMOVE = 3,
  SCAN = 4,
}

// One operation of `execute`; `scan` (a page, its limit capped by the
// server) only for SCAN, `value` only for PUT.
struct TcOp {
  1: TcOpKind kind,
  2: binary key,
  3: binary value,
  4: ScanRequest scan,
}

struct TcOpResult {
  // GET: whether the key was there, and its value.
  1: bool found,
  2: binary value,
  // SCAN: one page.
  3: TcScanPage page,
}

struct ExecuteRequest {
  1: list<TcOp> ops,
}

// Results in operation order. The transaction committed.
struct ExecuteResult {
  1: list<TcOpResult> results,
}

// What `deuteron stats` shows of a TC server. Counts are since the server
// started; latencies are of commit and execute calls, in microseconds.
struct TcStats {
  1: i64 commits,             // write transactions committed
  2: i64 read_only_commits,
  3: i64 aborts,              // all aborts the TC counted
  // Aborts by cause, of this server's transactions:
  4: i64 aborts_deadlock,     // a lock wait closed a cycle
  5: i64 aborts_lock_timeout, // a lock wait timed out
  6: i64 aborts_by_client,    // abort called
  7: i64 aborts_disconnect,   // the connection closed with it open
  8: i64 aborts_other,        // a failed commit, execute or other error
  9: i64 commit_count,        // commit and execute calls timed
  10: i64 commit_p50_us,
  11: i64 commit_p90_us,
  12: i64 commit_p99_us,
  13: i64 commit_max_us,
  14: i64 esl,                // the log's end of stable log
  15: i64 rssp,               // the log's durable RSSP
  16: i64 log_tail,           // where the next record goes
  17: i64 log_held_bytes,     // from the RSSP's segment start to the tail
  18: i64 log_bytes_written,
  19: i64 checkpoints,        // RSSPs made durable
  20: i64 replayed_ops,       // at the last recovery
  21: i64 dc_recoveries,
  22: i64 open_transactions,
  23: i64 connections,
  24: i64 uptime_ms,
  25: optional DcStats dc,    // the DC's, when it answered
  26: optional string dc_error, // why not, when it did not
  // The TC server's memory budget (tc/server/tc_server.md): its limit (0:
  // not enforced), the bytes charged now and at most, and the begins and
  // calls it refused. Absent from older servers (read as 0).
  27: optional i64 memory_budget,
  28: optional i64 memory_used,
  29: optional i64 memory_peak,
  30: optional i64 memory_refusals,
}

service TransactionService {
  // Returns the new transaction's id (nonzero).
  i64 beginTransaction() throws (1: DeuteronError error),
  TcReadResult get(1: i64 txn, 2: binary key) throws (1: DeuteronError error),
  void put(1: i64 txn, 2: binary key, 3: binary value) throws (1: DeuteronError error),
  void remove(1: i64 txn, 2: binary key) throws (1: DeuteronError error),
  // One page: request.limit items at most (0 or over the server's page
  // limit: the server's page limit).
  TcScanPage scan(1: i64 txn, 2: ScanRequest request) throws (1: DeuteronError error),
  void commit(1: i64 txn) throws (1: DeuteronError error),
  // Idempotent on a transaction this connection finished.
  void abort(1: i64 txn) throws (1: DeuteronError error),
  // The operations, in order, as one transaction that commits at the end.
  // The first failure aborts it and is thrown, its message naming the
  // operation's index; nothing of it is committed.
  ExecuteResult execute(1: ExecuteRequest request) throws (1: DeuteronError error),
  // Presents the shared secret; answered by the server layer itself
  // (protocol/protocol.md, "Authentication"). Last, as in every served service.
  void authenticate(1: binary token) throws (1: DeuteronError error),
  // A snapshot of the server's counters for `deuteron stats`
  // (protocol/protocol.md, "The TC service"). Appended after authenticate;
  // named tcStats so that it never matches the DC service's `stats`.
  TcStats tcStats() throws (1: DeuteronError error),
}
