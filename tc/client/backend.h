// The client library's two connections behind client.h: an embedded
// tc::Database (embedded_backend.cpp) or a remote TC server
// (remote_backend.cpp). Internal: not installed, not part of the API.
//
// Thread safety: a ClientBackend is thread-safe; a TxnBackend is driven by
// one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "tc/client/client.h"

namespace deuteron::client::detail {

struct Page {
  std::vector<std::pair<std::string, std::string>> items;
  bool more = false;
  std::string resume_key;  // when more
};

class TxnBackend {
 public:
  virtual ~TxnBackend() = default;  // implementations abort when active
  virtual uint64_t id() const = 0;
  virtual Result<std::string> Get(std::string_view key) = 0;
  virtual Status Put(std::string_view key, std::string_view value) = 0;
  virtual Status Delete(std::string_view key) = 0;
  // One page of at most page_size() items (options.limit ignored).
  virtual Result<Page> ScanPage(const ScanOptions& options) = 0;
  virtual Status Commit() = 0;
  virtual void Abort() = 0;
  virtual bool active() const = 0;
};

class ClientBackend {
 public:
  virtual ~ClientBackend() = default;
  virtual Result<std::unique_ptr<TxnBackend>> Begin() = 0;
  virtual Status Close() = 0;
};

Result<std::unique_ptr<ClientBackend>> OpenEmbeddedBackend(const std::string& dir,
                                                           const EmbeddedOptions& options);
Result<std::unique_ptr<ClientBackend>> ConnectRemoteBackend(const std::string& host, uint16_t port,
                                                            const RemoteOptions& options);

}  // namespace deuteron::client::detail
