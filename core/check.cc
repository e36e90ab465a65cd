#include "core/check.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace alpasim::core {
namespace {
// -1: abort(); otherwise _Exit(code). Atomic because workers may fail a CHECK concurrently.
std::atomic<int> check_failure_exit_code{-1};
}  // namespace

void set_check_failure_exit_code(int exit_code) { check_failure_exit_code = exit_code; }

namespace internal {

CheckFailure::CheckFailure(const char* file, int line, const char* condition)
    : file_(file), line_(line), condition_(condition) {}

CheckFailure::~CheckFailure() {
  std::fprintf(stderr, "%s:%d: CHECK failed: %s: %s\n(this is a bug in alpa-sim; please report it)\n",
               file_, line_, condition_, message_.str().c_str());
  std::fflush(stderr);
  int code = check_failure_exit_code.load();
  if (code >= 0) std::_Exit(code);
  std::abort();
}

}  // namespace internal
}  // namespace alpasim::core
