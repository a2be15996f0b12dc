// CheckHistory: Elle's list-append inference (history.md, "The checker").
//
// Passes, each linear (or n log n) in the history's size:
//  1. index every append (value -> writer) and note each writer's last
//     append per key (for G1b);
//  2. per key, the version order: the longest list an ok read returned;
//     every other ok read must be a prefix of it (incompatible-order);
//  3. the elements of the version orders (and of incompatible reads): who
//     wrote them (garbage-read, G1a, duplicate-elements); an info
//     transaction whose append was read is counted committed;
//  4. each ok transaction's reads against its own earlier reads and appends
//     (internal), and each read's last element (G1b);
//  5. lost appends from real time: an ok append must be in every read whose
//     transaction began after the append's transaction ended;
//  6. the ww, wr and rw edges between committed transactions, Tarjan's
//     strongly connected components, and per component one short cycle of
//     the strongest kind it holds (G0, G1c, G-single, G2).
#include "tc/crash/history/isolation_checker.h"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "common/json.h"

namespace deuteron::crash {

size_t IsolationReport::count(std::string_view kind) const {
  auto it = counts.find(std::string(kind));
  return it == counts.end() ? 0 : it->second;
}

namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

enum EdgeKind : uint8_t { kWW = 1, kWR = 2, kRW = 4 };

const char* EdgeName(uint8_t kinds) {
  if (kinds & kWW) return "ww";
  if (kinds & kWR) return "wr";
  return "rw";
}

struct Writer {
  uint32_t txn;      // index into txns
  uint32_t key;      // key id
  bool last_in_txn;  // the writer's last append to this key
};

struct ReadRef {
  uint32_t txn;
  const std::vector<uint64_t>* list;
};

class Checker {
 public:
  explicit Checker(const std::vector<HistoryTxn>& txns) : txns_(txns) {}

  IsolationReport Run() {
    report_.txns_checked = txns_.size();
    for (const HistoryTxn& t : txns_) report_.ops_checked += t.ops.size();
    IndexAppends();
    BuildVersionOrders();
    CheckElements();
    CheckInternalAndIntermediate();
    CheckLostAppends();
    BuildGraph();
    FindCycles();
    return std::move(report_);
  }

 private:
  void Note(const std::string& kind, const std::string& detail) {
    size_t& n = report_.counts[kind];
    if (++n <= IsolationReport::kMaxListedPerKind) report_.anomalies.push_back(kind + ": " + detail);
  }
  std::string T(uint32_t txn) const { return "T" + std::to_string(txns_[txn].id); }
  const std::string& KeyName(uint32_t key) const { return key_names_[key]; }

  uint32_t KeyId(const std::string& key) {
    auto [it, inserted] = key_ids_.try_emplace(key, static_cast<uint32_t>(key_names_.size()));
    if (inserted) {
      key_names_.push_back(key);
      reads_.emplace_back();
      order_.emplace_back(nullptr);
    }
    return it->second;
  }

  // 1.
  void IndexAppends() {
    for (uint32_t t = 0; t < txns_.size(); ++t) {
      const auto& ops = txns_[t].ops;
      for (size_t i = 0; i < ops.size(); ++i) {
        const HistoryOp& op = ops[i];
        const uint32_t key = KeyId(op.key);
        if (op.kind == HistoryOp::Kind::kRead) {
          if (txns_[t].outcome == TxnOutcome::kOk && op.read.has_value()) reads_[key].push_back({t, &*op.read});
          continue;
        }
        bool last = true;
        for (size_t j = i + 1; j < ops.size() && last; ++j) {
          last = !(ops[j].kind == HistoryOp::Kind::kAppend && ops[j].key == op.key);
        }
        auto [it, inserted] = writers_.try_emplace(op.value, Writer{t, key, last});
        if (!inserted) {
          Note("duplicate-append", "value " + std::to_string(op.value) + " appended by " + T(it->second.txn) +
                                       " and " + T(t));
        }
      }
    }
  }

