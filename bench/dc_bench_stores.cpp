// dc_bench's two systems (dc_bench_stores.h).
#include "bench/dc_bench_stores.h"

#include <db_cxx.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "common/env.h"
#include "dc/dc.h"
#include "protocol/data_component.h"

namespace deuteron::bench {
namespace {

// The DC's stated resident allowance outside its budget (dc/dc.md, "The memory
// budget"; tests/dc/dc_memory_test.cpp holds a DC to it).
constexpr uint64_t kDcFixedAllowance = uint64_t{8} << 20;

// ---------------------------------------------------------------- the DC

// The DC as the TC drives it. Every Put takes the next LSN of one shared
// sequence (the TC's log) and is applied with the latest ESL piggy-backed. A
// "log" thread plays the TC's log: every esl_period_us it makes stable what
// was issued by its previous tick (the ESL follows the writes one period
// behind, as a group commit would; an operation may reach the DC before or
// after the ESL passes it). A "checkpointer" thread plays the TC's
// checkpoints (tc/txn_manager.h): once the "log" (key + value bytes put) grew
// rssp_log_bytes or rssp_period_ms passed, it proposes an RSSP at the
// applied watermark (never above the DC's ESL + 1). Two threads, because in
// the TC the ESL a writer piggy-backs comes from the log and moves on while
// a checkpoint runs; until 2026-11-26 one thread did both, and every writer
// waited out each RSSP's FlushAll once the records above the frozen ESL
// reached the DC's limit (Busy).
//
// The applied watermark: before taking an LSN a writer publishes a lower
// bound of it (the sequence's current value + 1) in its slot, and clears the
// slot once the Apply returned. The checkpointer reads the sequence first,
// then the slots; all seq_cst. A writer whose slot it missed took its LSN
// after the read, so every LSN below min(sequence + 1, slots) has been
// applied.
class DcStore final : public KvStore {
 public:
  static constexpr uint64_t kIdle = std::numeric_limits<uint64_t>::max();

  DcStore(const StoreConfig& config, std::unique_ptr<dc::Dc> dc)
      : config_(config), dc_(std::move(dc)), slots_(static_cast<size_t>(config.max_threads)) {
    for (auto& s : slots_) s.store(kIdle);
    ticker_ = std::thread([this] { Tick(); });
    checkpointer_ = std::thread([this] { ProposeRssps(); });
  }
  ~DcStore() override {
    if (dc_ != nullptr) Close().PermitUncheckedError();  // the owner closed it on success
  }

  const char* name() const override { return "dc"; }

  Status Put(int t, Slice key, Slice value) override {
    std::atomic<uint64_t>& slot = slots_[static_cast<size_t>(t)];
    slot.store(next_lsn_.load() + 1);
    const uint64_t lsn = next_lsn_.fetch_add(1) + 1;
    log_bytes_.fetch_add(key.size() + value.size(), std::memory_order_relaxed);
    const RecordOp op{RecordOpKind::kUpsert, key, value, lsn};
    Status s;
    for (;;) {
      Result<ApplyResult> r =
          dc_->Apply(std::span<const RecordOp>(&op, 1), esl_.load(std::memory_order_relaxed), 0);
      if (r.ok()) break;
      // Busy: too much above the ESL; the log thread moves it on.
      if (!r.status().IsBusy()) {
        s = r.status();
        break;
      }
      std::this_thread::yield();
    }
    slot.store(kIdle);
    return s;
  }

  Status Get(int, Slice key, std::string* value, bool* found) override {
    Result<ReadResult> r = dc_->Get(key);
    if (!r.ok()) return r.status();
    *found = r->found;
    if (r->found) *value = std::move(r->value);
    return Status::OK();
  }

  Status Scan(int, Slice start, size_t n, size_t* read) override {
    ScanRequest req;
    req.lower = start.ToString();
    req.limit = static_cast<uint32_t>(n);
    Result<ScanResult> r = dc_->Scan(req);
    if (!r.ok()) return r.status();
    *read = r->items.size();
    return Status::OK();
  }

