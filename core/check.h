#pragma once

#include <sstream>

namespace alpasim::core::internal {

/// Collects the message of a failed ALPASIM_CHECK; its destructor prints
/// "file:line: CHECK failed: cond: message" to stderr and ends the process.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  CheckFailure(const CheckFailure&) = delete;
  CheckFailure& operator=(const CheckFailure&) = delete;
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return message_; }

 private:
  const char* file_;
  int line_;
  const char* condition_;
  std::ostringstream message_;
};

}  // namespace alpasim::core::internal

namespace alpasim::core {
/// How a failed CHECK ends the process. The default aborts (core dump, sanitizer trace);
/// the command-line tools exit with their documented "internal error" code instead.
void set_check_failure_exit_code(int exit_code);
/// Called with the failure's one-line text ("file:line: CHECK failed: cond: message") after
/// it is printed on stderr and before the process ends, e.g. to print a machine-readable
/// error on stdout. Must not fail a CHECK itself. nullptr (the default): nothing.
void set_check_failure_hook(void (*hook)(const char* text));
}  // namespace alpasim::core

/// Guards an invariant: a false `cond` is a bug in alpa-sim, never bad user input.
/// Stays on in release builds. `ALPASIM_CHECK(a < b) << "a=" << a;`
#define ALPASIM_CHECK(cond)                                                              \
  switch (0)                                                                             \
  case 0:                                                                                \
  default:                                                                               \
    if (cond) {                                                                          \
    } else /* NOLINT */                                                                  \
      ::alpasim::core::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()

#ifdef NDEBUG
#define ALPASIM_DCHECK(cond) \
  while (false) ALPASIM_CHECK(cond)
#else
/// An ALPASIM_CHECK for expensive invariants; compiled out in release builds.
#define ALPASIM_DCHECK(cond) ALPASIM_CHECK(cond)
#endif
