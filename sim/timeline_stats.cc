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
  // Communication intervals per device and kind; transfers count for their receiver too.
  std::vector<std::array<std::vector<Interval>, kNumTaskKinds>> comm_by_kind(num_devices);
  std::vector<std::vector<Interval>> compute(num_devices);
  for (std::size_t t = 0; t < graph.tasks().size(); ++t) {
    const auto& task = graph.tasks()[t];
    const auto& stream = graph.streams()[static_cast<std::size_t>(task.stream)];
    const auto d = static_cast<std::size_t>(stream.device);
    const auto kind = static_cast<std::size_t>(task.label.kind);
    const Interval iv(tl.start[t], tl.end[t]);
    out[d].time_by_kind[kind] += iv.second - iv.first;
    if (stream.kind == StreamKind::kCompute) {
      out[d].compute_busy += iv.second - iv.first;
      compute[d].push_back(iv);
    } else {
      comm_by_kind[d][kind].push_back(iv);
    }
    if (task.peer >= 0 && task.peer != stream.device) {
      comm_by_kind[static_cast<std::size_t>(task.peer)][kind].push_back(iv);
    }
  }
  std::vector<Interval> comm;
  for (std::size_t d = 0; d < num_devices; ++d) {
    DeviceStats& st = out[d];
    merge(compute[d]);
    comm.clear();
    for (std::size_t k = 0; k < kNumTaskKinds; ++k) {
      auto& ivs = comm_by_kind[d][k];
      if (ivs.empty()) continue;
      comm.insert(comm.end(), ivs.begin(), ivs.end());
      merge(ivs);
      Time busy = 0;
      for (const auto& iv : ivs) busy += iv.second - iv.first;
      st.communication_exposed_by_kind[k] = busy - intersection(ivs, compute[d]);
    }
    merge(comm);
    for (const auto& iv : comm) st.communication_busy += iv.second - iv.first;
    st.communication_overlapped = intersection(comm, compute[d]);
    st.communication_exposed = st.communication_busy - st.communication_overlapped;
  }
  return out;
}

}  // namespace alpasim::sim
