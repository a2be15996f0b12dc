#include "protocol/convert.h"

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <utility>

namespace deuteron::protocol {
namespace {

constexpr uint64_t kMaxI64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// Counters are unsigned here and i64 on the wire; they never reach 2^63.
int64_t Counter(uint64_t v) { return static_cast<int64_t>(v); }
uint64_t Counter(int64_t v) { return static_cast<uint64_t>(v); }

// Thrift's generated read stores an enum field's i32 into the C++ enum type
// whatever its value. A value outside the enumeration's range (a newer peer,
// garbage) must not be loaded as that type (undefined; UBSan's "invalid
// value for type"), so enum fields are read through their bytes.
template <typename E>
int32_t RawEnum(const E& e) {
  static_assert(sizeof(E) == sizeof(int32_t), "Thrift enums are i32");
  int32_t v;
  std::memcpy(&v, &e, sizeof(v));
  return v;
}

Status NegativeError(const char* what, int64_t v) {
  return Status::InvalidArgument(fmt::format("{} is negative: {}", what, v));
}

}  // namespace

Status ToWireApply(std::span<const ::deuteron::RecordOp> ops, uint64_t esl, ApplyRequest* out) {
  if (esl > kMaxI64) return Status::InvalidArgument(fmt::format("ESL {} does not fit in an i64", esl));
  out->ops.clear();
  out->ops.reserve(ops.size());
  for (const ::deuteron::RecordOp& op : ops) {
    if (op.lsn > kMaxI64) {
      return Status::InvalidArgument(fmt::format("LSN {} does not fit in an i64", op.lsn));
    }
    if (op.kind != ::deuteron::RecordOpKind::kUpsert && op.kind != ::deuteron::RecordOpKind::kDelete) {
      // The server would say the same; an unknown value cannot even be
      // held by the generated enum type.
      return Status::InvalidArgument(
          fmt::format("unknown record op kind {}", static_cast<int>(op.kind)));
    }
    RecordOp w;
    w.kind = static_cast<RecordOpKind::type>(static_cast<int>(op.kind));
    w.key.assign(op.key.data(), op.key.size());
    w.value.assign(op.value.data(), op.value.size());
    w.lsn = static_cast<int64_t>(op.lsn);
    out->ops.push_back(std::move(w));
  }
  out->esl = static_cast<int64_t>(esl);
  return Status::OK();
}

Status FromWireApply(const ApplyRequest& request, std::vector<::deuteron::RecordOp>* ops,
                     uint64_t* esl) {
  if (request.esl < 0) return NegativeError("ESL", request.esl);
  ops->clear();
  ops->reserve(request.ops.size());
  for (size_t i = 0; i < request.ops.size(); ++i) {
    const RecordOp& w = request.ops[i];
    ::deuteron::RecordOp op;
    const int32_t kind = RawEnum(w.kind);
    switch (kind) {
      case RecordOpKind::UPSERT:
        op.kind = ::deuteron::RecordOpKind::kUpsert;
        break;
      case RecordOpKind::DELETE:
        op.kind = ::deuteron::RecordOpKind::kDelete;
        break;
      default:
        return Status::InvalidArgument(
            fmt::format("operation {}: unknown record op kind {}", i, kind));
    }
    if (w.lsn < 0) return NegativeError("LSN", w.lsn);
    op.key = Slice(w.key);
    op.value = Slice(w.value);
    op.lsn = static_cast<uint64_t>(w.lsn);
    ops->push_back(op);
  }
  *esl = static_cast<uint64_t>(request.esl);
  return Status::OK();
}

std::vector<Slice> FromWireKeys(const std::vector<std::string>& keys) {
  std::vector<Slice> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) out.emplace_back(k);
  return out;
}

ScanRequest ToWireScan(const ::deuteron::ScanRequest& request) {
  ScanRequest w;
  if (request.lower) w.__set_lower(*request.lower);
  w.__set_lower_inclusive(request.lower_inclusive);
  if (request.upper) w.__set_upper(*request.upper);
  w.__set_upper_inclusive(request.upper_inclusive);
  w.__set_reverse(request.reverse);
  constexpr uint32_t kMaxI32 = static_cast<uint32_t>(std::numeric_limits<int32_t>::max());
  w.__set_limit(static_cast<int32_t>(request.limit > kMaxI32 ? kMaxI32 : request.limit));
  return w;
}

Result<::deuteron::ScanRequest> FromWireScan(const ScanRequest& w) {
  if (w.limit < 0) return NegativeError("scan limit", w.limit);
  ::deuteron::ScanRequest r;
  if (w.__isset.lower) r.lower = w.lower;
  r.lower_inclusive = w.lower_inclusive;
  if (w.__isset.upper) r.upper = w.upper;
  r.upper_inclusive = w.upper_inclusive;
  r.reverse = w.reverse;
  r.limit = static_cast<uint32_t>(w.limit);
  return r;
}

