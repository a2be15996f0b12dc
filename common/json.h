// JSON string literals for the project's hand-written JSON output (metrics,
// crash reports, histories, isolation reports).
//
// Thread safety: a pure function.
#pragma once

#include <string>
#include <string_view>

namespace deuteron {

// Appends `s` as a JSON string literal, quotes included: `"` and `\` are
// escaped, \n \r \t by name, other control bytes as \u00XX; every other byte
// (UTF-8 included) as it is.
void AppendJsonString(std::string* out, std::string_view s);

// `s` as a JSON string literal.
std::string JsonString(std::string_view s);

}  // namespace deuteron
