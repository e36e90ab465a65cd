#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "sim/engine.h"
#include "sim/task_graph.h"

namespace alpasim::sim {

/// Number of TaskKind values (for per-kind arrays).
inline constexpr std::size_t kNumTaskKinds = static_cast<std::size_t>(TaskKind::kOther) + 1;

/// Busy and overlap times of one device, ns.
struct DeviceStats {
  Time compute_busy = 0;      ///< sum of task durations on its compute streams
  /// Length of the union of its communication intervals: tasks on its communication
  /// streams and transfers it receives (TaskGraph::set_peer).
  Time communication_busy = 0;
  Time communication_overlapped = 0;  ///< part of that union during which compute ran
  Time communication_exposed = 0;     ///< the rest: communication with the compute idle
  /// Summed duration per TaskKind (index = static_cast<size_t>(kind)), all streams.
  std::array<Time, kNumTaskKinds> time_by_kind{};
  /// Exposed communication per TaskKind: the union of that kind's communication
  /// intervals minus compute. Kinds can overlap each other, so these may sum to more
  /// than communication_exposed.
  std::array<Time, kNumTaskKinds> communication_exposed_by_kind{};
};

/// Per-device busy time and the exposed/overlapped split of communication. Compute
/// streams of one device are assumed not to overlap each other (one per device is the
/// norm). O(n log n) in the number of tasks.
std::vector<DeviceStats> device_stats(const TaskGraph& graph, const Timeline& timeline);

}  // namespace alpasim::sim
