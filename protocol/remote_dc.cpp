#include "protocol/remote_dc.h"

#include <fmt/format.h>
#include <thrift/TApplicationException.h>
#include <thrift/TConfiguration.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/protocol/TProtocolException.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>
#include <thrift/transport/TTransportException.h>

#include <sys/socket.h>

#include <cerrno>
#include <algorithm>
#include <climits>
#include <exception>
#include <utility>

#include "DataComponentService.h"
#include "protocol/convert.h"
#include "protocol/errors.h"

namespace deuteron::protocol {

namespace thrift = ::apache::thrift;
using thrift::TApplicationException;
using thrift::protocol::TBinaryProtocol;
using thrift::protocol::TProtocolException;
using thrift::transport::TMemoryBuffer;
using thrift::transport::TSocket;
using thrift::transport::TTransportException;

namespace {

constexpr uint32_t kFrameHeader = 4;

void PutBigEndian32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

uint32_t GetBigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

// One TCP connection with its own generated client. Requests are serialized
// into out_ behind a 4-byte hole that becomes the frame header, so a request
// goes out in one write; a reply frame is read whole into frame_ and decoded
// from in_. Used by one thread at a time (the pool hands it out).
class RemoteDataComponent::Connection {
 public:
  explicit Connection(const RemoteOptions& o)
      : socket_(std::make_shared<TSocket>(o.host, o.port)) {
    socket_->setConnTimeout(o.connect_timeout_ms);
    socket_->setSendTimeout(o.send_timeout_ms);
    socket_->setRecvTimeout(o.recv_timeout_ms);
    // The memory buffers' message-size budget covers a whole frame.
    const int max_message =
        o.max_frame_size > INT_MAX - 1024 ? INT_MAX : static_cast<int>(o.max_frame_size) + 1024;
    auto config = std::make_shared<thrift::TConfiguration>(max_message, max_message);
    out_ = std::make_shared<TMemoryBuffer>(config);
    in_ = std::make_shared<TMemoryBuffer>(config);
    // Replies are read strictly (a version header is required) and no
    // string or list may claim more than a frame: garbage from a peer
    // cannot make the client allocate more than max_frame_size.
    const auto limit = static_cast<int32_t>(std::min<uint32_t>(o.max_frame_size, INT32_MAX));
    auto iprot = std::make_shared<TBinaryProtocol>(in_, limit, limit, /*strict_read=*/true,
                                                   /*strict_write=*/true);
    client_ = std::make_unique<DataComponentServiceClient>(iprot, std::make_shared<TBinaryProtocol>(out_));
  }

  ~Connection() {
    try {
      socket_->close();
    } catch (...) {  // closing a socket we are dropping: nothing to report
    }
  }

  void Open() { socket_->open(); }