  void AddCounters(ResultLine* line, uint64_t user_bytes) override {
    const llama::Llama::Stats ls = dc_->TEST_llama()->GetStats();
    const bwtree::BwTree::Stats ts = dc_->TEST_tree()->GetStats();
    const double user_written = static_cast<double>(dc_->user_bytes_applied());
    line->Set("llama_budget_bytes", ls.memory_budget)
        .Set("llama_memory_bytes", ls.memory_bytes)
        .Set("flush_failure_rate", Ratio(static_cast<double>(ls.flush_failures),
                                         static_cast<double>(ls.flushes + ls.flush_failures)))
        .Set("write_amplification", Ratio(static_cast<double>(ls.lss.written_bytes), user_written))
        .Set("lss_written_bytes", ls.lss.written_bytes)
        .Set("user_bytes_applied", dc_->user_bytes_applied())
        // The share of the LSS's writes that were the cleaner's relocations.
        .Set("cleaning_overhead", Ratio(static_cast<double>(ls.bytes_relocated),
                                        static_cast<double>(ls.lss.written_bytes)))
        .Set("segments_cleaned", ls.segments_cleaned)
        .Set("space_amplification", Ratio(static_cast<double>(ls.lss.live_bytes_on_disk),
                                          static_cast<double>(user_bytes)))
        .Set("lss_live_bytes", ls.lss.live_bytes_on_disk)
        // The LSS bytes the pages' states need (dc/llama/llama.md, "Live
        // bytes"), and the segment files held over them: the LSS's own space
        // amplification, as `deuteron stats` reports it (the one above is over
        // the user's key and value bytes, so it also counts the page format).
        .Set("llama_live_bytes", ls.live_bytes)
        .Set("lss_space_amplification", Ratio(static_cast<double>(ls.lss.live_bytes_on_disk),
                                              static_cast<double>(ls.live_bytes)))
        .Set("checkpoints", ls.checkpoints)
        .Set("lss_buffers_written", ls.lss.buffers_written)
        .Set("lss_syncs", ls.lss.syncs)
        .Set("lss_reserve_waits", ls.lss.reserve_waits)
        .Set("eviction_flushes", ls.eviction_flushes)
        .Set("swap_outs", ls.swap_outs)
        .Set("page_loads", ls.page_loads)
        .Set("warm_page_loads", ls.warm_page_loads)  // inner pages (Llama::KeepWarm)
        .Set("warm_swap_outs", ls.warm_swap_outs)
        .Set("eviction_passes", ls.eviction_passes)
        .Set("update_d_cas_failure_rate",
             Ratio(static_cast<double>(ls.update_d_failures), static_cast<double>(ts.writes)))
        .Set("update_r_failures", ls.update_r_failures)
        .Set("tree_update_retry_rate",
             Ratio(static_cast<double>(ts.update_retries), static_cast<double>(ts.writes)))
        .Set("consolidation_failure_rate",
             Ratio(static_cast<double>(ts.failed_consolidations),
                   static_cast<double>(ts.consolidations + ts.failed_consolidations)))
        .Set("split_failure_rate", Ratio(static_cast<double>(ts.failed_splits),
                                         static_cast<double>(ts.splits + ts.failed_splits)))
        .Set("consolidations", ts.consolidations)
        .Set("splits", ts.splits)
        .Set("height", static_cast<uint64_t>(ts.height))
        .Set("rssp_proposals", rssp_proposals_.load());
  }

  // Memory outside the budget's count: the flush-buffer ring, the mapping
  // table's touched entries (8 bytes a page), and the DC's fixed allowance
  // (dc/dc.md, "The memory budget": thread stacks, page-read buffers,
  // LLAMA's per-thread node caches, the allocator's thread caches).
  uint64_t RssAllowance() override {
    // The ring the DC chose for its budget (DcOptions::flush_ring_from_budget).
    const uint64_t ring = uint64_t{config_.lss_buffer_bytes} *
                          static_cast<uint64_t>(dc_->TEST_llama()->lss()->options().buffer_count);
    return ring + dc_->TEST_llama()->GetStats().pages * 8 + kDcFixedAllowance;
  }

