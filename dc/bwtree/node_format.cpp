#include "dc/bwtree/node_format.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>

#include "common/coding.h"
#include "common/prefetch.h"

namespace deuteron::bwtree {
namespace {

// DecodeFixed64/32 as single loads on little-endian hosts (the decoders in
// common/coding.h assemble bytes, which GCC does not merge here).
inline uint64_t Fixed64(const char* p) {
  if constexpr (std::endian::native == std::endian::little) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  } else {
    return DecodeFixed64(p);
  }
}

inline uint32_t Fixed32(const char* p) {
  if constexpr (std::endian::native == std::endian::little) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  } else {
    return DecodeFixed32(p);
  }
}

char* PutBytes(char* p, Slice s) {
  EncodeFixed32(p, static_cast<uint32_t>(s.size()));
  p += 4;
  if (!s.empty()) std::memcpy(p, s.data(), s.size());
  return p + s.size();
}

size_t HeaderSize(const BaseHeader& h, size_t count) {
  return kBaseFixedHeaderSize + h.low_key.size() + (h.high_infinite ? 0 : h.high_key.size()) +
         kBaseSlotSize * count;
}

// Writes the fixed header and the low and high keys; returns where the slot
// table starts.
char* EncodeHeader(const BaseHeader& h, size_t count, char* dst) {
  dst[0] = static_cast<char>(h.type);
  dst[1] = static_cast<char>(h.level);
  dst[2] = static_cast<char>(h.high_infinite ? kBaseHighInfinite : 0);
  dst[3] = 0;
  EncodeFixed32(dst + 4, static_cast<uint32_t>(count));
  EncodeFixed64(dst + 8, h.right_sibling);
  const Slice high = h.high_infinite ? Slice() : h.high_key;
  EncodeFixed32(dst + 16, static_cast<uint32_t>(h.low_key.size()));
  EncodeFixed32(dst + 20, static_cast<uint32_t>(high.size()));
  char* p = dst + kBaseFixedHeaderSize;
  if (!h.low_key.empty()) std::memcpy(p, h.low_key.data(), h.low_key.size());
  p += h.low_key.size();
  if (!high.empty()) std::memcpy(p, high.data(), high.size());
  p += high.size();
  return p;
}

// Writes slot i (its key prefix and payload offset) of the slot table at
// `slots`.
void PutSlot(char* slots, size_t i, Slice key, size_t offset) {
  EncodeFixed64(slots + kBaseSlotSize * i, KeyPrefix(key));
  EncodeFixed32(slots + kBaseSlotSize * i + 8, static_cast<uint32_t>(offset));
}

Status Bad(const char* what) { return Status::Corruption(std::string("bw-tree node: ") + what); }

// A leaf entry: 1 byte flags, varint32 key length, key, varint32 value
// length, value, varint64 LSN (node_format.md). The flags come first so that
// a consolidation copying entries as bytes reads them at the entry's start.
size_t LeafEntrySize(const LeafRecord& r) {
  return 1 + VarintLength(r.key.size()) + r.key.size() + VarintLength(r.value.size()) +
         r.value.size() + VarintLength(r.lsn);
}

char* PutLeafEntry(char* p, const LeafRecord& r) {
  *p++ = static_cast<char>(r.tombstone ? kRecordTombstone : 0);
  p = EncodeVarint32(p, static_cast<uint32_t>(r.key.size()));
  if (!r.key.empty()) std::memcpy(p, r.key.data(), r.key.size());
  p = EncodeVarint32(p + r.key.size(), static_cast<uint32_t>(r.value.size()));
  if (!r.value.empty()) std::memcpy(p, r.value.data(), r.value.size());
  return EncodeVarint64(p + r.value.size(), r.lsn);
}

