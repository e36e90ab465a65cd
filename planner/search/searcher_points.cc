// The Searcher's training-graph points: the graph of each (microbatch size, recompute),
// its layers' structural classes and intra-op graphs, per-layer compute and the
// points' and partitions' lower bounds (searcher.h).
#include "planner/search/searcher.h"

namespace alpasim::planner::search_detail {

core::Result<Point*> Searcher::point(std::int64_t mbs, schema::Recompute rc, bool with_layer_graphs) {
  const auto key = std::make_pair(mbs, static_cast<int>(rc));
  auto it = points_.find(key);
  if (it != points_.end()) {
    if (with_layer_graphs && !it->second->layer_graphs_built) {
      ALPASIM_RETURN_IF_ERROR(build_layer_graphs(*it->second));
    }
    return it->second.get();
  }
  auto p = std::make_unique<Point>();
  p->mbs = mbs;
  p->recompute = rc;
  ir::BuildOptions bo;
  bo.microbatch_size = mbs;
  bo.dtype = in_.dtype;
  ALPASIM_ASSIGN_OR_RETURN(ir::Graph fwd, ir::build_forward_graph(in_.model, bo));
  ir::TrainingOptions to;
  to.optimizer = optimizer_;
  to.recompute = to_ir(rc);
  p->graph = ir::derive_training_graph(fwd, to);
  p->stats = ir::layer_stats(p->graph);
  p->num_layers = p->graph.num_layers();
  p->gradient_param = ir::weight_gradient_parameters(p->graph);
  p->weight_ops.assign(static_cast<std::size_t>(std::max(0, p->num_layers)), {});
  p->gradient_in_other_layer.assign(p->graph.size(), 0);
  p->gemm_weight = ir::kernel_weight_parameters(p->graph);
  for (const ir::Op& op : p->graph.ops()) {
    const ir::OpId param = p->gradient_param[static_cast<std::size_t>(op.id)];
    if (param == ir::kNoOp) continue;
    if (op.layer != p->graph.op(param).layer) p->gradient_in_other_layer[static_cast<std::size_t>(param)] = 1;
    if (op.layer >= 0 && op.layer < p->num_layers) p->weight_ops[static_cast<std::size_t>(op.layer)].push_back(op.id);
  }
  if (with_layer_graphs) ALPASIM_RETURN_IF_ERROR(build_layer_graphs(*p));
  Point* raw = p.get();
  points_.emplace(key, std::move(p));
  return raw;
}

core::Status Searcher::build_layer_graphs(Point& pt) {
  Point* p = &pt;
  p->layer_graphs_built = true;
  std::map<std::string, int> first;
  std::vector<std::vector<ir::OpId>> layer_ops(static_cast<std::size_t>(p->num_layers));
  for (int l = 0; l < p->num_layers; ++l) {
    std::vector<ir::OpId> ops;
    ALPASIM_ASSIGN_OR_RETURN(intra_op::IntraOpGraph g,
                             adapters::layer_range_graph(p->graph, l, l + 1, &ops, false));
    std::string skey = g.structural_key();
    auto [f, inserted] = first.emplace(skey, l);
    p->rep.push_back(f->second);
    layer_ops[static_cast<std::size_t>(l)] = ops;
    if (inserted) {
      std::vector<ir::OpId> ops_w;
      ALPASIM_ASSIGN_OR_RETURN(intra_op::IntraOpGraph gw,
                               adapters::layer_range_graph(p->graph, l, l + 1, &ops_w, true));
      std::map<ir::OpId, int> index_w;
      for (std::size_t v = 0; v < ops_w.size(); ++v) index_w.emplace(ops_w[v], static_cast<int>(v));
      std::vector<int> to_w;
      for (ir::OpId id : ops) {
        auto it = index_w.find(id);
        to_w.push_back(it == index_w.end() ? -1 : it->second);
      }
      p->node_w.emplace(l, std::move(to_w));
      p->graphs_w.emplace(l, std::move(gw));
      p->node_ops_w.emplace(l, std::move(ops_w));
      p->graphs.emplace(l, std::move(g));
      p->node_ops.emplace(l, std::move(ops));
      p->keys.emplace(l, std::move(skey));
    }
  }
  p->boundary = layer_boundary_edges(p->graph, layer_ops);
  std::map<std::string, int> classes;
  p->boundary_class.assign(static_cast<std::size_t>(p->num_layers), -1);
  for (int l = 1; l < p->num_layers; ++l) {
    const auto& edges = p->boundary[static_cast<std::size_t>(l)];
    if (edges.empty()) continue;
    std::string key = std::to_string(p->rep[static_cast<std::size_t>(l - 1)]) + "," +
                      std::to_string(p->rep[static_cast<std::size_t>(l)]);
    for (const auto& e : edges) {
      key += ";" + std::to_string(e.producer_layer - l) + ":" + std::to_string(e.producer_node) +
             ">" + std::to_string(e.consumer_layer - l) + ":" + std::to_string(e.consumer_node);
    }
    p->boundary_class[static_cast<std::size_t>(l)] =
        classes.emplace(key, static_cast<int>(classes.size())).first->second;
  }
  return core::Status();
}

adapters::ComputeTimes Searcher::compute_for(const Point& p, int layer, std::int64_t devices) {
  return layer_computes(p, devices)[static_cast<std::size_t>(layer)];
}

const std::vector<double>& Searcher::layer_optimizer_bytes(const Point& p) {
  const auto key = std::make_pair(p.mbs, static_cast<int>(p.recompute));
  auto it = optimizer_bytes_.find(key);
  if (it == optimizer_bytes_.end()) {
    std::vector<double> bytes(static_cast<std::size_t>(std::max(0, p.num_layers)), 0.0);
    for (const ir::Op& op : p.graph.ops()) {
      if (op.phase != ir::Phase::kOptimizer || op.layer < 0 || op.layer >= p.num_layers) continue;
      bytes[static_cast<std::size_t>(op.layer)] += static_cast<double>(ir::memory_traffic_bytes(p.graph, op));
    }
    it = optimizer_bytes_.emplace(key, std::move(bytes)).first;
  }
  return it->second;
}

const std::vector<adapters::ComputeTimes>& Searcher::layer_computes(const Point& p, std::int64_t devices) {
  const auto key = std::make_tuple(p.mbs, static_cast<int>(p.recompute), devices);
  auto it = compute_.find(key);
  if (it == compute_.end()) {
    it = compute_.emplace(key, adapters::per_layer_compute(p.graph, devices, cost_)).first;
  }
  return it->second;
}

double Searcher::partition_lower_bound_s(const Point& p, const std::vector<int>& starts, std::int64_t devices) {
  ALPASIM_CHECK(p.layer_graphs_built) << "the bound prices layers by their representatives";
  const auto& ct = layer_computes(p, devices);
  sim::PipelineProblem pb;
  pb.schedule = sim::PipelineSchedule::kOneFOneB;
  pb.num_microbatches = static_cast<int>(in_.global_batch_size / p.mbs);
  pb.interleave = 1;
  for (std::size_t i = 0; i + 1 < starts.size(); ++i) {
    pb.meshes.emplace_back();
    double fwd = 0, bwd = 0, rc = 0, opt = 0;
    for (int l = starts[i]; l < starts[i + 1]; ++l) {
      // The search prices every layer with its structural class's representative.
      const auto& c = ct[static_cast<std::size_t>(p.rep[static_cast<std::size_t>(l)])];
      fwd += c.forward.value();
      bwd += c.backward.value();
      rc += c.recompute.value();
      opt += c.optimizer.value();
    }
    sim::StageCosts st;
    st.forward_s = core::seconds(fwd);
    st.backward_s = core::seconds(bwd);
    st.recompute_s = core::seconds(rc);
    st.optimizer_step_s = core::seconds(opt);
    pb.stages.push_back(st);
  }
  auto bound = pipeline_lower_bound(pb);
  return bound.ok() ? sim::to_seconds(bound.value()).value() : 0.0;
}

double Searcher::point_lower_bound_s(const Point& p, const std::set<std::int64_t>& sizes) {
  ALPASIM_CHECK(p.layer_graphs_built) << "the bound prices layers by their representatives";
  const auto key = std::make_tuple(p.mbs, static_cast<int>(p.recompute), sizes);
  auto it = point_bounds_.find(key);
  if (it != point_bounds_.end()) return it->second;
  std::vector<double> per_layer(static_cast<std::size_t>(p.num_layers), kInf);
  for (const std::int64_t n : sizes) {
    const auto& ct = layer_computes(p, n);
    for (std::size_t l = 0; l < per_layer.size(); ++l) {
      const auto& c = ct[static_cast<std::size_t>(p.rep[l])];  // as the search prices layer l
      const double gpu_s = static_cast<double>(n) * (c.forward.value() + c.backward.value() +
                                                     c.recompute.value());
      per_layer[l] = std::min(per_layer[l], gpu_s);
    }
  }
  double sum = 0;
  for (const double x : per_layer) sum += x;
  const double B = static_cast<double>(in_.global_batch_size / p.mbs);
  const double bound = sizes.empty() ? 0.0
      : std::max(0.0, B * sum / static_cast<double>(num_gpus_) * (1 - 1e-9) - 3e-9 * B);
  point_bounds_.emplace(key, bound);
  return bound;
}

}  // namespace alpasim::planner::search_detail
