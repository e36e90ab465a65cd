#pragma once

#include <cstdint>
#include <string>

namespace alpasim::exec::microbench {

/// A one-line progress bar on stderr, drawn only when stderr is a terminal (isatty): in a
/// pipe or a log file it prints nothing, so redirected output stays clean.
class Progress {
 public:
  /// `enabled` false silences it even on a terminal (--no-progress).
  Progress(std::string phase, std::int64_t total, bool enabled);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  /// Marks one more item done; `what` names it (e.g. "bf16 8192x8192x8192").
  void step(const std::string& what);
  /// Clears the line.
  void finish();

 private:
  std::string phase_;
  std::int64_t total_ = 0;
  std::int64_t done_ = 0;
  bool draw_ = false;
  bool finished_ = false;
};

/// Whether standard error is a terminal.
bool stderr_is_terminal();

}  // namespace alpasim::exec::microbench
