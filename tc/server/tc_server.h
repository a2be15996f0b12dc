// TcServer: serves a TxnManager over TCP with the TransactionService
// protocol (protocol/deuteron.thrift; protocol/protocol.md, "The TC
// service"), framed binary Thrift as the DC server speaks it. The client is
// tc/client/client.h (Client::Connect).
//
// Each connection gets a TcSession (tc_service.h), its table of open
// transactions. When the connection closes (the peer closed it, a transport
// error, idle_timeout, server Stop) the session closes: its open
// transactions are aborted and their locks released.
//
// Shape (interim; issue 38's shared server layer replaces it): Thrift's
// thread-per-connection TThreadedServer. A connection's calls run one at a
// time on its thread, in order. Limits: frames over max_frame_size and
// requests whose strings or lists pass string_limit or container_limit
// (or that do not decode) close that connection only; an unknown method
// gets a TApplicationException reply; at most max_connections are served
// at once (further clients wait in the listen backlog); a connection whose
// peer sends nothing for idle_timeout while no call of it runs is closed.
// Bad input never ends the process.
//
// Thread safety: Start, Stop and the accessors may be called from any
// thread; Stop is idempotent and is called by the destructor.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "tc/server/tc_service.h"
#include "tc/txn_manager.h"

namespace deuteron::tc {

struct TcServerOptions {
  std::string host = "127.0.0.1";  // an address (or a name that resolves)
  uint16_t port = 0;               // 0: an ephemeral port; see TcServer::port()
  uint32_t max_frame_size = 64u << 20;  // payload bytes; REQUIRES: >= 64
  int32_t string_limit = 16 << 20;      // most bytes in one Thrift string
  int32_t container_limit = 1 << 20;    // most elements in one Thrift list
  size_t max_connections = 256;
  // A connection that sends nothing for this long between calls is closed
  // (and its transactions aborted). Zero: never.
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(10)};
  TcServiceOptions service;
};

class TcServer {
 public:
  // REQUIRES: tm outlives the server (until Stop returns).
  TcServer(TxnManager* tm, TcServerOptions options);
  ~TcServer();
  TcServer(const TcServer&) = delete;
  TcServer& operator=(const TcServer&) = delete;

  // Binds, listens and starts serving. Busy when the address is in use,
  // InvalidArgument on bad options, IOError on other socket failures.
  // REQUIRES: called at most once.
  Status Start();

  // Stops accepting, answers SHUTTING_DOWN to calls that still arrive,
  // closes every connection (aborting its transactions) and joins every
  // thread. Afterwards no transaction of this server is open.
  void Stop();

  uint16_t port() const;
  // Connections open now, and transactions open in them.
  size_t connections() const;
  size_t open_transactions() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace deuteron::tc
