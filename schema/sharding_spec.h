#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace alpasim::schema {

/// How a tensor is laid out on a 2D logical device mesh (Alpa §4.1). For each tensor
/// axis, the mesh axes it is split over: none is "R" (replicated), {0} is "S0", {1} is
/// "S1", {0,1} is "S01" (split over both, mesh axis 0 major). Each mesh axis splits at
/// most one tensor axis. Text form concatenates the axes: "S0R", "RS1", "S01R", "S0S1".
class ShardingSpec {
 public:
  ShardingSpec() = default;
  explicit ShardingSpec(std::vector<std::vector<int>> mesh_axes_per_tensor_axis);

  /// Parses the text form for a tensor of any rank; errors say what was wrong.
  static core::Result<ShardingSpec> parse(std::string_view text);
  /// A spec that replicates a tensor of rank `rank`.
  static ShardingSpec replicated(int rank);

  int rank() const { return static_cast<int>(axes_.size()); }
  /// Mesh axes splitting tensor axis `tensor_axis` (empty: replicated along it).
  const std::vector<int>& mesh_axes(int tensor_axis) const { return axes_.at(tensor_axis); }
  /// True when mesh axis `mesh_axis` splits some tensor axis.
  bool uses_mesh_axis(int mesh_axis) const;
  bool is_replicated() const;
  /// Number of shards along a mesh of shape rows × cols (product of split mesh axes).
  std::int64_t num_shards(std::int64_t rows, std::int64_t cols) const;

  std::string to_string() const;
  friend bool operator==(const ShardingSpec&, const ShardingSpec&) = default;

 private:
  std::vector<std::vector<int>> axes_;
};

}  // namespace alpasim::schema
