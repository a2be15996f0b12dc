// The in-process data component; design notes in dc/dc.md.
#include "dc/dc.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/fault_hooks.h"
#include "common/heap.h"
#include "common/logging.h"

namespace deuteron::dc {
namespace {

// dc.meta field offsets (dc/dc.md).
constexpr size_t kMagicOffset = 0;
constexpr size_t kVersionOffset = 8;
constexpr size_t kRsspOffset = 16;
constexpr size_t kStableLssOffset = 24;   // version 2
constexpr size_t kIncarnationOffset = 32;  // version 2
constexpr size_t kStoreIdOffset = 36;      // version 3
constexpr size_t kCrcOffset = 52;          // over every byte before it
constexpr size_t kCrcOffsetV2 = 36;
constexpr size_t kCrcOffsetV1 = 28;
static_assert(kCrcOffset + 4 == kDcMetaSize);
static_assert(kCrcOffsetV2 + 4 == kDcMetaSizeV2);
static_assert(kCrcOffsetV1 + 4 == kDcMetaSizeV1);

// The bound on bytes held above the ESL (0: none); NaN or a share <= 0 is
// none, a huge one is capped (the cast must stay in range).
size_t AboveEslLimit(const DcOptions& o) {
  if (!(o.max_above_esl_share > 0) || o.llama.memory_budget == 0) return 0;
  const double limit = static_cast<double>(o.llama.memory_budget) * o.max_above_esl_share;
  return limit >= 0x1p62 ? size_t{1} << 62 : std::max<size_t>(1, static_cast<size_t>(limit));
}

// InvalidArgument for a value in the reserved top of the LSN range.
Status CheckNotReserved(uint64_t value, const char* what) {
  if (value < kReservedLsnFloor) return Status::OK();
  return Status::InvalidArgument(std::string(what) + " " + std::to_string(value) +
                                 " is in the reserved LSN range (>= 2^62)");
}

}  // namespace

std::string EncodeDcMeta(const DcMeta& meta) {
  std::string out(kDcMetaSize, '\0');
  EncodeFixed64(&out[kMagicOffset], kDcMetaMagic);
  EncodeFixed32(&out[kVersionOffset], kDcMetaVersion);
  EncodeFixed64(&out[kRsspOffset], meta.rssp);
  EncodeFixed64(&out[kStableLssOffset], meta.stable_lss);
  EncodeFixed32(&out[kIncarnationOffset], static_cast<uint32_t>(meta.incarnation));
  std::memcpy(&out[kStoreIdOffset], meta.store_id.data(), StoreId::kSize);
  EncodeFixed32(&out[kCrcOffset], crc32c::Mask(crc32c::Value(out.data(), kCrcOffset)));
  return out;
}

Result<DcMeta> DecodeDcMeta(Slice data) {
  if (data.size() != kDcMetaSize && data.size() != kDcMetaSizeV2 && data.size() != kDcMetaSizeV1) {
    return Status::Corruption("dc.meta: " + std::to_string(data.size()) + " bytes, expected " +
                              std::to_string(kDcMetaSize));
  }
  const char* p = data.data();
  if (DecodeFixed64(p + kMagicOffset) != kDcMetaMagic) {
    return Status::Corruption("dc.meta: bad magic");
  }
  const size_t crc_offset = data.size() - 4;
  if (crc32c::Unmask(DecodeFixed32(p + crc_offset)) != crc32c::Value(p, crc_offset)) {
    return Status::Corruption("dc.meta: checksum mismatch");
  }
  const uint32_t version = DecodeFixed32(p + kVersionOffset);
  if (version == 0) return Status::Corruption("dc.meta: format version 0");
  if (version > kDcMetaVersion) {
    return Status::NotSupported("dc.meta: format version " + std::to_string(version) +
                                " is newer than this build's " + std::to_string(kDcMetaVersion));
  }
  // Each version has one size.
  const size_t size_of_version = version == 1 ? kDcMetaSizeV1 : version == 2 ? kDcMetaSizeV2 : kDcMetaSize;
  if (data.size() != size_of_version) {
    return Status::Corruption("dc.meta: format version " + std::to_string(version) + " in " +
                              std::to_string(data.size()) + " bytes");
  }
  DcMeta meta;
  meta.rssp = DecodeFixed64(p + kRsspOffset);
  // Version 1 predates both: nothing was reported stable to recovery, and no
  // restart-to was ever fenced (incarnation 0).
  if (version >= 2) {
    meta.stable_lss = DecodeFixed64(p + kStableLssOffset);
    meta.incarnation = DecodeFixed32(p + kIncarnationOffset);
  }
  // Versions 1 and 2 predate store ids: nil until a TC's is adopted.
  if (version >= 3) {
    meta.store_id = StoreId::FromBytes(Slice(p + kStoreIdOffset, StoreId::kSize)).value();
  }
  return meta;
}

size_t CacheBudgetFor(size_t process_budget, const llama::LssOptions& lss) {
  if (process_budget == 0) return 0;
  const uint64_t ring = lss.buffer_size * static_cast<uint64_t>(std::max(lss.buffer_count, 0));
  const uint64_t left = process_budget > ring ? process_budget - ring : 0;
  // A quarter of what is left is the allocator's: jemalloc held 10 MiB
  // resident over the 33.6 MiB it had handed out at a 32 MiB budget
  // (partly filled slabs of node size classes), which the cache's count
  // does not see (dc/dc.md, "The memory budget").
  const uint64_t floor = std::max<uint64_t>(process_budget / 4, 1);
  return static_cast<size_t>(std::max<uint64_t>(left / 4 * 3, floor));
}

int FlushRingBuffersFor(size_t budget, const llama::LssOptions& lss) {
  if (lss.buffer_count <= 2 || lss.buffer_size == 0) return lss.buffer_count;  // as given
  const uint64_t fit = budget / 4 / lss.buffer_size;
  return static_cast<int>(std::clamp<uint64_t>(fit, 2, static_cast<uint64_t>(lss.buffer_count)));
}

Dc::Dc(Env* env, std::string dir, DcOptions options)
    : env_(env),
      dir_(std::move(dir)),
      options_(std::move(options)),
      backlog_(AboveEslLimit(options_),
               options_.llama.memory_budget + options_.llama.memory_budget / 4) {
  // Acquire loads: a bound read on any thread is at least as new as what the
  // thread has seen of the DC (the values only grow between restarts).
  options_.tree.flush_bound = [this] { return esl_.load(std::memory_order_acquire); };
  options_.tree.purge_bound = [this] { return rssp_.load(std::memory_order_acquire); };
  options_.llama.eviction_flush_bound = [this] { return esl_.load(std::memory_order_acquire); };
  if (options_.flush_ring_from_budget && options_.llama.memory_budget > 0) {
    options_.llama.lss.buffer_count =
        FlushRingBuffersFor(options_.llama.memory_budget, options_.llama.lss);
  }
}

Result<std::unique_ptr<Dc>> Dc::Open(Env* env, const std::string& dir, DcOptions options) {
  DEUTERON_KILL_POINT(kDcRecoveryBegin);
  std::unique_ptr<Dc> dc(new Dc(env, dir, std::move(options)));
  // Nothing else can reach the DC yet: the gate is uncontended.
  std::unique_lock<std::shared_mutex> gate(dc->gate_);
  // dc.meta first: its stable_lss tells LLAMA's recovery what was reported
  // stable.
  ASSIGN_OR_RETURN(const DcMeta meta, dc->ReadMeta());
  dc->stable_lss_.store(meta.stable_lss, std::memory_order_relaxed);
  RETURN_IF_ERROR(dc->OpenStore());
  const uint64_t durable = dc->MaxDurable();
  dc->rssp_.store(meta.rssp, std::memory_order_release);
  dc->incarnation_.store(meta.incarnation, std::memory_order_release);
  {
    std::lock_guard<std::mutex> l(dc->id_mu_);
    dc->store_id_ = meta.store_id;
  }
  // A new instance at every open: a TC that sees it change knows this DC
  // lost whatever it held only in memory.
  std::random_device rd;
  do {
    dc->instance_ = (static_cast<uint64_t>(rd()) << 32) | rd();
  } while (dc->instance_ == 0);
  // Every durable bound was an ESL the TC had made durable, and an
  // acknowledged RSSP never exceeds ESL + 1.
  dc->esl_.store(std::max(durable, meta.rssp == 0 ? 0 : meta.rssp - 1),
                 std::memory_order_release);
  dc->backlog_.Reset(dc->esl_.load(std::memory_order_relaxed));
  dc->ready_durable_.store(durable, std::memory_order_relaxed);
  dc->last_durable_.store(durable, std::memory_order_relaxed);
  DLOG_INFO("dc {}: open, rssp {}, max durable lsn {}, incarnation {}, store {}", dir, meta.rssp,
            durable, meta.incarnation, meta.store_id.ToString());
  DEUTERON_KILL_POINT(kDcRecoveryEnd);
  gate.unlock();
  dc->StartMaintenance();
  return dc;
}

Dc::~Dc() {
  StopMaintenance();
  if (skip_close_) {
    tree_.reset();
    if (llama_ != nullptr) llama_->TEST_SkipCloseOnDestroy();
    llama_.reset();
    return;
  }
  Status s = Close();
  if (!s.ok()) DLOG_ERROR("closing dc {}: {}", dir_, s.ToString());
}

Status Dc::OpenStore() {
  llama::LlamaOptions options = options_.llama;
  options.lss.stable_floor = stable_lss_.load(std::memory_order_relaxed);
  ASSIGN_OR_RETURN(llama_, llama::Llama::Open(env_, dir_, options));
  Result<std::unique_ptr<bwtree::BwTree>> tree = bwtree::BwTree::Open(llama_.get(), options_.tree);
  if (!tree.ok()) {
    llama_->TEST_SkipCloseOnDestroy();  // write nothing over a store we cannot read
    llama_.reset();
    return tree.status();
  }
  tree_ = std::move(tree).value();
  last_durable_.store(llama_->MaxAnnotation(), std::memory_order_relaxed);
  // The maintenance thread's view starts over with this LLAMA: recovery
  // replayed from its newest checkpoint's RSP to the tail.
  checkpoint_rsp_seen_ = llama_->LastCheckpointRsp();
  checkpoint_tail_ = llama_->Tail();
  checkpoint_time_ = std::chrono::steady_clock::now();
  return Status::OK();
}

Status Dc::CloseStore(bool clean) {
  Status s;
  if (clean && tree_ != nullptr) {
    s = tree_->FlushAll(esl_.load(std::memory_order_acquire));
  }
  tree_.reset();
  if (llama_ != nullptr) {
    if (!s.ok()) {
      llama_->TEST_SkipCloseOnDestroy();  // the store is failing: leave it to recovery
    } else {
      s = clean ? llama_->Close() : llama_->CloseWithoutCheckpoint();
    }
    llama_.reset();
  }
  return s;
}

Status Dc::Enter(std::shared_lock<std::shared_mutex>* hold) {
  auto refuse = [](DcState state) {
    return state == DcState::kShuttingDown ? Status::ShuttingDown("dc: closed")
                                           : Status::Unavailable("dc: restart in progress");
  };
  DcState state = state_.load();
  if (state != DcState::kServing) return refuse(state);
  std::shared_lock<std::shared_mutex> lock(gate_, std::try_to_lock);
  if (!lock.owns_lock()) return Status::Unavailable("dc: restart in progress");
  // A restart or close may have run whole between the two looks.
  state = state_.load();
  if (state != DcState::kServing || tree_ == nullptr) return refuse(state);
  *hold = std::move(lock);
  return Status::OK();
}

void Dc::AdvanceEsl(uint64_t esl) {
  uint64_t seen = esl_.load(std::memory_order_relaxed);
  // Release: pairs with the bound callbacks' acquire loads.
  while (seen < esl) {
    if (esl_.compare_exchange_weak(seen, esl, std::memory_order_release,
                                   std::memory_order_relaxed)) {
      backlog_.Release(esl);  // what it passed may now be flushed and evicted
      return;
    }
  }
}

uint64_t Dc::MaxDurable() const { return llama_ != nullptr ? llama_->MaxAnnotation() : 0; }

DcReady Dc::ready() const {
  DcReady r{rssp_.load(std::memory_order_acquire), ready_durable_.load(std::memory_order_relaxed),
            incarnation_.load(std::memory_order_acquire)};
  r.store_id = store_id();
  r.instance = instance_;
  return r;
}

StoreId Dc::store_id() const {
  std::lock_guard<std::mutex> l(id_mu_);
  return store_id_;
}

Status Dc::CheckIncarnation(uint64_t incarnation, const char* call) const {
  const uint64_t current = incarnation_.load(std::memory_order_acquire);
  if (incarnation == current) return Status::OK();
  if (incarnation < current) {
    return Status::StaleIncarnation(std::string(call) + ": TC incarnation " +
                                    std::to_string(incarnation) + " was superseded by " +
                                    std::to_string(current) + " (a later restart-to)");
  }
  return Status::InvalidArgument(std::string(call) + ": TC incarnation " +
                                 std::to_string(incarnation) +
                                 " was never started here (current " + std::to_string(current) +
                                 ")");
}

// ---- Record operations ----------------------------------------------------------

Status Dc::CheckReadFence(const ReadFence& fence, const char* call) const {
  RETURN_IF_ERROR(CheckIncarnation(fence.incarnation, call));
  if (fence.instance != 0 && fence.instance != instance_) {
    return Status::StaleIncarnation(std::string(call) + ": the reader expects DC instance " +
                                    std::to_string(fence.instance) + ", this is instance " +
                                    std::to_string(instance_) +
                                    " (the DC reopened its store since: restart it)");
  }
  return Status::OK();
}

Result<ApplyResult> Dc::Apply(std::span<const RecordOp> ops, uint64_t esl, uint64_t incarnation) {
  std::shared_lock<std::shared_mutex> hold;
  RETURN_IF_ERROR(Enter(&hold));
  // The hold keeps a RestartTo (and so a new incarnation) out until the
  // batch is done: a batch checked here is wholly before the restart.
  RETURN_IF_ERROR(CheckIncarnation(incarnation, "apply"));
  RETURN_IF_ERROR(CheckNotReserved(esl, "apply: ESL"));
  applies_.fetch_add(1, std::memory_order_relaxed);
  if (esl != 0) AdvanceEsl(esl);
  if (ops.size() > options_.max_batch_ops) {
    return Status::TooLarge("apply: " + std::to_string(ops.size()) +
                            " operations over the batch limit of " +
                            std::to_string(options_.max_batch_ops));
  }
  // Sizes, and what the batch would hold above the ESL (dc.md, "Writes
  // above the ESL"). A reserved LSN fails the batch before anything is
  // applied: reserved, it could never be released.
  const uint64_t esl_now = esl_.load(std::memory_order_acquire);
  size_t bytes = 0, above = 0;
  uint64_t max_above = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const RecordOp& op = ops[i];
    const size_t b = op.key.size() + op.value.size();
    bytes += b;
    if (op.lsn >= kReservedLsnFloor) {
      return CheckNotReserved(op.lsn, ("apply: operation " + std::to_string(i) + ": LSN").c_str());
    }
    if (op.lsn > esl_now) {
      above += b + kAboveEslRecordOverhead;
      max_above = std::max(max_above, op.lsn);
    }
  }
  if (bytes > options_.max_batch_bytes) {
    return Status::TooLarge("apply: " + std::to_string(bytes) +
                            " bytes over the batch limit of " +
                            std::to_string(options_.max_batch_bytes));
  }
  // Before anything is applied: a refused batch changes nothing.
  if (above > 0 && backlog_.limit() != 0) {
    Status busy = backlog_.Reserve(esl_now, max_above, above, llama_->MemoryUsage());
    if (busy.IsBusy() && llama_->MemoryUsage() > options_.llama.memory_budget) {
      // Refused for the cache's memory: evict (and reclaim garbage) here, with
      // no guard held, rather than leave the caller to retry until another
      // thread's allocation asks for an eviction (issue 34: a lone writer
      // waited out every ESL tick this way).
      if (Status e = llama_->EnforceBudget(); !e.ok()) return e;
      llama_->epochs()->TryReclaim();
      busy = backlog_.Reserve(esl_now, max_above, above, llama_->MemoryUsage());
    }
    RETURN_IF_ERROR(busy);
  }
  ApplyResult result;
  Status s;
  uint64_t user_bytes = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const RecordOp& op = ops[i];
    auto invalid = [i](const std::string& what) {
      return Status::InvalidArgument("apply: operation " + std::to_string(i) + ": " + what);
    };
    if (op.lsn == 0) {
      s = invalid("LSN 0");
      break;
    }
    if (op.kind != RecordOpKind::kUpsert && op.kind != RecordOpKind::kDelete) {
      s = invalid("unknown kind " + std::to_string(static_cast<int>(op.kind)));
      break;
    }
    const bool tombstone = op.kind == RecordOpKind::kDelete;
    if (tombstone && !op.value.empty()) {
      s = invalid("a delete with a value");
      break;
    }
    Result<bool> applied = tree_->WriteIfNewer(tombstone, op.key, op.value, op.lsn);
    if (!applied.ok()) {
      s = applied.status();
      break;
    }
    ++(*applied ? result.applied : result.skipped);
    if (*applied) user_bytes += op.key.size() + op.value.size();
  }
  user_bytes_.fetch_add(user_bytes, std::memory_order_relaxed);
  ops_applied_.fetch_add(result.applied, std::memory_order_relaxed);
  ops_skipped_.fetch_add(result.skipped, std::memory_order_relaxed);
  RETURN_IF_ERROR(s);
  return result;
}