  // False when an idle connection can no longer carry a call: the peer
  // closed it (the server's idle timeout, a restart) or sent bytes nobody
  // asked for. One nonblocking peek, no wait.
  bool LooksAlive() {
    if (!socket_->isOpen()) return false;
    char byte;
    const ssize_t n = ::recv(socket_->getSocketFD(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

  DataComponentServiceClient& client() { return *client_; }

  // Starts a request: clears the buffer and leaves room for the header.
  void BeginRequest() {
    out_->resetBuffer();
    const uint8_t hole[kFrameHeader] = {0, 0, 0, 0};
    out_->write(hole, kFrameHeader);
  }

  // Payload bytes serialized since BeginRequest.
  uint32_t RequestSize() {
    uint8_t* buf = nullptr;
    uint32_t n = 0;
    out_->getBuffer(&buf, &n);
    return n - kFrameHeader;
  }

  // Fills in the header and sends the frame. Throws TTransportException.
  void SendRequest() {
    uint8_t* buf = nullptr;
    uint32_t n = 0;
    out_->getBuffer(&buf, &n);
    PutBigEndian32(buf, n - kFrameHeader);
    socket_->write(buf, n);
  }

  // Reads one reply frame and points in_ at it. Throws TTransportException.
  void ReceiveReply(uint32_t max_frame_size) {
    uint8_t header[kFrameHeader];
    socket_->readAll(header, kFrameHeader);
    const uint32_t len = GetBigEndian32(header);
    if (len > max_frame_size) {
      throw TTransportException(
          TTransportException::CORRUPTED_DATA,
          fmt::format("reply frame of {} bytes over the limit of {}", len, max_frame_size));
    }
    frame_.resize(len);
    if (len > 0) socket_->readAll(frame_.data(), len);
    in_->resetBuffer(frame_.data(), len, TMemoryBuffer::OBSERVE);
  }

 private:
  std::shared_ptr<TSocket> socket_;
  std::shared_ptr<TMemoryBuffer> out_;
  std::shared_ptr<TMemoryBuffer> in_;
  std::unique_ptr<DataComponentServiceClient> client_;
  std::vector<uint8_t> frame_;
};

RemoteDataComponent::RemoteDataComponent(RemoteOptions options) : options_(std::move(options)) {}

RemoteDataComponent::~RemoteDataComponent() = default;

Result<std::unique_ptr<RemoteDataComponent>> RemoteDataComponent::Connect(RemoteOptions options) {
  if (options.port == 0) return Status::InvalidArgument("RemoteOptions: port is 0");
  if (options.max_connections == 0) return Status::InvalidArgument("RemoteOptions: max_connections is 0");
  if (options.max_frame_size < 64) return Status::InvalidArgument("RemoteOptions: max_frame_size below 64");
  if (options.connect_timeout_ms < 0 || options.send_timeout_ms < 0 || options.recv_timeout_ms < 0) {
    return Status::InvalidArgument("RemoteOptions: negative timeout");
  }
  std::unique_ptr<RemoteDataComponent> dc(new RemoteDataComponent(std::move(options)));
  ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, dc->Acquire());
  dc->Release(std::move(conn), /*broken=*/false);
  return dc;
}

size_t RemoteDataComponent::open_connections() const {
  std::lock_guard<std::mutex> l(mu_);
  return open_;
}

Result<std::unique_ptr<RemoteDataComponent::Connection>> RemoteDataComponent::Acquire() {
  {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      while (!idle_.empty()) {
        std::unique_ptr<Connection> conn = std::move(idle_.back());
        idle_.pop_back();
        if (conn->LooksAlive()) return conn;
        --open_;  // closed by the peer while idle: drop it, try the next
      }
      if (open_ < options_.max_connections) break;
      released_.wait(l);
    }
    ++open_;  // a slot for the connection we open below, outside the lock
  }
  std::string error;
  try {
    auto conn = std::make_unique<Connection>(options_);
    conn->Open();
    if (options_.secret.empty()) return conn;
    Status auth = Authenticate(*conn);
    if (auth.ok()) return conn;
    {
      std::lock_guard<std::mutex> l(mu_);
      --open_;
    }
    released_.notify_one();
    return auth;
  } catch (const std::exception& e) {  // TTransportException: refused, timed out
    error = e.what();
  } catch (...) {
    error = "unknown exception";
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    --open_;
  }
  released_.notify_one();
  return Status::Unavailable(
      fmt::format("cannot connect to DC at {}:{}: {}", options_.host, options_.port, error));
}

Status RemoteDataComponent::Authenticate(Connection& conn) {
  try {
    conn.BeginRequest();
    conn.client().send_authenticate(options_.secret);
    conn.SendRequest();
    conn.ReceiveReply(options_.max_frame_size);
    conn.client().recv_authenticate();
    return Status::OK();
  } catch (const DeuteronError& e) {
    return FromDeuteronError(e);
  } catch (const TApplicationException& e) {
    return FromApplicationException(e, "authenticate");
  } catch (const TTransportException& e) {
    return FromTransportException(e, "authenticate");
  } catch (const std::exception& e) {
    return Status::IOError(fmt::format("authenticate: {}", e.what()));
  }
}

void RemoteDataComponent::Release(std::unique_ptr<Connection> conn, bool broken) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (broken) {
      --open_;
    } else {
      idle_.push_back(std::move(conn));
    }
  }
  released_.notify_one();
  conn.reset();  // a broken one closes here, outside the lock
}

template <typename Send, typename Recv>
Status RemoteDataComponent::Call(const char* method, Send&& send, Recv&& recv) {
  ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Acquire());
  // Stays true unless the byte stream is known to be in step: a request
  // whole on the wire and its reply frame whole off it, or nothing sent.
  bool broken = true;
  bool decoding = false;
  Status s;
  try {
    conn->BeginRequest();
    send(conn->client());
    const uint32_t size = conn->RequestSize();
    if (size > options_.max_frame_size) {
      broken = false;
      s = Status::TooLarge(fmt::format("{}: request of {} bytes over the frame limit of {}", method,
                                       size, options_.max_frame_size));
    } else {
      conn->SendRequest();
      conn->ReceiveReply(options_.max_frame_size);
      decoding = true;
      s = recv(conn->client());
      broken = false;
    }
  } catch (const DeuteronError& e) {
    broken = false;
    s = FromDeuteronError(e);
  } catch (const TApplicationException& e) {
    broken = false;
    s = FromApplicationException(e, method);
  } catch (const TTransportException& e) {
    s = decoding ? Status::IOError(fmt::format("{}: malformed reply: {}", method, e.what()))
                 : FromTransportException(e, method);
  } catch (const TProtocolException& e) {
    s = Status::IOError(fmt::format("{}: malformed reply: {}", method, e.what()));
  } catch (const std::exception& e) {
    s = Status::Internal(fmt::format("{}: {}", method, e.what()));
  } catch (...) {
    s = Status::Internal(fmt::format("{}: unknown exception", method));
  }
  Release(std::move(conn), broken);
  return s;
}

