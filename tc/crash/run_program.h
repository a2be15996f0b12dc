// Runs a program to completion as a child process (for `deuteron check` on
// the stopped store and for `cp` of a store), its standard output and error
// written to a file.
//
// Thread safety: free function; safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace deuteron::crash {

// The exit status (-1: killed by a signal). IOError when it cannot be
// started (or the output file not opened).
Result<int> RunProgram(const std::string& program, const std::vector<std::string>& args,
                       const std::string& output_path);

}  // namespace deuteron::crash
