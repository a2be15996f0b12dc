// ClientHarness: a client::Client over one of the library's two
// connections, so that one test body runs over each:
//  - kEmbedded: Client::OpenEmbedded on a fresh directory;
//  - kRemote: a tc::Database on a fresh directory served by an in-process
//    TcServer on a loopback port, reached with Client::Connect.
// The directory is removed at the end.
//
// Thread safety: client() may be used from any thread; the harness itself
// from the test's thread.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "tc/client/client.h"
#include "tc/database.h"
#include "tc/server/tc_server.h"

namespace deuteron::test {

enum class ClientMode { kEmbedded, kRemote };

inline const char* ModeName(ClientMode m) { return m == ClientMode::kEmbedded ? "embedded" : "remote"; }

inline std::string MakeTempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "deuteron-client-XXXXXX").string();
  REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
  return tmpl;
}

class ClientHarness {
 public:
  static constexpr size_t kScanPage = 3;  // small: scans take several pages
  static constexpr std::chrono::milliseconds kLockTimeout{3000};

  explicit ClientHarness(ClientMode mode, tc::TcServerOptions server_options = {},
                         std::string secret = "")
      : mode_(mode), dir_(MakeTempDir()) {
    if (mode == ClientMode::kEmbedded) {
      client::EmbeddedOptions o;
      o.lock_timeout = kLockTimeout;
      o.scan_page = kScanPage;
      auto c = client::Client::OpenEmbedded(dir_, o);
      REQUIRE(c.ok());
      client_ = std::move(c).value();
      return;
    }
    tc::DatabaseOptions dbo;
    dbo.txn.lock_timeout = kLockTimeout;
    auto db = tc::Database::Open(dir_, dbo);
    REQUIRE(db.ok());
    db_ = std::move(db).value();
    server_options.port = 0;
    server_ = std::make_unique<tc::TcServer>(&db_->txn(), server_options);
    REQUIRE(server_->Start().ok());
    client::RemoteOptions o;
    o.scan_page = kScanPage;
    o.secret = std::move(secret);
    auto c = client::Client::Connect("127.0.0.1:" + std::to_string(server_->port()), o);
    REQUIRE(c.ok());
    client_ = std::move(c).value();
  }

  ~ClientHarness() {
    if (client_) CHECK(client_->Close().ok());
    client_.reset();
    if (server_) server_->Stop();
    if (db_) CHECK(db_->Close().ok());
    std::filesystem::remove_all(dir_);
  }

  ClientMode mode() const { return mode_; }
  client::Client& client() { return *client_; }
  // kRemote only.
  tc::TcServer& server() { return *server_; }
  uint16_t port() const { return server_ ? server_->port() : 0; }

 private:
  const ClientMode mode_;
  const std::string dir_;
  std::unique_ptr<tc::Database> db_;
  std::unique_ptr<tc::TcServer> server_;
  std::unique_ptr<client::Client> client_;
};

}  // namespace deuteron::test
