#include "sim/timeline_stats.h"

#include <algorithm>
#include <utility>

namespace alpasim::sim {
namespace {

using Interval = std::pair<Time, Time>;

// Sorts and merges overlapping or touching intervals in place.
void merge(std::vector<Interval>& v) {
  std::sort(v.begin(), v.end());
  std::size_t out = 0;
  for (const auto& iv : v) {
    if (iv.second <= iv.first) continue;
    if (out > 0 && iv.first <= v[out - 1].second) {
      v[out - 1].second = std::max(v[out - 1].second, iv.second);
    } else {
      v[out++] = iv;
    }
  }
  v.resize(out);
}

// Length of the intersection of two merged interval lists.
Time intersection(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  Time total = 0;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    Time lo = std::max(a[i].first, b[j].first);
    Time hi = std::min(a[i].second, b[j].second);
    if (hi > lo) total += hi - lo;
    if (a[i].second < b[j].second) ++i; else ++j;
  }
  return total;
}

}  // namespace

std::vector<DeviceStats> device_stats(const TaskGraph& graph, const Timeline& tl) {
  const std::size_t num_devices = graph.devices().size();
  std::vector<DeviceStats> out(num_devices);
  // Transfers also count as communication of their receiving device.
  std::vector<std::vector<Interval>> received(num_devices);
  for (std::size_t t = 0; t < graph.tasks().size(); ++t) {
    const auto& task = graph.tasks()[t];
    if (task.peer < 0) continue;
    const DeviceId own = graph.streams()[static_cast<std::size_t>(task.stream)].device;
    if (task.peer == own) continue;
    received[static_cast<std::size_t>(task.peer)].emplace_back(tl.start[t], tl.end[t]);
  }
  std::vector<Interval> compute, comm;
  for (std::size_t d = 0; d < num_devices; ++d) {
    compute.clear();
    comm = received[d];
    DeviceStats& st = out[d];
    for (StreamId s : graph.devices()[d].streams) {
      const auto& stream = graph.streams()[static_cast<std::size_t>(s)];
      for (TaskId t : stream.tasks) {
        const Time a = tl.start[static_cast<std::size_t>(t)];
        const Time b = tl.end[static_cast<std::size_t>(t)];
        st.time_by_kind[static_cast<std::size_t>(graph.tasks()[static_cast<std::size_t>(t)].label.kind)] += b - a;
        if (stream.kind == StreamKind::kCompute) {
          st.compute_busy += b - a;
          compute.emplace_back(a, b);
        } else {
          comm.emplace_back(a, b);
        }
      }
    }
    merge(compute);
    merge(comm);
    for (const auto& iv : comm) st.communication_busy += iv.second - iv.first;
    st.communication_overlapped = intersection(comm, compute);
    st.communication_exposed = st.communication_busy - st.communication_overlapped;
  }
  return out;
}

}  // namespace alpasim::sim
