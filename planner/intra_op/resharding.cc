#include "planner/intra_op/resharding.h"

#include "core/check.h"

namespace alpasim::planner::intra_op {

bool spec_fits(const std::vector<std::int64_t>& dims, const schema::ShardingSpec& spec,
               const LogicalMesh& mesh) {
  if (spec.rank() != static_cast<int>(dims.size())) return false;
  for (int i = 0; i < spec.rank(); ++i) {
    std::int64_t parts = 1;
    for (int a : spec.mesh_axes(i)) parts *= mesh.axis_size(a);
    if (dims[static_cast<std::size_t>(i)] % parts != 0) return false;
  }
  return true;
}

std::int64_t tile_elements(const std::vector<std::int64_t>& dims,
                           const schema::ShardingSpec& spec, const LogicalMesh& mesh) {
  ALPASIM_CHECK(spec.rank() == static_cast<int>(dims.size())) << spec.to_string();
  std::int64_t n = 1;
  for (std::int64_t d : dims) n *= d;
  return n / spec.num_shards(mesh.rows, mesh.cols);
}

std::vector<schema::ShardingSpec> enumerate_specs(const std::vector<std::int64_t>& dims,
                                                  const LogicalMesh& mesh,
                                                  const std::vector<bool>& splittable) {
  const int rank = static_cast<int>(dims.size());
  auto can_split = [&](int axis) {
    return splittable.empty() || splittable[static_cast<std::size_t>(axis)];
  };
  std::vector<schema::ShardingSpec> out;
  // a0 / a1: tensor axis split by mesh axis 0 / 1, or -1.
  for (int a0 = -1; a0 < rank; ++a0) {
    if (a0 >= 0 && (mesh.rows <= 1 || !can_split(a0))) continue;
    for (int a1 = -1; a1 < rank; ++a1) {
      if (a1 >= 0 && (mesh.cols <= 1 || !can_split(a1))) continue;
      std::vector<std::vector<int>> axes(static_cast<std::size_t>(rank));
      if (a0 >= 0) axes[static_cast<std::size_t>(a0)].push_back(0);
      if (a1 >= 0) axes[static_cast<std::size_t>(a1)].push_back(1);
      schema::ShardingSpec spec(std::move(axes));
      if (spec_fits(dims, spec, mesh)) out.push_back(std::move(spec));
    }
  }
  return out;
}

namespace {
// Tensor axis that mesh axis `m` splits in `spec`, and its position in that axis's list.
struct Placement {
  int tensor_axis = -1;
  int position = -1;
};
Placement placement(const schema::ShardingSpec& spec, int m) {
  for (int i = 0; i < spec.rank(); ++i) {
    const auto& axes = spec.mesh_axes(i);
    for (std::size_t k = 0; k < axes.size(); ++k) {
      if (axes[k] == m) return {i, static_cast<int>(k)};
    }
  }
  return {};
}
}  // namespace

std::vector<ReshardStep> reshard_steps(const std::vector<std::int64_t>& dims,
                                       std::int64_t element_bytes,
                                       const schema::ShardingSpec& src,
                                       const schema::ShardingSpec& dst, const LogicalMesh& mesh) {
  ALPASIM_CHECK(src.rank() == dst.rank() && src.rank() == static_cast<int>(dims.size()))
      << src.to_string() << " -> " << dst.to_string();
  std::vector<ReshardStep> steps;
  if (src == dst) return steps;
  MeshAxes moved = 0;     // all-to-all
  MeshAxes gathered = 0;  // all-gather
  for (int m = 0; m < 2; ++m) {
    if (mesh.axis_size(m) <= 1) continue;
    const Placement s = placement(src, m);
    if (s.tensor_axis < 0) continue;  // not split in src: nothing, or a free slice
    const Placement d = placement(dst, m);
    // Kept only when the whole prefix of the tensor axis's list up to m is the same.
    bool kept = false;
    if (d.tensor_axis == s.tensor_axis && d.position == s.position) {
      const auto& sa = src.mesh_axes(s.tensor_axis);
      const auto& da = dst.mesh_axes(d.tensor_axis);
      kept = std::equal(sa.begin(), sa.begin() + s.position + 1, da.begin());
    }
    if (kept) continue;
    const MeshAxes bit = m == 0 ? kAxis0 : kAxis1;
    if (d.tensor_axis >= 0 && d.tensor_axis != s.tensor_axis) {
      moved |= bit;
    } else {
      gathered |= bit;
    }
  }
  const core::Bytes src_tile(tile_elements(dims, src, mesh) * element_bytes);
  if (moved != 0) steps.push_back({Collective::kAllToAll, moved, src_tile});
  if (gathered != 0) {
    steps.push_back(
        {Collective::kAllGather, gathered, src_tile * group_size(mesh, gathered)});
  }
  return steps;
}

core::Seconds reshard_cost(const std::vector<std::int64_t>& dims, std::int64_t element_bytes,
                           const schema::ShardingSpec& src, const schema::ShardingSpec& dst,
                           const LogicalMesh& mesh, const CollectiveCostFn& cost) {
  core::Seconds total = core::seconds(0.0);
  for (const ReshardStep& s : reshard_steps(dims, element_bytes, src, dst, mesh)) {
    total += cost(s.collective, s.bytes_per_device, s.axes);
  }
  return total;
}

}  // namespace alpasim::planner::intra_op
