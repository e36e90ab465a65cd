// Shared by the libFuzzer targets (fuzz/*.cc): the input as text, and a check that a
// failure is a value with a message, never a crash (the sanitizers and libFuzzer catch the
// rest: signals, aborts, leaks, undefined behaviour).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>

#include "core/status.h"

namespace alpasim::fuzz {

inline std::string text_of(const std::uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// Every error the tools return is one line that says something.
inline void check_error(const core::Status& status) {
  if (status.ok()) return;
  const std::string& m = status.message();
  if (m.empty() || m.find('\n') != std::string::npos) {
    std::cerr << "fuzz: an error without a one-line message: [" << m << "]\n";
    std::abort();
  }
}

}  // namespace alpasim::fuzz