// Decodes the leaf record at *p, reading nothing at or past `end`; *p moves
// past it. Shared by RecordAt, AppendRecords and the purge in AddRun.
Status DecodeLeafRecord(const char** p, const char* end, LeafRecord* r) {
  const char* q = *p;
  if (q >= end) return Bad("leaf record truncated");
  const auto flags = static_cast<uint8_t>(*q++);
  if ((flags & ~kRecordTombstone) != 0) return Bad("unknown leaf record flags");
  uint32_t klen = 0, vlen = 0;
  q = GetVarint32Ptr(q, end, &klen);
  if (q == nullptr || static_cast<size_t>(end - q) < klen) return Bad("leaf record key truncated");
  r->key = Slice(q, klen);
  q = GetVarint32Ptr(q + klen, end, &vlen);
  if (q == nullptr || static_cast<size_t>(end - q) < vlen) {
    return Bad("leaf record value truncated");
  }
  r->value = Slice(q, vlen);
  q = GetVarint64Ptr(q + vlen, end, &r->lsn);
  if (q == nullptr) return Bad("leaf record LSN truncated");
  r->tombstone = (flags & kRecordTombstone) != 0;
  if (r->tombstone && vlen != 0) return Bad("tombstone with a value");
  *p = q;
  return Status::OK();
}

}  // namespace

uint64_t KeyPrefix(Slice key) {
  const auto* b = reinterpret_cast<const uint8_t*>(key.data());
  if (key.size() >= 8) return Slice::LoadBigEndian64(key.data());
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | (i < key.size() ? b[i] : 0u);
  return v;
}

// ---- Base encoders -------------------------------------------------------------

size_t LeafBaseSize(const BaseHeader& header, const std::vector<LeafRecord>& records) {
  size_t n = HeaderSize(header, records.size());
  for (const LeafRecord& r : records) n += LeafEntrySize(r);
  return n;
}

size_t InnerBaseSize(const BaseHeader& header, const std::vector<InnerEntry>& entries) {
  size_t n = HeaderSize(header, entries.size());
  for (const InnerEntry& e : entries) n += 4 + e.separator.size() + 8;
  return n;
}

void EncodeLeafBase(const BaseHeader& header, const std::vector<LeafRecord>& records, char* dst) {
  assert(header.type == NodeType::kLeaf && header.level == 0);
  const size_t n = records.size();
  char* table = EncodeHeader(header, n, dst);
  char* p = table + kBaseSlotSize * n;
  for (size_t i = 0; i < n; ++i) {
    const LeafRecord& r = records[i];
    assert(i == 0 || records[i - 1].key < r.key);
    assert(!r.tombstone || r.value.empty());
    PutSlot(table, i, r.key, static_cast<size_t>(p - dst));
    p = PutLeafEntry(p, r);
  }
  assert(static_cast<size_t>(p - dst) == LeafBaseSize(header, records));
}

void EncodeInnerBase(const BaseHeader& header, const std::vector<InnerEntry>& entries,
                     char* dst) {
  assert(header.type == NodeType::kInner && header.level > 0);
  const size_t n = entries.size();
  char* table = EncodeHeader(header, n, dst);
  char* p = table + kBaseSlotSize * n;
  for (size_t i = 0; i < n; ++i) {
    const InnerEntry& e = entries[i];
    assert(i == 0 || entries[i - 1].separator < e.separator);
    PutSlot(table, i, e.separator, static_cast<size_t>(p - dst));
    p = PutBytes(p, e.separator);
    EncodeFixed64(p, e.child);
    p += 8;
  }
  assert(static_cast<size_t>(p - dst) == InnerBaseSize(header, entries));
}

std::string EncodeLeafBase(const BaseHeader& header, const std::vector<LeafRecord>& records) {
  std::string s(LeafBaseSize(header, records), '\0');
  EncodeLeafBase(header, records, s.data());
  return s;
}

std::string EncodeInnerBase(const BaseHeader& header, const std::vector<InnerEntry>& entries) {
  std::string s(InnerBaseSize(header, entries), '\0');
  EncodeInnerBase(header, entries, s.data());
  return s;
}

// ---- BaseView --------------------------------------------------------------------

Result<BaseView> BaseView::Parse(Slice payload) {
  BaseView v;
  RETURN_IF_ERROR(v.Init(payload));
  return v;
}

size_t BaseView::CountIn(Slice payload) {
  return payload.size() < kBaseFixedHeaderSize ? 0 : Fixed32(payload.data() + 4);
}

