#include "dc/llama/llama.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cassert>
#include <cstring>
#include <functional>
#include <new>
#include <thread>

#include <sys/mman.h>

#include "common/coding.h"
#include "common/heap.h"
#include "common/logging.h"
#include "dc/llama/checkpoint.h"
#include "dc/llama/internal/llama_impl.h"
#include "dc/llama/op_phases.h"

namespace deuteron::llama {

namespace {

// Node memory. Every consolidation frees a chain and allocates one, every
// record delta is a small allocation, and a chain is often freed by another
// thread than the one that allocated it (glibc then takes the allocating
// thread's arena lock). So freed node blocks go to a per-thread cache by
// size class and are reused by that thread's next allocations of the class.
// Every block in the cached range is allocated at its class size, so any
// cached block fits any request of its class. Bounded per thread; freed
// when the thread exits. Off under sanitizers, which must see every free.
// Under jemalloc (every program's allocator, CMakeLists.txt) the cache still
// saves about 5% of a 1-thread insert (bwtree_bench, 2026-11-22).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kNodeCache = false;
#else
constexpr bool kNodeCache = true;
#endif

// Classes: 32-byte steps up to 256 bytes, then four per power of two up to
// kMaxCachedBlock. Returns false above that (an exact-size block).
constexpr size_t kMaxCachedBlock = 16384;
constexpr size_t kNodeClasses = 33;
bool NodeClass(size_t n, size_t* index, size_t* size) {
  if (n > kMaxCachedBlock) return false;
  if (n <= 256) {
    const size_t c = (n + 31) / 32;
    *index = c;
    *size = c * 32;
    return true;
  }
  const int p = std::bit_width(n - 1);  // 2^(p-1) < n <= 2^p, p >= 9
  const size_t step = size_t{1} << (p - 3);
  const size_t c = (n + step - 1) / step;  // 5..8
  *index = 8 + static_cast<size_t>(p - 9) * 4 + (c - 4);
  *size = c * step;
  return true;
}

// Trivially destructible, so that it stays usable on a thread after the
// reaper below has emptied it (a node freed by a later thread_local
// destructor then goes to operator delete).
struct NodeCache {
  void* heads[kNodeClasses];
  uint32_t counts[kNodeClasses];
  size_t bytes;
  bool registered;  // the reaper is armed
  bool closed;      // the thread is exiting: cache nothing more

  static constexpr uint32_t kMaxPerClass = 64;
  static constexpr size_t kMaxBytes = 1 << 20;

