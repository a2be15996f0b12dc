// Bw-tree node formats: the payload bytes of the LLAMA data nodes that make up
// a Bw-tree page (a base node, leaf or inner, and the deltas above it). The
// prose, with byte layouts, is in dc/bwtree/node_format.md; keep both in step.
//
// All integers are little-endian fixed width (common/coding.h). Decoders never
// read outside the payload they are given and report malformed bytes as
// Corruption. Views (BaseView, DeltaView) point into the payload, copy
// nothing, and stay valid only while the payload does (for a page read from
// LLAMA: while the caller holds its epoch guard).
//
// Thread safety: pure functions; views are immutable values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/slice.h"
#include "common/status.h"
#include "dc/llama/lss_format.h"

namespace deuteron::bwtree {

using llama::PageId;

// "No position hint" in a record delta.
inline constexpr uint32_t kNoHint = 0xffffffffu;

// ---- Base nodes ----------------------------------------------------------------

// Values 1 and 2 were the bases without a key prefix table, 3 the leaf with
// fixed-width record fields (all retired; they read as Corruption).
enum class NodeType : uint8_t {
  kInner = 4,  // level > 0: entries (separator, child PID)
  kLeaf = 5,   // level 0: records (key, value, LSN, tombstone), varint fields
};

// The first 8 bytes of a key, zero-padded, read as a big-endian number. It
// is monotone: a <= b bytewise implies KeyPrefix(a) <= KeyPrefix(b), so
// unequal prefixes order two keys without reading them.
uint64_t KeyPrefix(Slice key);

inline constexpr size_t kBaseFixedHeaderSize = 24;
// Bytes per entry in a base's slot table: an 8-byte key prefix and a 4-byte
// payload offset.
inline constexpr size_t kBaseSlotSize = 12;
// Header flag bits.
inline constexpr uint8_t kBaseHighInfinite = 1;
// Leaf record flag bits.
inline constexpr uint8_t kRecordTombstone = 1;
// The fewest bytes a leaf record takes in a base: flags, two one-byte
// lengths and a one-byte LSN.
inline constexpr size_t kMinLeafEntrySize = 4;

// The node's key range [low_key, high_key) and its B-link right sibling.
struct BaseHeader {
  NodeType type = NodeType::kLeaf;
  uint8_t level = 0;          // 0 for a leaf, > 0 for an inner node
  Slice low_key;              // inclusive; empty for the leftmost node
  bool high_infinite = true;  // no upper bound (the rightmost node)
  Slice high_key;             // exclusive, unless high_infinite
  PageId right_sibling = 0;   // 0: none
};

// A leaf record. A tombstone (deleted key) has an empty value and keeps the
// delete's LSN so that redoing the delete stays idempotent until the RSSP
// passes it.
struct LeafRecord {
  Slice key;
  Slice value;
  uint64_t lsn = 0;
  bool tombstone = false;
};

// An inner entry: keys in [separator, next entry's separator) live under child.
struct InnerEntry {
  Slice separator;
  PageId child = 0;
};

// Payload sizes and encoders. Records/entries must be sorted strictly
// ascending by key (bytewise) and lie in [low_key, high_key); the encoders
// assert it in debug builds.
// REQUIRES: every key and value is shorter than 4 GiB and the whole payload
// fits in 4 GiB.
size_t LeafBaseSize(const BaseHeader& header, const std::vector<LeafRecord>& records);
size_t InnerBaseSize(const BaseHeader& header, const std::vector<InnerEntry>& entries);
// Write exactly *Size() bytes at dst.
void EncodeLeafBase(const BaseHeader& header, const std::vector<LeafRecord>& records, char* dst);
void EncodeInnerBase(const BaseHeader& header, const std::vector<InnerEntry>& entries, char* dst);
std::string EncodeLeafBase(const BaseHeader& header, const std::vector<LeafRecord>& records);
std::string EncodeInnerBase(const BaseHeader& header, const std::vector<InnerEntry>& entries);

// Where a key would go in a base: `index` is the lower bound (first entry
// with key >= the search key), `exact` says that entry's key equals it.
struct BasePosition {
  size_t index = 0;
  bool exact = false;
};

// A read-only view over a base node payload. Parse() checks the header and
// that the slot table fits; each entry access checks that entry's bytes, so
// a lookup costs O(log n) and never reads out of bounds even on a corrupt
// payload. Validate() checks everything (O(n)), for loads and tests.
class BaseView {
 public:
  static Result<BaseView> Parse(Slice payload);
  // Parse() into this view (the hot paths' form: no Result to copy). On an
  // error the view is left unusable.
  Status Init(Slice payload);
  // The entry count in a base payload's header, unchecked, or 0 for a
  // payload shorter than the header (a write's hold test reads only this).
  static size_t CountIn(Slice payload);