Status BaseView::Init(Slice payload) {
  if (payload.size() < kBaseFixedHeaderSize) return Bad("base shorter than its header");
  const char* d = payload.data();
  BaseView& v = *this;
  v.payload_ = payload;
  const auto type = static_cast<uint8_t>(d[0]);
  const auto level = static_cast<uint8_t>(d[1]);
  const auto flags = static_cast<uint8_t>(d[2]);
  if (type == static_cast<uint8_t>(NodeType::kLeaf)) {
    if (level != 0) return Bad("leaf base with level > 0");
  } else if (type == static_cast<uint8_t>(NodeType::kInner)) {
    if (level == 0) return Bad("inner base with level 0");
  } else if (type >= 1 && type <= 3) {
    // Written by an older build: the bytes are intact but no longer read.
    return Bad(type == 3 ? "retired base node type 3 (leaf with fixed-width record fields)"
                         : "retired base node type (before the key prefix table)");
  } else {
    return Bad("unknown base node type");
  }
  if ((flags & ~kBaseHighInfinite) != 0 || d[3] != 0) return Bad("unknown base flags");
  v.header_.type = static_cast<NodeType>(type);
  v.header_.level = level;
  v.header_.high_infinite = (flags & kBaseHighInfinite) != 0;
  v.count_ = Fixed32(d + 4);
  v.header_.right_sibling = Fixed64(d + 8);
  const uint64_t low_len = Fixed32(d + 16);
  const uint64_t high_len = Fixed32(d + 20);
  if (v.header_.high_infinite && high_len != 0) return Bad("infinite high key with bytes");
  const uint64_t table_at = kBaseFixedHeaderSize + low_len + high_len;
  const uint64_t entries_at = table_at + kBaseSlotSize * static_cast<uint64_t>(v.count_);
  if (entries_at > payload.size()) return Bad("base header or slot table truncated");
  v.header_.low_key = Slice(d + kBaseFixedHeaderSize, low_len);
  v.header_.high_key = Slice(d + kBaseFixedHeaderSize + low_len, high_len);
  v.slots_at_ = table_at;
  v.entries_at_ = entries_at;
  if (v.count_ == 0 && entries_at != payload.size()) return Bad("trailing bytes in empty base");
  return Status::OK();
}

Result<Slice> BaseView::EntryBytes(size_t i) const {
  assert(i < count_);
  const size_t begin = OffsetAt(i);
  const size_t end = i + 1 < count_ ? OffsetAt(i + 1) : payload_.size();
  if (begin < entries_at_ || begin >= end || end > payload_.size()) {
    return Bad("base entry offset out of range");
  }
  return Slice(payload_.data() + begin, end - begin);
}

Result<Slice> BaseView::KeyAt(size_t i) const {
  ASSIGN_OR_RETURN(Slice bytes, EntryBytes(i));
  const char* const end = bytes.data() + bytes.size();
  uint32_t len = 0;
  const char* p = bytes.data();
  if (is_leaf()) {
    p = GetVarint32Ptr(p + 1, end, &len);  // past the flags (the span is not empty)
  } else if (bytes.size() >= 4) {
    len = Fixed32(p);
    p += 4;
  } else {
    p = nullptr;
  }
  if (p == nullptr || static_cast<size_t>(end - p) < len) return Bad("base key truncated");
  return Slice(p, len);
}

Result<LeafRecord> BaseView::RecordAt(size_t i) const {
  assert(is_leaf());
  ASSIGN_OR_RETURN(Slice bytes, EntryBytes(i));
  const char* p = bytes.data();
  const char* const end = bytes.data() + bytes.size();
  LeafRecord r;
  RETURN_IF_ERROR(DecodeLeafRecord(&p, end, &r));
  if (p != end) return Bad("leaf record tail malformed");
  return r;
}

Status BaseView::AppendRecords(std::vector<LeafRecord>* out, const Slice* stop) const {
  assert(is_leaf());
  const char* const end = payload_.data() + payload_.size();
  const char* p = payload_.data() + entries_at_;
  out->reserve(out->size() + count_);
  for (size_t i = 0; i < count_; ++i) {
    if (OffsetAt(i) != static_cast<size_t>(p - payload_.data())) {
      return Bad("base entry offset out of place");
    }
    LeafRecord r;
    RETURN_IF_ERROR(DecodeLeafRecord(&p, end, &r));
    if (stop != nullptr && !(r.key < *stop)) return Status::OK();
    out->push_back(r);
  }
  if (p != end) return Bad("leaf base has trailing bytes");
  return Status::OK();
}

