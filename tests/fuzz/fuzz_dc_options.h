// The small DC the fuzz targets run (dc_request_fuzz, tc_request_fuzz's
// embedded store, dc_store_fuzz): the smallest segments and buffers, no
// background I/O threads or recycling, a small mapping table, small keys,
// values and nodes (so that a few operations split and consolidate pages),
// and no checkpoints on a timer or by bytes (a target asks for its own).
// Each target adds what is its own (memory budget, batch limits).
//
// Thread safety: a function of nothing.
#pragma once

#include "dc/dc.h"

namespace deuteron::fuzz {

inline dc::DcOptions SmallDcOptions() {
  dc::DcOptions o;
  o.llama.lss.segment_size = 128 << 10;  // the smallest allowed
  o.llama.lss.buffer_size = 64 << 10;
  o.llama.lss.buffer_count = 2;
  o.llama.lss.io_threads = 0;
  o.llama.lss.recycle_pool = 0;
  o.llama.mapping.max_pages = 1 << 12;
  o.tree.limits.max_key_size = 256;
  o.tree.limits.max_value_size = 4096;
  o.tree.leaf_max_records = 8;
  o.tree.inner_max_entries = 6;
  o.tree.leaf_delta_threshold = 4;
  o.tree.inner_delta_threshold = 2;
  o.tree.leaf_merge_records = 2;
  o.tree.node_max_bytes = 8 << 10;
  o.checkpoint_interval_bytes = 0;
  o.checkpoint_interval_ms = 0;
  return o;
}

}  // namespace deuteron::fuzz