  // 2.
  void BuildVersionOrders() {
    incompatible_.assign(key_names_.size(), {});
    for (uint32_t k = 0; k < key_names_.size(); ++k) {
      const std::vector<uint64_t>* longest = nullptr;
      for (const ReadRef& r : reads_[k]) {
        if (longest == nullptr || r.list->size() > longest->size()) longest = r.list;
      }
      order_[k] = longest;
      if (longest == nullptr) continue;
      for (const ReadRef& r : reads_[k]) {
        if (r.list == longest) continue;
        if (!std::equal(r.list->begin(), r.list->end(), longest->begin())) {
          incompatible_[k].push_back(r.list);
          Note("incompatible-order", "key " + KeyName(k) + ": " + T(r.txn) + " read " + Show(*r.list) +
                                         ", not a prefix of " + Show(*longest));
        }
      }
      // Position of each element in the version order (first occurrence).
      for (size_t i = 0; i < longest->size(); ++i) {
        auto w = writers_.find((*longest)[i]);
        if (w != writers_.end() && w->second.key == k) position_.try_emplace((*longest)[i], static_cast<uint32_t>(i));
      }
    }
  }

  static std::string Show(const std::vector<uint64_t>& list) {
    std::string out = "[";
    const size_t shown = std::min<size_t>(list.size(), 12);
    for (size_t i = 0; i < shown; ++i) out += (i ? "," : "") + std::to_string(list[i]);
    if (shown < list.size()) out += ",... (" + std::to_string(list.size()) + " elements)";
    return out + "]";
  }

  // 3.
  void CheckList(uint32_t k, const std::vector<uint64_t>& list) {
    std::unordered_set<uint64_t> seen;
    seen.reserve(list.size());
    for (const uint64_t v : list) {
      if (!seen.insert(v).second) {
        Note("duplicate-elements", "key " + KeyName(k) + ": " + std::to_string(v) + " twice in " + Show(list));
      }
      auto it = writers_.find(v);
      if (it == writers_.end() || it->second.key != k) {
        Note("garbage-read", "key " + KeyName(k) + ": element " + std::to_string(v) + " was never appended to it");
        continue;
      }
      const HistoryTxn& w = txns_[it->second.txn];
      if (w.outcome == TxnOutcome::kFail) {
        if (reported_aborted_.insert(v).second) {
          Note("G1a", "key " + KeyName(k) + ": element " + std::to_string(v) + " of failed " + T(it->second.txn) +
                          " was read");
        }
      } else if (w.outcome == TxnOutcome::kInfo) {
        observed_info_[it->second.txn] = true;
      }
    }
  }

  void CheckElements() {
    observed_info_.assign(txns_.size(), false);
    for (uint32_t k = 0; k < key_names_.size(); ++k) {
      if (order_[k] != nullptr) CheckList(k, *order_[k]);
      for (const std::vector<uint64_t>* r : incompatible_[k]) CheckList(k, *r);
    }
  }

  bool Committed(uint32_t t) const {
    return txns_[t].outcome == TxnOutcome::kOk || (txns_[t].outcome == TxnOutcome::kInfo && observed_info_[t]);
  }

  // 4.
  void CheckInternalAndIntermediate() {
    struct State {
      const std::vector<uint64_t>* base = nullptr;  // the last read (null: not read yet)
      std::vector<uint64_t> extra;                  // appended since
    };
    std::unordered_map<std::string_view, State> state;
    for (uint32_t t = 0; t < txns_.size(); ++t) {
      if (txns_[t].outcome != TxnOutcome::kOk) continue;
      state.clear();
      for (const HistoryOp& op : txns_[t].ops) {
        State& s = state[op.key];
        if (op.kind == HistoryOp::Kind::kAppend) {
          s.extra.push_back(op.value);
          continue;
        }
        if (!op.read.has_value()) continue;
        const std::vector<uint64_t>& r = *op.read;
        if (s.base != nullptr || !s.extra.empty()) {
          const size_t base_n = s.base ? s.base->size() : 0;
          bool consistent;
          if (s.base != nullptr) {
            consistent = r.size() == base_n + s.extra.size() && std::equal(s.base->begin(), s.base->end(), r.begin()) &&
                         std::equal(s.extra.begin(), s.extra.end(), r.begin() + static_cast<ptrdiff_t>(base_n));
          } else {
            // Not read before: the read must end with this transaction's appends.
            consistent = r.size() >= s.extra.size() &&
                         std::equal(s.extra.begin(), s.extra.end(), r.end() - static_cast<ptrdiff_t>(s.extra.size()));
          }
          if (!consistent) {
            Note("internal", T(t) + " read key " + op.key + " as " + Show(r) +
                                 ", not as its own earlier reads and appends imply");
          }
        }
        s.base = &r;
        s.extra.clear();
        if (!r.empty()) {
          auto it = writers_.find(r.back());
          if (it != writers_.end() && it->second.txn != t && !it->second.last_in_txn &&
              txns_[it->second.txn].outcome != TxnOutcome::kFail) {
            Note("G1b", T(t) + " read key " + op.key + " ending at " + std::to_string(r.back()) + ", an intermediate append of " +
                            T(it->second.txn));
          }
        }
      }
    }
  }