Status BaseView::InnerAt(size_t i, InnerEntry* entry) const {
  assert(!is_leaf() && i < count_);
  // Fixed32 separator length, separator, fixed64 child: exactly its span.
  const size_t begin = OffsetAt(i);
  const size_t end = i + 1 < count_ ? OffsetAt(i + 1) : payload_.size();
  if (begin < entries_at_ || end > payload_.size() || end < begin + 12) {
    return Bad("base entry offset out of range");
  }
  const char* p = payload_.data() + begin;
  const uint32_t len = Fixed32(p);
  if (len != end - begin - 12) return Bad("inner entry length mismatch");
  entry->separator = Slice(p + 4, len);
  entry->child = Fixed64(p + 4 + len);
  return Status::OK();
}

Result<InnerEntry> BaseView::EntryAt(size_t i) const {
  InnerEntry e;
  RETURN_IF_ERROR(InnerAt(i, &e));
  return e;
}

Status BaseView::RouteEntry(Slice key, bool before, size_t* index, InnerEntry* entry) const {
  assert(!is_leaf());
  bool exact = false;
  ASSIGN_OR_RETURN(const size_t pos, LowerBound(key, KeyPrefix(key), 0, count_, &exact));
  const bool take_exact = exact && !before;
  if (!take_exact && pos == 0) {
    *index = count_;
    return Status::OK();
  }
  *index = take_exact ? pos : pos - 1;
  return InnerAt(*index, entry);
}

uint64_t BaseView::PrefixAt(size_t i) const {
  assert(i < count_);
  return Fixed64(payload_.data() + slots_at_ + kBaseSlotSize * i);
}

size_t BaseView::OffsetAt(size_t i) const {
  assert(i < count_);
  return Fixed32(payload_.data() + slots_at_ + kBaseSlotSize * i + 8);
}

Result<int> BaseView::CompareAt(size_t i, Slice key, uint64_t prefix) const {
  const uint64_t p = PrefixAt(i);
  if (p != prefix) return p < prefix ? -1 : 1;
  ASSIGN_OR_RETURN(Slice k, KeyAt(i));
  return k.compare(key);
}

Result<size_t> BaseView::LowerBound(Slice key, uint64_t prefix, size_t lo, size_t hi,
                                     bool* exact) const {
  *exact = false;
  // First over the prefix table alone (8 bytes a probe, no payload access):
  // [lo, hi) narrows to the entries whose prefix equals the key's. Prefixes
  // are monotone in the keys, so every entry before lies below the key and
  // every one after above it.
  const char* slots = payload_.data() + slots_at_;
  // The probes are dependent loads, each likely a cache miss on a cold
  // node: ask for every line of the searched range at once (a few lines;
  // the misses then overlap instead of following one another).
  if (hi - lo > 8) {
    // Four lines a turn (the loop's own instructions were a third of the
    // search's); the last turn may ask for up to three lines past the
    // range, which a prefetch never faults on.
    const char* const end = slots + kBaseSlotSize * hi;
    for (const char* p = slots + kBaseSlotSize * lo; p < end; p += 4 * 64) {
      __builtin_prefetch(p);
      __builtin_prefetch(p + 64);
      __builtin_prefetch(p + 128);
      __builtin_prefetch(p + 192);
    }
  }
  // Branch-free (the outcome of each probe is a coin flip a predictor
  // cannot learn): the answer stays in [lo, lo + n].
  if (lo < hi) {
    size_t n = hi - lo;
    while (n > 1) {
      const size_t half = n / 2;
      lo = Fixed64(slots + kBaseSlotSize * (lo + half)) < prefix ? lo + half : lo;
      n -= half;
    }
    lo += Fixed64(slots + kBaseSlotSize * lo) < prefix ? 1 : 0;
  }
  if (lo == count_ || Fixed64(slots + kBaseSlotSize * lo) != prefix) return lo;
  // Keys sharing the prefix: their end, then whole keys within.
  size_t end = lo + 1;
  for (size_t step = 1; end < count_ && Fixed64(slots + kBaseSlotSize * end) == prefix; step *= 2) {
    end = std::min(count_, end + step);
  }
  while (lo < end) {
    const size_t mid = lo + (end - lo) / 2;
    ASSIGN_OR_RETURN(Slice k, KeyAt(mid));
    const int c = k.compare(key);
    if (c < 0) {
      lo = mid + 1;
    } else if (c > 0) {
      end = mid;
    } else {
      *exact = true;  // keys are unique: the lower bound itself
      return mid;
    }
  }
  return lo;
}

