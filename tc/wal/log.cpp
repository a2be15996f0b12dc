// Log implementation notes.
//
// Memory orders (the invariants are numbered in log.h):
//  - tail_: relaxed CAS. It only hands out disjoint ranges; what a committer
//    may write into the ring is governed by released_, what the leader may
//    read by the slots.
//  - slots: a committer's copy happens-before its slot store (release); the
//    leader loads slots with acquire before it reads the bytes (invariant 3).
//  - released_: the leader stores it (seq_cst) after its pwrite read the ring;
//    a committer loads it (acquire) before overwriting ring bytes of the next
//    lap (invariant 2). seq_cst pairs the store with space_waiters_.
//  - Leadership (invariant 4): leading_ changes only under mu_, so taking it
//    and handing it on are ordered by mu_; a waiter handed leadership reads
//    its state kLead with acquire after the old leader's release store, so
//    the leader-only state (file_, file_segment_, file_dirty_)
//    passes from leader to leader with a happens-before edge. Outside mu_,
//    leading_ is only a hint (polling committers and the flusher).
//  - esl_: stored (seq_cst) by the leader only after the fdatasync returned;
//    committers load it with acquire. The pair esl_ / sleepers_ is a Dekker
//    handshake (both seq_cst): a committer counts itself as a sleeper, then
//    re-reads the ESL; the leader stores the ESL, then reads the count, so a
//    group wakes its sleepers at once. (Even a missed one is found when the
//    leadership ends: the hand-off always collects the covered under mu_.)
//  - failed_: set under mu_ after fail_status_; read with acquire, and
//    fail_status_ is then read under mu_.
#include "tc/wal/log.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "common/coding.h"
#include "common/fault_hooks.h"