  Status Close() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (ticker_.joinable()) ticker_.join();
    if (checkpointer_.joinable()) checkpointer_.join();
    Status s = dc_ == nullptr ? Status::OK() : dc_->Close();
    dc_.reset();
    if (!tick_error_.ok()) return tick_error_;
    if (!rssp_error_.ok()) return rssp_error_;
    return s;
  }

 private:
  // The log: every tick, what was issued by the previous one becomes stable
  // (the ESL).
  void Tick() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::microseconds(config_.esl_period_us));
      if (stop_) break;
      const uint64_t issued = next_lsn_.load();
      const uint64_t esl = logged_;  // what was issued one tick ago
      logged_ = issued;
      if (esl > esl_.load()) {
        esl_.store(esl);
        Status s = dc_->SetEsl(esl, 0);
        if (!s.ok() && tick_error_.ok()) tick_error_ = s;
        if (s.ok()) dc_esl_.store(esl);
      }
    }
  }

  // The TC's checkpoint trigger, on its own thread as in the TC, so that an
  // RSSP (a FlushAll and a sync) never holds the ESL back: every millisecond
  // it looks whether one is due and proposes the applied watermark, never
  // above the ESL the DC was given + 1.
  void ProposeRssps() {
    auto last_rssp = std::chrono::steady_clock::now();
    uint64_t log_at_rssp = 0;
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(1));
      if (stop_) break;
      const auto now = std::chrono::steady_clock::now();
      const uint64_t log = log_bytes_.load(std::memory_order_relaxed);
      const bool due = now - last_rssp >= std::chrono::milliseconds(config_.rssp_period_ms) ||
                       log - log_at_rssp >= config_.rssp_log_bytes;
      if (!due) continue;
      const uint64_t issued = next_lsn_.load();
      uint64_t floor = issued + 1;
      for (auto& s : slots_) floor = std::min(floor, s.load());
      const uint64_t rssp = std::min(floor, dc_esl_.load() + 1);
      if (rssp <= 1) continue;
      last_rssp = now;
      log_at_rssp = log;
      lock.unlock();
      Status s = dc_->ProposeRssp(rssp, 0);
      lock.lock();
      if (!s.ok() && rssp_error_.ok()) rssp_error_ = s;
      rssp_proposals_.fetch_add(1);
    }
  }

  StoreConfig config_;
  std::unique_ptr<dc::Dc> dc_;
  std::atomic<uint64_t> next_lsn_{0};  // LSNs issued so far
  std::atomic<uint64_t> esl_{0};
  std::atomic<uint64_t> dc_esl_{0};  // the ESL the DC accepted (SetEsl returned)
  uint64_t logged_ = 0;  // the ticker's: LSNs issued at its previous tick
  std::vector<std::atomic<uint64_t>> slots_;
  std::atomic<uint64_t> rssp_proposals_{0};
  std::atomic<uint64_t> log_bytes_{0};  // key + value bytes of the Puts: the "log"'s growth
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;   // GUARDED_BY(mu_)
  Status tick_error_;   // written by the ticker, read after it joined
  Status rssp_error_;   // written by the checkpointer, read after it joined
  std::thread ticker_;
  std::thread checkpointer_;
};

// ---------------------------------------------------------------- Berkeley DB

Status BdbError(int rc, const char* what) {
  return Status::IOError(fmt::format("berkeley db {}: {}", what, db_strerror(rc)));
}

