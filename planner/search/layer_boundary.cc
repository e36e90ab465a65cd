#include "planner/search/layer_boundary.h"

#include <algorithm>
#include <map>

#include "planner/intra_op/resharding.h"

namespace alpasim::planner {

std::vector<std::vector<BoundaryEdge>> layer_boundary_edges(
    const ir::Graph& graph, const std::vector<std::vector<ir::OpId>>& layer_nodes) {
  const int layers = static_cast<int>(layer_nodes.size());
  // Each layer's own node of each of its operators.
  std::vector<std::map<ir::OpId, int>> node_of(layer_nodes.size());
  for (int l = 0; l < layers; ++l) {
    const auto& nodes = layer_nodes[static_cast<std::size_t>(l)];
    for (std::size_t v = 0; v < nodes.size(); ++v) {
      if (graph.op(nodes[v]).layer == l) node_of[static_cast<std::size_t>(l)][nodes[v]] = static_cast<int>(v);
    }
  }
  std::vector<std::vector<BoundaryEdge>> out(layer_nodes.size());
  for (int x = 0; x < layers; ++x) {
    const auto& nodes = layer_nodes[static_cast<std::size_t>(x)];
    for (std::size_t v = 0; v < nodes.size(); ++v) {
      const ir::Op& producer = graph.op(nodes[v]);
      const int y = producer.layer;
      if ((y != x - 1 && y != x + 1) || y < 0 || y >= layers || producer.is_source()) continue;
      const auto& index = node_of[static_cast<std::size_t>(y)];
      auto it = index.find(producer.id);
      if (it == index.end()) continue;  // not a node of its layer's graph (a weight gradient)
      BoundaryEdge e;
      e.producer_layer = y;
      e.producer_node = it->second;
      e.consumer_layer = x;
      e.consumer_node = static_cast<int>(v);
      e.phase = producer.phase;
      out[static_cast<std::size_t>(std::max(x, y))].push_back(e);
    }
  }
  return out;
}

BoundaryCost price_boundary(const std::vector<BoundaryTransfer>& transfers,
                            const intra_op::LogicalMesh& mesh,
                            const intra_op::CollectiveCostFn& collective) {
  BoundaryCost b;
  for (const BoundaryTransfer& t : transfers) {
    const double s = intra_op::reshard_cost(t.dims, t.element_bytes, t.from, t.to, mesh, collective).value();
    switch (t.phase) {
      case ir::Phase::kForward: b.forward_s += s; break;
      case ir::Phase::kRecompute: b.recompute_s += s; break;
      case ir::Phase::kBackward: b.backward_s += s; break;
      case ir::Phase::kOptimizer: break;  // updates stay in their layer
    }
  }
  return b;
}

}  // namespace alpasim::planner
