#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "cost_model/cost_model.h"
#include "ir/graph.h"
#include "planner/intra_op/mesh.h"
#include "planner/intra_op/op_graph.h"

namespace alpasim::planner::adapters {

/// The operators of model layers [layer_begin, layer_end) of a training graph (every phase:
/// forward, recompute, backward, optimizer) as the intra-op pass's input. Tensors produced
/// by other layers become kInput nodes. Mapping: dots and MoE einsums keep their einsum
/// letters (a bias becomes a third operand on the output loops; MoE dispatch and combine
/// with GShard's loop structure, whatever their letters and combine operand order, keep the
/// expert-parallel kinds, intra_op::has_moe_structure); convolutions (forward, data
/// and filter gradient, any stride) become loop nests n, ho, wo, ci, kh, kw, co with explicit
/// extents, the spatial loops shared by input and output and splittable for 1x1 kernels
/// only (no halo exchange is priced); the embedding is a one-hot contraction over the vocabulary;
/// single-input reductions are kReduce, two-input ones (bias/scale gradients) an einsum;
/// forward norms and softmax normalise their last axis; optimizer updates are kUpdate;
/// everything else is elementwise with operand axes aligned from the trailing end (an axis
/// whose size differs must stay replicated). Errors: the converted graph fails validate().
/// `node_ops` (optional) receives the model-graph op of every node (for inputs from other
/// layers: the producing op). With `weight_gradients` false, weight-gradient ops and
/// optimizer updates are left out: with gradient accumulation they run once per iteration
/// (Alpa §5: accumulate, then synchronise), so the caller prices the gradient
/// synchronisation from the parameters' shardings instead of per microbatch. Memory-bound
/// nodes (elementwise, softmax, layer-norm, reduce) carry the operator's bytes read +
/// written (IntraOpNode::bytes_accessed), so that CostHooks::memory_bound can price the
/// extra work of a replicated layout.
core::Result<intra_op::IntraOpGraph> layer_range_graph(const ir::Graph& training,
                                                       std::int32_t layer_begin,
                                                       std::int32_t layer_end,
                                                       std::vector<ir::OpId>* node_ops = nullptr,
                                                       bool weight_gradients = true);

/// A physical submesh (Alpa §5.2): `nodes` whole nodes of `gpus_per_node` GPUs (nodes > 1
/// requires every GPU of the node), the devices numbered node-major.
struct SubmeshShape {
  std::int64_t nodes = 1;
  std::int64_t gpus_per_node = 1;
  std::int64_t size() const { return nodes * gpus_per_node; }
  friend bool operator==(const SubmeshShape&, const SubmeshShape&) = default;
};

/// Global device ids of logical mesh position (row, col), row-major, for a submesh placed
/// on nodes first_node.. and local GPUs first_local.. of a cluster with
/// `cluster_gpus_per_node` GPUs per node: index i = row·cols + col of the submesh's
/// node-major device list.
std::vector<std::int64_t> mesh_device_ids(const SubmeshShape& submesh,
                                          const intra_op::LogicalMesh& mesh,
                                          std::int64_t cluster_gpus_per_node,
                                          std::int64_t first_node, std::int64_t first_local);

/// The intra-op pass's collective hook for logical mesh `mesh` on `submesh` placed at node
/// 0: each axis's groups are derived together with cluster::Topology::concurrent_groups (the
/// rows of a mesh share NICs when they all-reduce at once) and priced by the cost model's
/// fastest algorithm. Group size 1 costs 0.
core::Result<intra_op::CollectiveCostFn> make_collective_hook(const cost_model::CostModel& cost,
                                                              const SubmeshShape& submesh,
                                                              const intra_op::LogicalMesh& mesh);

/// Identifies the cost behind make_collective_hook for the intra-op cache: the cluster
/// spec's JSON and the submesh shape.
std::string cost_fingerprint(const cost_model::CostModel& cost, const SubmeshShape& submesh);

/// Compute time of a layer range on `devices` GPUs that split every operator's work evenly
/// (the intra-op pass prices communication only, as Alpa §4.2 does): matmuls through the
/// cost model's GEMM / conv model with the M (or batch) dimension divided by the device
/// count, memory-bound operators through memory_bound() on their bytes / devices. Per
/// microbatch for forward, recompute and backward; once per iteration for the optimizer.
struct ComputeTimes {
  core::Seconds forward{0};
  core::Seconds recompute{0};
  core::Seconds backward{0};
  core::Seconds optimizer{0};
};
/// One operator's compute time on `d` GPUs splitting its work evenly, as
/// layer_range_compute sums it (a memory-bound operator: memory_bound of its bytes / d).
core::Seconds op_compute(const ir::Graph& training, const ir::Op& op, std::int64_t d,
                         const cost_model::CostModel& cost);
/// A weight gradient's or optimizer update's compute time on one device when it is not
/// split evenly over the mesh: a GEMM split `work_shards` ways (the mesh axes any of its
/// tensors is split on), a memory-bound operator reading `read_shards`-way and writing
/// `write_shards`-way splits (ir::split_memory_traffic_bytes). Each shard count >= 1.
core::Seconds op_compute_split(const ir::Graph& training, const ir::Op& op, std::int64_t work_shards,
                               std::int64_t read_shards, std::int64_t write_shards,
                               const cost_model::CostModel& cost);

ComputeTimes layer_range_compute(const ir::Graph& training, std::int32_t layer_begin,
                                 std::int32_t layer_end, std::int64_t devices,
                                 const cost_model::CostModel& cost);

/// layer_range_compute(training, l, l + 1, devices, cost) of every layer l in
/// [0, training.num_layers()) in one pass over the graph (the same sums in the same order:
/// bit-identical). Ops with a layer outside that range are ignored.
std::vector<ComputeTimes> per_layer_compute(const ir::Graph& training, std::int64_t devices,
                                            const cost_model::CostModel& cost);

}  // namespace alpasim::planner::adapters