// Berkeley DB's B-tree in a private locking environment: DB_INIT_LOCK |
// DB_INIT_MPOOL | DB_THREAD (| DB_PRIVATE | DB_CREATE), no DB_INIT_LOG and no
// DB_INIT_TXN, cache = the budget in one region, deadlock detection on every
// conflict (DB_LOCK_DEFAULT); an operation that loses a deadlock retries.
class BdbStore final : public KvStore {
 public:
  static Result<std::unique_ptr<KvStore>> Open(const StoreConfig& config) {
    auto store = std::unique_ptr<BdbStore>(new BdbStore(config.max_threads, config.budget_bytes));
    store->env_ = std::make_unique<DbEnv>(DB_CXX_NO_EXCEPTIONS);
    DbEnv* env = store->env_.get();
    const uint64_t cache = std::max<uint64_t>(config.budget_bytes, 1 << 20);
    int rc = env->set_cachesize(static_cast<u_int32_t>(cache >> 30),
                                static_cast<u_int32_t>(cache & ((1u << 30) - 1)), 1);
    if (rc != 0) return BdbError(rc, "set_cachesize");
    rc = env->set_lk_detect(DB_LOCK_DEFAULT);
    if (rc != 0) return BdbError(rc, "set_lk_detect");
    rc = env->open(config.dir.c_str(),
                   DB_CREATE | DB_INIT_LOCK | DB_INIT_MPOOL | DB_THREAD | DB_PRIVATE, 0);
    if (rc != 0) return BdbError(rc, "env open");
    store->db_ = std::make_unique<Db>(env, 0);
    rc = store->db_->open(nullptr, "data.db", nullptr, DB_BTREE, DB_CREATE | DB_THREAD, 0644);
    if (rc != 0) return BdbError(rc, "db open");
    return std::unique_ptr<KvStore>(std::move(store));
  }
  ~BdbStore() override { Close().PermitUncheckedError(); }  // the owner closed it on success

  const char* name() const override { return "bdb"; }

  Status Put(int, Slice key, Slice value) override {
    Dbt k(const_cast<char*>(key.data()), static_cast<u_int32_t>(key.size()));
    Dbt v(const_cast<char*>(value.data()), static_cast<u_int32_t>(value.size()));
    for (;;) {
      const int rc = db_->put(nullptr, &k, &v, 0);
      if (rc == 0) return Status::OK();
      if (rc != DB_LOCK_DEADLOCK) return BdbError(rc, "put");
      deadlocks_.fetch_add(1, std::memory_order_relaxed);
    }
  }

  Status Get(int t, Slice key, std::string* value, bool* found) override {
    std::vector<char>& buf = bufs_[static_cast<size_t>(t)].value;
    Dbt k(const_cast<char*>(key.data()), static_cast<u_int32_t>(key.size()));
    for (;;) {
      Dbt v(buf.data(), 0);
      v.set_ulen(static_cast<u_int32_t>(buf.size()));
      v.set_flags(DB_DBT_USERMEM);
      const int rc = db_->get(nullptr, &k, &v, 0);
      if (rc == 0) {
        value->assign(buf.data(), v.get_size());
        *found = true;
        return Status::OK();
      }
      if (rc == DB_NOTFOUND) {
        *found = false;
        return Status::OK();
      }
      if (rc == DB_BUFFER_SMALL) {
        buf.resize(v.get_size());
        continue;
      }
      if (rc != DB_LOCK_DEADLOCK) return BdbError(rc, "get");
      deadlocks_.fetch_add(1, std::memory_order_relaxed);
    }
  }