  // 5.
  void CheckLostAppends() {
    // Per key, (start, length) of its prefix-compatible ok reads by start,
    // and the shortest length among each suffix of them.
    std::vector<std::vector<std::pair<int64_t, size_t>>> by_start(key_names_.size());
    std::vector<std::vector<size_t>> suffix_min(key_names_.size());
    for (uint32_t k = 0; k < key_names_.size(); ++k) {
      const std::unordered_set<const std::vector<uint64_t>*> bad(incompatible_[k].begin(), incompatible_[k].end());
      auto& reads = by_start[k];
      for (const ReadRef& r : reads_[k]) {
        if (txns_[r.txn].start_us >= 0 && !bad.count(r.list)) reads.emplace_back(txns_[r.txn].start_us, r.list->size());
      }
      std::sort(reads.begin(), reads.end());
      suffix_min[k].assign(reads.size() + 1, std::numeric_limits<size_t>::max());
      for (size_t i = reads.size(); i-- > 0;) suffix_min[k][i] = std::min(suffix_min[k][i + 1], reads[i].second);
    }
    // In history order, so that the same history always lists the same ones.
    for (uint32_t ti = 0; ti < txns_.size(); ++ti) {
      const HistoryTxn& t = txns_[ti];
      if (t.outcome != TxnOutcome::kOk || t.end_us < 0) continue;
      for (const HistoryOp& op : t.ops) {
        if (op.kind == HistoryOp::Kind::kAppend) CheckLostAppend(ti, op.value, by_start, suffix_min);
      }
    }
  }

  void CheckLostAppend(uint32_t ti, uint64_t value,
                       const std::vector<std::vector<std::pair<int64_t, size_t>>>& by_start,
                       const std::vector<std::vector<size_t>>& suffix_min) {
    const HistoryTxn& t = txns_[ti];
    auto wi = writers_.find(value);
    if (wi == writers_.end() || wi->second.txn != ti) return;  // a duplicate append, reported
    const Writer& w = wi->second;
    const auto& reads = by_start[w.key];
    const auto first = std::upper_bound(reads.begin(), reads.end(),
                                        std::make_pair(t.end_us, std::numeric_limits<size_t>::max()));
    if (first == reads.end()) return;
    const size_t min_len = suffix_min[w.key][static_cast<size_t>(first - reads.begin())];
    auto pos = position_.find(value);
    const size_t needed = pos == position_.end() ? std::numeric_limits<size_t>::max() : pos->second + size_t{1};
    if (min_len < needed) {
      Note("lost-append", "key " + KeyName(w.key) + ": " + std::to_string(value) + " appended by " + T(w.txn) +
                              " (acknowledged at " + std::to_string(t.end_us) + " us) is missing from a read of " +
                              std::to_string(min_len) + " elements that began after it");
    }
  }

  // 6.
  struct Edge {
    uint32_t from, to;
    uint8_t kinds;
  };

  void AddEdge(uint32_t from_txn, uint32_t to_txn, uint8_t kind) {
    if (from_txn == to_txn || !Committed(from_txn) || !Committed(to_txn)) return;
    edges_.push_back({from_txn, to_txn, kind});
  }

