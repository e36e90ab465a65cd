#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/units.h"
#include "planner/intra_op/mesh.h"
#include "planner/intra_op/op_graph.h"
#include "schema/sharding_spec.h"

namespace alpasim::planner::intra_op {

/// Costs the pass asks of the cost model, kept to two hooks so the pass does not depend on
/// cost_model/ (the integration fills them from a calibrated model).
struct CostHooks {
  /// Prices collectives per mesh axis; required.
  CollectiveCostFn collective;
  /// Sustained FLOP/s of one device for einsum-like operators. 0 ignores compute, as Alpa
  /// §4.2 does (all strategies of a heavy operator split its work evenly); > 0 also charges
  /// strategies that leave a mesh axis idle for their replicated compute.
  double device_flops_per_s = 0.0;
  /// Time of one device's memory-bound kernel over `bytes`, monotone in them; empty ignores
  /// memory-bound compute. Set: a memory-bound operator's strategy (nodes with
  /// bytes_accessed > 0) pays, as compute, what its tile costs beyond an even split over
  /// the mesh, memory_bound(bytes / shards) - memory_bound(bytes / devices) >= 0: nothing
  /// when its layout splits it over every device, its whole size less a share when it is
  /// replicated (Megatron's layer norms and dropouts under tensor parallelism without
  /// sequence parallelism). The even split itself is the caller's to add.
  std::function<core::Seconds(core::Bytes)> memory_bound;
};

/// One parallel algorithm of one operator (Alpa §4.1, Table 3).
struct Strategy {
  /// Alpa notation, e.g. "S0R x RS1 -> S0S1" or "RS0 x S0R -> RR (all-reduce 0)".
  std::string name;
  schema::ShardingSpec output;
  std::vector<schema::ShardingSpec> inputs;  ///< required layout of each operand
  core::Seconds communication = core::seconds(0.0);
  core::Seconds compute = core::seconds(0.0);
  core::Bytes memory = core::bytes(0);  ///< per device: output tile (or optimizer states)
  /// Mesh axes over which this strategy all-reduces its partial-sum output (0: none). The
  /// post-pass (intra_op_pass.h) may turn it into reduce-scatter + all-gather (ZeRO-like).
  MeshAxes all_reduce_axes = 0;
  core::Bytes all_reduce_bytes = core::bytes(0);  ///< per-device buffer of that all-reduce
  /// Mesh axes over which this strategy reduce-scatters its partial-sum output (0: none), and
  /// the per-device buffer before it (the intra-op pass combines such collectives of a sum's
  /// operands, IntraOpNode::sums_operands).
  MeshAxes reduce_scatter_axes = 0;
  core::Bytes reduce_scatter_bytes = core::bytes(0);
  /// Devices that share the operator's work (einsum-like: product of split loop sizes);
  /// the rest compute replicas. 1 for operators whose compute is not modelled.
  std::int64_t parallel_devices = 1;

  core::Seconds cost() const { return communication + compute; }
};

/// Every strategy of node `v` on `mesh`, in a fixed order, none that splits unevenly.
/// When hooks.device_flops_per_s is 0 (compute not priced), einsum-like operators keep only
/// strategies that split their work over every device (Alpa §4.2: no replicated compute for
/// heavy operators), unless none exists.
/// - einsum (dot, batched matmul, conv2d, embedding): every map of its loops onto the mesh
///   axes (each mesh axis of size > 1 splits one loop or none; both on one loop = S01). A
///   split contraction leaves partial sums: one variant all-reduces them (output replicated
///   along those mesh axes), others reduce-scatter them onto an unsplit output axis.
///   Loops marked unsplittable stay whole; with loop extents (convolutions) every operand
///   and the output must split evenly too. A convolution's strategies are therefore Alpa's:
///   batch split (data parallel; the filter gradient's partial sums all-reduce), output-
///   channel split (the data gradient all-reduces), input-channel split (the forward
///   all-reduces), and spatial splits of 1x1 convolutions.
/// - MoE dispatch / combine: the einsum strategies plus expert parallelism: tokens split by
///   group g (or, with too few groups, each group's tokens s), experts e split on the same
///   mesh axis, one all-to-all between the two; on a 2D mesh also data x expert
///   parallelism: g split over both axes (S01; or g over axis 0 and s over axis 1), e over
///   axis 1, the all-to-all within axis 1.
/// - elementwise, layout, softmax, layer-norm, update: every output layout; operands
///   follow it (a broadcast operand stays replicated on the broadcast axes). A split
///   normalised axis costs an all-reduce of two fp32 statistics per row.
/// - reduce: every operand layout; split summed axes all-reduce the result.
/// - input, parameter: every layout, free.
std::vector<Strategy> enumerate_strategies(const IntraOpGraph& graph, int v,
                                           const LogicalMesh& mesh, const CostHooks& hooks);

}  // namespace alpasim::planner::intra_op
