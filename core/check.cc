#include "core/check.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace alpasim::core {
namespace {
// -1: abort(); otherwise _Exit(code). Atomic because workers may fail a CHECK concurrently.
std::atomic<int> check_failure_exit_code{-1};
std::atomic<void (*)(const char*)> check_failure_hook{nullptr};
}  // namespace

void set_check_failure_exit_code(int exit_code) { check_failure_exit_code = exit_code; }
void set_check_failure_hook(void (*hook)(const char* text)) { check_failure_hook = hook; }

namespace internal {

CheckFailure::CheckFailure(const char* file, int line, const char* condition)
    : file_(file), line_(line), condition_(condition) {}

CheckFailure::~CheckFailure() {
  std::ostringstream text;
  text << file_ << ":" << line_ << ": CHECK failed: " << condition_ << ": " << message_.str();
  std::fprintf(stderr, "%s\n(this is a bug in alpa-sim; please report it)\n", text.str().c_str());
  std::fflush(stderr);
  if (auto* hook = check_failure_hook.load()) hook(text.str().c_str());
  int code = check_failure_exit_code.load();
  if (code >= 0) std::_Exit(code);
  std::abort();
}

}  // namespace internal
}  // namespace alpasim::core
