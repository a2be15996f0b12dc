// The server layer's own wire pieces (protocol/protocol.md): the frame
// length word, the method name of a request read without decoding it, and
// the replies the layer writes itself (errors, `authenticate`). Every reply
// returned here is a whole frame, length word included.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <thrift/TApplicationException.h>

#include "common/status.h"

namespace deuteron::server {

inline constexpr size_t kFrameHeader = 4;
// The method every served Thrift service declares last, answered by the
// layer itself: void authenticate(1: binary token) throws (1: DeuteronError).
inline constexpr std::string_view kAuthenticateMethod = "authenticate";

uint32_t GetBigEndian32(const char* p);
void PutBigEndian32(uint8_t* p, uint32_t v);

// The method name of a strict binary Thrift message, or nullopt when the
// payload does not start with a well-formed strict header. The view points
// into `payload`.
std::optional<std::string_view> PeekMethod(std::string_view payload);

// A frame carrying TApplicationException `type` for call (name, seqid).
std::string ApplicationErrorReply(const std::string& name, int32_t seqid,
                                  apache::thrift::TApplicationException::TApplicationExceptionType type,
                                  const std::string& message);
// A frame whose result struct holds field 1, the DeuteronError: every method
// of a served service declares `throws (1: DeuteronError error)`, so this
// decodes as that method's typed error whatever the method.
std::string TypedErrorReply(const std::string& name, int32_t seqid, const Status& s);
// The answer to a frame header of length `len` (0 or over `max_frame`).
std::string BadFrameReply(uint32_t len, uint32_t max_frame);

// Answers an `authenticate` request. With `secret` null, any token is
// accepted (no secret configured). Otherwise the token must equal *secret
// (compared in constant time for its length); *ok says whether it did. A
// request that does not decode counts as a wrong token.
std::string AuthenticateReply(std::string_view payload, const std::string* secret,
                              bool* ok = nullptr);
// An UNAUTHENTICATED typed error answering `payload`'s call.
std::string UnauthenticatedReply(std::string_view payload, std::string_view why);

// Equal contents, in time that depends on the lengths only.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace deuteron::server