void BaseView::PrefetchEntryNear(Slice key) const {
  if (count_ < 8) return;
  const uint64_t low = KeyPrefix(header_.low_key);  // 0 for the leftmost node
  const uint64_t high = header_.high_infinite ? ~uint64_t{0} : KeyPrefix(header_.high_key);
  const uint64_t p = KeyPrefix(key);
  if (p < low || p >= high) return;
  // Entries are stored in key order: the key's share of the prefix range
  // is about its share of the entry bytes. Both terms are cut to 32 bits so
  // that one 64-bit multiply and divide give the offset (d < range, so
  // off <= span; span < 2^32, offsets being 32-bit). A fifth fewer
  // instructions than the same in doubles (callgrind).
  uint64_t range = high - low;
  uint64_t d = p - low;
  const int shift = std::max(0, static_cast<int>(std::bit_width(range)) - 32);
  range >>= shift;
  d >>= shift;
  const size_t span = payload_.size() - entries_at_;
  const size_t off = std::min<size_t>(span - 1, d * span / range);
  // Two lines either side: for keys spread evenly, the entry's index is off
  // the guess by about sqrt(n)/2 entries (~5 at 90), under 2 lines of
  // 22-byte records (random8). 1 or 3 lines a side measured worse (performance.md).
  PrefetchLines(payload_.data() + entries_at_ + off, 5, /*lines_before=*/2);
}

Result<BasePosition> BaseView::Find(Slice key, size_t lo, size_t hi) const {
  assert(lo <= hi);
  if (hi > count_) hi = count_;
  if (lo > hi) lo = hi;
  const uint64_t prefix = KeyPrefix(key);
  BasePosition result;
  ASSIGN_OR_RETURN(size_t pos, LowerBound(key, prefix, lo, hi, &result.exact));
  if (lo == 0 && hi == count_) {
    // The whole node: the prefix table placed the key (whole keys where
    // prefixes tie), so only the neighbours' prefixes are checked, from the
    // slot lines already read.
    if ((pos > 0 && PrefixAt(pos - 1) > prefix) || (pos < count_ && PrefixAt(pos) < prefix)) {
      return Bad("base keys out of order");
    }
    result.index = pos;
    return result;
  }
  // A shortcut range: check the answer against its neighbours (by prefix
  // where that decides); a range from stale hints fails here, and then the
  // whole node is searched.
  bool ok = true;
  if (pos > 0) {
    ASSIGN_OR_RETURN(int c, CompareAt(pos - 1, key, prefix));
    ok = c < 0;
  }
  if (ok && pos < count_ && !result.exact) {
    ASSIGN_OR_RETURN(int c, CompareAt(pos, key, prefix));
    ok = c > 0;
  }
  if (!ok) return Find(key, 0, count_);
  result.index = pos;
  return result;
}

Status BaseView::Validate() const {
  if (count_ > 0) {
    const size_t first = OffsetAt(0);
    if (first != entries_at_) return Bad("first base entry not after the slot table");
  }
  Slice prev;
  for (size_t i = 0; i < count_; ++i) {
    Slice key;
    if (is_leaf()) {
      ASSIGN_OR_RETURN(LeafRecord r, RecordAt(i));
      key = r.key;
    } else {
      ASSIGN_OR_RETURN(InnerEntry e, EntryAt(i));
      key = e.separator;
    }
    if (PrefixAt(i) != KeyPrefix(key)) return Bad("base key prefix does not match its key");
    if (i > 0 && !(prev < key)) return Bad("base keys not strictly ascending");
    if (key < header_.low_key) return Bad("base key below the low key");
    if (AboveHigh(key)) return Bad("base key at or above the high key");
    prev = key;
  }
  if (!header_.high_infinite && !(header_.low_key < header_.high_key)) {
    return Bad("base low key not below high key");
  }
  return Status::OK();
}

