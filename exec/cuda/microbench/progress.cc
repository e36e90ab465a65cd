#include "exec/cuda/microbench/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace alpasim::exec::microbench {

bool stderr_is_terminal() { return isatty(STDERR_FILENO) == 1; }

Progress::Progress(std::string phase, std::int64_t total, bool enabled)
    : phase_(std::move(phase)), total_(std::max<std::int64_t>(total, 1)),
      draw_(enabled && stderr_is_terminal()) {}

Progress::~Progress() { finish(); }

void Progress::step(const std::string& what) {
  ++done_;
  if (!draw_) return;
  constexpr int kWidth = 30;  // characters of bar
  const int filled = static_cast<int>(kWidth * std::min(done_, total_) / total_);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.resize(kWidth, '.');
  std::string label = what.substr(0, 40);
  std::fprintf(stderr, "\r%-5s [%s] %lld/%lld %-40s", phase_.c_str(), bar.c_str(),
               static_cast<long long>(done_), static_cast<long long>(total_), label.c_str());
  std::fflush(stderr);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (draw_) {
    std::fprintf(stderr, "\r%100s\r", "");
    std::fflush(stderr);
  }
}

}  // namespace alpasim::exec::microbench