Result<ReadResult> Dc::Get(Slice key) {
  std::shared_lock<std::shared_mutex> hold;
  RETURN_IF_ERROR(Enter(&hold));
  return GetHeld(key);
}

Result<ReadResult> Dc::GetFenced(Slice key, const ReadFence& fence) {
  std::shared_lock<std::shared_mutex> hold;
  RETURN_IF_ERROR(Enter(&hold));
  // The hold keeps a RestartTo out until the read is done: a read checked
  // here is wholly before any later restart.
  RETURN_IF_ERROR(CheckReadFence(fence, "get"));
  return GetHeld(key);
}

Result<ReadResult> Dc::GetHeld(Slice key) {
  gets_.fetch_add(1, std::memory_order_relaxed);
  ReadResult out;
  ASSIGN_OR_RETURN(bwtree::Record record, tree_->ReadHeld(key, &out.found));
  out.value = std::move(record.value);
  out.lsn = record.lsn;
  return out;
}

Result<std::vector<ReadResult>> Dc::MultiGet(std::span<const Slice> keys) {
  std::shared_lock<std::shared_mutex> hold;
  RETURN_IF_ERROR(Enter(&hold));
  return MultiGetHeld(keys);
}

Result<std::vector<ReadResult>> Dc::MultiGetFenced(std::span<const Slice> keys,
                                                   const ReadFence& fence) {
  std::shared_lock<std::shared_mutex> hold;
  RETURN_IF_ERROR(Enter(&hold));
  RETURN_IF_ERROR(CheckReadFence(fence, "multiget"));
  return MultiGetHeld(keys);
}