  void BuildGraph() {
    auto writer_of = [&](uint64_t v, uint32_t k) -> uint32_t {
      auto it = writers_.find(v);
      return it == writers_.end() || it->second.key != k ? kNone : it->second.txn;
    };
    for (uint32_t k = 0; k < key_names_.size(); ++k) {
      const std::vector<uint64_t>* order = order_[k];
      if (order == nullptr) continue;
      // ww: consecutive elements of the version order.
      for (size_t i = 0; i + 1 < order->size(); ++i) {
        const uint32_t a = writer_of((*order)[i], k), b = writer_of((*order)[i + 1], k);
        if (a != kNone && b != kNone) AddEdge(a, b, kWW);
      }
      for (const ReadRef& r : reads_[k]) {
        const std::vector<uint64_t>& list = *r.list;
        // wr: the writer of the last element read.
        if (!list.empty()) {
          const uint32_t w = writer_of(list.back(), k);
          if (w != kNone) AddEdge(w, r.txn, kWR);
        }
        // rw: the writer of the element after the prefix read, when the
        // read is a prefix of the version order.
        if (list.size() < order->size() && std::equal(list.begin(), list.end(), order->begin())) {
          const uint32_t w = writer_of((*order)[list.size()], k);
          if (w != kNone) AddEdge(r.txn, w, kRW);
        }
      }
    }
    // Merge parallel edges, then adjacency in CSR form.
    std::sort(edges_.begin(), edges_.end(), [](const Edge& a, const Edge& b) {
      return a.from != b.from ? a.from < b.from : a.to < b.to;
    });
    std::vector<Edge> merged;
    for (const Edge& e : edges_) {
      if (!merged.empty() && merged.back().from == e.from && merged.back().to == e.to) {
        merged.back().kinds |= e.kinds;
      } else {
        merged.push_back(e);
      }
    }
    edges_ = std::move(merged);
    offsets_.assign(txns_.size() + 1, 0);
    for (const Edge& e : edges_) ++offsets_[e.from + 1];
    for (size_t i = 1; i < offsets_.size(); ++i) offsets_[i] += offsets_[i - 1];
  }

  void FindCycles() {
    Graph whole;
    whole.node.resize(txns_.size());
    for (uint32_t t = 0; t < txns_.size(); ++t) whole.node[t] = t;
    whole.edges = std::move(edges_);
    whole.offsets = std::move(offsets_);
    for (const auto& comp : whole.Components(kWW | kWR | kRW)) ReportComponent(whole.Sub(comp, kWW | kWR | kRW));
  }

  // A directed graph in CSR form over nodes 0..n-1, node[i] its transaction.
  struct Graph {
    std::vector<uint32_t> node;
    std::vector<Edge> edges;  // sorted by from
    std::vector<uint32_t> offsets;

    size_t size() const { return node.size(); }

    // The subgraph induced by `nodes` (local ids of this graph), edges
    // meeting `mask` only.
    Graph Sub(const std::vector<uint32_t>& nodes, uint8_t mask) const {
      Graph g;
      std::unordered_map<uint32_t, uint32_t> local;
      std::vector<uint32_t> sorted = nodes;
      std::sort(sorted.begin(), sorted.end());
      for (uint32_t v : sorted) {
        local.emplace(v, static_cast<uint32_t>(g.node.size()));
        g.node.push_back(node[v]);
      }
      g.offsets.assign(sorted.size() + 1, 0);
      for (uint32_t v : sorted) {
        for (uint32_t i = offsets[v]; i < offsets[v + 1]; ++i) {
          auto it = local.find(edges[i].to);
          if (it == local.end() || (edges[i].kinds & mask) == 0) continue;
          g.edges.push_back({local[v], it->second, static_cast<uint8_t>(edges[i].kinds & mask)});
        }
        g.offsets[local[v] + 1] = static_cast<uint32_t>(g.edges.size());
      }
      return g;
    }

