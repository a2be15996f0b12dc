#include "dc/llama/llama.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <functional>
#include <new>
#include <thread>

#include <sys/mman.h>

#include "common/coding.h"
#include "common/logging.h"
#include "dc/llama/checkpoint.h"

namespace deuteron::llama {

// Bytes of nodes the cache holds, summed over per-thread shards so that
// allocation does not bounce one cache line between threads. Relaxed: the
// total is a statistic and a budget signal, never used to order memory.
class Llama::MemoryCounter {
 public:
  void Add(int64_t n) { shards_[ShardIndex()].bytes.fetch_add(n, std::memory_order_relaxed); }
  int64_t Total() const {
    int64_t t = 0;
    for (const auto& s : shards_) t += s.bytes.load(std::memory_order_relaxed);
    return t;
  }

 private:
  static constexpr size_t kShards = 16;
  struct alignas(64) Shard {
    std::atomic<int64_t> bytes{0};
  };
  static size_t ShardIndex() {
    thread_local const size_t index = std::hash<std::thread::id>()(std::this_thread::get_id()) % kShards;
    return index;
  }
  Shard shards_[kShards];
};

// What a walk down a chain finds (see page_node.h for the flushed-ness rule).
struct Llama::ChainInfo {
  bool has_flush = false;            // a kFlush or kPartialSwap node defines flushed-ness
  uint64_t bound = 0;                // its bound
  uint64_t flush_seq = 0;            // its seq (a partial swap's seq_hi)
  uint64_t annotation = 0;
  LssAddress lss_head = kNullAddress;  // newest LSS state: topmost flush/relocation, or base prior
  LssAddress lss_end = kNullAddress;
  LssAddress lss_base = kNullAddress;  // the kBase record ending that chain (0: unknown)
  const PageNode* base = nullptr;
  bool base_flushed = false;
  bool partial_swap = false;
  std::vector<const PageNode*> unflushed;  // data nodes, chain order
};

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

std::string PageName(PageId pid) { return "page " + std::to_string(pid); }

}  // namespace

// ---------------------------------------------------------------------------
// Opening, recovery, closing

Llama::Llama(Env* env, std::string dir, LlamaOptions options)
    : env_(env),
      dir_(std::move(dir)),
      options_(std::move(options)),
      epochs_(std::make_unique<EpochManager>(options_.epochs)),
      mapping_(std::make_unique<MappingTable>(epochs_.get(), options_.mapping)),
      memory_(std::make_unique<MemoryCounter>()) {
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
    return llama->Recover();
  }();
  if (!s.ok()) {
    llama->closed_ = true;  // never opened: nothing to make stable or checkpoint
    return s;
  }
  return llama;
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
  RETURN_IF_ERROR(lss_->MakeStable(lss_->Tail()));
  if (checkpoint) RETURN_IF_ERROR(Checkpoint());
  dir_lock_.reset();  // closed: the next owner may open the store
  return Status::OK();
}

