#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>

#include "core/units.h"

namespace alpasim::planner::intra_op {

/// A 2D logical device mesh rows × cols (Alpa §4.1). Mesh axis 0 has `rows` devices per
/// group, axis 1 has `cols`. An axis of size 1 cannot split anything.
struct LogicalMesh {
  std::int64_t rows = 1;
  std::int64_t cols = 1;
  /// Devices along mesh axis `axis` (0 or 1).
  std::int64_t axis_size(int axis) const { return axis == 0 ? rows : cols; }
  std::int64_t num_devices() const { return rows * cols; }
  /// "2x4".
  std::string to_string() const;
  friend bool operator==(const LogicalMesh&, const LogicalMesh&) = default;
};

/// A set of mesh axes as a bit mask: kAxis0 = 1, kAxis1 = 2, kBothAxes = 3 (0 = none).
using MeshAxes = unsigned;
inline constexpr MeshAxes kAxis0 = 1;
inline constexpr MeshAxes kAxis1 = 2;
inline constexpr MeshAxes kBothAxes = 3;

/// Devices in one group of the collective over `axes` (product of their sizes).
std::int64_t group_size(const LogicalMesh& mesh, MeshAxes axes);

/// Collective communication primitives the intra-op pass prices.
enum class Collective { kAllReduce, kAllGather, kReduceScatter, kAllToAll };
/// "all-reduce", "all-gather", "reduce-scatter", "all-to-all".
const char* collective_name(Collective c);

/// Prices one collective inside every group of devices along `axes` of the mesh (all groups
/// run concurrently, so the time of one group is the cost). `bytes_per_device` is the size
/// of the buffer each device holds: the whole buffer for all-reduce and all-to-all, the
/// gathered result for all-gather, the input for reduce-scatter. Returns seconds.
/// This is the narrow interface to the cost model (cost_model/collective_cost.h will
/// provide one calibrated from profiles; AlphaBetaCollectives below is the fallback).
using CollectiveCostFn = std::function<core::Seconds(Collective, core::Bytes, MeshAxes)>;

/// Ring alpha-beta model per mesh axis: time = alpha + factor · bytes / bandwidth with
/// factor 2(n-1)/n for all-reduce and (n-1)/n for all-gather, reduce-scatter and all-to-all
/// (each device sends (n-1)/n of its buffer); n is the group size. A collective over both
/// axes runs at the slower axis's bandwidth and the larger latency.
struct AlphaBetaCollectives {
  LogicalMesh mesh;
  std::array<core::BytesPerSecond, 2> bandwidth{core::gbyte_per_s(100.0),
                                                core::gbyte_per_s(100.0)};
  std::array<core::Seconds, 2> latency{core::microseconds(0.0), core::microseconds(0.0)};

  core::Seconds operator()(Collective c, core::Bytes bytes_per_device, MeshAxes axes) const;
};

}  // namespace alpasim::planner::intra_op
