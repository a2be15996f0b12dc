// MemListStore: an in-memory ListStore (tc/crash/history/list_append.h) for
// the checker's tests and benchmark. Serializable: one transaction runs at
// a time (Begin takes a store-wide mutex, the transaction's end releases it);
// writes are buffered and applied at Commit.
//
// Thread safety: Begin may be called from any threads; each transaction is
// driven by one thread.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "tc/crash/history/list_append.h"

namespace deuteron::crash::test {

class MemListStore final : public ListStore {
 public:
  Result<std::unique_ptr<ListTxn>> Begin() override {
    return std::unique_ptr<ListTxn>(new Txn(this));
  }

 private:
  class Txn final : public ListTxn {
   public:
    explicit Txn(MemListStore* store) : store_(store), lock_(store->mu_) {}
    Result<std::string> Get(std::string_view key) override {
      auto w = writes_.find(std::string(key));
      if (w != writes_.end()) return w->second;
      auto it = store_->data_.find(std::string(key));
      if (it == store_->data_.end()) return Status::NotFound("absent");
      return it->second;
    }
    Status Put(std::string_view key, std::string_view value) override {
      writes_[std::string(key)] = std::string(value);
      return Status::OK();
    }
    Status Commit() override {
      for (auto& [k, v] : writes_) store_->data_[k] = std::move(v);
      writes_.clear();
      return Status::OK();
    }

   private:
    MemListStore* const store_;
    std::unique_lock<std::mutex> lock_;
    std::map<std::string, std::string> writes_;
  };

  std::mutex mu_;
  std::map<std::string, std::string> data_;  // guarded by mu_
};

}  // namespace deuteron::crash::test