    // Tarjan's algorithm, iterative, over the edges meeting `mask`: the
    // components of two or more nodes (local ids).
    std::vector<std::vector<uint32_t>> Components(uint8_t mask) const {
      const size_t n = size();
      std::vector<uint32_t> index(n, kNone), low(n, 0);
      std::vector<char> on_stack(n, 0);
      std::vector<uint32_t> stack;
      std::vector<std::pair<uint32_t, uint32_t>> call;  // (node, next edge)
      std::vector<std::vector<uint32_t>> out;
      uint32_t counter = 0;
      for (uint32_t root = 0; root < n; ++root) {
        if (index[root] != kNone || offsets[root + 1] == offsets[root]) continue;
        call.push_back({root, offsets[root]});
        index[root] = low[root] = counter++;
        stack.push_back(root);
        on_stack[root] = 1;
        while (!call.empty()) {
          const uint32_t v = call.back().first;
          if (call.back().second < offsets[v + 1]) {
            const Edge& e = edges[call.back().second++];
            if ((e.kinds & mask) == 0) continue;
            const uint32_t w = e.to;
            if (index[w] == kNone) {
              index[w] = low[w] = counter++;
              stack.push_back(w);
              on_stack[w] = 1;
              call.push_back({w, offsets[w]});
            } else if (on_stack[w]) {
              low[v] = std::min(low[v], index[w]);
            }
            continue;
          }
          call.pop_back();
          if (!call.empty()) low[call.back().first] = std::min(low[call.back().first], low[v]);
          if (low[v] == index[v]) {
            std::vector<uint32_t> comp;
            uint32_t w;
            do {
              w = stack.back();
              stack.pop_back();
              on_stack[w] = 0;
              comp.push_back(w);
            } while (w != v);
            if (comp.size() > 1) out.push_back(std::move(comp));
          }
        }
      }
      return out;
    }

    // The shortest path from `from` to `to` over edges meeting `mask`, as
    // its nodes (from first, to last); empty when there is none.
    std::vector<uint32_t> Path(uint32_t from, uint32_t to, uint8_t mask) const {
      std::vector<uint32_t> parent(size(), kNone);
      std::vector<char> seen(size(), 0);
      std::deque<uint32_t> queue{from};
      seen[from] = 1;
      while (!queue.empty() && !seen[to]) {
        const uint32_t v = queue.front();
        queue.pop_front();
        for (uint32_t i = offsets[v]; i < offsets[v + 1]; ++i) {
          const Edge& e = edges[i];
          if ((e.kinds & mask) == 0 || seen[e.to]) continue;
          seen[e.to] = 1;
          parent[e.to] = v;
          queue.push_back(e.to);
        }
      }
      if (!seen[to]) return {};
      std::vector<uint32_t> path;
      for (uint32_t v = to; v != from; v = parent[v]) path.push_back(v);
      path.push_back(from);
      std::reverse(path.begin(), path.end());
      return path;
    }

    // A cycle through the edge a -> b (local ids) closed by a path from b
    // back to a over `mask`: its nodes, a first; empty when none.
    std::vector<uint32_t> CycleVia(uint32_t a, uint32_t b, uint8_t mask) const {
      std::vector<uint32_t> path = Path(b, a, mask);
      if (path.empty()) return path;
      path.pop_back();  // a itself
      path.insert(path.begin(), a);
      return path;
    }

    uint8_t KindsBetween(uint32_t a, uint32_t b) const {
      for (uint32_t i = offsets[a]; i < offsets[a + 1]; ++i) {
        if (edges[i].to == b) return edges[i].kinds;
      }
      return 0;
    }
  };

  // "T1 -ww-> T2 -rw-> T1": `cycle` lists its nodes once (local ids of g);
  // step i shows the kind of edge allowed by masks[i].
  std::string ShowCycle(const Graph& g, const std::vector<uint32_t>& cycle, const std::vector<uint8_t>& masks) const {
    std::string out = T(g.node[cycle[0]]);
    for (size_t i = 0; i < cycle.size(); ++i) {
      const uint32_t a = cycle[i], b = cycle[(i + 1) % cycle.size()];
      out += std::string(" -") + EdgeName(g.KindsBetween(a, b) & masks[i]) + "-> " + T(g.node[b]);
    }
    return out;
  }