Result<::deuteron::ApplyResult> RemoteDataComponent::Apply(std::span<const ::deuteron::RecordOp> ops,
                                                           uint64_t esl, uint64_t incarnation) {
  protocol::ApplyRequest request;
  RETURN_IF_ERROR(ToWireApply(ops, esl, &request));
  ASSIGN_OR_RETURN(const int64_t inc, ToWireLsn(incarnation, "incarnation"));
  request.__set_incarnation(inc);
  ::deuteron::ApplyResult out;
  RETURN_IF_ERROR(Call(
      "apply", [&](DataComponentServiceClient& c) { c.send_apply(request); },
      [&](DataComponentServiceClient& c) {
        protocol::ApplyResult r;
        c.recv_apply(r);
        out = FromWire(r);
        return Status::OK();
      }));
  return out;
}

Result<::deuteron::ReadResult> RemoteDataComponent::Get(Slice key) { return DoGet(key, ReadFence()); }

Result<::deuteron::ReadResult> RemoteDataComponent::GetFenced(Slice key,
                                                              const ::deuteron::ReadFence& fence) {
  ASSIGN_OR_RETURN(const ReadFence w, ToWireFence(fence));
  return DoGet(key, w);
}

Result<::deuteron::ReadResult> RemoteDataComponent::DoGet(Slice key, const ReadFence& fence) {
  const std::string k = key.ToString();
  ::deuteron::ReadResult out;
  RETURN_IF_ERROR(Call(
      "get", [&](DataComponentServiceClient& c) { c.send_get(k, fence); },
      [&](DataComponentServiceClient& c) {
        protocol::ReadResult r;
        c.recv_get(r);
        out = FromWire(std::move(r));
        return Status::OK();
      }));
  return out;
}

Result<std::vector<::deuteron::ReadResult>> RemoteDataComponent::MultiGet(std::span<const Slice> keys) {
  return DoMultiGet(keys, ReadFence());
}

Result<std::vector<::deuteron::ReadResult>> RemoteDataComponent::MultiGetFenced(
    std::span<const Slice> keys, const ::deuteron::ReadFence& fence) {
  ASSIGN_OR_RETURN(const ReadFence w, ToWireFence(fence));
  return DoMultiGet(keys, w);
}

Result<std::vector<::deuteron::ReadResult>> RemoteDataComponent::DoMultiGet(std::span<const Slice> keys,
                                                                            const ReadFence& fence) {
  std::vector<std::string> ks;
  ks.reserve(keys.size());
  for (const Slice& k : keys) ks.push_back(k.ToString());
  std::vector<::deuteron::ReadResult> out;
  RETURN_IF_ERROR(Call(
      "multiGet", [&](DataComponentServiceClient& c) { c.send_multiGet(ks, fence); },
      [&](DataComponentServiceClient& c) {
        std::vector<protocol::ReadResult> rs;
        c.recv_multiGet(rs);
        out.reserve(rs.size());
        for (protocol::ReadResult& r : rs) out.push_back(FromWire(std::move(r)));
        return Status::OK();
      }));
  return out;
}