namespace deuteron::wal {
namespace {

constexpr uint64_t kPrewriteChunk = 1ull << 20;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Sleeps while *word == expected (or until a wake or a signal: callers loop).
// Raw futexes rather than std::atomic::wait, whose waiter pool we do not need.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
               const struct timespec* timeout = nullptr) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, timeout,
          nullptr, 0);
}
void FutexWakeOne(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

uint64_t NowMicros() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

class Log::Impl {
 public:
  Impl(Env* env, std::string dir, const LogOptions& options)
      : env_(env), dir_(std::move(dir)), opts_(options), seg_size_(options.segment_size),
        ring_size_(options.buffer_size), ring_(new char[options.buffer_size]()),
        slot_count_(options.buffer_size / kRecordAlign),
        slots_(new std::atomic<uint64_t>[options.buffer_size / kRecordAlign]) {
    for (uint64_t i = 0; i < slot_count_; ++i) slots_[i].store(0, std::memory_order_relaxed);
    fail_status_.PermitUncheckedError();
  }

  ~Impl() { Close().PermitUncheckedError(); }

  size_t MaxPayload() const {
    return static_cast<size_t>(std::min(seg_size_, ring_size_) / 4 - kRecordHeaderSize);
  }

  // ------------------------------------------------------------ open/recover

  Status Recover() {
    RETURN_IF_ERROR(env_->CreateDirs(dir_));
    ASSIGN_OR_RETURN(std::vector<std::string> names, env_->GetChildren(dir_));
    std::set<uint64_t> segments;
    std::vector<std::string> spares;
    bool has_meta = false;
    for (const std::string& name : names) {
      uint64_t n;
      if (ParseSegmentFileName(name, &n)) {
        segments.insert(n);
      } else if (ParseSpareFileName(name, &n)) {
        spares.push_back(name);
        next_spare_id_ = std::max(next_spare_id_, n + 1);
      } else if (name == kMetaFileName) {
        has_meta = true;
      } else if (name == kMetaTempFileName) {
        RETURN_IF_ERROR(env_->DeleteFile(JoinPath(dir_, name)));
      }
    }
    LogMeta meta;
    const std::string meta_path = JoinPath(dir_, kMetaFileName);
    if (has_meta) {
      ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(env_, meta_path));
      ASSIGN_OR_RETURN(meta, DecodeMeta(bytes, meta_path));
      if (meta.segment_size != seg_size_) {
        return Status::InvalidArgument(dir_ + ": log was created with segment_size " +
                                       std::to_string(meta.segment_size) + ", options say " +
                                       std::to_string(seg_size_));
      }
    } else {
      if (!segments.empty()) {
        return Status::Corruption(dir_ + ": log segment files without " + kMetaFileName);
      }
      meta.segment_size = seg_size_;
      meta.rssp = SegmentStart(kFirstSegment, seg_size_);
      meta.store_id = StoreId::Random();  // a new store
      RETURN_IF_ERROR(WriteMeta(meta));
    }
    if (meta.store_id.nil()) {
      // A version 1 log (before store ids): it gets one now, in a version 2
      // wal.meta. Its DC has none either (it adopts the TC's).
      meta.store_id = StoreId::Random();
      RETURN_IF_ERROR(WriteMeta(meta));
    }
    store_id_ = meta.store_id;
    rssp_.store(meta.rssp);
    const uint64_t first = SegmentOf(meta.rssp, seg_size_);
    lowest_ = first;

    for (const std::string& name : spares) {  // a spare cut short by a crash is dropped
      const std::string path = JoinPath(dir_, name);
      ASSIGN_OR_RETURN(uint64_t size, env_->GetFileSize(path));
      if (size == seg_size_) {
        spares_.push_back(path);
      } else {
        RETURN_IF_ERROR(env_->DeleteFile(path));
      }
    }
    // Segments wholly below the durable RSSP (a release cut short by a crash).
    for (auto it = segments.begin(); it != segments.end() && *it < first;) {
      RETURN_IF_ERROR(ReleaseSegment(*it));
      it = segments.erase(it);
    }

    LogReader reader(env_, dir_, seg_size_, SegmentStart(first, seg_size_), LogReader::kNoLimit);
    LogRecord record;
    for (;;) {
      ASSIGN_OR_RETURN(bool more, reader.Next(&record));
      if (!more) break;
    }
    const Lsn end = reader.position();
    if (end < meta.rssp) {
      return Status::Corruption("log in " + dir_ + " ends at " + DescribePosition(end, seg_size_) +
                                ", below its durable RSSP " + std::to_string(meta.rssp));
    }
    RETURN_IF_ERROR(CheckTail(end, segments));

    // Cut the tail, so that nothing after `end` can ever be read as a record
    // again: truncate the end's segment there (regrowing it with zeros) and
    // delete every later segment file.
    const uint64_t end_segment = SegmentOf(end, seg_size_);
    for (uint64_t s : segments) {
      const std::string path = JoinPath(dir_, SegmentFileName(s));
      if (s > end_segment) {
        RETURN_IF_ERROR(env_->DeleteFile(path));
      } else if (s == end_segment) {
        ASSIGN_OR_RETURN(std::unique_ptr<File> f, env_->OpenFile(path, OpenMode::kReadWrite));
        RETURN_IF_ERROR(f->Truncate(end % seg_size_));
        RETURN_IF_ERROR(f->Truncate(seg_size_));
        RETURN_IF_ERROR(f->Sync());
        RETURN_IF_ERROR(f->Close());
      }
    }
    while (spares_.size() < static_cast<size_t>(opts_.spare_segments)) {
      ASSIGN_OR_RETURN(std::string path, CreateSpare());
      spares_.push_back(path);
    }
    RETURN_IF_ERROR(env_->SyncDir(dir_));

    tail_.store(end);
    esl_.store(end);
    released_.store(end);
    return Status::OK();
  }

  // Corruption when a valid record after `end` was written after `end` was
  // durable (its esl_seen is above `end`): then the record at `end` was
  // reported durable and is damaged, not a torn tail.
  Status CheckTail(Lsn end, const std::set<uint64_t>& segments) {
    const uint64_t end_segment = SegmentOf(end, seg_size_);
    for (auto it = segments.lower_bound(end_segment); it != segments.end(); ++it) {
      ASSIGN_OR_RETURN(std::string buf, ReadSegment(env_, dir_, *it, seg_size_));
      const Lsn base = SegmentStart(*it, seg_size_);
      uint64_t off = *it == end_segment ? end % seg_size_ + kRecordAlign : 0;
      for (; off + kRecordHeaderSize <= buf.size(); off += kRecordAlign) {
        if (DecodeFixed64(buf.data() + off + 8) != base + off) continue;
        RecordHeader h;
        if (ParseRecord(buf.data() + off, buf.size() - off, base + off, seg_size_, &h, nullptr) !=
                Parsed::kInvalid &&
            h.esl_seen > end) {
          return Status::Corruption(
              "bad log record at " + DescribePosition(end, seg_size_) + " in " + dir_ +
              ": it was durable (the record at LSN " + std::to_string(base + off) +
              " was written after the ESL reached " + std::to_string(h.esl_seen) + ")");
        }
      }
    }
    return Status::OK();
  }

  void Start() { flusher_ = std::thread([this] { FlusherLoop(); }); }

  // ------------------------------------------------------------ committers

  Result<LogSpan> Append(Slice payload) {
    if (closed_.load(std::memory_order_acquire)) return Status::ShuttingDown("log is closed");
    if (failed_.load(std::memory_order_acquire)) return FailStatus();
    if (payload.size() > MaxPayload()) {
      return Status::TooLarge("log record of " + std::to_string(payload.size()) +
                              " bytes, the most is " + std::to_string(MaxPayload()));
    }
    const uint64_t span = RecordSpan(payload.size());
    Lsn start = tail_.load(std::memory_order_relaxed);
    Lsn rec, end;
    do {  // invariant 1
      const Lsn segment_end = SegmentStart(SegmentOf(start, seg_size_) + 1, seg_size_);
      rec = start + span <= segment_end ? start : segment_end;
      end = rec + span;
    } while (!tail_.compare_exchange_weak(start, end, std::memory_order_relaxed));

    if (end - released_.load(std::memory_order_acquire) > ring_size_) {
      RETURN_IF_ERROR(WaitForSpace(end));
    }
    const Lsn esl_seen = esl_.load(std::memory_order_acquire);
    if (rec != start) {  // pad the rest of the segment
      if (rec - start >= kRecordHeaderSize) {
        char pad[kRecordHeaderSize];
        EncodeRecordHeader(pad,
                           RecordHeader{start, static_cast<uint32_t>(rec - start - kRecordHeaderSize),
                                        RecordType::kPadding, esl_seen},
                           0);
        CopyToRing(start, pad, sizeof(pad));
      }
      Slot(start).store(rec, std::memory_order_release);
    }
    char header[kRecordHeaderSize];
    EncodeRecordHeader(header,
                       RecordHeader{rec, static_cast<uint32_t>(payload.size()), RecordType::kData,
                                    esl_seen},
                       PayloadCrc(payload));
    CopyToRing(rec, header, sizeof(header));
    CopyToRing(rec + kRecordHeaderSize, payload.data(), payload.size());
    static constexpr char kZeros[kRecordAlign] = {};
    CopyToRing(rec + kRecordHeaderSize + payload.size(), kZeros,
               span - kRecordHeaderSize - payload.size());
    Slot(rec).store(end, std::memory_order_release);  // invariant 3
    records_.fetch_add(1, std::memory_order_relaxed);
    return LogSpan{rec, end};
  }

  Status WaitDurable(Lsn end) {
    if (esl_.load(std::memory_order_acquire) >= end) return Status::OK();
    if (failed_.load(std::memory_order_acquire)) return FailStatus();
    // While a leader writes, poll first, one committer at a time and only
    // while nobody sleeps (a light load): the ESL usually arrives within one
    // fdatasync, and a futex wake costs tens of microseconds on a vCPU. Under
    // load a poller would only take a core from the leader and the committers
    // it wakes. A poller stops as soon as no leader is left, to lead itself.
    // Off unless committer_spin_us > 0 (the default is 0: wal.md, "Polling").
    bool poll = opts_.committer_spin_us > 0 && sleepers_.load(std::memory_order_relaxed) == 0 &&
                leading_.load(std::memory_order_relaxed);
    if (poll &&
        spinners_.fetch_add(1, std::memory_order_relaxed) >= opts_.max_spinning_committers) {
      spinners_.fetch_sub(1, std::memory_order_relaxed);
      poll = false;
    }
    if (poll) {
      const uint64_t deadline = NowMicros() + opts_.committer_spin_us;
      bool covered = false;
      do {
        for (int i = 0; i < 64 && !covered; ++i) {
          covered = esl_.load(std::memory_order_acquire) >= end;
          CpuRelax();
        }
        if (covered || failed_.load(std::memory_order_acquire) ||
            sleepers_.load(std::memory_order_relaxed) > 0 ||
            !leading_.load(std::memory_order_relaxed)) {
          break;
        }
      } while (NowMicros() < deadline);
      spinners_.fetch_sub(1, std::memory_order_relaxed);
      if (covered) return Status::OK();
    }

    Waiter w;
    w.end = end;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (esl_.load(std::memory_order_acquire) >= end) return Status::OK();
      if (failed_.load(std::memory_order_acquire)) return fail_status_;
      if (leading_.load(std::memory_order_relaxed)) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        if (esl_.load(std::memory_order_seq_cst) >= end) {  // pairs with the leader's store
          sleepers_.fetch_sub(1, std::memory_order_relaxed);
          return Status::OK();
        }
        waiters_.push_back(&w);
      } else {
        leading_.store(true, std::memory_order_relaxed);
        w.state.store(kLead, std::memory_order_relaxed);
      }
    }
    if (w.state.load(std::memory_order_relaxed) != kLead) {
      committer_sleeps_.fetch_add(1, std::memory_order_relaxed);
      while (w.state.load(std::memory_order_acquire) == kWaiting) FutexWait(&w.state, kWaiting);
    }
    const uint32_t state = w.state.load(std::memory_order_acquire);
    if (state == kLead) Lead(end);  // may start while its waker still wakes others
    if (state == kDurable || esl_.load(std::memory_order_acquire) >= end) return Status::OK();
    return FailStatus();
  }

  Lsn Esl() const { return esl_.load(std::memory_order_acquire); }
  Lsn Tail() const { return tail_.load(std::memory_order_relaxed); }
  Lsn DurableRssp() const { return rssp_.load(std::memory_order_acquire); }
  const StoreId& store_id() const { return store_id_; }

  // ------------------------------------------------------------ RSSP

  Status SetDurableRssp(Lsn rssp) {
    if (rssp > Esl()) {
      return Status::InvalidArgument("RSSP " + std::to_string(rssp) + " above the ESL " +
                                     std::to_string(Esl()));
    }
    std::lock_guard<std::mutex> l(rssp_mu_);
    const Lsn current = rssp_.load(std::memory_order_relaxed);
    if (rssp < current) {
      return Status::InvalidArgument("RSSP " + std::to_string(rssp) + " below the durable RSSP " +
                                     std::to_string(current));
    }
    if (rssp == current) return Status::OK();
    RETURN_IF_ERROR(WriteMeta(LogMeta{seg_size_, rssp, store_id_}));
    rssp_.store(rssp, std::memory_order_release);
    const uint64_t first = SegmentOf(rssp, seg_size_);
    for (; lowest_ < first; ++lowest_) RETURN_IF_ERROR(ReleaseSegment(lowest_));
    return env_->SyncDir(dir_);
  }

  Result<std::unique_ptr<LogReader>> NewReader(Lsn from) {
    const Lsn esl = Esl();
    if (from > esl) {
      return Status::InvalidArgument("read from " + std::to_string(from) + " above the ESL " +
                                     std::to_string(esl));
    }
    {
      std::lock_guard<std::mutex> l(rssp_mu_);
      if (SegmentOf(from, seg_size_) < lowest_) {
        return Status::NotFound("log position " + std::to_string(from) +
                                " lies in a released segment (durable RSSP " +
                                std::to_string(DurableRssp()) + ")");
      }
    }
    return std::make_unique<LogReader>(env_, dir_, seg_size_, from, esl);
  }

  Status Close() {
    if (closed_.exchange(true)) return CloseStatus();
    closing_.store(1, std::memory_order_release);
    FutexWakeOne(&closing_);
    if (flusher_.joinable()) flusher_.join();
    // Write and sync everything appended (Close must not race with Append),
    // then hold the leadership for good, so that nobody touches file_ again.
    WaitDurable(tail_.load(std::memory_order_relaxed)).PermitUncheckedError();
    for (;;) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (!leading_.load(std::memory_order_relaxed)) {
          leading_.store(true, std::memory_order_relaxed);
          break;
        }
      }
      std::this_thread::yield();
    }
    if (file_ != nullptr) {
      Status s = file_->Close();
      file_.reset();
      if (!s.ok() && !failed_.load()) Fail(s);
    }
    return CloseStatus();
  }

  Stats GetStats() const {
    Stats s;
    s.records = records_.load(std::memory_order_relaxed);
    s.groups = groups_.load(std::memory_order_relaxed);
    s.bytes_written = bytes_written_.load(std::memory_order_relaxed);
    s.syncs = syncs_.load(std::memory_order_relaxed);
    s.committer_sleeps = committer_sleeps_.load(std::memory_order_relaxed);
    s.space_waits = space_waits_.load(std::memory_order_relaxed);
    s.segments_created = segments_created_.load(std::memory_order_relaxed);
    s.segments_recycled = segments_recycled_.load(std::memory_order_relaxed);
    s.segments_deleted = segments_deleted_.load(std::memory_order_relaxed);
    s.leader_handoffs = handoffs_.load(std::memory_order_relaxed);
    s.flusher_leads = flusher_leads_.load(std::memory_order_relaxed);
    return s;
  }

  const LogOptions& options() const { return opts_; }

 private:
  // kLead: the waiter was handed the leadership (invariant 4).
  static constexpr uint32_t kWaiting = 0, kDurable = 1, kFailed = 2, kLead = 3;
  // A sleeping committer, on its own stack. The waker reads `end` under mu_
  // (while the committer cannot leave), then stores `state` and wakes the
  // futex word. The committer may see the state and return before that wake:
  // the waker only passes the word's address to the kernel, never touches
  // the memory again, and a FUTEX_WAKE on a word that is gone wakes nobody or
  // makes a later wait on the same stack address re-check its word (every
  // futex wait loops), as glibc's own mutex unlock does. No lock is taken on
  // the way out: a woken committer that had to take one its waker holds
  // sleeps and wakes once more (tc/wal/wal.md, group commit).
  struct Waiter {
    Lsn end = kNullLsn;
    std::atomic<uint32_t> state{kWaiting};
  };

  static void Release(Waiter* w, uint32_t state) {
    w->state.store(state, std::memory_order_release);
    FutexWakeOne(&w->state);
  }

  std::atomic<uint64_t>& Slot(Lsn lsn) { return slots_[(lsn / kRecordAlign) & (slot_count_ - 1)]; }

  void CopyToRing(Lsn lsn, const char* src, size_t n) {
    const uint64_t off = lsn & (ring_size_ - 1);
    const size_t first = static_cast<size_t>(std::min<uint64_t>(n, ring_size_ - off));
    std::memcpy(ring_.get() + off, src, first);
    if (n > first) std::memcpy(ring_.get(), src + first, n - first);
  }

  Status FailStatus() {
    std::lock_guard<std::mutex> l(mu_);
    return fail_status_;
  }

  Status CloseStatus() {
    if (failed_.load(std::memory_order_acquire)) return FailStatus();
    return Status::OK();
  }

  // Waits until the ring has room for [.., end). With no leader, it leads
  // itself to write the filled prefix (its own record is not filled yet).
  Status WaitForSpace(Lsn end) {
    space_waits_.fetch_add(1, std::memory_order_relaxed);
    space_waiters_.fetch_add(1, std::memory_order_seq_cst);
    while (end - released_.load(std::memory_order_seq_cst) > ring_size_ &&
           !failed_.load(std::memory_order_acquire)) {
      if (TryTakeLead()) {
        Lead(kNullLsn);
        continue;
      }
      std::unique_lock<std::mutex> l(space_mu_);
      if (end - released_.load(std::memory_order_seq_cst) > ring_size_ &&
          !failed_.load(std::memory_order_acquire)) {
        space_cv_.wait_for(l, std::chrono::milliseconds(1));
      }
    }
    space_waiters_.fetch_sub(1, std::memory_order_relaxed);
    if (failed_.load(std::memory_order_acquire)) return FailStatus();
    return Status::OK();
  }

  bool TryTakeLead() {
    if (leading_.load(std::memory_order_relaxed)) return false;
    std::lock_guard<std::mutex> l(mu_);
    if (leading_.load(std::memory_order_relaxed)) return false;
    leading_.store(true, std::memory_order_relaxed);
    return true;
  }

  // Wakes the sleepers the ESL `esl` covers (invariant 4). With `hand_off`,
  // the leadership also ends: passed to the uncovered sleeper with the lowest
  // end, woken before the group, so the next group's write starts while this
  // thread wakes; when none sleeps, the group is woken first and the
  // leadership given up only then (to a committer of the group that queued
  // meanwhile, or cleared): freed before the wakes, the leader's own next
  // record took it and went alone, while the group it woke queued behind
  // (log_bench, 4 committers). The futex wakes happen outside mu_, so
  // committers going to sleep do not wait for them.
  void WakeCovered(Lsn esl, bool hand_off) {
    for (;;) {
      // A local list: once the leadership is given up, the next leader may
      // be running before these wakes are done.
      std::vector<Waiter*> covered;
      Waiter* next = nullptr;
      bool done = true;
      {
        std::lock_guard<std::mutex> l(mu_);
        covered.reserve(waiters_.size());
        for (size_t i = 0; i < waiters_.size();) {
          if (waiters_[i]->end > esl) {
            if (next == nullptr || waiters_[i]->end < next->end) next = waiters_[i];
            ++i;
            continue;
          }
          covered.push_back(waiters_[i]);
          waiters_[i] = waiters_.back();
          waiters_.pop_back();
        }
        if (hand_off) {
          if (next != nullptr) {
            waiters_.erase(std::find(waiters_.begin(), waiters_.end(), next));
            sleepers_.fetch_sub(1, std::memory_order_relaxed);
            handoffs_.fetch_add(1, std::memory_order_relaxed);
          } else if (covered.empty()) {
            leading_.store(false, std::memory_order_relaxed);
          } else {
            done = false;  // wake the group, then look again
          }
        }
        sleepers_.fetch_sub(static_cast<int>(covered.size()), std::memory_order_relaxed);
      }
      if (!hand_off) next = nullptr;
      // The next leader first: it is on the path of every commit still
      // waiting. The leader-only state goes with it (release), so this thread
      // touches none of it after this store.
      if (next != nullptr) Release(next, kLead);
      for (Waiter* w : covered) Release(w, kDurable);
      if (done) return;
    }
  }

  // Invariant 5: the log stops for good.
  void Fail(const Status& cause) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!failed_.load(std::memory_order_relaxed)) {
        // Whatever the cause (a file the crash took away is NotFound), the
        // log failed on I/O: NoSpace stays NoSpace, the rest is IOError.
        fail_status_ = Status(cause.code() == Code::kNoSpace ? Code::kNoSpace : Code::kIOError,
                              "write-ahead log " + dir_ + " failed: " + cause.ToString());
        failed_.store(true, std::memory_order_release);
      }
      // Records the ESL already covered are durable and reported so.
      const Lsn esl = esl_.load(std::memory_order_acquire);
      for (Waiter* w : waiters_) Release(w, w->end <= esl ? kDurable : kFailed);
      sleepers_.fetch_sub(static_cast<int>(waiters_.size()), std::memory_order_relaxed);
      waiters_.clear();
    }
    std::lock_guard<std::mutex> l(space_mu_);
    space_cv_.notify_all();
  }

  // ------------------------------------------------------------ the writer

  // The end of the filled prefix from `from` (invariant 3).
  Lsn FilledFrom(Lsn from) {
    Lsn filled = from;
    for (Lsn next; (next = Slot(filled).load(std::memory_order_acquire)) > filled;) filled = next;
    return filled;
  }

  // REQUIRES: the caller holds the leadership. Writes groups until the ESL
  // reaches `end` (kNullLsn: the filled prefix as of the call), then for up to
  // writer_spin_us more while the next group is already filled, then hands
  // the leadership on. A record before `end` still being copied (a gap) is
  // waited for: every reserved range is filled unless the log fails.
  void Lead(Lsn end) {
    if (end == kNullLsn) end = FilledFrom(released_.load(std::memory_order_relaxed));
    uint64_t extra_deadline = 0;
    for (uint32_t idle = 0;;) {
      if (failed_.load(std::memory_order_acquire)) break;
      const Lsn written = released_.load(std::memory_order_relaxed);
      const Lsn filled = FilledFrom(written);
      const bool covered = esl_.load(std::memory_order_relaxed) >= end;
      if (filled > written) {
        if (covered) {  // our own record is durable: more groups only while they are filled
          if (extra_deadline == 0) extra_deadline = NowMicros() + opts_.writer_spin_us;
          if (NowMicros() >= extra_deadline) break;
        }
        Status s = WriteGroup(written, filled);
        if (!s.ok()) {
          Fail(s);
          break;
        }
        idle = 0;
        // The group that covers our own record ends the lead: the hand-off
        // below passes the leadership on before it wakes this group, so the
        // next group's write and sync start while this thread still wakes.
        if (filled >= end && opts_.writer_spin_us == 0) break;
        if (sleepers_.load(std::memory_order_seq_cst) > 0) WakeCovered(filled, /*hand_off=*/false);
        continue;
      }
      if (covered) break;
      if (++idle < 64) {
        CpuRelax();
      } else {
        std::this_thread::yield();  // the copier of the gap may need this core
      }
    }
    WakeCovered(esl_.load(std::memory_order_relaxed), /*hand_off=*/true);
  }

  // The flusher: records appended but not waited for (an Append without a
  // WaitDurable) still reach the disk. Every flush_interval_us it writes the
  // filled prefix when nobody led since its last look.
  void FlusherLoop() {
    const uint64_t ns = uint64_t{opts_.flush_interval_us} * 1000;
    const struct timespec period = {static_cast<time_t>(ns / 1000000000),
                                    static_cast<long>(ns % 1000000000)};
    Lsn last = kNullLsn;
    while (closing_.load(std::memory_order_acquire) == 0) {
      FutexWait(&closing_, 0, &period);
      const Lsn written = released_.load(std::memory_order_acquire);
      if (written == last && FilledFrom(written) > written && TryTakeLead()) {
        flusher_leads_.fetch_add(1, std::memory_order_relaxed);
        Lead(kNullLsn);
      }
      last = written;
    }
  }

  // One group: write [from, to) (switching segments as needed), sync, publish.
  Status WriteGroup(Lsn from, Lsn to) {
    DEUTERON_KILL_POINT(kTcLogGroupCommitBeforeWrite);
    for (Lsn x = from; x < to;) {
      const uint64_t segment = SegmentOf(x, seg_size_);
      const Lsn chunk_end = std::min(to, SegmentStart(segment + 1, seg_size_));
      if (file_ == nullptr || segment != file_segment_) {
        if (file_ != nullptr && file_dirty_) RETURN_IF_ERROR(SyncFile());
        RETURN_IF_ERROR(SwitchSegment(segment));
      }
      RETURN_IF_ERROR(WriteFromRing(x, chunk_end));
      file_dirty_ = true;
      x = chunk_end;
    }
    released_.store(to, std::memory_order_seq_cst);  // invariant 2
    if (space_waiters_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> l(space_mu_);
      space_cv_.notify_all();
    }
    DEUTERON_KILL_POINT(kTcLogGroupCommitBeforeSync);
    if (fault::BrokenOnPurpose(fault::Break::kAckBeforeSync)) {
      // Contract 4 broken on purpose (DEUTERON_BREAK=ack_before_sync): the
      // group is published as durable unsynced; only a segment switch or
      // Close syncs it, so a power loss loses acknowledged commits.
      esl_.store(to, std::memory_order_seq_cst);
    } else {
      RETURN_IF_ERROR(SyncFile());
    }
    DEUTERON_KILL_POINT(kTcLogGroupCommitAfterSync);
    esl_.store(to, std::memory_order_seq_cst);  // invariant 4; Lead wakes the group
    groups_.fetch_add(1, std::memory_order_relaxed);
    bytes_written_.fetch_add(to - from, std::memory_order_relaxed);
    return Status::OK();
  }

  Status WriteFromRing(Lsn from, Lsn to) {
    const uint64_t off = from & (ring_size_ - 1);
    const uint64_t n = to - from;
    const uint64_t first = std::min(n, ring_size_ - off);
    RETURN_IF_ERROR(file_->WriteAt(from % seg_size_, Slice(ring_.get() + off, first)));
    if (n > first) {
      RETURN_IF_ERROR(file_->WriteAt(from % seg_size_ + first, Slice(ring_.get(), n - first)));
    }
    return Status::OK();
  }

  Status SyncFile() {
    syncs_.fetch_add(1, std::memory_order_relaxed);
    file_dirty_ = false;
    return file_->Sync();
  }

  // Opens `segment` for writing: the existing file (the segment recovery
  // resumed in), or a spare renamed to it, with the directory synced.
  Status SwitchSegment(uint64_t segment) {
    if (file_ != nullptr) {
      Status s = file_->Close();
      file_.reset();
      RETURN_IF_ERROR(s);
    }
    const std::string path = JoinPath(dir_, SegmentFileName(segment));
    if (!env_->FileExists(path)) {
      std::string spare;
      {
        std::lock_guard<std::mutex> l(seg_mu_);
        if (!spares_.empty()) {
          spare = spares_.back();
          spares_.pop_back();
        }
      }
      if (spare.empty()) {
        ASSIGN_OR_RETURN(spare, CreateSpare());
      }
      RETURN_IF_ERROR(env_->RenameFile(spare, path));
      RETURN_IF_ERROR(env_->SyncDir(dir_));
    }
    ASSIGN_OR_RETURN(file_, env_->OpenFile(path, OpenMode::kReadWrite));
    file_segment_ = segment;
    file_dirty_ = false;
    return Status::OK();
  }

  // A new spare file, pre-written with zeros and synced (not its directory).
  Result<std::string> CreateSpare() {
    uint64_t id;
    {
      std::lock_guard<std::mutex> l(seg_mu_);
      id = next_spare_id_++;
    }
    const std::string path = JoinPath(dir_, SpareFileName(id));
    ASSIGN_OR_RETURN(std::unique_ptr<File> f, env_->OpenFile(path, OpenMode::kCreateNew));
    const std::string zeros(static_cast<size_t>(std::min(kPrewriteChunk, seg_size_)), '\0');
    for (uint64_t off = 0; off < seg_size_; off += zeros.size()) {
      RETURN_IF_ERROR(f->WriteAt(off, zeros));
    }
    RETURN_IF_ERROR(f->Sync());
    RETURN_IF_ERROR(f->Close());
    segments_created_.fetch_add(1, std::memory_order_relaxed);
    return path;
  }

  // Keeps segment `segment`'s file as a spare (its old records name other
  // positions, so they never read as current) or deletes it when there are
  // enough spares. A missing file is fine. The caller syncs the directory.
  Status ReleaseSegment(uint64_t segment) {
    const std::string path = JoinPath(dir_, SegmentFileName(segment));
    if (!env_->FileExists(path)) return Status::OK();
    std::string spare;
    {
      std::lock_guard<std::mutex> l(seg_mu_);
      if (spares_.size() < static_cast<size_t>(opts_.spare_segments)) {
        spare = JoinPath(dir_, SpareFileName(next_spare_id_++));
      }
    }
    if (spare.empty()) {
      RETURN_IF_ERROR(env_->DeleteFile(path));
      segments_deleted_.fetch_add(1, std::memory_order_relaxed);
      return Status::OK();
    }
    RETURN_IF_ERROR(env_->RenameFile(path, spare));
    std::lock_guard<std::mutex> l(seg_mu_);
    spares_.push_back(spare);
    segments_recycled_.fetch_add(1, std::memory_order_relaxed);
    return Status::OK();
  }

  Status WriteMeta(const LogMeta& meta) {
    const std::string tmp = JoinPath(dir_, kMetaTempFileName);
    RETURN_IF_ERROR(WriteStringToFile(env_, EncodeMeta(meta), tmp, /*sync=*/true));
    RETURN_IF_ERROR(env_->RenameFile(tmp, JoinPath(dir_, kMetaFileName)));
    return env_->SyncDir(dir_);
  }

  Env* const env_;
  const std::string dir_;
  const LogOptions opts_;
  const uint64_t seg_size_;
  StoreId store_id_;  // set by Open, then constant
  const uint64_t ring_size_;
  const std::unique_ptr<char[]> ring_;
  const uint64_t slot_count_;
  const std::unique_ptr<std::atomic<uint64_t>[]> slots_;

  alignas(64) std::atomic<Lsn> tail_{0};
  alignas(64) std::atomic<Lsn> esl_{0};
  alignas(64) std::atomic<Lsn> released_{0};
  alignas(64) std::atomic<bool> leading_{false};  // changed only under mu_
  std::atomic<uint32_t> closing_{0};              // the flusher's futex word
  std::atomic<int> spinners_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<int> space_waiters_{0};
  std::atomic<bool> failed_{false};
  std::atomic<bool> closed_{false};

  std::mutex mu_;
  std::vector<Waiter*> waiters_;  // GUARDED_BY(mu_)
  Status fail_status_;            // GUARDED_BY(mu_), set once

  std::mutex space_mu_;
  std::condition_variable space_cv_;

  std::thread flusher_;
  // The leader's own (invariant 4): the segment file it writes.
  std::unique_ptr<File> file_;
  uint64_t file_segment_ = 0;
  bool file_dirty_ = false;

  std::mutex rssp_mu_;  // serializes SetDurableRssp; lock order: rssp_mu_ before seg_mu_
  std::atomic<Lsn> rssp_{kNullLsn};
  uint64_t lowest_ = 0;  // GUARDED_BY(rssp_mu_): lowest segment held

  std::mutex seg_mu_;
  std::vector<std::string> spares_;  // GUARDED_BY(seg_mu_): paths of spare files
  uint64_t next_spare_id_ = 0;       // GUARDED_BY(seg_mu_)

  std::atomic<uint64_t> records_{0}, groups_{0}, bytes_written_{0}, syncs_{0},
      committer_sleeps_{0}, space_waits_{0}, segments_created_{0}, segments_recycled_{0},
      segments_deleted_{0}, handoffs_{0}, flusher_leads_{0};
};