Result<std::vector<ReadResult>> Dc::MultiGetHeld(std::span<const Slice> keys) {
  if (keys.size() > options_.max_multiget_keys) {
    return Status::TooLarge("multiget: " + std::to_string(keys.size()) +
                            " keys over the limit of " +
                            std::to_string(options_.max_multiget_keys));
  }
  gets_.fetch_add(keys.size(), std::memory_order_relaxed);
  std::vector<ReadResult> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSIGN_OR_RETURN(bwtree::Record record, tree_->ReadHeld(keys[i], &out[i].found));
    out[i].value = std::move(record.value);
    out[i].lsn = record.lsn;
  }
  return out;
}

Result<ScanResult> Dc::Scan(const ScanRequest& request) {
  std::shared_lock<std::shared_mutex> hold;
  RETURN_IF_ERROR(Enter(&hold));
  return ScanHeld(request);
}

Result<ScanResult> Dc::ScanFenced(const ScanRequest& request, const ReadFence& fence) {
  std::shared_lock<std::shared_mutex> hold;
  RETURN_IF_ERROR(Enter(&hold));
  RETURN_IF_ERROR(CheckReadFence(fence, "scan"));
  return ScanHeld(request);
}

Result<ScanResult> Dc::ScanHeld(const ScanRequest& request) {
  scans_.fetch_add(1, std::memory_order_relaxed);
  const size_t limit = request.limit == 0
                           ? options_.max_scan_items
                           : std::min<size_t>(request.limit, options_.max_scan_items);
  bwtree::ScanOptions scan;
  scan.lower = request.lower;
  scan.lower_inclusive = request.lower_inclusive;
  scan.upper = request.upper;
  scan.upper_inclusive = request.upper_inclusive;
  scan.reverse = request.reverse;
  ASSIGN_OR_RETURN(std::unique_ptr<bwtree::Iterator> it, tree_->Scan(scan));
  ScanResult out;
  for (; it->Valid(); it->Next()) {
    if (out.items.size() >= limit) {
      out.more = true;
      break;
    }
    out.items.push_back(ScanItem{it->key().ToString(), it->value().ToString(), it->lsn()});
  }
  RETURN_IF_ERROR(it->status());
  scan_items_.fetch_add(out.items.size(), std::memory_order_relaxed);
  return out;
}

