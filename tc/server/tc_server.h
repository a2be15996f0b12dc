// TcServer: serves a TxnManager over TCP with the TransactionService
// protocol (protocol/deuteron.thrift; protocol/protocol.md, "The TC
// service"). The client is tc/client/client.h (Client::Connect).
//
// A Service over the server layer (protocol/server/framed_server.h), which
// owns the sockets, framing, limits, request memory, backpressure,
// admission, deadlines and the shared secret, as for the DC server. This
// file adds the per-connection transaction tables: the layer's open hook
// gives each connection a TcSession (tc_service.h), every call is routed to
// its connection's session (server::CallContext), and the close hook (a
// worker, once no call of the connection runs) closes the session, aborting
// its open transactions and releasing their locks. So a connection that the
// peer closes, that breaks a framing rule, that idles past idle_timeout or
// that is evicted for a new one loses exactly its own transactions.
//
// The TC's memory budget (TcServiceOptions::memory_budget; tc_server.md,
// "The memory budget") charges sessions and transactions before they grow
// and refuses what does not fit with UNAVAILABLE; the layer's request memory
// limit bounds what requests hold.
//
// Every TC call may wait (a lock, a commit's log force), so every call runs
// on the worker threads, none inline on an io loop. A call waiting for a
// lock holds its worker until the lock comes or the lock timeout passes:
// worker_threads bounds the calls in progress at once, and must exceed the
// lock waits expected at once, or the transactions holding the locks wait
// for a worker (until the lock timeout frees them). The default is 64.
//
// Thread safety: Start, Stop and the accessors may be called from any
// thread; Stop is idempotent and is called by the destructor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/status.h"
#include "protocol/server/framed_server.h"
#include "tc/server/tc_service.h"
#include "tc/txn_manager.h"

namespace deuteron::tc {

// The layer's options (limits, deadlines, secret) plus the TC service's.
struct TcServerOptions : server::ServerOptions {
  TcServerOptions() {
    worker_threads = 64;
    name = "TC server";
  }
  TcServiceOptions service;
};

class TcServer {
 public:
  // REQUIRES: tm outlives the server (until Stop returns).
  TcServer(TxnManager* tm, TcServerOptions options);
  ~TcServer();
  TcServer(const TcServer&) = delete;
  TcServer& operator=(const TcServer&) = delete;

  // See server::FramedServer::Start. REQUIRES: called at most once.
  Status Start();

  // Makes calls still arriving answer SHUTTING_DOWN, stops accepting,
  // closes every connection (aborting its transactions), waits for calls in
  // progress and joins every thread. Afterwards no transaction of this
  // server is open.
  void Stop();

  uint16_t port() const;
  size_t connections() const;
  // Transactions open in all connections now.
  size_t open_transactions() const;
  server::ServerStats stats() const;
  // The memory budget's account (TcServiceOptions::memory_budget).
  const TcBudget& budget() const;

 private:
  class Service;
  std::unique_ptr<Service> service_;
  std::unique_ptr<server::FramedServer> server_;
};

}  // namespace deuteron::tc
