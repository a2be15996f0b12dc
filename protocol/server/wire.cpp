#include "protocol/server/wire.h"

#include <memory>

#include <fmt/format.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>

#include "protocol/errors.h"

namespace deuteron::server {
namespace {

namespace thrift = ::apache::thrift;
using thrift::TApplicationException;
using thrift::protocol::TBinaryProtocol;
using thrift::transport::TMemoryBuffer;

// A buffer with room for the length word, filled in by Finish.
std::shared_ptr<TMemoryBuffer> StartFrame() {
  auto out = std::make_shared<TMemoryBuffer>();
  const uint8_t hole[kFrameHeader] = {0, 0, 0, 0};
  out->write(hole, kFrameHeader);
  return out;
}

std::string Finish(TMemoryBuffer& out) {
  uint8_t* buf = nullptr;
  uint32_t n = 0;
  out.getBuffer(&buf, &n);
  PutBigEndian32(buf, n - static_cast<uint32_t>(kFrameHeader));
  return std::string(reinterpret_cast<const char*>(buf), n);
}

// The name and seqid of `payload`'s call, as far as they can be read.
void ReadHeader(std::string_view payload, std::string* name, int32_t* seqid) {
  try {
    auto in = std::make_shared<TMemoryBuffer>(
        reinterpret_cast<uint8_t*>(const_cast<char*>(payload.data())),
        static_cast<uint32_t>(payload.size()), TMemoryBuffer::OBSERVE);
    TBinaryProtocol p(in, 1024, 1024, true, true);
    thrift::protocol::TMessageType type;
    p.readMessageBegin(*name, type, *seqid);
  } catch (const std::exception&) {  // answer as method "", seqid 0
  }
}

}  // namespace

uint32_t GetBigEndian32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | uint32_t{u[3]};
}

void PutBigEndian32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

std::optional<std::string_view> PeekMethod(std::string_view payload) {
  if (payload.size() < 8) return std::nullopt;
  const auto* u = reinterpret_cast<const unsigned char*>(payload.data());
  if (u[0] != 0x80 || u[1] != 0x01) return std::nullopt;  // not a strict binary header
  const uint32_t len = GetBigEndian32(payload.data() + 4);
  if (len > payload.size() - 8) return std::nullopt;
  return payload.substr(8, len);
}

std::string ApplicationErrorReply(const std::string& name, int32_t seqid,
                                  TApplicationException::TApplicationExceptionType type,
                                  const std::string& message) {
  auto out = StartFrame();
  TBinaryProtocol p(out);
  TApplicationException x(type, message);
  p.writeMessageBegin(name, thrift::protocol::T_EXCEPTION, seqid);
  x.write(&p);
  p.writeMessageEnd();
  return Finish(*out);
}

std::string TypedErrorReply(const std::string& name, int32_t seqid, const Status& s) {
  auto out = StartFrame();
  TBinaryProtocol p(out);
  p.writeMessageBegin(name, thrift::protocol::T_REPLY, seqid);
  p.writeStructBegin("result");
  p.writeFieldBegin("error", thrift::protocol::T_STRUCT, 1);
  protocol::ToDeuteronError(s).write(&p);
  p.writeFieldEnd();
  p.writeFieldStop();
  p.writeStructEnd();
  p.writeMessageEnd();
  return Finish(*out);
}

std::string BadFrameReply(uint32_t len, uint32_t max_frame) {
  if (len == 0) {
    return ApplicationErrorReply("", 0, TApplicationException::PROTOCOL_ERROR, "a zero-length frame");
  }
  return TypedErrorReply(
      "", 0, Status::TooLarge(fmt::format("a frame of {} bytes over the limit of {}", len, max_frame)));
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Every byte of `a` is compared (against b's, cycled), so the time depends
  // on the lengths alone, never on where the first difference lies.
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  if (b.empty()) return a.empty();
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i % b.size()]);
  }
  return diff == 0;
}

std::string AuthenticateReply(std::string_view payload, const std::string* secret, bool* ok) {
  std::string name(kAuthenticateMethod);
  int32_t seqid = 0;
  std::string token;
  bool decoded = false;
  try {
    auto in = std::make_shared<TMemoryBuffer>(
        reinterpret_cast<uint8_t*>(const_cast<char*>(payload.data())),
        static_cast<uint32_t>(payload.size()), TMemoryBuffer::OBSERVE);
    // A token is short: a longer string is not read (it cannot match).
    TBinaryProtocol p(in, 4096, 16, true, true);
    thrift::protocol::TMessageType type;
    p.readMessageBegin(name, type, seqid);
    std::string struct_name;
    p.readStructBegin(struct_name);
    for (;;) {
      std::string field_name;
      thrift::protocol::TType ftype;
      int16_t fid = 0;
      p.readFieldBegin(field_name, ftype, fid);
      if (ftype == thrift::protocol::T_STOP) break;
      if (fid == 1 && ftype == thrift::protocol::T_STRING) {
        p.readBinary(token);
      } else {
        p.skip(ftype);
      }
      p.readFieldEnd();
    }
    p.readStructEnd();
    decoded = type == thrift::protocol::T_CALL;
  } catch (const std::exception&) {
    decoded = false;
  }
  const bool good = secret == nullptr || (decoded && ConstantTimeEquals(token, *secret));
  if (ok != nullptr) *ok = good;
  if (!good) {
    return TypedErrorReply(name, seqid, Status::Unauthenticated("authenticate: wrong or unreadable token"));
  }
  auto out = StartFrame();
  TBinaryProtocol p(out);
  p.writeMessageBegin(name, thrift::protocol::T_REPLY, seqid);
  p.writeStructBegin("result");
  p.writeFieldStop();
  p.writeStructEnd();
  p.writeMessageEnd();
  return Finish(*out);
}

std::string UnauthenticatedReply(std::string_view payload, std::string_view why) {
  std::string name;
  int32_t seqid = 0;
  ReadHeader(payload, &name, &seqid);
  return TypedErrorReply(name, seqid, Status::Unauthenticated(why));
}

}  // namespace deuteron::server