// ---- Control operations ---------------------------------------------------------

Status Dc::SetEsl(uint64_t esl, uint64_t incarnation) {
  std::shared_lock<std::shared_mutex> hold;
  RETURN_IF_ERROR(Enter(&hold));
  RETURN_IF_ERROR(CheckIncarnation(incarnation, "set-esl"));
  RETURN_IF_ERROR(CheckNotReserved(esl, "set-esl: ESL"));
  AdvanceEsl(esl);
  return Status::OK();
}

Status Dc::ProposeRssp(uint64_t rssp, uint64_t incarnation) {
  std::shared_lock<std::shared_mutex> hold;
  RETURN_IF_ERROR(Enter(&hold));
  RETURN_IF_ERROR(CheckIncarnation(incarnation, "propose-rssp"));
  RETURN_IF_ERROR(CheckNotReserved(rssp, "propose-rssp: RSSP"));
  rssp_proposals_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(rssp_mu_);
  const uint64_t esl = esl_.load(std::memory_order_acquire);
  if (rssp > esl + 1) {
    return Status::InvalidArgument("rssp " + std::to_string(rssp) + " is above ESL " +
                                   std::to_string(esl) + " + 1");
  }
  if (rssp_hook_) rssp_hook_();
  // Flush under the ESL, not rssp - 1: a base consolidated with a tag in
  // (rssp - 1, esl] holds records below rssp. A base consolidated under a
  // newer ESL since (a racing Apply) is flushed under that one: FlushAll
  // re-reads the bound rather than skip it (dc/dc.md).
  if (!fault::BrokenOnPurpose(fault::Break::kRsspBeforeFlush)) {  // else contract 3 broken on purpose
    RETURN_IF_ERROR(tree_->FlushAll(esl));
    // Flushes by other threads (the evictor, structure changes) that this one
    // found done are made stable too.
    RETURN_IF_ERROR(llama_->MakeStable(llama_->Tail()));
  }
  DEUTERON_KILL_POINT(kDcRsspAfterFlush);
  last_durable_.store(llama_->MaxAnnotation(), std::memory_order_relaxed);
  if (rssp > rssp_.load(std::memory_order_relaxed)) {
    // With what is now reported stable: damage below it is corruption, not
    // a torn tail, when the LSS is recovered.
    const uint64_t stable = llama_->HiStable();
    RETURN_IF_ERROR(WriteMeta(DcMeta{rssp, stable, incarnation, store_id()}));
    stable_lss_.store(stable, std::memory_order_relaxed);
    // Only now may consolidation purge tombstones below it.
    rssp_.store(rssp, std::memory_order_release);
    DEUTERON_KILL_POINT(kDcRsspAfterMeta);
  }
  return Status::OK();
}