  const BaseHeader& header() const { return header_; }
  NodeType type() const { return header_.type; }
  bool is_leaf() const { return header_.type == NodeType::kLeaf; }
  size_t count() const { return count_; }
  Slice payload() const { return payload_; }
  // True when key lies at or above the high key (it belongs to a right sibling).
  bool AboveHigh(Slice key) const { return !header_.high_infinite && key >= header_.high_key; }

  // Entry i's key (leaf key or inner separator). REQUIRES: i < count().
  Result<Slice> KeyAt(size_t i) const;
  // REQUIRES: i < count(); is_leaf() / !is_leaf() respectively.
  Result<LeafRecord> RecordAt(size_t i) const;
  // Appends records 0.. in order, stopping before the first key >= *stop
  // (no stop: all). One sequential pass, for consolidation: each record is
  // checked against its offset-table entry and the payload's bounds.
  // REQUIRES: is_leaf().
  Status AppendRecords(std::vector<LeafRecord>* out, const Slice* stop = nullptr) const;
  Result<InnerEntry> EntryAt(size_t i) const;
  // Inner bases: the entry that routes `key`, the one with the largest
  // separator <= key (< key, before), as *index and *entry; *index =
  // count() when the key lies below every separator.
  Status RouteEntry(Slice key, bool before, size_t* index, InnerEntry* entry) const;

  // Lower bound of `key` over the whole node.
  Result<BasePosition> Find(Slice key) const { return Find(key, 0, count_); }
  // Lower bound of `key` searched in [lo, hi] only: a shortcut range from
  // delta hints. The answer is checked against its neighbours; if the range
  // was wrong (a stale hint) the whole node is searched instead.
  // REQUIRES: lo <= hi (hi may be past count(); it is clamped).
  Result<BasePosition> Find(Slice key, size_t lo, size_t hi) const;

  // A hint for a search about to run: asks for the entry lines where
  // `key` would lie if the node's keys spread evenly over [low, high) by
  // prefix (interpolation), so that the entry's miss overlaps the slot
  // search instead of following it. Reads only the header.
  void PrefetchEntryNear(Slice key) const;

  // Full check: every entry decodes, keys strictly ascending, inside
  // [low_key, high_key); leaf tombstones have empty values.
  Status Validate() const;

 private:
  friend class BaseBuilder;
  // Bytes of entry i: [begin, end) within the payload.
  Result<Slice> EntryBytes(size_t i) const;
  // Inner entry i decoded in place (EntryAt and RouteEntry).
  // REQUIRES: !is_leaf(), i < count().
  Status InnerAt(size_t i, InnerEntry* entry) const;
  // Entry i's key prefix and payload offset (from its slot).
  // REQUIRES: i < count().
  uint64_t PrefixAt(size_t i) const;
  size_t OffsetAt(size_t i) const;
  // <0, 0, >0 as entry i's key compares with `key` (whose prefix is given):
  // by prefix where they differ, by the whole keys otherwise.
  Result<int> CompareAt(size_t i, Slice key, uint64_t prefix) const;
  // The lower bound of key in [lo, hi] by prefix, then by whole keys among
  // the entries sharing its prefix; *exact: that entry's key equals it.
  Result<size_t> LowerBound(Slice key, uint64_t prefix, size_t lo, size_t hi, bool* exact) const;