// ---------------------------------------------------------------- Log

Log::Log(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Log::~Log() = default;

Result<std::unique_ptr<Log>> Log::Open(Env* env, const std::string& dir,
                                       const LogOptions& options) {
  if (!IsPowerOfTwo(options.segment_size) || options.segment_size < kMinSegmentSize) {
    return Status::InvalidArgument("log segment_size must be a power of two >= " +
                                   std::to_string(kMinSegmentSize));
  }
  if (!IsPowerOfTwo(options.buffer_size) || options.buffer_size < 4096) {
    return Status::InvalidArgument("log buffer_size must be a power of two >= 4096");
  }
  if (options.flush_interval_us == 0) {
    return Status::InvalidArgument("log flush_interval_us must be > 0");
  }
  if (options.spare_segments < 0 || options.max_spinning_committers < 0) {
    return Status::InvalidArgument("log spare_segments and max_spinning_committers must be >= 0");
  }
  auto impl = std::make_unique<Impl>(env, dir, options);
  RETURN_IF_ERROR(impl->Recover());
  impl->Start();
  return std::unique_ptr<Log>(new Log(std::move(impl)));
}

Result<LogSpan> Log::Append(Slice payload) { return impl_->Append(payload); }
Status Log::WaitDurable(Lsn end) { return impl_->WaitDurable(end); }
Result<LogSpan> Log::Commit(Slice payload) {
  ASSIGN_OR_RETURN(LogSpan span, impl_->Append(payload));
  RETURN_IF_ERROR(impl_->WaitDurable(span.end));
  return span;
}
Lsn Log::Esl() const { return impl_->Esl(); }
Lsn Log::Tail() const { return impl_->Tail(); }
Lsn Log::DurableRssp() const { return impl_->DurableRssp(); }
StoreId Log::store_id() const { return impl_->store_id(); }
Status Log::SetDurableRssp(Lsn rssp) { return impl_->SetDurableRssp(rssp); }
Result<std::unique_ptr<LogReader>> Log::NewReader(Lsn from) const {
  return impl_->NewReader(from);
}
Status Log::Close() { return impl_->Close(); }
size_t Log::MaxPayload() const { return impl_->MaxPayload(); }
const LogOptions& Log::options() const { return impl_->options(); }
Log::Stats Log::GetStats() const { return impl_->GetStats(); }

}  // namespace deuteron::wal
