#include "tc/crash/lsn_probe.h"

#include <memory>
#include <utility>

#include <thrift/TApplicationException.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>
#include <thrift/transport/TTransportException.h>

#include "TransactionService.h"
#include "protocol/errors.h"
#include "protocol/remote_dc.h"

namespace deuteron::crash {
namespace {

namespace proto = ::deuteron::protocol;

constexpr size_t kExamples = 5;

Result<uint64_t> ReadLogTail(const std::string& host, uint16_t port) {
  using apache::thrift::TApplicationException;
  using apache::thrift::transport::TTransportException;
  try {
    auto socket = std::make_shared<apache::thrift::transport::TSocket>(host, port);
    socket->setConnTimeout(2000);
    socket->setRecvTimeout(15000);
    socket->setSendTimeout(5000);
    auto transport = std::make_shared<apache::thrift::transport::TFramedTransport>(socket);
    transport->open();
    proto::TransactionServiceClient client(std::make_shared<apache::thrift::protocol::TBinaryProtocol>(transport));
    proto::TcStats stats;
    client.tcStats(stats);
    transport->close();
    return static_cast<uint64_t>(stats.log_tail);
  } catch (const proto::DeuteronError& e) {
    return proto::FromDeuteronError(e);
  } catch (const TApplicationException& e) {
    return proto::FromApplicationException(e, "tcStats");
  } catch (const TTransportException& e) {
    return proto::FromTransportException(e, "tcStats");
  }
}

}  // namespace

Result<FutureRecords> FindFutureRecords(const std::string& tc_host, uint16_t tc_port,
                                        const std::string& dc_host, uint16_t dc_port) {
  proto::RemoteOptions ro;
  ro.host = dc_host;
  ro.port = dc_port;
  ro.max_connections = 1;
  ro.recv_timeout_ms = 15000;
  Result<std::unique_ptr<proto::RemoteDataComponent>> dc = proto::RemoteDataComponent::Connect(ro);
  if (!dc.ok()) return dc.status();
  // Every key with its LSN, page by page.
  std::vector<std::pair<std::string, uint64_t>> held;
  ScanRequest req;
  for (;;) {
    Result<ScanResult> page = (*dc)->Scan(req);
    if (!page.ok()) return page.status();
    for (ScanItem& item : page->items) held.emplace_back(std::move(item.key), item.lsn);
    if (!page->more || page->items.empty()) break;
    req.lower = held.back().first;
    req.lower_inclusive = false;
  }
  Result<uint64_t> tail = ReadLogTail(tc_host, tc_port);
  if (!tail.ok()) return tail.status();
  FutureRecords r;
  r.log_tail = *tail;
  r.keys_scanned = held.size();
  for (const auto& [key, lsn] : held) {
    if (lsn < r.log_tail) continue;
    ++r.count;
    if (r.examples.size() < kExamples) r.examples.push_back(key + " at LSN " + std::to_string(lsn));
  }
  return r;
}

}  // namespace deuteron::crash