// ---- BaseBuilder -----------------------------------------------------------------

Status BaseBuilder::AddRun(const BaseView& from, size_t begin, size_t end, uint64_t purge_bound,
                           size_t* purged) {
  assert(from.type() == header_.type && begin <= end && end <= from.count_);
  const char* data = from.payload_.data();
  const size_t size = from.payload_.size();
  // Each entry's span lies inside the entries, in order, and holds at least
  // an entry's fixed fields: for a leaf record its flags, two lengths and an
  // LSN (kMinLeafEntrySize bytes), starting with known flags; for an inner
  // entry a length and a child (12 bytes). The lengths inside are not
  // decoded, except a tombstone's when a purge may drop it: every read of
  // the new base checks its entry's own bytes (RecordAt, KeyAt, InnerAt), as
  // Validate checks them all. Counted in locals: the loop reads through char
  // pointers, which may alias the members, so member updates would be stored
  // every entry.
  const bool leaf = from.is_leaf();
  const size_t fixed = leaf ? kMinLeafEntrySize : 12;
  size_t run_begin = begin;
  size_t kept = 0, kept_bytes = 0;
  size_t at = begin < from.count_ ? from.OffsetAt(begin) : size;
  if (at < from.entries_at_) return Bad("base entry offset out of range");
  // Entries [begin, inner_end) are followed by another; the last one ends the payload.
  const size_t inner_end = from.count_ > 0 ? std::min(end, from.count_ - 1) : 0;
  const char* const offsets = data + from.slots_at_ + 8;  // slot i's offset: + 12 i
  for (size_t i = begin; i < end; ++i) {
    const size_t next = i < inner_end ? Fixed32(offsets + kBaseSlotSize * (i + 1)) : size;
    if (next > size || next < at + fixed) return Bad("base entry offset out of range");
    if (leaf) {
      const auto flags = static_cast<uint8_t>(data[at]);
      if ((flags & ~kRecordTombstone) != 0) return Bad("unknown leaf record flags");
      bool purge = false;
      if ((flags & kRecordTombstone) != 0 && purge_bound > 0) {
        LeafRecord r;
        const char* p = data + at;
        RETURN_IF_ERROR(DecodeLeafRecord(&p, data + next, &r));
        if (p != data + next) return Bad("leaf record tail malformed");
        purge = r.lsn < purge_bound;
      }
      if (purge) {
        if (run_begin < i) pieces_.push_back(Piece{&from, run_begin, i, {}, {}});
        run_begin = i + 1;
        if (purged != nullptr) ++*purged;
        at = next;
        continue;
      }
    }
    ++kept;
    kept_bytes += next - at;
    at = next;
  }
  count_ += kept;
  entry_bytes_ += kept_bytes;
  if (run_begin < end) pieces_.push_back(Piece{&from, run_begin, end, {}, {}});
  return Status::OK();
}

void BaseBuilder::AddRecord(const LeafRecord& record) {
  assert(header_.type == NodeType::kLeaf && (!record.tombstone || record.value.empty()));
  pieces_.push_back(Piece{nullptr, 0, 0, record, {}});
  ++count_;
  entry_bytes_ += LeafEntrySize(record);
}

void BaseBuilder::AddEntry(const InnerEntry& entry) {
  assert(header_.type == NodeType::kInner);
  pieces_.push_back(Piece{nullptr, 0, 0, {}, entry});
  ++count_;
  entry_bytes_ += 4 + entry.separator.size() + 8;
}

size_t BaseBuilder::size() const { return HeaderSize(header_, count_) + entry_bytes_; }

std::string BaseBuilder::Finish() const {
  std::string out(size(), '\0');
  Finish(out.data());
  return out;
}