Result<::deuteron::ScanResult> RemoteDataComponent::Scan(const ::deuteron::ScanRequest& request) {
  return DoScan(request, ReadFence());
}

Result<::deuteron::ScanResult> RemoteDataComponent::ScanFenced(const ::deuteron::ScanRequest& request,
                                                               const ::deuteron::ReadFence& fence) {
  ASSIGN_OR_RETURN(const ReadFence w, ToWireFence(fence));
  return DoScan(request, w);
}

Result<::deuteron::ScanResult> RemoteDataComponent::DoScan(const ::deuteron::ScanRequest& request,
                                                           const ReadFence& fence) {
  const protocol::ScanRequest w = ToWireScan(request);
  ::deuteron::ScanResult out;
  RETURN_IF_ERROR(Call(
      "scan", [&](DataComponentServiceClient& c) { c.send_scan(w, fence); },
      [&](DataComponentServiceClient& c) {
        protocol::ScanResult r;
        c.recv_scan(r);
        out = FromWire(std::move(r));
        return Status::OK();
      }));
  return out;
}

Status RemoteDataComponent::SetEsl(uint64_t esl, uint64_t incarnation) {
  ASSIGN_OR_RETURN(const int64_t w, ToWireLsn(esl, "ESL"));
  ASSIGN_OR_RETURN(const int64_t inc, ToWireLsn(incarnation, "incarnation"));
  return Call(
      "setEsl", [&](DataComponentServiceClient& c) { c.send_setEsl(w, inc); },
      [&](DataComponentServiceClient& c) {
        c.recv_setEsl();
        return Status::OK();
      });
}

Status RemoteDataComponent::ProposeRssp(uint64_t rssp, uint64_t incarnation) {
  ASSIGN_OR_RETURN(const int64_t w, ToWireLsn(rssp, "RSSP"));
  ASSIGN_OR_RETURN(const int64_t inc, ToWireLsn(incarnation, "incarnation"));
  return Call(
      "proposeRssp", [&](DataComponentServiceClient& c) { c.send_proposeRssp(w, inc); },
      [&](DataComponentServiceClient& c) {
        c.recv_proposeRssp();
        return Status::OK();
      });
}

Result<::deuteron::DcReady> RemoteDataComponent::RestartTo(uint64_t stable_end) {
  return RestartToStore(stable_end, ::deuteron::StoreId());
}

Result<::deuteron::DcReady> RemoteDataComponent::RestartToStore(uint64_t stable_end,
                                                                const ::deuteron::StoreId& store_id) {
  ASSIGN_OR_RETURN(const int64_t w, ToWireLsn(stable_end, "stable end"));
  // Nil: the field stays empty, which the server reads as "no check".
  const std::string id = store_id.nil() ? std::string() : store_id.bytes();
  ::deuteron::DcReady out;
  RETURN_IF_ERROR(Call(
      "restartTo", [&](DataComponentServiceClient& c) { c.send_restartTo(w, id); },
      [&](DataComponentServiceClient& c) {
        protocol::DcReady r;
        c.recv_restartTo(r);
        out = FromWire(r);
        return Status::OK();
      }));
  return out;
}

Result<::deuteron::DcStats> RemoteDataComponent::GetStats() {
  ::deuteron::DcStats out;
  RETURN_IF_ERROR(Call(
      "stats", [&](DataComponentServiceClient& c) { c.send_stats(); },
      [&](DataComponentServiceClient& c) {
        protocol::DcStats r;
        c.recv_stats(r);
        out = FromWire(r);
        return Status::OK();
      }));
  return out;
}

Result<::deuteron::DcHealth> RemoteDataComponent::Health() {
  ::deuteron::DcHealth out;
  RETURN_IF_ERROR(Call(
      "health", [&](DataComponentServiceClient& c) { c.send_health(); },
      [&](DataComponentServiceClient& c) {
        protocol::DcHealth r;
        c.recv_health(r);
        Result<::deuteron::DcHealth> h = FromWire(r);
        if (!h.ok()) return h.status();
        out = *h;
        return Status::OK();
      }));
  return out;
}

}  // namespace deuteron::protocol
