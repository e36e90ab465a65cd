#pragma once

#include <cstdint>
#include <vector>

#include "core/units.h"
#include "planner/intra_op/mesh.h"
#include "schema/sharding_spec.h"

namespace alpasim::planner::intra_op {

/// True when every split tensor axis of `spec` divides evenly over its mesh axes (Alpa
/// shards evenly, SPMD) and the spec's rank matches `dims`.
bool spec_fits(const std::vector<std::int64_t>& dims, const schema::ShardingSpec& spec,
               const LogicalMesh& mesh);

/// Elements of the tile one device holds: prod(dims) / shards.
std::int64_t tile_elements(const std::vector<std::int64_t>& dims,
                           const schema::ShardingSpec& spec, const LogicalMesh& mesh);

/// Every spec of a tensor of shape `dims` on `mesh`: each mesh axis of size > 1 splits at
/// most one tensor axis; when both split the same axis it is S01 (axis 0 major; S10 is the
/// same tile set in another device order and is not enumerated). Tensor axes whose entry in
/// `splittable` is false stay R; specs that do not divide evenly are left out. The result
/// starts with the replicated spec and has at most (rank + 1)^2 entries, in a fixed order.
std::vector<schema::ShardingSpec> enumerate_specs(const std::vector<std::int64_t>& dims,
                                                  const LogicalMesh& mesh,
                                                  const std::vector<bool>& splittable = {});

/// One collective of a resharding.
struct ReshardStep {
  Collective collective;
  MeshAxes axes;
  core::Bytes bytes_per_device;  ///< as CollectiveCostFn defines it
};

/// How to turn a tensor laid out as `src` into `dst` (Alpa §4.1, Table 2):
///  - same spec: nothing;
///  - replicated -> sharded along a mesh axis: a local slice, free;
///  - a mesh axis that moves from one tensor axis to another: all-to-all along it, on the
///    source tile;
///  - a mesh axis that splits in `src` and not in `dst` (or splits the same tensor axis in
///    another major/minor order): all-gather along it;
/// in that order (all-to-all first, on the smaller tiles), then the free slices. Partial sums
/// (split contractions) are not layouts: the operator strategy that makes them pays their
/// all-reduce or reduce-scatter (strategies.h).
std::vector<ReshardStep> reshard_steps(const std::vector<std::int64_t>& dims,
                                       std::int64_t element_bytes,
                                       const schema::ShardingSpec& src,
                                       const schema::ShardingSpec& dst, const LogicalMesh& mesh);

/// Seconds of reshard_steps() priced by `cost`.
core::Seconds reshard_cost(const std::vector<std::int64_t>& dims, std::int64_t element_bytes,
                           const schema::ShardingSpec& src, const schema::ShardingSpec& dst,
                           const LogicalMesh& mesh, const CollectiveCostFn& cost);

}  // namespace alpasim::planner::intra_op
