#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "sim/task_graph.h"
#include "sim/time.h"

namespace alpasim::sim {

/// Total memory of a device from `time` on (until the next sample).
struct MemorySample {
  Time time = 0;           ///< ns
  std::int64_t bytes = 0;  ///< device total from `time` on
};

/// Memory use of one device over a simulation.
struct DeviceMemoryTrace {
  std::int64_t peak_bytes = 0;  ///< maximum of the total over time (static included)
  Time peak_time = 0;           ///< first time the peak was reached, ns
  /// Bytes held per component (TaskGraph::memory_components order) at the peak.
  std::vector<std::int64_t> peak_by_component;
  /// The total after each change, one sample per distinct time (last value at that time),
  /// starting with the static memory at time 0.
  std::vector<MemorySample> series;
  /// Bytes per component after each sample: row i (components() entries) belongs to
  /// series[i]. Row-major, series.size() × number of components.
  std::vector<std::int64_t> component_series;
};

/// What simulate() computes: when each task ran, and memory over time.
struct Timeline {
  std::vector<Time> start;  ///< per task, ns
  std::vector<Time> end;    ///< per task, ns
  Time makespan = 0;        ///< latest end (0 for an empty graph), ns
  std::vector<DeviceMemoryTrace> memory;  ///< per device
  std::vector<double> link_bytes;         ///< bytes carried per link
  /// Per link, the rate it carried over time (LinkModel::rate_series).
  std::vector<std::vector<LinkRateSample>> link_rates;
  std::uint64_t events_processed = 0;     ///< events popped from the queue
};

/// Runs the discrete-event simulation of `graph` from time 0 until every task is done.
/// Events are ordered by (time, sequence number), so the result depends only on the
/// graph. Returns FAILED_PRECONDITION naming a stuck stream head when the tasks cannot
/// all run (a dependency cycle, or stream orders that contradict the dependencies).
core::Result<Timeline> simulate(const TaskGraph& graph);

}  // namespace alpasim::sim
