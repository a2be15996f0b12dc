// A bare TransactionService client for tests that act as a hostile or
// careless peer: the generated Thrift client over one framed connection, so
// that a transaction stays open after an error (the client library aborts
// it) and one connection may hold many transactions. Errors come back as
// the call's ErrorCode rather than as exceptions; a transport failure is
// reported as UNAVAILABLE.
//
// Thread safety: one ThriftTc per thread; no Catch2 macros inside, so it may
// run on threads other than the test's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>

#include "TransactionService.h"

namespace deuteron::test {

class ThriftTc {
 public:
  using Code = ::deuteron::protocol::ErrorCode::type;

  // Connects to a TC server on loopback; ok() false when it could not.
  explicit ThriftTc(uint16_t port) {
    namespace transport = apache::thrift::transport;
    auto socket = std::make_shared<transport::TSocket>("127.0.0.1", port);
    socket->setRecvTimeout(30000);
    socket->setSendTimeout(30000);
    transport_ = std::make_shared<transport::TFramedTransport>(socket);
    client_ = std::make_unique<::deuteron::protocol::TransactionServiceClient>(
        std::make_shared<apache::thrift::protocol::TBinaryProtocol>(transport_));
    try {
      transport_->open();
      ok_ = true;
    } catch (const std::exception&) {
      ok_ = false;
    }
  }
  ~ThriftTc() { Close(); }
  ThriftTc(const ThriftTc&) = delete;
  ThriftTc& operator=(const ThriftTc&) = delete;

  bool ok() const { return ok_; }
  void Close() {
    try {
      if (transport_) transport_->close();
    } catch (const std::exception&) {
    }
  }

  // The call's error code (OK on success); *txn gets the new id.
  Code Begin(int64_t* txn) {
    return Run([&] { *txn = client_->beginTransaction(); });
  }
  Code Put(int64_t txn, const std::string& key, const std::string& value) {
    return Run([&] { client_->put(txn, key, value); });
  }
  Code Get(int64_t txn, const std::string& key) {
    return Run([&] {
      ::deuteron::protocol::TcReadResult r;
      client_->get(r, txn, key);
    });
  }
  Code Commit(int64_t txn) {
    return Run([&] { client_->commit(txn); });
  }
  Code Abort(int64_t txn) {
    return Run([&] { client_->abort(txn); });
  }
  Code Stats(::deuteron::protocol::TcStats* out) {
    return Run([&] { client_->tcStats(*out); });
  }

 private:
  template <typename F>
  Code Run(F&& f) {
    if (!ok_) return ::deuteron::protocol::ErrorCode::UNAVAILABLE;
    try {
      f();
      return ::deuteron::protocol::ErrorCode::OK;
    } catch (const ::deuteron::protocol::DeuteronError& e) {
      return e.code;
    } catch (const std::exception&) {
      ok_ = false;
      return ::deuteron::protocol::ErrorCode::UNAVAILABLE;
    }
  }

  std::shared_ptr<apache::thrift::transport::TTransport> transport_;
  std::unique_ptr<::deuteron::protocol::TransactionServiceClient> client_;
  bool ok_ = false;
};

}  // namespace deuteron::test
