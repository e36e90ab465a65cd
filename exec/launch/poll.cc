#include "exec/launch/poll.h"

#include <chrono>
#include <thread>

#include "core/text.h"

namespace alpasim::exec::launch {

double SteadyClock::now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void SteadyClock::sleep_s(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

core::Status poll_until(const std::function<PollState(std::string* reason)>& query, double timeout_s,
                        double interval_s, Clock& clock, const std::string& what) {
  const double deadline = clock.now_s() + timeout_s;
  for (;;) {
    const bool late = clock.now_s() >= deadline;  // read before the query: one last look
    std::string reason;
    switch (query(&reason)) {
      case PollState::kDone: return core::ok_status();
      case PollState::kFailed: return core::internal_error(what + ": " + reason);
      case PollState::kPending: break;
    }
    if (late) return core::unavailable(what + ": timed out after " + core::format_fixed(timeout_s, 1) + " s");
    clock.sleep_s(interval_s);
  }
}

}  // namespace alpasim::exec::launch