void BaseBuilder::Finish(char* dst) const {
  assert((header_.type == NodeType::kLeaf) == (header_.level == 0));
  const size_t n = count_;
  char* table = EncodeHeader(header_, n, dst);
  char* p = table + kBaseSlotSize * n;
  size_t slot = 0;
  for (const Piece& piece : pieces_) {
    if (piece.from == nullptr && header_.type == NodeType::kLeaf) {
      const LeafRecord& r = piece.record;
      PutSlot(table, slot++, r.key, static_cast<size_t>(p - dst));
      p = PutLeafEntry(p, r);
      continue;
    }
    if (piece.from == nullptr) {
      const InnerEntry& e = piece.entry;
      PutSlot(table, slot++, e.separator, static_cast<size_t>(p - dst));
      p = PutBytes(p, e.separator);
      EncodeFixed64(p, e.child);
      p += 8;
      continue;
    }
    // A run: its slots as they are, their offsets then moved to where its
    // bytes now start, its bytes in one copy (AddRun checked the spans).
    const BaseView& from = *piece.from;
    const char* data = from.payload_.data();
    const size_t k = piece.end - piece.begin;
    char* out_slots = table + kBaseSlotSize * slot;
    std::memcpy(out_slots, data + from.slots_at_ + kBaseSlotSize * piece.begin, kBaseSlotSize * k);
    const size_t begin = from.OffsetAt(piece.begin);
    const size_t end = piece.end < from.count_ ? from.OffsetAt(piece.end) : from.payload_.size();
    const size_t shifted = static_cast<size_t>(p - dst);
    for (size_t i = 0; i < k; ++i) {
      char* o = out_slots + kBaseSlotSize * i + 8;
      EncodeFixed32(o, static_cast<uint32_t>(Fixed32(o) - begin + shifted));
    }
    std::memcpy(p, data + begin, end - begin);
    p += end - begin;
    slot += k;
  }
  assert(slot == n && static_cast<size_t>(p - dst) == size());
  (void)slot;
}

// ---- Deltas ----------------------------------------------------------------------

size_t EncodedDeltaSize(const DeltaView& d) {
  switch (d.type) {
    case DeltaType::kInsert:
    case DeltaType::kUpdate:
    case DeltaType::kUpsert:
      return 1 + 4 + 8 + 4 + d.key.size() + 4 + d.value.size();
    case DeltaType::kDelete:
      return 1 + 4 + 8 + 4 + d.key.size();
    case DeltaType::kSplit:
    case DeltaType::kMerge:
      return 1 + 8 + 4 + d.key.size();
    case DeltaType::kIndexEntry:
    case DeltaType::kIndexTermDelete:
      return 1 + 8 + 1 + 4 + d.key.size() + 4 + (d.next_infinite ? 0 : d.next.size());
    case DeltaType::kRemoveNode:
      return 1;
  }
  return 0;
}

std::string EncodeDelta(const DeltaView& d) {
  std::string s(EncodedDeltaSize(d), '\0');
  EncodeDelta(d, s.data());
  return s;
}

void EncodeDelta(const DeltaView& d, char* dst) {
  char* p = dst;
  *p++ = static_cast<char>(d.type);
  switch (d.type) {
    case DeltaType::kInsert:
    case DeltaType::kUpdate:
    case DeltaType::kUpsert:
    case DeltaType::kDelete:
      EncodeFixed32(p, d.hint);
      EncodeFixed64(p + 4, d.lsn);
      p = PutBytes(p + 12, d.key);
      if (d.type != DeltaType::kDelete) p = PutBytes(p, d.value);
      break;
    case DeltaType::kSplit:
    case DeltaType::kMerge:
      EncodeFixed64(p, d.pid);
      p = PutBytes(p + 8, d.key);
      break;
    case DeltaType::kIndexEntry:
    case DeltaType::kIndexTermDelete:
      EncodeFixed64(p, d.pid);
      p[8] = static_cast<char>(d.next_infinite ? 1 : 0);
      p = PutBytes(p + 9, d.key);
      p = PutBytes(p, d.next_infinite ? Slice() : d.next);
      break;
    case DeltaType::kRemoveNode:
      break;
  }
  assert(p == dst + EncodedDeltaSize(d));
  (void)p;
}