Result<int64_t> ToWireLsn(uint64_t lsn, const char* what) {
  if (lsn > kMaxI64) return Status::InvalidArgument(fmt::format("{} {} does not fit in an i64", what, lsn));
  return static_cast<int64_t>(lsn);
}

Result<uint64_t> FromWireLsn(int64_t lsn, const char* what) {
  if (lsn < 0) return NegativeError(what, lsn);
  return static_cast<uint64_t>(lsn);
}

Result<ReadFence> ToWireFence(const ::deuteron::ReadFence& fence) {
  ReadFence w;
  ASSIGN_OR_RETURN(const int64_t inc, ToWireLsn(fence.incarnation, "incarnation"));
  w.__set_incarnation(inc);
  if (fence.instance != 0) {
    w.__set_instance(Counter(fence.instance));  // as DcReady: the bit pattern
  }
  return w;
}

Result<std::optional<::deuteron::ReadFence>> FromWireFence(const ReadFence& w) {
  if (!w.__isset.incarnation) return std::optional<::deuteron::ReadFence>();
  ::deuteron::ReadFence fence;
  ASSIGN_OR_RETURN(fence.incarnation, FromWireLsn(w.incarnation, "incarnation"));
  if (w.__isset.instance) fence.instance = Counter(w.instance);
  return std::optional<::deuteron::ReadFence>(fence);
}

ApplyResult ToWire(const ::deuteron::ApplyResult& r) {
  ApplyResult w;
  w.__set_applied(static_cast<int32_t>(r.applied));
  w.__set_skipped(static_cast<int32_t>(r.skipped));
  return w;
}

::deuteron::ApplyResult FromWire(const ApplyResult& w) {
  ::deuteron::ApplyResult r;
  r.applied = static_cast<uint32_t>(w.applied);
  r.skipped = static_cast<uint32_t>(w.skipped);
  return r;
}

ReadResult ToWire(::deuteron::ReadResult&& r) {
  ReadResult w;
  w.__set_found(r.found);
  w.value = std::move(r.value);  // __set_value would copy
  w.__isset.value = true;
  w.__set_lsn(Counter(r.lsn));
  return w;
}

::deuteron::ReadResult FromWire(ReadResult&& w) {
  ::deuteron::ReadResult r;
  r.found = w.found;
  r.value = std::move(w.value);
  r.lsn = Counter(w.lsn);
  return r;
}

ScanResult ToWire(const ::deuteron::ScanResult& r) {
  ScanResult w;
  w.items.reserve(r.items.size());
  for (const ::deuteron::ScanItem& item : r.items) {
    ScanItem wi;
    wi.key = item.key;
    wi.value = item.value;
    wi.lsn = Counter(item.lsn);
    w.items.push_back(std::move(wi));
  }
  w.__isset.items = true;
  w.__set_more(r.more);
  return w;
}

::deuteron::ScanResult FromWire(ScanResult&& w) {
  ::deuteron::ScanResult r;
  r.items.reserve(w.items.size());
  for (ScanItem& wi : w.items) {
    r.items.push_back(::deuteron::ScanItem{std::move(wi.key), std::move(wi.value), Counter(wi.lsn)});
  }
  r.more = w.more;
  return r;
}

DcReady ToWire(const ::deuteron::DcReady& r) {
  DcReady w;
  w.__set_rssp(Counter(r.rssp));
  w.__set_max_durable_lsn(Counter(r.max_durable_lsn));
  w.__set_incarnation(Counter(r.incarnation));
  if (!r.store_id.nil()) w.__set_store_id(r.store_id.bytes());
  if (r.instance != 0) w.__set_instance(Counter(r.instance));
  return w;
}

namespace {

// An optional store id field: nil when absent or not 16 bytes (a peer that
// sends a malformed one is treated as one that sends none: the DC still
// checks the id itself on restartTo).
::deuteron::StoreId StoreIdFromWire(bool isset, const std::string& bytes) {
  if (!isset) return {};
  Result<::deuteron::StoreId> id = ::deuteron::StoreId::FromBytes(bytes);
  return id.ok() ? *id : ::deuteron::StoreId();
}

}  // namespace

::deuteron::DcReady FromWire(const DcReady& w) {
  ::deuteron::DcReady r{Counter(w.rssp), Counter(w.max_durable_lsn), Counter(w.incarnation)};
  r.store_id = StoreIdFromWire(w.__isset.store_id, w.store_id);
  r.instance = w.__isset.instance ? Counter(w.instance) : 0;
  return r;
}

DcHealth ToWire(const ::deuteron::DcHealth& r) {
  DcHealth w;
  w.__set_state(static_cast<DcState::type>(static_cast<int>(r.state)));
  w.__set_esl(Counter(r.esl));
  w.__set_rssp(Counter(r.rssp));
  w.__set_max_durable_lsn(Counter(r.max_durable_lsn));
  w.__set_incarnation(Counter(r.incarnation));
  if (!r.store_id.nil()) w.__set_store_id(r.store_id.bytes());
  if (r.instance != 0) w.__set_instance(Counter(r.instance));
  return w;
}

