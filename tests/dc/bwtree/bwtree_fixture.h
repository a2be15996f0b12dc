// The Bw-tree tests' tree on a fresh in-memory store, and the checks they
// share against the model (bwtree_test.cpp, bwtree_scan_test.cpp,
// bwtree_merge_window_test.cpp).
//
// Thread safety: a Fixture is used by one test thread; the checks are as
// thread-safe as the tree they read.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "dc/bwtree/bwtree.h"
#include "tests/dc/bwtree/bwtree_test_util.h"

namespace deuteron::bwtree::test {

using llama::Llama;
using llama::LlamaOptions;

// A tree on a fresh in-memory store. Members die tree first, then the cache.
struct Fixture {
  explicit Fixture(BwTreeOptions o = TestOptions(), LlamaOptions lo = TreeLlamaOptions())
      : tree_options(std::move(o)), llama_options(std::move(lo)) {
    llama = OpenLlama(env.get(), llama_options);
    tree = OpenTree(llama.get(), tree_options);
  }

  // Flushes everything, closes (checkpointing as configured) and reopens.
  void Reopen() {
    REQUIRE(tree->FlushAll(kAll).ok());
    tree.reset();
    REQUIRE(llama->Close().ok());
    llama.reset();
    llama = OpenLlama(env.get(), llama_options);
    tree = OpenTree(llama.get(), tree_options);
  }

  BwTreeOptions tree_options;
  LlamaOptions llama_options;
  std::unique_ptr<Env> env = NewMemEnv();
  std::unique_ptr<Llama> llama;
  std::unique_ptr<BwTree> tree;
};

// Writes and requires the given outcome; keeps `model` in step.
inline void Write(BwTree* tree, Model* model, WriteKind kind, const std::string& key,
                  const std::string& value, uint64_t lsn) {
  const bool del = kind == WriteKind::kDelete || kind == WriteKind::kBlindDelete;
  const Expect want = model->Apply(kind, key, value, lsn);
  Status s = tree->Write(kind, key, del ? Slice() : Slice(value), lsn);
  INFO(KindName(kind) << " " << Esc(key) << " @" << lsn << ": " << s.ToString() << ", want "
                       << ExpectName(want));
  REQUIRE(Matches(s, want));
}

inline void RequireSame(BwTree* tree, const Model& model, uint64_t purge_below = 0) {
  const std::string diff = CompareAll(tree, model, purge_below);
  INFO(diff);
  REQUIRE(diff.empty());
}

inline void RequireFound(BwTree* tree, const std::string& key, const std::string& value, uint64_t lsn) {
  auto r = tree->Get(key);
  INFO("Get " << key << ": " << r.status().ToString());
  REQUIRE(r.ok());
  CHECK(r->value == value);
  CHECK(r->lsn == lsn);
  auto l = tree->GetLsn(key);
  REQUIRE(l.ok());
  CHECK(*l == lsn);
}

inline void RequireAbsent(BwTree* tree, const std::string& key, uint64_t lsn) {
  auto r = tree->Get(key);
  INFO("Get " << key << ": " << r.status().ToString());
  CHECK(r.status().IsNotFound());
  auto l = tree->GetLsn(key);
  REQUIRE(l.ok());
  CHECK(*l == lsn);
}

inline BwTreeOptions PurgeAll(BwTreeOptions o) {
  o.purge_bound = [] { return kAll; };
  return o;
}

}  // namespace deuteron::bwtree::test

// The names the tree tests use unqualified (each test file's own helpers,
// in its anonymous namespace, hide these where they share a name).
namespace deuteron::bwtree {
using llama::Llama;
using llama::LlamaOptions;
using test::CompareAll;
using test::Describe;
using test::Expect;
using test::Fixture;
using test::Item;
using test::kAll;
using test::Key;
using test::Model;
using test::OpenLlama;
using test::OpenTree;
using test::PurgeAll;
using test::RequireAbsent;
using test::RequireCheck;
using test::RequireFound;
using test::RequireSame;
using test::ScanItems;
using test::ScanText;
using test::SmallNodeOptions;
using test::TestOptions;
using test::TreeLlamaOptions;
using test::Write;
}  // namespace deuteron::bwtree