Result<DcReady> Dc::RestartTo(uint64_t stable_end) { return Restart(stable_end, nullptr); }

Result<DcReady> Dc::RestartToStore(uint64_t stable_end, const StoreId& store_id) {
  return Restart(stable_end, store_id.nil() ? nullptr : &store_id);
}

Result<DcReady> Dc::Restart(uint64_t stable_end, const StoreId* tc_store) {
  std::unique_lock<std::mutex> restart(restart_mu_, std::try_to_lock);
  if (!restart.owns_lock()) return Status::Unavailable("dc: restart or close in progress");
  if (closed_) return Status::ShuttingDown("dc: closed");
  RETURN_IF_ERROR(CheckNotReserved(stable_end, "restart-to: stable end"));
  // The LSS already holds operations up to max_durable_lsn; they cannot be
  // taken back. REQUIRES: a hold on gate_.
  auto below_durable = [&]() -> Status {
    const uint64_t durable =
        llama_ != nullptr ? llama_->MaxAnnotation() : last_durable_.load(std::memory_order_relaxed);
    if (stable_end >= durable) return Status::OK();
    return Status::InvalidArgument("restart-to " + std::to_string(stable_end) +
                                   ": the LSS already holds operations up to LSN " +
                                   std::to_string(durable));
  };
  {
    std::shared_lock<std::shared_mutex> gate(gate_);
    RETURN_IF_ERROR(below_durable());
  }
  state_.store(DcState::kRestarting);
  // New calls now see kRestarting; calls inside finish before this returns.
  std::unique_lock<std::shared_mutex> gate(gate_);
  // Those calls may have flushed under a newer ESL since the look above.
  if (Status s = below_durable(); !s.ok()) {
    if (tree_ != nullptr) state_.store(DcState::kServing);
    return s;
  }
  // One store: a DC of another refuses the TC before anything changes; a
  // DC without an id adopts the TC's, in the dc.meta written next.
  StoreId id = store_id();
  if (tc_store != nullptr && !id.nil() && id != *tc_store) {
    if (tree_ != nullptr) state_.store(DcState::kServing);
    return Status::StoreMismatch("restart-to: the DC at " + dir_ + " belongs to store " +
                                 id.ToString() + ", the TC to store " + tc_store->ToString());
  }
  if (tc_store != nullptr && id.nil()) id = *tc_store;
  DEUTERON_KILL_POINT(kDcRestartToBegin);
  // The new incarnation is durable before anything changes, so that no call
  // of an older one is accepted again, after a crash of this DC included.
  const uint64_t incarnation = incarnation_.load(std::memory_order_relaxed) + 1;
  Status fenced = incarnation > kMaxIncarnation
                      ? Status::NotSupported("restart-to: out of TC incarnations")
                      : WriteMeta(DcMeta{rssp_.load(std::memory_order_relaxed),
                                         stable_lss_.load(std::memory_order_relaxed),
                                         incarnation, id});
  if (!fenced.ok()) {
    if (tree_ != nullptr) state_.store(DcState::kServing);  // nothing was dropped
    return fenced.WithContext("restart-to " + std::to_string(stable_end));
  }
  incarnation_.store(incarnation, std::memory_order_release);
  {
    std::lock_guard<std::mutex> l(id_mu_);
    store_id_ = id;
  }
  // Drop the cache: nothing new is flushed (what the LSS holds is what the
  // ESL allowed), no checkpoint is needed.
  Status s = CloseStore(/*clean=*/false);
  if (!s.ok()) DLOG_WARN("dc {}: restart-to {}: closing: {}", dir_, stable_end, s.ToString());
  esl_.store(stable_end, std::memory_order_release);
  backlog_.Reset(stable_end);  // the cache, and all it held above the ESL, is gone
  if (restart_hook_) restart_hook_();
  s = OpenStore();
  if (!s.ok()) {
    // Stays kRestarting: calls get Unavailable, RestartTo may be retried.
    DLOG_ERROR("dc {}: restart-to {}: reopening: {}", dir_, stable_end, s.ToString());
    return s;
  }
  DEUTERON_KILL_POINT(kDcRestartToReopened);
  const uint64_t durable = llama_->MaxAnnotation();
  ready_durable_.store(durable, std::memory_order_relaxed);
  restarts_.fetch_add(1, std::memory_order_relaxed);
  state_.store(DcState::kServing);
  DLOG_INFO("dc {}: restarted to {}, rssp {}, max durable lsn {}, incarnation {}", dir_,
            stable_end, rssp_.load(), durable, incarnation);
  DcReady ready{rssp_.load(std::memory_order_acquire), durable, incarnation};
  ready.store_id = id;
  ready.instance = instance_;
  return ready;
}

