#pragma once

#include <vector>

#include "ir/graph.h"
#include "planner/intra_op/mesh.h"
#include "schema/sharding_spec.h"

namespace alpasim::planner {

/// A tensor one layer produces and an adjacent layer reads: an activation (forward or
/// recompute) read by the next layer, or an activation gradient (backward) read by the
/// one before. The search solves every layer's intra-op plan alone, its inputs from other
/// layers "in any layout, free" (adapters::layer_range_graph makes them kInput nodes), so
/// a stage holding both layers must still move each such tensor from the layout its
/// producer's solution writes to the layout its consumer's solution reads (issue 15 #2).
/// Nodes are indices in the layers' own intra-op graphs (node_ops order).
struct BoundaryEdge {
  int producer_layer = 0;
  int producer_node = 0;
  int consumer_layer = 0;
  int consumer_node = 0;  ///< the consumer graph's kInput node of the tensor
  ir::Phase phase = ir::Phase::kForward;  ///< the producer's
  friend bool operator==(const BoundaryEdge&, const BoundaryEdge&) = default;
};

/// The edges between layers l - 1 and l of `graph`, for every l (index l; index 0 is
/// empty), in consumer-layer then consumer-node order. `layer_nodes[l]`: the model op of
/// each node of layer l's intra-op graph (for kInput nodes, the op producing the tensor).
/// Weights (a tied weight is a copy with its own gradient all-reduce) and batch inputs (no
/// producer) are not edges, nor are tensors of non-adjacent layers (their stage boundary
/// is a pipeline send).
std::vector<std::vector<BoundaryEdge>> layer_boundary_edges(
    const ir::Graph& graph, const std::vector<std::vector<ir::OpId>>& layer_nodes);

/// One boundary tensor to move, with the layouts of both sides.
struct BoundaryTransfer {
  std::vector<std::int64_t> dims;  ///< the tensor's shape, elements
  std::int64_t element_bytes = 2;
  schema::ShardingSpec from;  ///< the producer's output layout
  schema::ShardingSpec to;    ///< the consumer's input-node layout
  ir::Phase phase = ir::Phase::kForward;
};

/// Seconds per microbatch of a boundary's transfers by the phase that pays them.
struct BoundaryCost {
  double forward_s = 0, backward_s = 0, recompute_s = 0;
  double total_s() const { return forward_s + backward_s + recompute_s; }
};

/// Prices each transfer with intra_op::reshard_cost on `mesh` (all-to-all, all-gather,
/// free slices; nothing when the layouts agree) and charges it to its phase.
BoundaryCost price_boundary(const std::vector<BoundaryTransfer>& transfers,
                            const intra_op::LogicalMesh& mesh,
                            const intra_op::CollectiveCostFn& collective);

}  // namespace alpasim::planner