Llama::~Llama() {
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
  // Test before exchange: every guard release passes here, and a write to
  // the shared flag on each would bounce its line between threads.
  const size_t segments = cleaning_wanted_.load(std::memory_order_relaxed) == 0
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

namespace {

// Bytes of a page record's payload holding `nodes` (format: lss_format.md).
size_t PagePayloadSize(const std::vector<const PageNode*>& nodes) {
  size_t bytes = 0;
  for (const PageNode* n : nodes) {
    bytes += static_cast<size_t>(VarintLength(n->size) + VarintLength(n->seq) +
                                 VarintLength(n->tag)) + 1 + n->size;
  }
  return bytes;
}


// Encodes `nodes` (chain order) as that payload at dst.
void EncodePagePayloadTo(const std::vector<const PageNode*>& nodes, char* dst) {
  for (const PageNode* n : nodes) {
    dst = EncodeVarint32(dst, n->size);
    dst = EncodeVarint64(dst, n->seq);
    dst = EncodeVarint64(dst, n->tag);
    *dst++ = static_cast<char>(n->kind);
    std::memcpy(dst, n->payload(), n->size);
    dst += n->size;
  }
}

// Writes a page record at dst: the pieces `nodes` (chain order, `payload`
// bytes encoded), a kBase when it starts the page's chain (prev 0), else a
// C-delta over `prev`. Returns the bytes written.
size_t WritePageRecord(char* dst, PageId pid, const std::vector<const PageNode*>& nodes,
                       size_t payload, LssAddress prev, uint64_t annotation, uint64_t bound) {
  RecordHeader h;
  h.type = prev == kNullAddress ? RecordType::kBase : RecordType::kDelta;
  h.length = static_cast<uint32_t>(payload);
  h.count = static_cast<uint32_t>(nodes.size());
  h.pid = pid;
  h.prev = prev;
  h.annotation = annotation;
  h.bound = bound;
  EncodePagePayloadTo(nodes, dst + kRecordHeaderSize);
  EncodeRecord(h, Slice(dst + kRecordHeaderSize, payload), dst);
  return RecordSpan(payload);
}

// Writes a record with no payload (kAllocate, kFree) at dst.
size_t WriteMarkerRecord(char* dst, RecordType type, PageId pid, uint64_t annotation) {
  RecordHeader h;
  h.type = type;
  h.pid = pid;
  h.annotation = annotation;
  EncodeRecord(h, Slice(), dst);
  return RecordSpan(0);
}

}  // namespace

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
    // A state just relocated, or flushed and not yet stable, may still sit in
    // a flush buffer; the LSS reads only stable records.
    if (Status s = EnsureStable(a); !s.ok()) return fail(std::move(s));
    std::string payload;
    Result<RecordHeader> rh = lss_->ReadRecord(a, &payload);
    if (!rh.ok()) return fail(rh.status());
    const RecordHeader& h = *rh;
    page_load_reads_.fetch_add(1, std::memory_order_relaxed);
    const std::string where = "LSS record at " + std::to_string(a);
    if (h.type != RecordType::kBase && h.type != RecordType::kDelta) {
      return fail(Status::Corruption(where + " is not a page record"));
    }
    if (first) {
      if (h.pid != expected) {
        return fail(Status::Corruption(where + " belongs to " + PageName(h.pid) + ", not " +
                                       PageName(expected)));
      }
      pid = h.pid;
      state->bound = h.bound;
      state->end = a + RecordSpan(h.length);
      first = false;
    } else if (h.pid != pid) {
      return fail(Status::Corruption(where + " belongs to " + PageName(h.pid) + ", not " +
                                     PageName(pid)));
    }
    Decoder d{Slice(payload)};
    for (uint32_t i = 0; i < h.count; ++i) {
      uint32_t size = 0;
      uint64_t seq = 0, tag = 0;
      Slice kind, bytes;
      if (!d.Varint32(&size) || !d.Varint64(&seq) || !d.Varint64(&tag) || !d.Bytes(1, &kind) ||
          !d.Bytes(size, &bytes)) {
        return fail(d.status().WithContext(where));
      }
      const auto k = static_cast<NodeKind>(kind[0]);
      if (k != NodeKind::kBase && k != NodeKind::kDelta) {
        return fail(Status::Corruption(where + ": piece of unknown kind"));
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
    if (h.prev == kNullAddress || h.prev >= a) {
      return fail(Status::Corruption(where + ": C-delta with bad link " + std::to_string(h.prev)));
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

Status Llama::EnsureStable(LssAddress a) {
  // Records never cross buffers: making the byte at `a` stable makes its
  // whole record stable.
  if (a < lss_->HiStable()) return Status::OK();
  return lss_->MakeStable(a + 1);
}

Result<const PageNode*> Llama::Materialize(PageId pid, uint64_t entry) {
  page_loads_.fetch_add(1, std::memory_order_relaxed);
  LoadedState loaded_state;
  if (MappingTable::IsLss(entry)) {
    const LssAddress address = MappingTable::ToLss(entry);
    ASSIGN_OR_RETURN(PageNode * chain, LoadFromLss(pid, address, &loaded_state));
    FlushNode* f = NewFlushNode(NodeKind::kFlush);
    f->seq = chain->seq + 1;
    f->tag = loaded_state.bound;
    f->address = address;
    f->end = loaded_state.end;
    f->base = loaded_state.base;
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

namespace {

// The flush bound actually used: never below the chain's current one, so
// bounds only grow up a chain (page_node.h).
uint64_t EffectiveBound(bool has_flush, uint64_t chain_bound, uint64_t max_tag) {
  return has_flush ? std::max(chain_bound, max_tag) : max_tag;
}

}  // namespace

Result<FlushResult> Llama::Flush(PageId pid, uint64_t max_tag, uint64_t annotation) {
  ASSIGN_OR_RETURN(const PageNode* head, ReadState(pid, /*hide_private=*/false));
  if (head == nullptr) return FlushResult{};
  {
    // A page private to an open system transaction is its commit's to write.
    // Checked after the read: a page that becomes private later was freed and
    // reallocated meanwhile, so the CAS below over `head` fails anyway.
    std::lock_guard<std::mutex> att(att_mu_);
    if (private_pages_.count(pid) != 0) return FlushResult{};
  }
  ChainInfo info;
  AnalyzeChain(head, &info);
  const uint64_t bound = EffectiveBound(info.has_flush, info.bound, max_tag);
  std::vector<const PageNode*> selected;
  for (const PageNode* n : info.unflushed) {
    if (n->tag <= bound) selected.push_back(n);
  }
  const bool whole = info.base == nullptr || !info.base_flushed;
  // An unflushed base above the bound is blocked even with nothing else to
  // write: it may hold records at or below the bound (folded from deltas),
  // which are then not in the LSS. Reporting it clean would let a caller
  // take them for durable.
  if (info.base != nullptr && whole && info.base->tag > bound) {
    return FlushResult{FlushOutcome::kBlocked};
  }
  if (selected.empty()) return FlushResult{};
  // Deltas need a durable base beneath them.
  if (info.base == nullptr) return FlushResult{FlushOutcome::kBlocked};
  assert(whole || info.lss_head != kNullAddress);

  const size_t payload = PagePayloadSize(selected);
  const size_t span = RecordSpan(payload);
  ASSIGN_OR_RETURN(Reservation r, lss_->Reserve(span));
  FlushNode* f = NewFlushNode(NodeKind::kFlush);
  f->seq = head->seq + 1;
  f->tag = bound;
  f->address = r.address;
  f->end = r.address + span;
  f->base = whole ? r.address : info.lss_base;
  f->annotation = annotation;
  f->next = const_cast<PageNode*>(head);
  f->base_hint = BaseHintBelow(head);
  uint64_t expected = MappingTable::FromPointer(head);
  if (!mapping_->Cas(pid, expected, MappingTable::FromPointer(f))) {
    lss_->Void(r);
    FreeNode(f);
    flush_failures_.fetch_add(1, std::memory_order_relaxed);
    return FlushResult{FlushOutcome::kRaced};
  }
  // The CAS made this flush the page's newest; now copy (LLAMA 3.2.3 step 4).
  WritePageRecord(r.dst, pid, selected, payload, whole ? kNullAddress : info.lss_head,
                  annotation, bound);
  NoteAnnotation(annotation);
  lss_->Commit(r);

  size_t change = 0;
  for (const PageNode* n : selected) change += n->size;
  flushes_.fetch_add(1, std::memory_order_relaxed);
  flush_bytes_.fetch_add(span, std::memory_order_relaxed);
  change_bytes_.fetch_add(change, std::memory_order_relaxed);
  MaybeClean(r.address);
  return FlushResult{FlushOutcome::kFlushed, r.address, r.address + span, span};
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
  // Only parts that are flushed and stable leave memory, so a page is always
  // read back from durable records.
  if (!info.has_flush || info.lss_head == kNullAddress || info.lss_end > lss_->HiStable()) {
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
  ps->address = info.lss_head;
  ps->end = info.lss_end;
  ps->base = info.lss_base;
  ps->annotation = info.annotation;
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
// Memory budget and eviction

void Llama::Touch(PageId pid) {
  // Relaxed: a reference bit is a hint; test before set so hot pages do not
  // bounce the line between readers.
  if (referenced_ != nullptr && referenced_[pid].load(std::memory_order_relaxed) == 0) {
    referenced_[pid].store(1, std::memory_order_relaxed);
  }
}

size_t Llama::MemoryUsage() const {
  const int64_t nodes = std::max<int64_t>(0, memory_->Total());
  // The reference bits cost one byte per page below the high-water mark.
  return static_cast<size_t>(nodes) + mapping_->MemoryUsage() + mapping_->high_water();
}


bool Llama::HasFlushableOverSwap(uint64_t entry, uint64_t bound) {
  if (!MappingTable::IsMemory(entry)) return false;
  bool seen_flush = false;
  uint64_t flush_bound = 0;
  bool flushable = false;
  for (const PageNode* n = MappingTable::ToPointer<PageNode>(entry); n != nullptr; n = n->next) {
    if (n->kind == NodeKind::kPartialSwap) return flushable;
    if (n->kind == NodeKind::kFlush && !seen_flush) {
      seen_flush = true;
      flush_bound = n->tag;
    }
    if (n->is_data() && n->tag <= bound && !(seen_flush && n->tag <= flush_bound)) {
      flushable = true;
    }
  }
  return true;  // wholly in memory: Flush reads nothing back
}

void Llama::MaybeEnforceBudget() {
  if (options_.memory_budget == 0) return;
  // Checking the sum of the counter's shards on every allocation would cost
  // more than the allocation; every 64th is enough to stay within the budget.
  thread_local uint32_t calls = 0;
  if ((++calls & 63) != 0) return;
  if (MemoryUsage() <= options_.memory_budget) return;
  // The caller holds a guard (it is building a node): evicting here would
  // make garbage that cannot be reclaimed until the guard goes. Ask for it
  // at the next guard-free moment (Guard::~Guard).
  eviction_wanted_.store(true, std::memory_order_relaxed);
}

Status Llama::EnforceBudget() {
  if (options_.memory_budget == 0) return Status::OK();
  const size_t target = static_cast<size_t>(static_cast<double>(options_.memory_budget) *
                                            options_.eviction_target);
  // Far over budget, wait for the running evictor; slightly over, leave it to it.
  std::unique_lock<std::mutex> lock(evict_mu_, std::defer_lock);
  if (MemoryUsage() > options_.memory_budget + options_.memory_budget / 20) {
    lock.lock();
  } else if (!lock.try_lock()) {
    return Status::OK();
  }
  eviction_wanted_.store(false, std::memory_order_relaxed);
  const uint64_t bound =
      options_.eviction_flush_bound ? options_.eviction_flush_bound() : ~0ull;
  // The last pass ended over its target with nothing more it could drop
  // (pages above the bound: the DC's records above the ESL). Until the bound
  // moves or memory grows by an eighth (of the budget, or of what it was if
  // more), another pass would walk mostly the same pages for nothing: every
  // thread leaving a guard would walk them all (issue 38). Growth in steps
  // of an eighth keeps the passes to a logarithmic number while the cache
  // fills; what was flushed meanwhile (an RSSP's FlushAll, structure
  // changes) waits for the next pass.
  //
  // Progress is measured without the garbage waiting for other threads'
  // guards: it is already dropped, and goes when they leave.
  auto live = [&] {
    const size_t used = MemoryUsage();
    const size_t pending = epochs_->PendingBytes();
    return used > pending ? used - pending : 0;
  };
  if (futile_.valid && futile_.bound == bound &&
      live() <= futile_.usage + std::max(options_.memory_budget, futile_.usage) / 8) {
    return Status::OK();
  }
  futile_.valid = false;
  eviction_passes_.fetch_add(1, std::memory_order_relaxed);
  epochs_->TryReclaim();
  // Two sweeps: the first clears reference bits, the second finds them clear.
  // Pages that need a flush first are flushed in a batch, made stable once,
  // then swapped out.
  std::vector<PageId> flushed;
  const PageId high_water = mapping_->high_water();
  for (uint64_t visited = 0; visited < 2 * high_water && live() > target; ++visited) {
    if ((visited & 63) == 63) epochs_->TryReclaim();
    if (clock_hand_ >= high_water || clock_hand_ == 0) clock_hand_ = 1;
    const PageId pid = clock_hand_++;
    if (!MappingTable::IsMemory(mapping_->Load(pid))) continue;
    if (referenced_ != nullptr && referenced_[pid].load(std::memory_order_relaxed) != 0) {
      referenced_[pid].store(0, std::memory_order_relaxed);
      continue;
    }
    auto guard = epochs_->Enter();
    if (SwapOut(pid)) continue;
    {
      std::lock_guard<std::mutex> att(att_mu_);
      if (private_pages_.count(pid) != 0) continue;
    }
    // A partly swapped page whose unflushed nodes are all above the bound
    // has nothing more to give: flushing it would only read its swapped part
    // back in (Flush materializes), and the next sweep would do it again.
    if (!HasFlushableOverSwap(mapping_->Load(pid), bound)) continue;
    // Annotated with its bound, like every flush under the owner's bound.
    Result<FlushResult> r = Flush(pid, bound, options_.eviction_flush_bound ? bound : 0);
    if (!r.ok() && r.status().IsNotFound()) continue;  // freed under the evictor
    if (!r.ok()) return r.status();
    if (r->outcome == FlushOutcome::kFlushed) {
      eviction_flushes_.fetch_add(1, std::memory_order_relaxed);
    }
    // Flushed now, or flushed before but not yet stable: swap out once stable.
    if (r->outcome == FlushOutcome::kFlushed || r->outcome == FlushOutcome::kClean) {
      flushed.push_back(pid);
    }
    if (flushed.size() >= 64) {
      RETURN_IF_ERROR(lss_->MakeStable(lss_->Tail()));
      for (PageId f : flushed) SwapOut(f);
      flushed.clear();
    }
  }
  if (!flushed.empty()) {
    RETURN_IF_ERROR(lss_->MakeStable(lss_->Tail()));
    auto guard = epochs_->Enter();
    for (PageId f : flushed) SwapOut(f);
  }
  epochs_->TryReclaim();
  if (const size_t left = live(); left > target) futile_ = FutilePass{true, bound, left};
  return Status::OK();
}

// ---------------------------------------------------------------------------
// System transactions


bool Llama::SystemTxn::Owns(PageId pid) const {
  return std::find(allocated_.begin(), allocated_.end(), pid) != allocated_.end();
}

std::unique_ptr<Llama::SystemTxn> Llama::TBegin() {
  return std::make_unique<SystemTxn>(next_tid_.fetch_add(1, std::memory_order_relaxed));
}

Result<PageId> Llama::TAllocate(SystemTxn* txn) {
  assert(!txn->finished_);
  // Allocated and private in one hold: a checkpoint never sees the PID
  // allocated (empty) and not private, which would record it allocated and
  // leak it if the transaction aborts or the process crashes.
  std::lock_guard<std::mutex> lock(att_mu_);
  ASSIGN_OR_RETURN(PageId pid, mapping_->Allocate());
  txn->allocated_.push_back(pid);
  private_pages_.insert(pid);
  if (checkpoint_reading_) allocated_in_checkpoint_.push_back(pid);
  return pid;
}

Status Llama::TFree(SystemTxn* txn, PageId pid) {
  assert(!txn->finished_);
  if (pid == 0 || pid >= mapping_->high_water() || MappingTable::IsFree(mapping_->Load(pid))) {
    return Status::InvalidArgument("cannot free " + PageName(pid) + ": not allocated");
  }
  if (txn->Owns(pid) || std::find(txn->freed_.begin(), txn->freed_.end(), pid) != txn->freed_.end()) {
    return Status::InvalidArgument("cannot free " + PageName(pid) + " twice in one transaction");
  }
  txn->freed_.push_back(pid);
  return Status::OK();
}

Result<bool> Llama::TUpdateD(SystemTxn* txn, PageId pid, const PageNode* expected,
                             PageNode* delta) {
  assert(!txn->finished_);
  if (!txn->Owns(pid)) {
    return Status::InvalidArgument("system transaction updates only pages it allocated; " +
                                   PageName(pid) + " is not one");
  }
  delta->flags |= kNodePrivate;  // Read hides the page until the commit
  if (UpdateD(pid, expected, delta)) return true;
  delta->flags &= static_cast<uint8_t>(~kNodePrivate);
  return false;
}

namespace {

// One page written by a commit.
struct PagePlan {
  PageId pid = 0;
  const PageNode* head = nullptr;  // state the flush node goes on
  std::vector<const PageNode*> selected;
  bool whole = false;
  LssAddress prev = kNullAddress;
  LssAddress chain_base = kNullAddress;  // kBase record under `prev`
  uint64_t bound = 0;
  size_t payload = 0;
  FlushNode* flush = nullptr;
  uint64_t installed_over = 0;     // entry replaced by the flush node (private pages)
};

}  // namespace

Result<bool> Llama::TCommit(SystemTxn* txn, PageId pid, const PageNode* expected,
                            PageNode* final_delta, uint64_t max_tag, uint64_t annotation) {
  return CommitTxn(txn, pid, expected, final_delta, /*replace=*/false, max_tag, annotation);
}

Result<bool> Llama::TCommitReplace(SystemTxn* txn, PageId pid, const PageNode* expected,
                                   PageNode* state, uint64_t max_tag, uint64_t annotation) {
  assert(pid != 0 && state != nullptr);
  return CommitTxn(txn, pid, expected, state, /*replace=*/true, max_tag, annotation);
}

Result<bool> Llama::CommitTxn(SystemTxn* txn, PageId pid, const PageNode* expected,
                              PageNode* final_delta, bool replace, uint64_t max_tag,
                              uint64_t annotation) {
  assert(!txn->finished_);
  assert((pid == 0) == (final_delta == nullptr));
  if (replace) {
    PrepareReplacement(expected, final_delta);  // a whole chain, as Update-R installs
  } else if (final_delta != nullptr) {
    final_delta->next = const_cast<PageNode*>(expected);
    final_delta->seq = expected != nullptr ? expected->seq + 1 : 1;
    final_delta->base_hint = BaseHintBelow(expected);
  }

  // Plan every page the transaction changed, the final page included.
  std::vector<PagePlan> plans;
  auto plan_page = [&](PageId p, const PageNode* head) -> Status {
    if (head == nullptr) return Status::OK();  // still empty: its kAllocate says all
    ChainInfo info;
    AnalyzeChain(head, &info);
    PagePlan plan;
    plan.pid = p;
    plan.head = head;
    plan.bound = EffectiveBound(info.has_flush, info.bound, max_tag);
    for (const PageNode* n : info.unflushed) {
      if (n->tag <= plan.bound) plan.selected.push_back(n);
    }
    if (info.base == nullptr) {
      return Status::InvalidArgument(PageName(p) + " has deltas but no base to flush them over");
    }
    plan.whole = !info.base_flushed;
    if (plan.whole && info.base->tag > plan.bound) {
      return Status::InvalidArgument(PageName(p) + "'s base (tag " + std::to_string(info.base->tag) +
                                     ") cannot be flushed under bound " + std::to_string(max_tag));
    }
    if (plan.selected.empty()) return Status::OK();
    plan.prev = plan.whole ? kNullAddress : info.lss_head;
    plan.chain_base = info.lss_base;
    plan.payload = PagePayloadSize(plan.selected);
    plans.push_back(std::move(plan));
    return Status::OK();
  };
  for (PageId p : txn->allocated_) {
    if (p == pid) continue;
    const uint64_t e = mapping_->Load(p);
    RETURN_IF_ERROR(plan_page(p, MappingTable::IsMemory(e) ? MappingTable::ToPointer<PageNode>(e)
                                                           : nullptr));
  }
  if (final_delta != nullptr) RETURN_IF_ERROR(plan_page(pid, final_delta));
  if (after_plan_for_test_) after_plan_for_test_(txn->allocated_);

  // Reserve one transaction record holding every inner record.
  size_t inner = RecordSpan(0) * (txn->allocated_.size() + txn->freed_.size());
  for (const PagePlan& plan : plans) inner += RecordSpan(plan.payload);
  const size_t count = txn->allocated_.size() + txn->freed_.size() + plans.size();
  ASSIGN_OR_RETURN(Reservation r, lss_->Reserve(RecordSpan(inner)));

  // Addresses of the inner records, in the order they will be written:
  // allocations, page states, frees.
  LssAddress at = r.address + kRecordHeaderSize + RecordSpan(0) * txn->allocated_.size();
  for (PagePlan& plan : plans) {
    FlushNode* f = NewFlushNode(NodeKind::kFlush);
    f->seq = plan.head->seq + 1;
    f->tag = plan.bound;
    f->address = at;
    f->end = at + RecordSpan(plan.payload);
    f->base = plan.whole ? at : plan.chain_base;
    f->annotation = annotation;
    f->next = const_cast<PageNode*>(plan.head);
    f->base_hint = BaseHintBelow(plan.head);
    if (plan.pid != pid) f->flags = kNodePrivate;  // a private page stays hidden
    plan.flush = f;
    at = f->end;
  }

  // Install the flush nodes on the private pages, then the final update: the
  // commit point. Undo the private installs if the final CAS fails. An
  // installed flush node was visible to LLAMA's own walkers of the mapping
  // table (Flush, SwapOut, the evictor, checkpoints, the cleaner), which load
  // a head before they check the active transaction table: it is retired
  // through the epoch, never freed at once. Only the commit changes a private
  // page (Read hides it from everyone else, and those walkers skip it), so the
  // undo CAS cannot fail.
  auto undo = [&](size_t installed) {
    for (size_t i = 0; i < plans.size(); ++i) {
      if (i < installed) {
        uint64_t e = MappingTable::FromPointer(plans[i].flush);
        const bool ok = mapping_->Cas(plans[i].pid, e, plans[i].installed_over);
        assert(ok && "private page changed under its system transaction");
        (void)ok;
        RetireNode(plans[i].flush);
      } else {
        FreeNode(plans[i].flush);
      }
    }
  };
  size_t installed = 0;
  for (PagePlan& plan : plans) {
    if (plan.pid == pid) continue;
    plan.installed_over = MappingTable::FromPointer(plan.head);
    uint64_t e = plan.installed_over;
    if (!mapping_->Cas(plan.pid, e, MappingTable::FromPointer(plan.flush))) {
      undo(installed);
      lss_->Void(r);
      return Status::Internal(PageName(plan.pid) + " changed while private to a system transaction");
    }
    ++installed;
  }
  // Plans of private pages come first (the final page's plan is last).
  if (final_delta != nullptr) {
    const bool final_planned = !plans.empty() && plans.back().pid == pid;
    uint64_t e = expected != nullptr ? MappingTable::FromPointer(expected) : MappingTable::kEmptyPage;
    const uint64_t desired = final_planned ? MappingTable::FromPointer(plans.back().flush)
                                           : MappingTable::FromPointer(final_delta);
    const bool fault = commit_fault_for_test_ && commit_fault_for_test_(pid);
    if (fault || !mapping_->Cas(pid, e, desired)) {
      undo(installed);
      lss_->Void(r);
      if (replace) {
        update_r_failures_.fetch_add(1, std::memory_order_relaxed);
      } else {
        final_delta->next = nullptr;
        update_d_failures_.fetch_add(1, std::memory_order_relaxed);
      }
      return false;
    }
    if (replace) RetireChain(expected);
  }
  // Committed: the new pages become readable. Each private head (the flush
  // node installed above) is replaced by an unmarked copy, as the final CAS
  // just linked the pages in; readers that meet them before this see
  // NotFound and start over. Still private (in the active transaction
  // table), so no other thread changes them and each CAS succeeds.
  for (PagePlan& plan : plans) {
    if (plan.pid == pid) continue;
    FlushNode* pub = NewFlushNode(NodeKind::kFlush);
    *pub = *plan.flush;
    pub->flags = 0;
    uint64_t e = MappingTable::FromPointer(plan.flush);
    const bool ok = mapping_->Cas(plan.pid, e, MappingTable::FromPointer(pub));
    assert(ok && "private page changed under its system transaction");
    (void)ok;
    RetireNode(plan.flush);
  }

  // Committed in memory; copy the records (LLAMA 5.3.1).
  char* out = r.dst + kRecordHeaderSize;
  for (PageId p : txn->allocated_) out += WriteMarkerRecord(out, RecordType::kAllocate, p, annotation);
  for (const PagePlan& plan : plans) {
    out += WritePageRecord(out, plan.pid, plan.selected, plan.payload, plan.prev, annotation,
                           plan.bound);
  }
  for (PageId p : txn->freed_) out += WriteMarkerRecord(out, RecordType::kFree, p, annotation);
  RecordHeader outer;
  outer.type = RecordType::kTransaction;
  outer.length = static_cast<uint32_t>(inner);
  outer.count = static_cast<uint32_t>(count);
  outer.annotation = annotation;
  EncodeRecord(outer, Slice(r.dst + kRecordHeaderSize, inner), r.dst);
  // The in-memory effects of the commit (frees, leaving the ATT) come before
  // the record may become stable: a checkpoint whose RSP (Hi-Stable) is past
  // this record must see them, or recovery, which does not replay the record,
  // would bring the freed pages back and lose the new ones.
  if (before_frees_for_test_) before_frees_for_test_();
  FreePagesNow(txn->freed_);
  EndTransaction(txn);
  NoteAnnotation(annotation);
  lss_->Commit(r);
  txn_commits_.fetch_add(1, std::memory_order_relaxed);
  flushes_.fetch_add(plans.size(), std::memory_order_relaxed);
  flush_bytes_.fetch_add(RecordSpan(inner), std::memory_order_relaxed);
  return true;
}

void Llama::FreePagesNow(const std::vector<PageId>& pids) {
  for (PageId p : pids) {
    // Retire the state the free replaced, not one loaded before it: a flush
    // or swap-out may CAS a new head on in between, and loading first would
    // leak that head.
    const uint64_t e = mapping_->Free(p);
    if (MappingTable::IsMemory(e)) RetireChain(MappingTable::ToPointer<PageNode>(e));
  }
}

void Llama::EndTransaction(SystemTxn* txn) {
  {
    std::lock_guard<std::mutex> lock(att_mu_);
    for (PageId p : txn->allocated_) private_pages_.erase(p);
  }
  txn->finished_ = true;
}

void Llama::TAbort(SystemTxn* txn) {
  assert(!txn->finished_);
  {
    // Freed and no longer private in one hold, as TAllocate made them
    // allocated and private: a PID freed first could be reused (once the
    // epoch lets it) by another transaction's TAllocate, whose private mark
    // the erase below would then remove; erased first, a checkpoint could
    // record it allocated and empty.
    std::lock_guard<std::mutex> lock(att_mu_);
    FreePagesNow(txn->allocated_);
    for (PageId p : txn->allocated_) private_pages_.erase(p);
  }
  txn->finished_ = true;
  txn_aborts_.fetch_add(1, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------
// Checkpoint

Status Llama::Checkpoint() {
  std::lock_guard<std::mutex> lock(checkpoint_mu_);
  CheckpointData d;
  d.store_id = lss_->identity().store_id;
  d.sequence = checkpoint_sequence_ + 1;
  // Every reservation below Hi-Stable has finished its CAS (its buffer was
  // written only once its writers were done), so each state the table shows
  // from here on is either captured below or replayed from the RSP.
  d.rsp = lss_->HiStable();
  // Every record below the RSP noted its annotation before its commit.
  d.max_annotation = MaxAnnotation();
  std::unordered_set<PageId> private_pages;
  {
    std::lock_guard<std::mutex> att(att_mu_);
    private_pages = private_pages_;
    checkpoint_reading_ = true;
    allocated_in_checkpoint_.clear();
  }
  if (checkpoint_hook_for_test_) checkpoint_hook_for_test_();
  const PageId high_water = mapping_->high_water();
  d.entries.assign(high_water - 1, 0);
  constexpr PageId kPagesPerGuard = 4096;  // let reclamation progress on big tables
  for (PageId first = 1; first < high_water; first += kPagesPerGuard) {
    auto guard = epochs_->Enter();
    for (PageId pid = first; pid < std::min(high_water, first + kPagesPerGuard); ++pid) {
      const uint64_t e = mapping_->Load(pid);
      uint64_t& out = d.entries[pid - 1];
      if (MappingTable::IsFree(e) || private_pages.count(pid) != 0) {
        out = 0;
      } else if (MappingTable::IsEmptyPage(e)) {
        out = kEmptyPageEntry;
      } else if (MappingTable::IsLss(e)) {
        out = MappingTable::ToLss(e);
      } else {
        ChainInfo info;
        AnalyzeChain(MappingTable::ToPointer<PageNode>(e), &info);
        out = info.lss_head != kNullAddress ? info.lss_head : kEmptyPageEntry;
      }
    }
  }
  {
    // Allocated while the table was read: private then, perhaps not in the
    // snapshot. Free here; committed ones are replayed from the RSP.
    std::lock_guard<std::mutex> att(att_mu_);
    for (PageId pid : allocated_in_checkpoint_) {
      if (pid < high_water) d.entries[pid - 1] = 0;
    }
    allocated_in_checkpoint_.clear();
    checkpoint_reading_ = false;
  }
  // What the entries point at must be durable before the checkpoint is.
  RETURN_IF_ERROR(lss_->MakeStable(lss_->Tail()));
  d.gc_frontier = gc_frontier_.load();
  RETURN_IF_ERROR(WriteCheckpoint(env_, dir_, d));
  checkpoint_sequence_ = d.sequence;
  checkpoint_rsp_[0] = checkpoint_rsp_[1];
  checkpoint_rsp_[1] = d.rsp;
  checkpoints_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

LssAddress Llama::LastCheckpointRsp() {
  std::lock_guard<std::mutex> lock(checkpoint_mu_);
  return checkpoint_rsp_[1];
}

// ---------------------------------------------------------------------------
// Cleaning

void Llama::MaybeClean(LssAddress flushed_at) {
  if (options_.cleaning_trigger_segments == 0) return;
  // Only the flush that first lands in a new segment looks (cheap otherwise).
  const uint64_t segment = SegmentOf(flushed_at, lss_->identity().segment_size);
  uint64_t seen = tail_segment_seen_.load(std::memory_order_relaxed);
  if (segment <= seen ||
      !tail_segment_seen_.compare_exchange_strong(seen, segment, std::memory_order_relaxed)) {
    return;
  }
  const uint64_t segment_size = lss_->identity().segment_size;
  const uint64_t first_uncleaned =
      std::max(lss_->LowestSegment(), cleaned_frontier_.load() / segment_size);
  const uint64_t held = lss_->TailSegment() + 1 - std::min(first_uncleaned, lss_->TailSegment());
  if (held <= std::max<uint64_t>(options_.cleaning_trigger_segments,
                                 clean_trigger_.load(std::memory_order_relaxed))) {
    return;
  }
  // The flushing thread holds a guard: clean when it lets go of it.
  cleaning_wanted_.store(held - std::max<size_t>(options_.cleaning_target_segments, 1),
                         std::memory_order_relaxed);
}

Status Llama::RelocateIfLive(PageId pid, LssAddress lo, LssAddress hi, CleanResult* result) {
  for (;;) {
    auto guard = epochs_->Enter();
    if (pid == 0 || pid >= mapping_->high_water()) return Status::OK();
    const uint64_t e = mapping_->Load(pid);
    if (MappingTable::IsFree(e) || MappingTable::IsEmptyPage(e)) return Status::OK();
    const PageNode* head = nullptr;
    LssAddress at = kNullAddress;
    bool swapped = false;
    ChainInfo info;
    if (MappingTable::IsLss(e)) {
      at = MappingTable::ToLss(e);
    } else {
      head = MappingTable::ToPointer<const PageNode>(e);
      swapped = head->kind == NodeKind::kPartialSwap || (head->flags & kNodeSwapped) != 0;
      AnalyzeChain(head, &info);
      at = info.lss_head;
    }
    // Is any record of the page's durable state in the victim range? Chain
    // addresses fall from the newest record to the kBase that ends it, and
    // nothing lies below the victim (the lowest segment held), so the state
    // is live there iff its kBase is. A resident page knows its kBase; a
    // swapped-out one has its chain walked.
    bool live = false;
    if (info.lss_base != kNullAddress) {
      live = info.lss_base < hi;
    } else {
      for (LssAddress a = at; a != kNullAddress;) {
        if (a >= lo && a < hi) {
          live = true;
          break;
        }
        RETURN_IF_ERROR(EnsureStable(a));
        std::string payload;
        ASSIGN_OR_RETURN(RecordHeader h, lss_->ReadRecord(a, &payload));
        if (h.type != RecordType::kDelta) break;
        a = h.prev;
      }
    }
    if (!live) return Status::OK();

    // Rewrite the whole durable state as one kBase record at the tail.
    LoadedState loaded_state;
    ASSIGN_OR_RETURN(PageNode * loaded, LoadFromLss(pid, at, &loaded_state));
    const uint64_t bound = loaded_state.bound;
    std::vector<const PageNode*> pieces;
    for (const PageNode* n = loaded; n != nullptr; n = n->next) pieces.push_back(n);
    const size_t payload = PagePayloadSize(pieces);
    const size_t span = RecordSpan(payload);
      Result<Reservation> rr = lss_->Reserve(span);
    if (!rr.ok()) {
      DiscardChain(loaded);
      return rr.status();
    }
    const Reservation r = *rr;

    // The new mapping: an entry, a relocation node, or a rebuilt partial swap.
    uint64_t desired;
    PageNode* built = nullptr;
    if (head == nullptr) {
      desired = MappingTable::FromLss(r.address);
    } else if (!swapped) {
      FlushNode* rel = NewFlushNode(NodeKind::kRelocation);
      rel->seq = head->seq + 1;
      rel->address = r.address;
      rel->end = r.address + span;
      rel->base = r.address;
      rel->next = const_cast<PageNode*>(head);
      rel->base_hint = BaseHintBelow(head);
      built = rel;
      desired = MappingTable::FromPointer(rel);
    } else {
      const PageNode* n = head;
      std::vector<const PageNode*> copies;
      for (; n->kind != NodeKind::kPartialSwap; n = n->next) copies.push_back(n);
      const FlushNode* old_ps = AsFlush(n);
      FlushNode* ps = NewFlushNode(NodeKind::kPartialSwap);
      ps->seq = old_ps->seq;
      ps->seq_hi = old_ps->seq_hi;
      ps->tag = old_ps->tag;
      ps->annotation = old_ps->annotation;
      ps->address = r.address;
      ps->end = r.address + span;
      ps->base = r.address;
      PageNode* top = ps;
      for (auto it = copies.rbegin(); it != copies.rend(); ++it) {
        PageNode* c = NewNode((*it)->kind, (*it)->size, (*it)->tag);
        c->seq = (*it)->seq;
        c->prior = (*it)->prior;
        c->flags = (*it)->flags;
        std::memcpy(c->payload(), (*it)->payload(), (*it)->size);
        c->next = top;
        top = c;
      }
      built = top;
      desired = MappingTable::FromPointer(top);
    }
    uint64_t expected = e;
    if (!mapping_->Cas(pid, expected, desired)) {
      lss_->Void(r);
      if (built != nullptr) {
        if (!swapped) built->next = nullptr;
        DiscardChain(built);
      }
      DiscardChain(loaded);
      continue;  // the page changed: look again
    }
    WritePageRecord(r.dst, pid, pieces, payload, kNullAddress, 0, bound);
    lss_->Commit(r);
    if (swapped) RetireChain(head);
    DiscardChain(loaded);
    result->pages_relocated++;
    result->bytes_relocated += span;
    return Status::OK();
  }
}

Result<CleanResult> Llama::Clean(size_t max_segments) {
  return CleanSegments(max_segments, /*release_now=*/true);
}

Result<CleanResult> Llama::CleanSegments(size_t max_segments, bool release_now) {
  std::lock_guard<std::mutex> lock(clean_mu_);
  CleanResult result;
  const uint64_t segment_size = lss_->identity().segment_size;
  for (size_t i = 0; i < max_segments; ++i) {
    const uint64_t victim =
        std::max(lss_->LowestSegment(), cleaned_frontier_.load() / segment_size);
    const LssAddress lo = victim * segment_size;
    const LssAddress hi = lo + segment_size;
    // Only whole, stable segments behind the one being written.
    if (victim >= lss_->TailSegment() || hi > lss_->HiStable()) break;
    std::vector<PageId> pids;
    RETURN_IF_ERROR(lss_->ScanSegment(
        victim, [&](LssAddress, const RecordHeader& h, Slice, bool) -> Status {
          if (h.type == RecordType::kBase || h.type == RecordType::kDelta) pids.push_back(h.pid);
          return Status::OK();
        }));
    std::sort(pids.begin(), pids.end());
    pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
    for (PageId pid : pids) RETURN_IF_ERROR(RelocateIfLive(pid, lo, hi, &result));
    cleaned_frontier_.store(hi);
    result.segments_cleaned++;
  }
  segments_cleaned_.fetch_add(result.segments_cleaned, std::memory_order_relaxed);
  pages_relocated_.fetch_add(result.pages_relocated, std::memory_order_relaxed);
  if (result.segments_cleaned > 0) {
    // What survived (relocated, and written meanwhile) is about the live
    // state: clean again once the segments held have doubled, not at the
    // fixed trigger, which a live state bigger than it would meet after
    // every new segment, relocating the whole state each time (llama.md,
    // "Cleaning").
    const uint64_t first_uncleaned =
        std::max(lss_->LowestSegment(), cleaned_frontier_.load() / segment_size);
    const uint64_t held =
        lss_->TailSegment() + 1 - std::min(first_uncleaned, lss_->TailSegment());
    clean_trigger_.store(2 * held, std::memory_order_relaxed);
  }
  bytes_relocated_.fetch_add(result.bytes_relocated, std::memory_order_relaxed);

  // Releasing costs two checkpoints (after the relocations, so that neither
  // slot can send recovery into the cleaned segments; LLAMA 4.3 and 6.2):
  // automatic cleaning pays it once per batch.
  const LssAddress frontier = cleaned_frontier_.load();
  const uint64_t unreleased = frontier / segment_size > lss_->LowestSegment()
                                  ? frontier / segment_size - lss_->LowestSegment()
                                  : 0;
  const uint64_t batch = std::max<uint64_t>(options_.cleaning_trigger_segments, 1);
  if (unreleased == 0 || (!release_now && unreleased < batch)) return result;
  gc_frontier_.store(frontier);
  RETURN_IF_ERROR(Checkpoint());
  RETURN_IF_ERROR(Checkpoint());
  LssAddress release;
  {
    std::lock_guard<std::mutex> ck(checkpoint_mu_);
    release = std::min({frontier, checkpoint_rsp_[0], checkpoint_rsp_[1]});
  }
  const uint64_t before = lss_->LowestSegment();
  RETURN_IF_ERROR(lss_->ReleaseSegmentsBelow(release));
  result.segments_released = lss_->LowestSegment() - before;
  return result;
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
  s.page_change_bytes = change_bytes_.load(std::memory_order_relaxed);
  s.swap_outs = swap_outs_.load(std::memory_order_relaxed);
  s.partial_swaps = partial_swaps_.load(std::memory_order_relaxed);
  s.page_loads = page_loads_.load(std::memory_order_relaxed);
  s.page_load_reads = page_load_reads_.load(std::memory_order_relaxed);
  s.update_d_failures = update_d_failures_.load(std::memory_order_relaxed);
  s.update_r_failures = update_r_failures_.load(std::memory_order_relaxed);
  s.txn_commits = txn_commits_.load(std::memory_order_relaxed);
  s.txn_aborts = txn_aborts_.load(std::memory_order_relaxed);
  s.checkpoints = checkpoints_.load(std::memory_order_relaxed);
  s.segments_cleaned = segments_cleaned_.load(std::memory_order_relaxed);
  s.pages_relocated = pages_relocated_.load(std::memory_order_relaxed);
  s.bytes_relocated = bytes_relocated_.load(std::memory_order_relaxed);
  s.lss = lss_->GetStats();
  return s;
}

}  // namespace deuteron::llama