  // One cycle of the strongest kind in a strongly connected component.
  void ReportComponent(const Graph& comp) {
    // G0, then G1c: a cycle within the ww (then ww and wr) edges.
    for (const auto& [mask, kind] : {std::pair<uint8_t, const char*>{kWW, "G0"}, {kWW | kWR, "G1c"}}) {
      const auto sub = comp.Components(mask);
      if (sub.empty()) continue;
      const Graph g = comp.Sub(sub[0], mask);
      for (uint32_t i = g.offsets[0]; i < g.offsets[1]; ++i) {
        std::vector<uint32_t> cycle = g.CycleVia(0, g.edges[i].to, mask);
        if (cycle.empty()) continue;
        Note(kind, "cycle " + ShowCycle(g, cycle, std::vector<uint8_t>(cycle.size(), mask)));
        return;
      }
    }
    // G-single: an rw edge a -> b and a path of ww/wr edges from b to a.
    constexpr int kMaxTries = 256;
    int tries = 0;
    for (const Edge& e : comp.edges) {
      if ((e.kinds & kRW) == 0) continue;
      if (++tries > kMaxTries) break;
      std::vector<uint32_t> cycle = comp.CycleVia(e.from, e.to, kWW | kWR);
      if (cycle.empty()) continue;
      std::vector<uint8_t> masks(cycle.size(), kWW | kWR);
      masks[0] = kRW;
      Note("G-single", "cycle " + ShowCycle(comp, cycle, masks));
      return;
    }
    // G2: any cycle; every one has two or more rw edges. Show rw wherever
    // a step has it.
    const Edge& e = comp.edges.front();
    std::vector<uint32_t> cycle = comp.CycleVia(e.from, e.to, kWW | kWR | kRW);
    assert(!cycle.empty() && "every edge of a strongly connected component lies on a cycle");
    if (cycle.empty()) return;
    std::vector<uint8_t> masks(cycle.size(), kRW);
    for (size_t i = 0; i < cycle.size(); ++i) {
      if ((comp.KindsBetween(cycle[i], cycle[(i + 1) % cycle.size()]) & kRW) == 0) masks[i] = kWW | kWR;
    }
    Note("G2", "cycle " + ShowCycle(comp, cycle, masks));
  }

  const std::vector<HistoryTxn>& txns_;
  IsolationReport report_;
  std::unordered_map<std::string, uint32_t> key_ids_;
  std::vector<std::string> key_names_;
  std::vector<std::vector<ReadRef>> reads_;              // ok reads, by key
  std::vector<const std::vector<uint64_t>*> order_;      // version order, by key
  std::vector<std::vector<const std::vector<uint64_t>*>> incompatible_;  // by key
  std::unordered_map<uint64_t, Writer> writers_;
  std::unordered_map<uint64_t, uint32_t> position_;      // element -> index in its key's order
  std::unordered_set<uint64_t> reported_aborted_;
  std::vector<char> observed_info_;
  std::vector<Edge> edges_;        // until FindCycles takes them
  std::vector<uint32_t> offsets_;
};

}  // namespace

IsolationReport CheckHistory(const History& history) { return CheckHistory(history.transactions()); }

IsolationReport CheckHistory(const std::vector<HistoryTxn>& txns) { return Checker(txns).Run(); }

std::string ReportToJson(const IsolationReport& report) {
  std::string out = "{\"ops_checked\":" + std::to_string(report.ops_checked) +
                    ",\"txns_checked\":" + std::to_string(report.txns_checked) + ",\"counts\":{";
  bool first = true;
  for (const auto& [kind, n] : report.counts) {
    if (!first) out.push_back(',');
    first = false;
    AppendJsonString(&out, kind);
    out += ":" + std::to_string(n);
  }
  out += "},\"anomalies\":[";
  for (size_t i = 0; i < report.anomalies.size(); ++i) {
    if (i > 0) out.push_back(',');
    AppendJsonString(&out, report.anomalies[i]);
  }
  out += "]}";
  return out;
}

}  // namespace deuteron::crash