Result<::deuteron::DcHealth> FromWire(const DcHealth& w) {
  ::deuteron::DcHealth r;
  const int32_t state = RawEnum(w.state);
  switch (state) {
    case DcState::SERVING:
      r.state = ::deuteron::DcState::kServing;
      break;
    case DcState::RESTARTING:
      r.state = ::deuteron::DcState::kRestarting;
      break;
    case DcState::SHUTTING_DOWN:
      r.state = ::deuteron::DcState::kShuttingDown;
      break;
    default:
      return Status::Internal(fmt::format("peer sent unknown DC state {}", state));
  }
  r.esl = Counter(w.esl);
  r.rssp = Counter(w.rssp);
  r.max_durable_lsn = Counter(w.max_durable_lsn);
  r.incarnation = Counter(w.incarnation);
  r.store_id = StoreIdFromWire(w.__isset.store_id, w.store_id);
  r.instance = w.__isset.instance ? Counter(w.instance) : 0;
  return r;
}

DcStats ToWire(const ::deuteron::DcStats& r) {
  DcStats w;
  w.__set_applies(Counter(r.applies));
  w.__set_ops_applied(Counter(r.ops_applied));
  w.__set_ops_skipped(Counter(r.ops_skipped));
  w.__set_gets(Counter(r.gets));
  w.__set_scans(Counter(r.scans));
  w.__set_scan_items(Counter(r.scan_items));
  w.__set_rssp_proposals(Counter(r.rssp_proposals));
  w.__set_restarts(Counter(r.restarts));
  w.__set_esl(Counter(r.esl));
  w.__set_rssp(Counter(r.rssp));
  w.__set_max_durable_lsn(Counter(r.max_durable_lsn));
  w.__set_pages(Counter(r.pages));
  w.__set_memory_bytes(Counter(r.memory_bytes));
  w.__set_flushes(Counter(r.flushes));
  w.__set_flush_bytes(Counter(r.flush_bytes));
  w.__set_lss_bytes_written(Counter(r.lss_bytes_written));
  w.__set_tree_height(static_cast<int32_t>(r.tree_height));
  w.__set_memory_budget(Counter(r.memory_budget));
  w.__set_node_bytes(Counter(r.node_bytes));
  w.__set_checkpoints(Counter(r.checkpoints));
  w.__set_segments_cleaned(Counter(r.segments_cleaned));
  w.__set_pages_relocated(Counter(r.pages_relocated));
  w.__set_bytes_relocated(Counter(r.bytes_relocated));
  w.__set_lss_disk_bytes(Counter(r.lss_disk_bytes));
  w.__set_lss_segments(Counter(r.lss_segments));
  w.__set_page_loads(Counter(r.page_loads));
  w.__set_swap_outs(Counter(r.swap_outs));
  w.__set_live_bytes(Counter(r.live_bytes));
  return w;
}

::deuteron::DcStats FromWire(const DcStats& w) {
  ::deuteron::DcStats r;
  r.applies = Counter(w.applies);
  r.ops_applied = Counter(w.ops_applied);
  r.ops_skipped = Counter(w.ops_skipped);
  r.gets = Counter(w.gets);
  r.scans = Counter(w.scans);
  r.scan_items = Counter(w.scan_items);
  r.rssp_proposals = Counter(w.rssp_proposals);
  r.restarts = Counter(w.restarts);
  r.esl = Counter(w.esl);
  r.rssp = Counter(w.rssp);
  r.max_durable_lsn = Counter(w.max_durable_lsn);
  r.pages = Counter(w.pages);
  r.memory_bytes = Counter(w.memory_bytes);
  r.flushes = Counter(w.flushes);
  r.flush_bytes = Counter(w.flush_bytes);
  r.lss_bytes_written = Counter(w.lss_bytes_written);
  r.tree_height = static_cast<uint32_t>(w.tree_height);
  r.memory_budget = w.__isset.memory_budget ? Counter(w.memory_budget) : 0;
  r.node_bytes = w.__isset.node_bytes ? Counter(w.node_bytes) : 0;
  r.checkpoints = w.__isset.checkpoints ? Counter(w.checkpoints) : 0;
  r.segments_cleaned = w.__isset.segments_cleaned ? Counter(w.segments_cleaned) : 0;
  r.pages_relocated = w.__isset.pages_relocated ? Counter(w.pages_relocated) : 0;
  r.bytes_relocated = w.__isset.bytes_relocated ? Counter(w.bytes_relocated) : 0;
  r.lss_disk_bytes = w.__isset.lss_disk_bytes ? Counter(w.lss_disk_bytes) : 0;
  r.lss_segments = w.__isset.lss_segments ? Counter(w.lss_segments) : 0;
  r.page_loads = w.__isset.page_loads ? Counter(w.page_loads) : 0;
  r.swap_outs = w.__isset.swap_outs ? Counter(w.swap_outs) : 0;
  r.live_bytes = w.__isset.live_bytes ? Counter(w.live_bytes) : 0;
  return r;
}

}  // namespace deuteron::protocol