  Slice payload_;
  BaseHeader header_;
  size_t count_ = 0;
  size_t slots_at_ = 0;    // payload offset of the slot table
  size_t entries_at_ = 0;  // payload offset of the first entry
};

// Builds a base from runs of another base's entries of the same type, copied
// as bytes with their key prefixes (offsets shifted), and new entries (leaf
// records or inner entries, as the header's type says), added in ascending
// key order: what consolidation does without decoding the entries it keeps.
// Each run's entry spans are checked to lie in order inside the payload,
// long enough for an entry (leaf records also end in known flags); the
// lengths inside are left to the reads of the new base, which check every
// entry they decode (a copy never reads outside the old payload).
// REQUIRES: runs and entries are added in strictly ascending key order, all
// in the header's range; views stay valid until Finish().
class BaseBuilder {
 public:
  explicit BaseBuilder(const BaseHeader& header) : header_(header) { pieces_.reserve(16); }
  // Entries [begin, end) of `from` (a base of the header's type). Leaf
  // tombstones with LSN below `purge_bound` are left out and counted in
  // *purged. REQUIRES: begin <= end <= from.count().
  Status AddRun(const BaseView& from, size_t begin, size_t end, uint64_t purge_bound = 0,
                size_t* purged = nullptr);
  // REQUIRES: a leaf header.
  void AddRecord(const LeafRecord& record);
  // REQUIRES: an inner header.
  void AddEntry(const InnerEntry& entry);
  size_t count() const { return count_; }
  // The base payload's size, and the payload written into exactly that many
  // bytes at dst (or returned).
  size_t size() const;
  void Finish(char* dst) const;
  std::string Finish() const;

 private:
  struct Piece {
    const BaseView* from = nullptr;  // a run [begin, end) of `from`, or:
    size_t begin = 0, end = 0;
    LeafRecord record;               // a new record (from == nullptr, a leaf)
    InnerEntry entry;                // a new entry (from == nullptr, inner)
  };
  BaseHeader header_;
  std::vector<Piece> pieces_;
  size_t count_ = 0;
  size_t entry_bytes_ = 0;
};

// ---- Deltas --------------------------------------------------------------------

enum class DeltaType : uint8_t {
  kInsert = 1,           // record: key, value, LSN (key was absent)
  kUpdate = 2,           // record: key, value, LSN (key was present)
  kUpsert = 3,           // record: key, value, LSN (either)
  kDelete = 4,           // record: key, LSN (a tombstone)
  kSplit = 5,            // keys >= separator moved to sibling
  kIndexEntry = 6,       // inner: keys in [separator, next) live under child
  kRemoveNode = 7,       // this node is being merged into its left sibling
  kMerge = 8,            // keys >= separator are in the merged sibling's state
  kIndexTermDelete = 9,  // inner: keys in [separator, next) now live under child
};

inline bool IsRecordDelta(DeltaType t) {
  return t == DeltaType::kInsert || t == DeltaType::kUpdate || t == DeltaType::kUpsert ||
         t == DeltaType::kDelete;
}

// A decoded delta; fields not used by its type are empty/zero.
//  record deltas: key, value (empty for kDelete), lsn, hint
//  kSplit: key = separator, pid = new right sibling
//  kIndexEntry, kIndexTermDelete: key = separator, next / next_infinite, pid = child
//  kMerge: key = separator, pid = the merged (removed) sibling
//  kRemoveNode: nothing
struct DeltaView {
  DeltaType type = DeltaType::kRemoveNode;
  Slice key;
  Slice value;
  uint64_t lsn = 0;
  uint32_t hint = kNoHint;  // record deltas: lower bound of key in the base below
  PageId pid = 0;
  Slice next;
  bool next_infinite = false;

  // Decodes a delta payload in place (exact: trailing bytes are Corruption).
  static Result<DeltaView> Parse(Slice payload);
};

// Encoders. REQUIRES: keys and values shorter than 4 GiB; type is a record
// type for EncodeRecordDelta (value ignored for kDelete).
std::string EncodeRecordDelta(DeltaType type, Slice key, Slice value, uint64_t lsn,
                              uint32_t hint);
std::string EncodeSplitDelta(Slice separator, PageId sibling);
std::string EncodeIndexEntryDelta(Slice separator, PageId child, bool next_infinite, Slice next);
std::string EncodeRemoveNodeDelta();
std::string EncodeMergeDelta(Slice separator, PageId merged_sibling);
std::string EncodeIndexTermDeleteDelta(Slice separator, PageId child, bool next_infinite,
                                       Slice next);
// Re-encodes a decoded delta (with whatever hint it now carries).
std::string EncodeDelta(const DeltaView& d);
// The same into dst, which has room for exactly EncodedDeltaSize(d) bytes
// (the hot path: straight into a LLAMA node, no temporary string).
size_t EncodedDeltaSize(const DeltaView& d);
void EncodeDelta(const DeltaView& d, char* dst);

}  // namespace deuteron::bwtree