std::string EncodeRecordDelta(DeltaType type, Slice key, Slice value, uint64_t lsn,
                              uint32_t hint) {
  assert(IsRecordDelta(type));
  DeltaView d;
  d.type = type;
  d.key = key;
  if (type != DeltaType::kDelete) d.value = value;
  d.lsn = lsn;
  d.hint = hint;
  return EncodeDelta(d);
}

std::string EncodeSplitDelta(Slice separator, PageId sibling) {
  DeltaView d;
  d.type = DeltaType::kSplit;
  d.key = separator;
  d.pid = sibling;
  return EncodeDelta(d);
}

namespace {

std::string EncodeIndexDelta(DeltaType type, Slice separator, PageId child, bool next_infinite,
                             Slice next) {
  DeltaView d;
  d.type = type;
  d.key = separator;
  d.pid = child;
  d.next_infinite = next_infinite;
  d.next = next_infinite ? Slice() : next;
  return EncodeDelta(d);
}

}  // namespace

std::string EncodeIndexEntryDelta(Slice separator, PageId child, bool next_infinite, Slice next) {
  return EncodeIndexDelta(DeltaType::kIndexEntry, separator, child, next_infinite, next);
}

std::string EncodeRemoveNodeDelta() {
  DeltaView d;
  d.type = DeltaType::kRemoveNode;
  return EncodeDelta(d);
}

std::string EncodeMergeDelta(Slice separator, PageId merged_sibling) {
  DeltaView d;
  d.type = DeltaType::kMerge;
  d.key = separator;
  d.pid = merged_sibling;
  return EncodeDelta(d);
}

std::string EncodeIndexTermDeleteDelta(Slice separator, PageId child, bool next_infinite,
                                       Slice next) {
  return EncodeIndexDelta(DeltaType::kIndexTermDelete, separator, child, next_infinite, next);
}

Result<DeltaView> DeltaView::Parse(Slice payload) {
  Slice in = payload;
  if (in.empty()) return Bad("empty delta");
  const auto type = static_cast<uint8_t>(in[0]);
  in.remove_prefix(1);
  if (type < static_cast<uint8_t>(DeltaType::kInsert) ||
      type > static_cast<uint8_t>(DeltaType::kIndexTermDelete)) {
    return Bad("unknown delta type");
  }
  DeltaView d;
  d.type = static_cast<DeltaType>(type);
  auto bytes = [&in](Slice* out) {
    uint32_t len = 0;
    if (!GetFixed32(&in, &len) || len > in.size()) return false;
    *out = Slice(in.data(), len);
    in.remove_prefix(len);
    return true;
  };
  switch (d.type) {
    case DeltaType::kInsert:
    case DeltaType::kUpdate:
    case DeltaType::kUpsert:
    case DeltaType::kDelete:
      if (!GetFixed32(&in, &d.hint) || !GetFixed64(&in, &d.lsn) || !bytes(&d.key)) {
        return Bad("record delta truncated");
      }
      if (d.type != DeltaType::kDelete && !bytes(&d.value)) return Bad("record delta truncated");
      break;
    case DeltaType::kSplit:
    case DeltaType::kMerge:
      if (!GetFixed64(&in, &d.pid) || !bytes(&d.key)) return Bad("split/merge delta truncated");
      break;
    case DeltaType::kIndexEntry:
    case DeltaType::kIndexTermDelete: {
      if (!GetFixed64(&in, &d.pid) || in.empty()) return Bad("index delta truncated");
      const auto flags = static_cast<uint8_t>(in[0]);
      in.remove_prefix(1);
      if (flags > 1) return Bad("unknown index delta flags");
      d.next_infinite = flags == 1;
      if (!bytes(&d.key) || !bytes(&d.next)) return Bad("index delta truncated");
      if (d.next_infinite && !d.next.empty()) return Bad("infinite next key with bytes");
      if (!d.next_infinite && !(d.key < d.next)) return Bad("index delta range empty");
      break;
    }
    case DeltaType::kRemoveNode:
      break;
  }
  if (!in.empty()) return Bad("trailing bytes in delta");
  return d;
}

}  // namespace deuteron::bwtree