Status Dc::CheckTree() {
  std::unique_lock<std::shared_mutex> gate(gate_);
  if (tree_ == nullptr) return Status::InvalidArgument("CheckTree: the DC is closed");
  return tree_->Check();
}

Status Dc::Close() {
  std::lock_guard<std::mutex> restart(restart_mu_);
  if (closed_) return Status::OK();
  closed_ = true;
  state_.store(DcState::kShuttingDown);
  std::unique_lock<std::shared_mutex> gate(gate_);
  Status s = CloseStore(/*clean=*/true);
  gate.unlock();
  StopMaintenance();  // it finds the DC shut down and waits to be told
  return s;
}

// ---- Maintenance ------------------------------------------------------------------

void Dc::StartMaintenance() {
  if (options_.checkpoint_interval_bytes == 0 && options_.checkpoint_interval_ms == 0 &&
      options_.heap_purge_above == 0) {
    return;
  }
  maintenance_ = std::thread([this] { MaintenanceLoop(); });
}

void Dc::StopMaintenance() {
  {
    std::lock_guard<std::mutex> lock(maintenance_mu_);
    maintenance_stop_ = true;
  }
  maintenance_cv_.notify_all();
  if (maintenance_.joinable()) maintenance_.join();
}

void Dc::MaintenanceLoop() {
  const auto period =
      std::chrono::milliseconds(std::max<uint64_t>(options_.maintenance_period_ms, 1));
  std::unique_lock<std::mutex> lock(maintenance_mu_);
  for (;;) {
    maintenance_cv_.wait_for(lock, period, [this] { return maintenance_stop_; });
    if (maintenance_stop_) return;
    lock.unlock();
    if (options_.heap_purge_above != 0) {
      // Only freed pages can be given back: purging over a resident figure
      // made of pages in use (or of the allocator's own fragmentation)
      // would cost a walk of every arena for nothing.
      if (HeapBytesResident() > options_.heap_purge_above &&
          HeapBytesRetained() > options_.heap_purge_above / 16) {
        PurgeHeap();
        heap_purges_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    {
      // Never waits on a restart or close: the look is skipped instead.
      std::shared_lock<std::shared_mutex> hold;
      if (Enter(&hold).ok()) {
        Status s = MaybeCheckpoint();
        if (!s.ok()) DLOG_WARN("dc {}: periodic checkpoint: {}", dir_, s.ToString());
      }
    }
    lock.lock();
  }
}

Status Dc::MaybeCheckpoint() {
  const auto now = std::chrono::steady_clock::now();
  const uint64_t rsp = llama_->LastCheckpointRsp();
  const uint64_t tail = llama_->Tail();
  if (rsp != checkpoint_rsp_seen_) {  // LLAMA checkpointed (cleaning, or us)
    checkpoint_rsp_seen_ = rsp;
    checkpoint_tail_ = tail;
    checkpoint_time_ = now;
  }
  // What recovery would replay now: the LSS from the newest checkpoint's RSP.
  const uint64_t replay = tail > rsp ? tail - rsp : 0;
  const bool by_bytes =
      options_.checkpoint_interval_bytes != 0 && replay >= options_.checkpoint_interval_bytes;
  const bool by_time =
      options_.checkpoint_interval_ms != 0 && tail != checkpoint_tail_ &&
      now - checkpoint_time_ >= std::chrono::milliseconds(options_.checkpoint_interval_ms);
  if (!by_bytes && !by_time) return Status::OK();
  // A checkpoint makes stable only what flushes already wrote, all under the
  // ESL, and references only LSS addresses: nothing above the ESL becomes
  // durable (dc/dc.md).
  RETURN_IF_ERROR(llama_->Checkpoint());
  periodic_checkpoints_.fetch_add(1, std::memory_order_relaxed);
  checkpoint_rsp_seen_ = llama_->LastCheckpointRsp();
  checkpoint_tail_ = llama_->Tail();
  checkpoint_time_ = now;
  return Status::OK();
}

Result<DcStats> Dc::GetStats() {
  std::shared_lock<std::shared_mutex> hold;
  RETURN_IF_ERROR(Enter(&hold));
  DcStats s;
  s.applies = applies_.load(std::memory_order_relaxed);
  s.ops_applied = ops_applied_.load(std::memory_order_relaxed);
  s.ops_skipped = ops_skipped_.load(std::memory_order_relaxed);
  s.gets = gets_.load(std::memory_order_relaxed);
  s.scans = scans_.load(std::memory_order_relaxed);
  s.scan_items = scan_items_.load(std::memory_order_relaxed);
  s.rssp_proposals = rssp_proposals_.load(std::memory_order_relaxed);
  s.restarts = restarts_.load(std::memory_order_relaxed);
  s.esl = esl_.load(std::memory_order_acquire);
  s.rssp = rssp_.load(std::memory_order_acquire);
  s.max_durable_lsn = MaxDurable();
  const llama::Llama::Stats ls = llama_->GetStats();
  s.pages = ls.pages;
  s.memory_bytes = ls.memory_bytes;
  s.flushes = ls.flushes;
  s.flush_bytes = ls.flush_bytes;
  s.lss_bytes_written = ls.lss.written_bytes;
  s.tree_height = tree_->GetStats().height;
  s.memory_budget = ls.memory_budget;
  s.node_bytes = ls.node_bytes;
  s.checkpoints = ls.checkpoints;
  s.segments_cleaned = ls.segments_cleaned;
  s.pages_relocated = ls.pages_relocated;
  s.bytes_relocated = ls.bytes_relocated;
  s.lss_disk_bytes = ls.lss.live_bytes_on_disk;
  s.lss_segments = ls.lss.segments_live;
  s.page_loads = ls.page_loads;
  s.swap_outs = ls.swap_outs;
  s.live_bytes = ls.live_bytes;
  return s;
}

Result<DcHealth> Dc::Health() {
  DcHealth h;
  h.esl = esl_.load(std::memory_order_acquire);
  h.rssp = rssp_.load(std::memory_order_acquire);
  h.incarnation = incarnation_.load(std::memory_order_acquire);
  h.store_id = store_id();
  h.instance = instance_;
  std::shared_lock<std::shared_mutex> hold;
  Status s = Enter(&hold);
  h.state = s.ok() ? DcState::kServing : state_.load();
  h.max_durable_lsn = s.ok() ? MaxDurable() : last_durable_.load(std::memory_order_relaxed);
  return h;
}

// ---- dc.meta ----------------------------------------------------------------------

Status Dc::WriteMeta(const DcMeta& meta) {
  const std::string tmp = JoinPath(dir_, kDcMetaTempFileName);
  const std::string path = JoinPath(dir_, kDcMetaFileName);
  {
    ASSIGN_OR_RETURN(std::unique_ptr<File> file, env_->OpenFile(tmp, OpenMode::kTruncate));
    RETURN_IF_ERROR(file->Append(EncodeDcMeta(meta)));
    RETURN_IF_ERROR(file->Sync());
    RETURN_IF_ERROR(file->Close());
  }
  RETURN_IF_ERROR(env_->RenameFile(tmp, path));
  return env_->SyncDir(dir_);
}

Result<DcMeta> Dc::ReadMeta() {
  const std::string path = JoinPath(dir_, kDcMetaFileName);
  if (!env_->FileExists(path)) return DcMeta{};  // a new store: nothing acknowledged
  ASSIGN_OR_RETURN(std::unique_ptr<File> file, env_->OpenFile(path, OpenMode::kRead));
  ASSIGN_OR_RETURN(const uint64_t size, file->Size());
  if (size != kDcMetaSize && size != kDcMetaSizeV1) {
    return Status::Corruption(path + ": " + std::to_string(size) + " bytes, expected " +
                              std::to_string(kDcMetaSize));
  }
  std::string bytes(size, '\0');
  RETURN_IF_ERROR(file->ReadExactAt(0, bytes.data(), bytes.size()));
  RETURN_IF_ERROR(file->Close());
  Result<DcMeta> meta = DecodeDcMeta(bytes);
  if (!meta.ok()) return meta.status().WithContext(path);
  return meta;
}

}  // namespace deuteron::dc
