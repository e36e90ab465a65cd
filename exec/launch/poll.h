#pragma once

#include <functional>
#include <string>

#include "core/status.h"

namespace alpasim::exec::launch {

/// Time source of the poll loops, replaceable by a fake in tests (no timed tests).
class Clock {
 public:
  virtual ~Clock() = default;
  /// Seconds since an arbitrary fixed origin (monotonic).
  virtual double now_s() = 0;
  /// Waits about `seconds` (a fake advances its time instead).
  virtual void sleep_s(double seconds) = 0;
};

/// std::chrono::steady_clock and std::this_thread::sleep_for.
class SteadyClock final : public Clock {
 public:
  double now_s() override;
  void sleep_s(double seconds) override;
};

/// What one poll found.
enum class PollState {
  kDone,     ///< finished successfully
  kPending,  ///< still running: poll again
  kFailed,   ///< failed: the callback filled in the reason
};

/// Polls `query` every `interval_s` until it is kDone (ok), kFailed (kInternal: "<what>:
/// <reason>") or `timeout_s` has passed since the call (kUnavailable: "<what>: timed out
/// after <t> s"). `query` runs at least once, and once more after the deadline, so an
/// operation that finished during the last sleep is not reported as a timeout. Used for
/// NCCL's non-blocking calls (ncclCommGetAsyncError) and the GPU streams: never a hang.
core::Status poll_until(const std::function<PollState(std::string* reason)>& query, double timeout_s,
                        double interval_s, Clock& clock, const std::string& what);

}  // namespace alpasim::exec::launch