  void* Take(size_t index, size_t size) {
    void* block = heads[index];
    if (block == nullptr) return nullptr;
    heads[index] = *static_cast<void**>(block);
    --counts[index];
    bytes -= size;
    return block;
  }
  bool Put(void* block, size_t index, size_t size);
  void Drain() {
    for (void*& head : heads) {
      while (head != nullptr) {
        void* next = *static_cast<void**>(head);
        ::operator delete(head);
        head = next;
      }
    }
  }
};

thread_local NodeCache node_cache{};

// Empties this thread's cache when the thread exits.
struct NodeCacheReaper {
  ~NodeCacheReaper() {
    node_cache.closed = true;
    node_cache.Drain();
  }
};

bool NodeCache::Put(void* block, size_t index, size_t size) {
  if (closed || counts[index] >= kMaxPerClass || bytes + size > kMaxBytes) return false;
  if (!registered) {
    static thread_local NodeCacheReaper reaper;
    (void)reaper;
    registered = true;
  }
  *static_cast<void**>(block) = heads[index];
  heads[index] = block;
  ++counts[index];
  bytes += size;
  return true;
}

// The bytes a node of `bytes` really occupies: its class size when cached
// blocks serve it. The memory budget counts these, so that rounding up to
// a class (up to a quarter more) cannot carry usage past the budget.
size_t AllocatedBytes(size_t bytes) {
  size_t index = 0, size = 0;
  if (kNodeCache && NodeClass(bytes, &index, &size)) return size;
  return bytes;
}

size_t NodeBytes(const PageNode* n) {
  return AllocatedBytes(n->is_data() ? sizeof(PageNode) + n->size : sizeof(FlushNode));
}

void* AllocateNode(size_t bytes) {
  size_t index = 0, size = 0;
  if (!kNodeCache || !NodeClass(bytes, &index, &size)) return ::operator new(bytes);
  if (void* block = node_cache.Take(index, size)) return block;
  return ::operator new(size);
}

void ReleaseNode(void* block, size_t bytes) {
  size_t index = 0, size = 0;
  if (kNodeCache && NodeClass(bytes, &index, &size) && node_cache.Put(block, index, size)) {
    return;
  }
  ::operator delete(block);
}

}  // namespace

// ---------------------------------------------------------------------------
// Opening, recovery, closing

Llama::Llama(Env* env, std::string dir, LlamaOptions options)
    : env_(env),
      dir_(std::move(dir)),
      options_(std::move(options)),
      epochs_(std::make_unique<EpochManager>(options_.epochs)),
      mapping_(std::make_unique<MappingTable>(epochs_.get(), options_.mapping)),
      memory_(std::make_unique<MemoryCounter>()),
      state_bytes_(std::make_unique<StateBytes>(mapping_->capacity())) {
  void* bits = mmap(nullptr, mapping_->capacity(), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (bits != MAP_FAILED) referenced_ = static_cast<std::atomic<uint8_t>*>(bits);
}

Result<std::unique_ptr<Llama>> Llama::Open(Env* env, const std::string& dir,
                                           const LlamaOptions& options) {
  std::unique_ptr<Llama> llama(new Llama(env, dir, options));
  if (options.lock_directory) {
    RETURN_IF_ERROR(env->CreateDirs(dir));
    ASSIGN_OR_RETURN(llama->dir_lock_, DirLock::Acquire(env, dir));
  }
  Status s = [&]() -> Status {
    ASSIGN_OR_RETURN(llama->lss_, LogStructuredStore::Open(env, dir, options.lss));
    RETURN_IF_ERROR(llama->Recover());
    return llama->RecoverLiveBytes();
  }();
  if (!s.ok()) {
    llama->closed_ = true;  // never opened: nothing to make stable or checkpoint
    return s;
  }
  if (options.clean_in_background && options.cleaning_trigger_segments != 0) {
    llama->background_cleaning_ = true;
    Llama* l = llama.get();
    llama->cleaner_ = std::thread([l] { l->CleanerLoop(); });
  }
  return llama;
}

void Llama::CleanerLoop() {
  std::unique_lock<std::mutex> lock(cleaner_mu_);
  for (;;) {
    cleaner_cv_.wait(lock, [this] {
      return cleaner_stop_ || cleaning_wanted_.load(std::memory_order_relaxed) != 0;
    });
    if (cleaner_stop_) return;
    cleaning_wanted_.store(0, std::memory_order_relaxed);
    // Counted again now, not taken from the request: a pass that ran since
    // may have cleaned those segments, and cleaning on the old count would
    // relocate what that pass just wrote.
    const size_t segments = SegmentsToClean();
    if (segments == 0) continue;
    // Relocations allocate and free page nodes as the writers do: from the
    // writers' arena, not one of this thread's own that would keep its
    // partly used slabs and dirty pages resident beside theirs (with its
    // own arena, issue 33's test peaked 3 MiB higher).
    SetHeapThreadArena(cleaner_arena_.load(std::memory_order_relaxed));
    lock.unlock();
    Result<CleanResult> r = CleanSegments(segments, /*release_now=*/false);
    if (!r.ok()) DLOG_WARN("cleaning {}: {}", dir_, r.status().ToString());
    // What the pass retired (relocated pages' old chains) goes now, not at
    // this thread's next pass.
    epochs_->TryReclaim();
    lock.lock();
  }
}

void Llama::StopCleaner() {
  if (!cleaner_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(cleaner_mu_);
    cleaner_stop_ = true;
  }
  cleaner_cv_.notify_all();
  cleaner_.join();
}

Status Llama::Recover() {
  const uint64_t segment_size = lss_->identity().segment_size;
  LssAddress start = kNullAddress;
  Result<CheckpointData> ckpt = ReadLatestCheckpoint(env_, dir_, lss_->identity().store_id);
  if (ckpt.ok()) {
    const CheckpointData& d = *ckpt;
    checkpoint_sequence_ = d.sequence;
    // The older checkpoint's RSP is unknown here: release nothing until two
    // new checkpoints exist.
    checkpoint_rsp_[0] = 0;
    checkpoint_rsp_[1] = d.rsp;
    gc_frontier_.store(d.gc_frontier);
    cleaned_frontier_.store(d.gc_frontier);
    max_annotation_.store(d.max_annotation);
    for (size_t i = 0; i < d.entries.size(); ++i) {
      const uint64_t e = d.entries[i];
      if (e == 0) continue;
      mapping_->RecoverySet(i + 1, e == kEmptyPageEntry ? MappingTable::kEmptyPage
                                                        : MappingTable::FromLss(e));
    }
    mapping_->RecoverySetHighWater(d.entries.size() + 1);
    start = d.rsp == kNullAddress ? kNullAddress : BufferBaseAtOrAfter(d.rsp, segment_size);
  } else if (!ckpt.status().IsNotFound()) {
    return ckpt.status();
  }

  PageId high_water = mapping_->high_water();
  RETURN_IF_ERROR(lss_->Recover(
      start, [&](LssAddress address, const RecordHeader& h, Slice, bool) -> Status {
        if (h.type == RecordType::kVoid) return Status::OK();
        if (h.annotation > max_annotation_.load(std::memory_order_relaxed)) {
          max_annotation_.store(h.annotation, std::memory_order_relaxed);  // one thread
        }
        if (h.type == RecordType::kTransaction) return Status::OK();
        if (h.pid == 0 || h.pid >= mapping_->capacity()) {
          return Status::Corruption("LSS record at " + std::to_string(address) +
                                    " names impossible " + PageName(h.pid));
        }
        switch (h.type) {
          case RecordType::kBase:
          case RecordType::kDelta:
            // A page's records follow its kAllocate. One that meets the page
            // free is a flush (or relocation) whose CAS beat the free while
            // its space was reserved after the freeing transaction's: the
            // page is gone, and replaying the record would bring it back.
            if (MappingTable::IsFree(mapping_->Load(h.pid))) break;
            mapping_->RecoverySet(h.pid, MappingTable::FromLss(address));
            break;
          case RecordType::kAllocate:
            mapping_->RecoverySet(h.pid, MappingTable::kEmptyPage);
            break;
          case RecordType::kFree:
            mapping_->RecoverySet(h.pid, MappingTable::kFree);
            break;
          default:
            break;
        }
        high_water = std::max<PageId>(high_water, h.pid + 1);
        return Status::OK();
      }));
  mapping_->RecoverySetHighWater(high_water);
  // Every page state the checkpoint named was stable before the checkpoint
  // was; one at or past the recovered end was cut with a damaged tail, and
  // the next writes would land there: another page's bytes for this one.
  const LssAddress end = lss_->HiStable();
  for (PageId pid = 1; pid < high_water; ++pid) {
    const uint64_t e = mapping_->Load(pid);
    if (MappingTable::IsLss(e) && MappingTable::ToLss(e) >= end) {
      return Status::Corruption("the checkpoint places " + PageName(pid) + " at LSS address " +
                                std::to_string(MappingTable::ToLss(e)) +
                                ", past the recovered end " + std::to_string(end));
    }
  }
  mapping_->RebuildFreeList();
  return Status::OK();
}

Status Llama::Close() { return CloseImpl(options_.checkpoint_on_close); }

Status Llama::CloseWithoutCheckpoint() { return CloseImpl(false); }

Status Llama::CloseImpl(bool checkpoint) {
  if (closed_) return Status::OK();
  closed_ = true;
  StopCleaner();  // before the LSS's last sync: it writes and checkpoints
  RETURN_IF_ERROR(lss_->MakeStable(lss_->Tail()));
  if (checkpoint) RETURN_IF_ERROR(Checkpoint());
  dir_lock_.reset();  // closed: the next owner may open the store
  return Status::OK();
}

Llama::~Llama() {
  StopCleaner();
  if (!closed_ && lss_ != nullptr) {
    Status s = Close();
    if (!s.ok()) DLOG_ERROR("closing LLAMA store {}: {}", dir_, s.ToString());
  }
  // No thread uses the cache any more: free the chains still installed, then
  // run every deferred free (they use the mapping table and memory counter).
  if (mapping_ != nullptr) {
    for (PageId pid = 1; pid < mapping_->high_water(); ++pid) {
      const uint64_t e = mapping_->Load(pid);
      if (!MappingTable::IsMemory(e)) continue;
      PageNode* n = MappingTable::ToPointer<PageNode>(e);
      while (n != nullptr) {
        PageNode* next = n->next;
        FreeNode(n);
        n = next;
      }
    }
  }
  epochs_.reset();
  if (referenced_ != nullptr) munmap(referenced_, mapping_->capacity());
  mapping_.reset();
  lss_.reset();
  dir_lock_.reset();
}

// ---------------------------------------------------------------------------
// Guards and deferred work

namespace {
// Llama guards this thread holds, over all stores (deferred work runs when it
// drops to zero, so also never under another store's guard).
thread_local int guard_depth = 0;
}  // namespace

Llama::Guard::Guard(Llama* llama, EpochManager::Guard epoch)
    : llama_(llama), epoch_(std::move(epoch)) {
  ++guard_depth;
}

Llama::Guard::Guard(Guard&& other) noexcept
    : llama_(other.llama_), epoch_(std::move(other.epoch_)) {
  other.llama_ = nullptr;
  other.epoch_.reset();
}

Llama::Guard::~Guard() {
  if (llama_ == nullptr) return;
  epoch_.reset();
  if (--guard_depth == 0) llama_->RunDeferredWork();
}

Llama::Guard Llama::Enter() { return Guard(this, epochs_->Enter()); }

void Llama::NoteAnnotation(uint64_t annotation) {
  uint64_t seen = max_annotation_.load(std::memory_order_relaxed);
  // Release: pairs with MaxAnnotation's acquire (a reader that sees the value
  // sees what the flush did before it).
  while (seen < annotation &&
         !max_annotation_.compare_exchange_weak(seen, annotation, std::memory_order_release,
                                                std::memory_order_relaxed)) {
  }
}

void Llama::RunDeferredWork() {
  if (eviction_wanted_.load(std::memory_order_relaxed)) {
    Status s = EnforceBudget();
    if (!s.ok()) DLOG_WARN("eviction in {}: {}", dir_, s.ToString());
  }
  if (background_cleaning_) return;  // MaybeClean woke the cleaner
  // Test before exchange: every guard release passes here, and a write to
  // the shared flag on each would bounce its line between threads.
  // Cleaning waits for other threads' guards before it releases segments:
  // never from inside one of this thread's (a raw epoch guard around a
  // Llama::Guard); the next guard-free moment cleans.
  const size_t segments = cleaning_wanted_.load(std::memory_order_relaxed) == 0 ||
                                  epochs_->InGuard()
                              ? 0
                              : cleaning_wanted_.exchange(0, std::memory_order_relaxed);
  if (segments > 0) {
    Result<CleanResult> r = CleanSegments(segments, /*release_now=*/false);
    if (!r.ok()) DLOG_WARN("cleaning {}: {}", dir_, r.status().ToString());
  }
}

// ---------------------------------------------------------------------------
// Nodes

PageNode* Llama::NewNode(NodeKind kind, size_t payload_size, uint64_t tag) {
  assert(kind == NodeKind::kBase || kind == NodeKind::kDelta);
  void* mem = AllocateNode(sizeof(PageNode) + payload_size);
  auto* n = new (mem) PageNode{kind, 0, 0, static_cast<uint32_t>(payload_size), 0, tag,
                               nullptr, kNullAddress, nullptr};
  if (kind == NodeKind::kBase) n->base_hint = n;
  memory_->Add(static_cast<int64_t>(NodeBytes(n)));
  MaybeEnforceBudget();
  return n;
}

FlushNode* Llama::NewFlushNode(NodeKind kind) {
  void* mem = AllocateNode(sizeof(FlushNode));
  auto* n = new (mem) FlushNode{};
  n->kind = kind;
  memory_->Add(static_cast<int64_t>(NodeBytes(n)));
  return n;
}

void Llama::FreeNode(PageNode* node) {
  const size_t bytes = NodeBytes(node);
  memory_->Add(-static_cast<int64_t>(bytes));
  ReleaseNode(node, bytes);
}

void Llama::DiscardNode(PageNode* node) { FreeNode(node); }

void Llama::DiscardChain(PageNode* head) {
  while (head != nullptr) {
    PageNode* next = head->next;
    FreeNode(head);
    head = next;
  }
}

size_t Llama::ChainBytes(const PageNode* head) const {
  size_t bytes = 0;
  for (; head != nullptr; head = head->next) bytes += NodeBytes(head);
  return bytes;
}

void Llama::FreeChainDeferred(void* llama, uint64_t head) {
  static_cast<Llama*>(llama)->DiscardChain(reinterpret_cast<PageNode*>(head));
}

void Llama::FreeNodeDeferred(void* llama, uint64_t node) {
  static_cast<Llama*>(llama)->FreeNode(reinterpret_cast<PageNode*>(node));
}

void Llama::RetireNode(PageNode* node) {
  epochs_->Defer(&FreeNodeDeferred, this, reinterpret_cast<uint64_t>(node), NodeBytes(node));
}

void Llama::RetireChain(const PageNode* head) {
  if (head == nullptr) return;
  epochs_->Defer(&FreeChainDeferred, this, reinterpret_cast<uint64_t>(head), ChainBytes(head));
}

// ---------------------------------------------------------------------------
// Chains

namespace {

// The node that says where a chain's LSS state starts: the first one that is
// not a delta. A flush, partial-swap or relocation node holds it at its
// address; a base at its prior (the state it replaced). Null: an empty chain.
const PageNode* LssHeadNode(const PageNode* head) {
  for (const PageNode* n = head; n != nullptr; n = n->next) {
    if (n->kind != NodeKind::kDelta) return n;
  }
  return nullptr;
}

}  // namespace

void Llama::AnalyzeChain(const PageNode* head, ChainInfo* info) {
  *info = ChainInfo();
  const PageNode* lss_node = LssHeadNode(head);
  if (lss_node != nullptr && !lss_node->is_data()) {
    const FlushNode* f = AsFlush(lss_node);
    info->lss_head = f->address;
    info->lss_end = f->end;
    info->lss_base = f->base;
    info->lss_depth = f->depth;
    info->lss_chain_bytes = f->chain_bytes;
  } else if (lss_node != nullptr) {
    info->lss_head = lss_node->prior;
  }
  for (const PageNode* n = head; n != nullptr; n = n->next) {
    switch (n->kind) {
      case NodeKind::kFlush:
      case NodeKind::kPartialSwap: {
        const FlushNode* f = AsFlush(n);
        if (!info->has_flush) {
          info->has_flush = true;
          info->bound = f->tag;
          info->flush_seq = n->kind == NodeKind::kPartialSwap ? f->seq_hi : f->seq;
          info->annotation = f->annotation;
        }
        if (n->kind == NodeKind::kPartialSwap) info->partial_swap = true;
        break;
      }
      case NodeKind::kRelocation:
        break;
      case NodeKind::kBase:
      case NodeKind::kDelta: {
        const bool flushed = info->has_flush && n->tag <= info->bound;
        if (!flushed) info->unflushed.push_back(n);
        if (n->kind == NodeKind::kBase) {
          info->base = n;
          info->base_flushed = flushed;
        }
        break;
      }
    }
  }
}

LssAddress Llama::LssHeadOf(const PageNode* head) {
  const PageNode* n = LssHeadNode(head);
  if (n == nullptr) return kNullAddress;
  return n->is_data() ? n->prior : AsFlush(n)->address;
}

Result<PageNode*> Llama::LoadFromLss(PageId expected, LssAddress address, LoadedState* state) {
  std::vector<PageNode*> nodes;
  auto fail = [&](Status s) -> Status {
    for (PageNode* n : nodes) FreeNode(n);
    return s;
  };
  PageId pid = 0;
  LssAddress a = address;
  bool first = true;
  while (a != kNullAddress) {
    // A state just relocated, or flushed and not yet written, may still sit
    // in a flush buffer; the LSS reads only written records.
    if (Status s = EnsureWritten(a); !s.ok()) return fail(std::move(s));
    std::string payload;
    Result<RecordHeader> rh = lss_->ReadRecord(a, &payload);
    if (!rh.ok()) return fail(rh.status());
    const RecordHeader& h = *rh;
    page_load_reads_.fetch_add(1, std::memory_order_relaxed);
    ++state->records;
    state->bytes += RecordSpan(h.length);
    // Named only on an error (every page load passes here).
    auto where = [a] { return "LSS record at " + std::to_string(a); };
    if (h.type != RecordType::kBase && h.type != RecordType::kDelta) {
      return fail(Status::Corruption(where() + " is not a page record"));
    }
    if (first) {
      if (h.pid != expected) {
        return fail(Status::Corruption(where() + " belongs to " + PageName(h.pid) + ", not " +
                                       PageName(expected)));
      }
      pid = h.pid;
      state->bound = h.bound;
      state->end = a + RecordSpan(h.length);
      first = false;
    } else if (h.pid != pid) {
      return fail(Status::Corruption(where() + " belongs to " + PageName(h.pid) + ", not " +
                                     PageName(pid)));
    }
    Decoder d{Slice(payload)};
    for (uint32_t i = 0; i < h.count; ++i) {
      uint32_t size = 0;
      uint64_t seq = 0, tag = 0;
      Slice kind, bytes;
      if (!d.Varint32(&size) || !d.Varint64(&seq) || !d.Varint64(&tag) || !d.Bytes(1, &kind) ||
          !d.Bytes(size, &bytes)) {
        return fail(d.status().WithContext(where()));
      }
      const auto k = static_cast<NodeKind>(kind[0]);
      if (k != NodeKind::kBase && k != NodeKind::kDelta) {
        return fail(Status::Corruption(where() + ": piece of unknown kind"));
      }
      PageNode* n = NewNode(k, size, tag);
      n->seq = seq;
      std::memcpy(n->payload(), bytes.data(), size);
      nodes.push_back(n);
    }
    if (h.type == RecordType::kBase) {
      state->base = a;
      break;
    }
    state->chain_bytes = ChainBytesPlus(state->chain_bytes, RecordSpan(h.length));
    if (h.prev == kNullAddress || h.prev >= a) {
      return fail(
          Status::Corruption(where() + ": C-delta with bad link " + std::to_string(h.prev)));
    }
    a = h.prev;
  }
  std::sort(nodes.begin(), nodes.end(),
            [](const PageNode* x, const PageNode* y) { return x->seq > y->seq; });
  if (nodes.empty() || nodes.back()->kind != NodeKind::kBase ||
      std::count_if(nodes.begin(), nodes.end(),
                    [](const PageNode* n) { return n->kind == NodeKind::kBase; }) != 1) {
    return fail(Status::Corruption("LSS state of " + PageName(pid) + " at " +
                                   std::to_string(address) + " has no single base"));
  }
  for (size_t i = 0; i + 1 < nodes.size(); ++i) nodes[i]->next = nodes[i + 1];
  for (PageNode* n : nodes) n->base_hint = nodes.back();
  return nodes.front();
}

Status Llama::EnsureWritten(LssAddress a) {
  // Records never cross buffers: writing the byte at `a` writes its whole
  // record.
  if (a < lss_->HiWritten()) return Status::OK();
  return lss_->MakeWritten(a + 1);
}

Result<const PageNode*> Llama::Materialize(PageId pid, uint64_t entry) {
  ScopedPhase phase(OpPhase::kPageLoad);
  page_loads_.fetch_add(1, std::memory_order_relaxed);
  if (IsWarm(pid)) warm_page_loads_.fetch_add(1, std::memory_order_relaxed);
  LoadedState loaded_state;
  if (MappingTable::IsLss(entry)) {
    const LssAddress address = MappingTable::ToLss(entry);
    ASSIGN_OR_RETURN(PageNode * chain, LoadFromLss(pid, address, &loaded_state));
    state_bytes_->Note(pid, address, loaded_state.bytes);
    FlushNode* f = NewFlushNode(NodeKind::kFlush);
    f->seq = chain->seq + 1;
    f->tag = loaded_state.bound;
    f->address = address;
    f->end = loaded_state.end;
    f->base = loaded_state.base;
    f->depth = loaded_state.records;
    f->chain_bytes = loaded_state.chain_bytes;
    f->next = chain;
    f->base_hint = BaseHintBelow(chain);
    uint64_t expected = entry;
    if (!mapping_->Cas(pid, expected, MappingTable::FromPointer(f))) {
      DiscardChain(f);
      return nullptr;  // raced with another loader or a writer: read again
    }
    return f;
  }

  // A partially swapped page: copies of its unflushed nodes over a
  // partial-swap node that says where the rest is.
  const auto* head = MappingTable::ToPointer<const PageNode>(entry);
  std::vector<const PageNode*> memory_nodes;
  const PageNode* n = head;
  for (; n->kind != NodeKind::kPartialSwap; n = n->next) {
    assert(n->is_data() && (n->flags & kNodeSwapped));
    memory_nodes.push_back(n);
  }
  const FlushNode* ps = AsFlush(n);
  ASSIGN_OR_RETURN(PageNode * loaded, LoadFromLss(pid, ps->address, &loaded_state));
  state_bytes_->Note(pid, ps->address, loaded_state.bytes);

  // Rebuild: nodes above the old topmost flush, the flush, then the memory
  // nodes below it merged with the loaded ones, all by seq.
  std::vector<PageNode*> above, below;
  for (const PageNode* m : memory_nodes) {
    PageNode* copy = NewNode(m->kind, m->size, m->tag);
    copy->seq = m->seq;
    copy->prior = m->prior;
    std::memcpy(copy->payload(), m->payload(), m->size);
    (m->seq > ps->seq_hi ? above : below).push_back(copy);
  }
  for (PageNode* l = loaded; l != nullptr; l = l->next) below.push_back(l);
  std::sort(below.begin(), below.end(),
            [](const PageNode* x, const PageNode* y) { return x->seq > y->seq; });
  FlushNode* f = NewFlushNode(NodeKind::kFlush);
  f->seq = ps->seq_hi;
  f->tag = ps->tag;
  f->address = ps->address;
  f->end = ps->end;
  f->base = ps->base;
  f->depth = ps->depth;
  f->chain_bytes = ps->chain_bytes;
  f->annotation = ps->annotation;
  std::vector<PageNode*> chain = std::move(above);
  chain.push_back(f);
  chain.insert(chain.end(), below.begin(), below.end());
  const PageNode* base = chain.back()->kind == NodeKind::kBase ? chain.back() : nullptr;
  for (size_t i = 0; i < chain.size(); ++i) {
    chain[i]->next = i + 1 < chain.size() ? chain[i + 1] : nullptr;
    chain[i]->base_hint = base;
  }
  uint64_t expected = entry;
  if (!mapping_->Cas(pid, expected, MappingTable::FromPointer(chain.front()))) {
    DiscardChain(chain.front());
    return nullptr;
  }
  RetireChain(head);
  return chain.front();
}

// ---------------------------------------------------------------------------
// Page data operations

Result<const PageNode*> Llama::Read(PageId pid) { return ReadState(pid, /*hide_private=*/true); }

Result<const PageNode*> Llama::ReadState(PageId pid, bool hide_private) {
  if (pid == 0 || pid >= mapping_->high_water()) {
    return Status::NotFound(PageName(pid) + " is not allocated");
  }
  for (;;) {
    const uint64_t e = mapping_->Load(pid);
    if (MappingTable::IsFree(e)) return Status::NotFound(PageName(pid) + " is not allocated");
    if (MappingTable::IsEmptyPage(e)) return static_cast<const PageNode*>(nullptr);
    Touch(pid);
    if (MappingTable::IsMemory(e)) {
      const auto* n = MappingTable::ToPointer<const PageNode>(e);
      if (n->kind != NodeKind::kPartialSwap && (n->flags & (kNodeSwapped | kNodePrivate)) == 0) {
        return n;
      }
      // A page private to an open system transaction is no one else's to
      // read or change: to other threads it does not exist yet (a route to
      // its PID is stale, bwtree.md). Its owner updates it through TUpdateD.
      if ((n->flags & kNodePrivate) != 0) {
        if (hide_private) {
          return Status::NotFound(PageName(pid) + " is private to a system transaction");
        }
        return n;
      }
    }
    ASSIGN_OR_RETURN(const PageNode* m, Materialize(pid, e));
    if (m != nullptr) return m;
  }
}

bool Llama::IsPrivate(PageId pid) {
  std::lock_guard<std::mutex> lock(att_mu_);
  return private_pages_.count(pid) != 0;
}

const PageNode* Llama::ReadResident(PageId pid) {
  if (pid == 0 || pid >= mapping_->high_water()) return nullptr;
  const uint64_t e = mapping_->Load(pid);
  if (!MappingTable::IsMemory(e)) return nullptr;
  const auto* n = MappingTable::ToPointer<const PageNode>(e);
  if (n->kind == NodeKind::kPartialSwap || (n->flags & (kNodeSwapped | kNodePrivate)) != 0) {
    return nullptr;
  }
  Touch(pid);
  return n;
}

bool Llama::UpdateD(PageId pid, const PageNode* expected, PageNode* delta) {
  assert(delta->is_data());
  uint64_t exp = expected != nullptr ? MappingTable::FromPointer(expected) : MappingTable::kEmptyPage;
  delta->next = const_cast<PageNode*>(expected);
  delta->seq = expected != nullptr ? expected->seq + 1 : 1;
  delta->base_hint = delta->kind == NodeKind::kBase ? delta : BaseHintBelow(expected);
  if (mapping_->Cas(pid, exp, MappingTable::FromPointer(delta))) return true;
  delta->next = nullptr;
  update_d_failures_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void Llama::PrepareReplacement(const PageNode* expected, PageNode* state) {
  // Number the new chain above the old one, and remember where the old
  // state is in the LSS: until the new base is flushed, that is the page's
  // durable state (checkpoints and the cleaner need it).
  size_t length = 0;
  PageNode* base = nullptr;
  for (PageNode* n = state; n != nullptr; n = n->next) {
    assert(n->is_data());
    ++length;
    base = n;
  }
  assert(base != nullptr && base->kind == NodeKind::kBase);
  uint64_t seq = (expected != nullptr ? expected->seq : 0) + length;
  for (PageNode* n = state; n != nullptr; n = n->next) {
    n->seq = seq--;
    n->base_hint = base;
  }
  base->prior = LssHeadOf(expected);
}

bool Llama::UpdateR(PageId pid, const PageNode* expected, PageNode* state) {
  uint64_t exp = expected != nullptr ? MappingTable::FromPointer(expected) : MappingTable::kEmptyPage;
  PrepareReplacement(expected, state);
  const bool fault = update_r_fault_for_test_ && update_r_fault_for_test_(pid);
  if (!fault && mapping_->Cas(pid, exp, MappingTable::FromPointer(state))) {
    RetireChain(expected);
    return true;
  }
  update_r_failures_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

bool Llama::SwapOut(PageId pid) {
  if (pid == 0 || pid >= mapping_->high_water()) return false;
  const uint64_t e = mapping_->Load(pid);
  if (!MappingTable::IsMemory(e)) return false;
  const auto* head = MappingTable::ToPointer<const PageNode>(e);
  if (head->kind == NodeKind::kPartialSwap || (head->flags & kNodeSwapped) != 0) return false;
  {
    std::lock_guard<std::mutex> lock(att_mu_);
    if (private_pages_.count(pid) != 0) return false;
  }
  ChainInfo info;
  AnalyzeChain(head, &info);
  // Only parts that are flushed and written leave memory, so a page is
  // always read back from the segment files (written records that a crash
  // loses before a sync are above every RSSP and checkpoint: the TC's redo
  // and recovery rebuild what they held).
  if (!info.has_flush || info.lss_head == kNullAddress || info.lss_end > lss_->HiWritten()) {
    return false;
  }
  if (info.unflushed.empty()) {
    uint64_t expected = e;
    if (!mapping_->Cas(pid, expected, MappingTable::FromLss(info.lss_head))) return false;
    RetireChain(head);
    swap_outs_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  FlushNode* ps = NewFlushNode(NodeKind::kPartialSwap);
  ps->seq = info.flush_seq;
  ps->seq_hi = info.flush_seq;
  ps->tag = info.bound;
  SetLssStateAsFound(ps, info);
  PageNode* top = ps;
  for (auto it = info.unflushed.rbegin(); it != info.unflushed.rend(); ++it) {
    const PageNode* m = *it;
    PageNode* copy = NewNode(m->kind, m->size, m->tag);
    copy->seq = m->seq;
    copy->prior = m->prior;
    copy->flags = kNodeSwapped;
    std::memcpy(copy->payload(), m->payload(), m->size);
    copy->next = top;
    top = copy;
  }
  uint64_t expected = e;
  if (!mapping_->Cas(pid, expected, MappingTable::FromPointer(top))) {
    DiscardChain(top);
    return false;
  }
  RetireChain(head);
  partial_swaps_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// ---------------------------------------------------------------------------
// Stats

Llama::Stats Llama::GetStats() const {
  Stats s;
  const auto mt = mapping_->GetStats();
  // Counted since open, on top of what recovery brought back: frees of
  // recovered pages would otherwise take it below zero.
  s.pages = mt.recovered + mt.allocated - mt.freed;
  s.node_bytes = static_cast<uint64_t>(std::max<int64_t>(0, memory_->Total()));
  s.memory_bytes = MemoryUsage();
  s.eviction_passes = eviction_passes_.load(std::memory_order_relaxed);
  s.eviction_flushes = eviction_flushes_.load(std::memory_order_relaxed);
  s.memory_budget = options_.memory_budget;
  s.flushes = flushes_.load(std::memory_order_relaxed);
  s.flush_failures = flush_failures_.load(std::memory_order_relaxed);
  s.flush_bytes = flush_bytes_.load(std::memory_order_relaxed);
  s.whole_flush_bytes = whole_flush_bytes_.load(std::memory_order_relaxed);
  s.chain_rewrites = chain_rewrites_.load(std::memory_order_relaxed);
  s.incremental_replacements = incremental_replacements_.load(std::memory_order_relaxed);
  s.page_change_bytes = change_bytes_.load(std::memory_order_relaxed);
  s.swap_outs = swap_outs_.load(std::memory_order_relaxed);
  s.partial_swaps = partial_swaps_.load(std::memory_order_relaxed);
  s.page_loads = page_loads_.load(std::memory_order_relaxed);
  s.warm_page_loads = warm_page_loads_.load(std::memory_order_relaxed);
  s.warm_swap_outs = warm_swap_outs_.load(std::memory_order_relaxed);
  s.page_load_reads = page_load_reads_.load(std::memory_order_relaxed);
  s.update_d_failures = update_d_failures_.load(std::memory_order_relaxed);
  s.update_r_failures = update_r_failures_.load(std::memory_order_relaxed);
  s.txn_commits = txn_commits_.load(std::memory_order_relaxed);
  s.txn_aborts = txn_aborts_.load(std::memory_order_relaxed);
  s.checkpoints = checkpoints_.load(std::memory_order_relaxed);
  s.segments_cleaned = segments_cleaned_.load(std::memory_order_relaxed);
  s.pages_relocated = pages_relocated_.load(std::memory_order_relaxed);
  s.bytes_relocated = bytes_relocated_.load(std::memory_order_relaxed);
  s.live_bytes = static_cast<uint64_t>(std::max<int64_t>(0, state_bytes_->Total()));
  s.lss = lss_->GetStats();
  return s;
}

}  // namespace deuteron::llama