  Status Scan(int t, Slice start, size_t n, size_t* read) override {
    Buffers& b = bufs_[static_cast<size_t>(t)];
    for (;;) {
      Dbc* cursor = nullptr;
      int rc = db_->cursor(nullptr, &cursor, 0);
      if (rc != 0) return BdbError(rc, "cursor");
      b.key.assign(start.data(), start.data() + start.size());
      b.key.resize(std::max<size_t>(b.key.size(), 256));
      size_t got = 0;
      u_int32_t flag = DB_SET_RANGE;
      while (got < n) {
        Dbt k(b.key.data(), static_cast<u_int32_t>(flag == DB_SET_RANGE ? start.size() : 0));
        k.set_ulen(static_cast<u_int32_t>(b.key.size()));
        k.set_flags(DB_DBT_USERMEM);
        Dbt v(b.value.data(), 0);
        v.set_ulen(static_cast<u_int32_t>(b.value.size()));
        v.set_flags(DB_DBT_USERMEM);
        rc = cursor->get(&k, &v, flag);
        if (rc == DB_BUFFER_SMALL) {
          b.key.resize(std::max<size_t>(b.key.size(), k.get_size()));
          b.value.resize(std::max<size_t>(b.value.size(), v.get_size()));
          if (flag == DB_SET_RANGE) {
            const size_t room = b.key.size();
            b.key.assign(start.data(), start.data() + start.size());
            b.key.resize(std::max(room, start.size()));
          }
          continue;
        }
        if (rc != 0) break;
        ++got;
        flag = DB_NEXT;
      }
      const int rc_close = cursor->close();
      if (rc == DB_LOCK_DEADLOCK || rc_close == DB_LOCK_DEADLOCK) {
        deadlocks_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (rc != 0 && rc != DB_NOTFOUND) return BdbError(rc, "cursor get");
      if (rc_close != 0) return BdbError(rc_close, "cursor close");
      *read = got;
      return Status::OK();
    }
  }

  void AddCounters(ResultLine* line, uint64_t user_bytes) override {
    DB_MPOOL_STAT* ms = nullptr;
    if (env_->memp_stat(&ms, nullptr, 0) == 0 && ms != nullptr) {
      line->Set("bdb_cache_hits", static_cast<uint64_t>(ms->st_cache_hit))
          .Set("bdb_cache_misses", static_cast<uint64_t>(ms->st_cache_miss))
          .Set("bdb_pages_written", static_cast<uint64_t>(ms->st_page_out))
          .Set("bdb_cache_bytes", static_cast<uint64_t>(ms->st_gbytes) * (uint64_t{1} << 30) +
                                      static_cast<uint64_t>(ms->st_bytes));
      free(ms);
    }
    DB_BTREE_STAT* bs = nullptr;
    if (db_->stat(nullptr, &bs, DB_FAST_STAT) == 0 && bs != nullptr) {
      line->Set("bdb_page_size", static_cast<uint64_t>(bs->bt_pagesize));
      free(bs);
    }
    line->Set("bdb_deadlocks", deadlocks_.load());
    (void)user_bytes;
  }

  // Berkeley DB sizes a cache under 500 MB 25% above what was asked for.
  uint64_t RssAllowance() override { return budget_ / 4; }

  Status Close() override {
    Status s;
    if (db_ != nullptr) {
      const int rc = db_->close(0);
      if (rc != 0) s = BdbError(rc, "db close");
      db_.reset();
    }
    if (env_ != nullptr) {
      const int rc = env_->close(0);
      if (rc != 0 && s.ok()) s = BdbError(rc, "env close");
      env_.reset();
    }
    return s;
  }

 private:
  struct Buffers {
    std::vector<char> key = std::vector<char>(256);
    std::vector<char> value = std::vector<char>(4096);
  };
  BdbStore(int threads, size_t budget) : bufs_(static_cast<size_t>(threads)), budget_(budget) {}

  std::unique_ptr<DbEnv> env_;
  std::unique_ptr<Db> db_;
  std::vector<Buffers> bufs_;  // one per worker
  std::atomic<uint64_t> deadlocks_{0};
  const uint64_t budget_;
};

}  // namespace

Result<std::unique_ptr<KvStore>> OpenDcStore(const StoreConfig& config) {
  dc::DcOptions options;  // cleaning and periodic checkpoints on (defaults)
  options.llama.lss.buffer_size = config.lss_buffer_bytes;
  options.llama.lss.segment_size = config.lss_segment_bytes;
  // The budget is LLAMA's cache budget, as Berkeley DB's is its cache size
  // (bench/README.md, "dc_bench": what each side's memory is).
  options.llama.memory_budget = config.budget_bytes;
  options.llama.checkpoint_on_close = false;
  options.llama.clean_in_background = config.clean_in_background;
  options.llama.warm_page_sweeps = config.warm_page_sweeps;
  options.llama.evict_without_waiting = config.evict_without_waiting;
  if (config.heap_purge) options.heap_purge_above = config.budget_bytes;
  // A checkpoint every segment of LSS growth instead of every 64 MiB, so
  // that the short runs see several.
  options.checkpoint_interval_bytes = config.lss_segment_bytes;
  Result<std::unique_ptr<dc::Dc>> dc = dc::Dc::Open(Env::Posix(), config.dir, options);
  if (!dc.ok()) return dc.status();
  return std::unique_ptr<KvStore>(new DcStore(config, std::move(dc).value()));
}

Result<std::unique_ptr<KvStore>> OpenBdbStore(const StoreConfig& config) {
  return BdbStore::Open(config);
}

}  // namespace deuteron::bench
