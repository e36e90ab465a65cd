// The Searcher's intra-op costs: the per-layer solves (in parallel), the layer
// boundaries' resharding, layouts a plan writes priced as written, and the per-layer
// costs (LayerCost) the lowering reads (searcher.h).
#include <atomic>
#include <thread>

#include "planner/search/searcher.h"

namespace alpasim::planner::search_detail {

core::Status Searcher::ensure_costs(Point& p, const std::vector<std::pair<SubmeshShape, LogicalMesh>>& meshes,
                                    bool count_queries) {
  struct Task {
    int rep;
    SubmeshShape sub;
    LogicalMesh mesh;
    int variant;
    int hook;
  };
  std::vector<Task> tasks;
  std::set<std::string> queued;
  std::vector<intra_op::CollectiveCostFn> hooks;
  std::map<std::string, int> hook_of;
  for (const auto& [sub, mesh] : meshes) {
    const std::string mk = mesh_key(sub, mesh);
    if (!hook_of.count(mk)) {
      ALPASIM_ASSIGN_OR_RETURN(const intra_op::CollectiveCostFn* h, hook(sub, mesh));
      hook_of[mk] = static_cast<int>(hooks.size());
      hooks.push_back(*h);
    }
    for (const auto& [rep, g] : p.graphs) {
      for (int var = 0; var < (mesh.num_devices() > 1 ? 2 : 1); ++var) {
        std::string key = cost_key(p, rep, sub, mesh, var);
        if (count_queries) ++queries_;
        if (costs_.count(key) || !queued.insert(key).second) continue;
        tasks.push_back({rep, sub, mesh, var, hook_of[mk]});
      }
    }
  }
  if (tasks.empty()) return core::Status();
  std::vector<core::Result<intra_op::IntraOpPlan>> results(
      tasks.size(), core::Result<intra_op::IntraOpPlan>(core::internal_error("not run")));
  std::atomic<std::size_t> next{0};
  constexpr double kSolveLimitS = 30.0;  // per solve, without a deadline
  // Per task: not started (deadline), or given less time than kSolveLimitS.
  std::vector<char> skipped(tasks.size(), 0), shortened(tasks.size(), 0);
  auto worker = [&]() {
    intra_op::IntraOpPass pass;
    for (;;) {
      const std::size_t i = next.fetch_add(1);
      if (i >= tasks.size()) return;
      const Task& t = tasks[i];
      double limit_s = kSolveLimitS;
      if (deadline) {
        const double left_s = std::chrono::duration<double>(*deadline - Clock::now()).count();
        if (left_s <= 0 && !accept_cut_solves) {
          skipped[i] = 1;
          continue;
        }
        if (left_s < limit_s) {
          limit_s = std::max(left_s, accept_cut_solves ? kCutSolveLimitS : 0.0);
          shortened[i] = 1;
        }
      }
      intra_op::CostHooks h;
      h.collective = hooks[static_cast<std::size_t>(t.hook)];
      // Replicated memory-bound work (strategies.h); the even split is compute_for's.
      h.memory_bound = [this](core::Bytes b) { return cost_.memory_bound(b); };
      intra_op::IntraOpOptions o;
      o.time_limit = core::seconds(limit_s);
      o.stop_at_time_limit = shortened[i] != 0;
      const auto& graph = t.variant == 0 ? p.graphs.at(t.rep) : p.graphs_w.at(t.rep);
      results[i] = pass.run(graph, t.mesh, h, o);
      if (accept_cut_solves && shortened[i] != 0 && results[i].ok() &&
          (results[i].value().feasibility == intra_op::Feasibility::kTimedOut ||
           results[i].value().node_cost_s.size() != graph.nodes.size())) {
        // Cut before it had any layout: the first point needs one, so solve it fully. (The
        // search's solves have no memory limit, so none ends out of memory without one.)
        o.time_limit = core::seconds(kSolveLimitS);
        o.stop_at_time_limit = false;
        shortened[i] = 0;
        results[i] = pass.run(graph, t.mesh, h, o);
      }
    }
  };
  const int threads = std::max(1, std::min<int>(in_.options.threads, static_cast<int>(tasks.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (skipped[i] != 0) {
      interrupted = true;
      continue;
    }
    ++solves_;
    if (!results[i].ok()) return results[i].status();
    if (shortened[i] != 0 && !results[i].value().proven_optimal) {
      if (!accept_cut_solves) {
        interrupted = true;  // perhaps cut by the deadline: not the answer without one
        continue;
      }
      ++approximate_solves;  // the first point's: kept as solved
    }
    const Task& t = tasks[i];
    const std::string key = cost_key(p, t.rep, t.sub, t.mesh, t.variant);
    costs_.emplace(key, to_layer_cost(p, t.rep, t.mesh, t.variant, results[i].value(),
                                      hooks[static_cast<std::size_t>(t.hook)]));
    plans_.emplace(key, std::move(results[i]).value());
  }
  return core::Status();
}

core::Result<const intra_op::CollectiveCostFn*> Searcher::hook(const SubmeshShape& sub, const LogicalMesh& mesh) {
  const std::string mk = mesh_key(sub, mesh);
  auto it = hooks_.find(mk);
  if (it == hooks_.end()) {
    ALPASIM_ASSIGN_OR_RETURN(intra_op::CollectiveCostFn h, adapters::make_collective_hook(cost_, sub, mesh));
    it = hooks_.emplace(mk, std::move(h)).first;
  }
  return &it->second;
}

const BoundaryCost& Searcher::layer_boundary(const Point& p, int l, const SubmeshShape& sub,
                                             const LogicalMesh& mesh, int variant,
                                             const std::map<int, std::string>* written) {
  static const BoundaryCost kNone;
  if (l <= 0 || l >= p.num_layers || mesh.num_devices() == 1) return kNone;
  const int cls = p.boundary_class[static_cast<std::size_t>(l)];
  if (cls < 0) return kNone;
  auto suffix = [&](int layer) -> std::string {
    if (written == nullptr) return "";
    auto w = written->find(layer);
    return w == written->end() ? "" : w->second;
  };
  std::string key = std::to_string(p.mbs) + "|" + std::to_string(static_cast<int>(p.recompute)) +
                    "|" + std::to_string(cls) + "|" + mesh_key(sub, mesh) + "|" +
                    std::to_string(variant);
  for (const BoundaryEdge& e : p.boundary[static_cast<std::size_t>(l)]) {
    key += suffix(e.producer_layer) + suffix(e.consumer_layer);
  }
  auto it = boundary_costs_.find(key);
  if (it != boundary_costs_.end()) return it->second;
  std::vector<BoundaryTransfer> transfers;
  for (const BoundaryEdge& e : p.boundary[static_cast<std::size_t>(l)]) {
    const int prep = p.rep[static_cast<std::size_t>(e.producer_layer)];
    const int crep = p.rep[static_cast<std::size_t>(e.consumer_layer)];
    int pu = e.producer_node, cv = e.consumer_node;
    if (variant == 1) {
      pu = p.node_w.at(prep)[static_cast<std::size_t>(pu)];
      cv = p.node_w.at(crep)[static_cast<std::size_t>(cv)];
      ALPASIM_CHECK(pu >= 0 && cv >= 0) << "variant 1 adds weight gradients, it removes no node";
    }
    const auto& from = layer_plan(p, e.producer_layer, sub, mesh, variant, suffix(e.producer_layer)).shardings;
    const auto& to = layer_plan(p, e.consumer_layer, sub, mesh, variant, suffix(e.consumer_layer)).shardings;
    ALPASIM_CHECK(static_cast<std::size_t>(pu) < from.size() && static_cast<std::size_t>(cv) < to.size());
    const auto& node = p.graphs.at(crep).nodes[static_cast<std::size_t>(e.consumer_node)];
    transfers.push_back({node.shape, node.element_bytes, from[static_cast<std::size_t>(pu)].output,
                         to[static_cast<std::size_t>(cv)].output, e.phase});
  }
  auto fn = hook(sub, mesh);
  ALPASIM_CHECK(fn.ok()) << fn.status().message();  // built by ensure_costs for this mesh
  const BoundaryCost b = price_boundary(transfers, mesh, **fn);
  if (std::getenv("ALPASIM_SEARCH_DEBUG") != nullptr) {
    std::fprintf(stderr, "boundary %d mbs %lld rc %d mesh %s var %d: %zu tensors, fwd %.3g bwd %.3g rc %.3g s\n",
                 l, static_cast<long long>(p.mbs), static_cast<int>(p.recompute),
                 mesh_key(sub, mesh).c_str(), variant, transfers.size(), b.forward_s, b.backward_s,
                 b.recompute_s);
  }
  return boundary_costs_.emplace(key, b).first->second;
}

const LayerCost& Searcher::layer_cost(const Point& p, int layer, const SubmeshShape& sub,
                                      const LogicalMesh& mesh, int variant, const std::string& written) const {
  if (mesh.num_devices() == 1) variant = 0;
  return costs_.at(cost_key(p, p.rep[static_cast<std::size_t>(layer)], sub, mesh, variant) + written);
}

const intra_op::IntraOpPlan& Searcher::layer_plan(const Point& p, int layer, const SubmeshShape& sub,
                                                  const LogicalMesh& mesh, int variant,
                                                  const std::string& written) const {
  if (mesh.num_devices() == 1) variant = 0;
  return plans_.at(cost_key(p, p.rep[static_cast<std::size_t>(layer)], sub, mesh, variant) + written);
}

core::Result<std::map<int, std::string>> Searcher::price_written_layouts(Point& p, const schema::PlanStage& st,
                                                                         int stage_index, const SubmeshShape& sub,
                                                                         const LogicalMesh& mesh, int* variant) {
  std::map<std::string, const schema::OperatorSharding*> by_name;
  for (const auto& sh : st.shardings) by_name.emplace(sh.op, &sh);
  *variant = 0;
  for (const ir::Op& op : p.graph.ops()) {
    if (op.layer >= st.layer_begin && op.layer < st.layer_end && op.phase == ir::Phase::kOptimizer &&
        by_name.count(op.name) != 0) {
      *variant = 1;
      break;
    }
  }
  ALPASIM_ASSIGN_OR_RETURN(const intra_op::CollectiveCostFn* fn, hook(sub, mesh));
  std::map<int, std::string> suffixes;
  for (auto l = st.layer_begin; l < st.layer_end; ++l) {
    const int layer = static_cast<int>(l);
    const int rep = p.rep[static_cast<std::size_t>(layer)];
    std::vector<ir::OpId> own;
    ALPASIM_RETURN_IF_ERROR(
        adapters::layer_range_graph(p.graph, layer, layer + 1, &own, *variant == 1).status());
    std::vector<std::optional<schema::OperatorSharding>> required(own.size());
    std::string layouts = std::to_string(*variant);
    for (std::size_t i = 0; i < own.size(); ++i) {
      const ir::Op& op = p.graph.op(own[i]);
      layouts += ';';
      // Every node the stage gives a layout: the layer's operators and weights, a tied
      // weight of another layer, and a tensor from the previous layer of the stage (it
      // arrives in its producer's layout; converting it is priced inside this layer).
      auto it = by_name.find(op.name);
      if (it == by_name.end()) continue;
      required[i] = *it->second;
      if (op.layer != layer || op.is_source()) {
        // A weight or a tensor of another layer is a source here: its output layout only.
        required[i]->strategy.clear();
        required[i]->inputs.clear();
      }
      layouts += it->second->strategy + ":";
      for (const auto& spec : it->second->inputs) layouts += spec.to_string() + ",";
      layouts += ">" + it->second->output.to_string();
    }
    const std::string suffix =
        "|written" + std::to_string(written_layouts_.emplace(layouts, written_layouts_.size()).first->second);
    suffixes.emplace(layer, suffix);
    const std::string key = cost_key(p, rep, sub, mesh, *variant) + suffix;
    if (costs_.count(key) != 0) continue;
    intra_op::CostHooks h;
    h.collective = *fn;
    h.memory_bound = [this](core::Bytes b) { return cost_.memory_bound(b); };
    intra_op::IntraOpOptions o;
    o.time_limit = core::seconds(30.0);
    o.required = std::move(required);
    intra_op::IntraOpPass pass;
    const auto& graph = *variant == 0 ? p.graphs.at(rep) : p.graphs_w.at(rep);
    auto solved = pass.run(graph, mesh, h, o);
    if (!solved.ok()) {
      return solved.status().with_context("/stages/" + std::to_string(stage_index) + "/shardings (layer " +
                                          std::to_string(layer) + ")");
    }
    ++solves_;
    costs_.emplace(key, to_layer_cost(p, rep, mesh, *variant, solved.value(), *fn));
    plans_.emplace(key, std::move(solved).value());
  }
  return suffixes;
}

void Searcher::fill_shardings(const Point& pt, schema::PlanStage* st, int variant) const {
  const SubmeshShape sub{st->submesh_nodes, st->submesh_gpus_per_node};
  const LogicalMesh mesh{st->logical_rows, st->logical_cols};
  for (auto l = st->layer_begin; l < st->layer_end; ++l) {
    const auto& ip = layer_plan(pt, static_cast<int>(l), sub, mesh, variant);
    // Names come from the representative layer: rename to this layer's ops.
    std::vector<ir::OpId> own;
    auto g = adapters::layer_range_graph(pt.graph, static_cast<std::int32_t>(l),
                                         static_cast<std::int32_t>(l + 1), &own, variant == 1);
    schema::PlanStage tmp;
    intra_op::write_to_stage(ip, &tmp);
    for (std::size_t i = 0; i < tmp.shardings.size() && i < own.size(); ++i) {
      const ir::Op& op = pt.graph.op(own[i]);
      if (op.layer != l || op.is_source()) continue;
      tmp.shardings[i].op = op.name;
      st->shardings.push_back(std::move(tmp.shardings[i]));
    }
    // Gradients are reduce-scattered and optimizer states sharded on every multi-GPU mesh.
    st->weight_update_sharding = mesh.num_devices() > 1;
  }
}

std::string Searcher::cost_key(const Point& p, int rep, const SubmeshShape& sub,
                               const LogicalMesh& mesh, int variant) const {
  return std::to_string(p.mbs) + "|" + std::to_string(static_cast<int>(p.recompute)) + "|" +
         std::to_string(rep) + "|" + mesh_key(sub, mesh) + "|" + std::to_string(variant);
}

void Searcher::list_layer_calls(const Point& p, const intra_op::IntraOpGraph& g, const std::vector<ir::OpId>& ops,
                                const LogicalMesh& mesh, const intra_op::IntraOpPlan& plan, LayerCost* c) const {
  std::map<std::string, double> moved;  // gradient op -> seconds taken out per microbatch
  for (const auto& w : plan.weight_update_sharding) moved[w.gradient] += w.reduce_scatter_plus_all_gather.value();
  auto fwd = std::make_shared<std::vector<sim::BlockingCollective>>();
  auto bwd = std::make_shared<std::vector<sim::BlockingCollective>>();
  auto rc = std::make_shared<std::vector<sim::BlockingCollective>>();
  auto sync = std::make_shared<std::vector<sim::BlockingCollective>>();
  for (std::size_t v = 0; v < g.nodes.size() && v < plan.shardings.size(); ++v) {
    const ir::Op& op = p.graph.op(ops[v]);
    double comm = plan.node_cost_s[v] - plan.node_compute_s[v];
    if (auto it = moved.find(op.name); it != moved.end()) comm -= it->second;
    if (!(comm > 0)) continue;
    std::vector<sim::BlockingCollective>* to = nullptr;
    switch (op.phase) {
      case ir::Phase::kForward: to = fwd.get(); break;
      case ir::Phase::kBackward: to = bwd.get(); break;
      case ir::Phase::kRecompute: to = rc.get(); break;
      case ir::Phase::kOptimizer: to = sync.get(); break;  // once per iteration: the grad-sync task
    }
    if (to == nullptr) continue;
    const schema::OperatorSharding& sh = plan.shardings[v];
    sim::BlockingCollective call;
    call.collective = "reshard";
    call.algorithm = "operand resharding";
    call.group_size = static_cast<int>(mesh.num_devices());
    const std::int64_t out_shards = std::max<std::int64_t>(1, sh.output.num_shards(mesh.rows, mesh.cols));
    for (const char* kind : {"all-reduce", "reduce-scatter"}) {
      const auto at = sh.strategy.find(std::string("(") + kind + " ");
      if (at == std::string::npos) continue;
      call.collective = std::string(kind) == "all-reduce" ? "all_reduce" : "reduce_scatter";
      call.algorithm = "intra-op strategy";
      // The mesh axes after the kind: "0", "1" or "01".
      int group = 1;
      for (std::size_t k = at + std::string(kind).size() + 2; k < sh.strategy.size(); ++k) {
        if (sh.strategy[k] == '0') group *= static_cast<int>(mesh.rows);
        else if (sh.strategy[k] == '1') group *= static_cast<int>(mesh.cols);
        else break;
      }
      call.group_size = group;
      // nccl-tests' size: the buffer each GPU holds before the collective.
      call.bytes = op.out.bytes() / out_shards * (call.collective == "reduce_scatter" ? group : 1);
      break;
    }
    call.time = core::seconds(comm);
    // The layer is priced by its structural class's representative: keep the operator's
    // name inside its layer; problem_of() prefixes the layer that runs it.
    const auto slash = op.name.find('/');
    call.where = slash == std::string::npos ? op.name : op.name.substr(slash + 1);
    if (to == sync.get()) call.category = "grad_collective";
    to->push_back(std::move(call));
  }
  c->fwd_calls = std::move(fwd);
  c->bwd_calls = std::move(bwd);
  c->rc_calls = std::move(rc);
  c->sync_calls = std::move(sync);
}

LayerCost Searcher::to_layer_cost(const Point& p, int rep, const LogicalMesh& mesh, int variant,
                                  const intra_op::IntraOpPlan& plan,
                                  const intra_op::CollectiveCostFn& hook) {
  LayerCost c;
  const auto& g = variant == 0 ? p.graphs.at(rep) : p.graphs_w.at(rep);
  const auto& ops = variant == 0 ? p.node_ops.at(rep) : p.node_ops_w.at(rep);
  const std::int64_t devices = mesh.num_devices();
  // The pass prices each operator's collectives, the resharding of its operands and the
  // work its layout adds to an even split (a replicated memory-bound operator computes
  // its whole size on every device) per microbatch (plan.node_cost_s, of which
  // node_compute_s is the work); each is charged to the operator's phase: forward,
  // backward, recompute, or (variant 1's optimizer updates, once per iteration) the
  // gradient synchronisation. Variant 1 priced its weight-update-sharded gradient
  // collectives (backward) per microbatch: they are taken out here and priced once per
  // iteration below, like variant 0's.
  ALPASIM_CHECK(plan.node_cost_s.size() == g.nodes.size() && plan.node_compute_s.size() == g.nodes.size() &&
                ops.size() == g.nodes.size());
  double fwd_work = 0, bwd_work = 0, rc_comm = 0, opt_comm = 0;
  for (std::size_t v = 0; v < g.nodes.size(); ++v) {
    const double work = plan.node_compute_s[v];
    const double comm_v = plan.node_cost_s[v] - work;
    switch (p.graph.op(ops[v]).phase) {
      case ir::Phase::kForward: c.fwd_comm_s += comm_v; fwd_work += work; break;
      case ir::Phase::kBackward: c.bwd_comm_s += comm_v; bwd_work += work; break;
      case ir::Phase::kRecompute: rc_comm += plan.node_cost_s[v]; break;
      case ir::Phase::kOptimizer: opt_comm += plan.node_cost_s[v]; break;
    }
  }
  // Weight gradients are not nodes of the intra-op graph, and compute_for splits them
  // over every device. Each writes its parameter's layout and reads its input gradients':
  // a parameter replicated over an axis on which its input gradient is replicated too (a
  // row-parallel linear's bias, a layer norm's scale, under tensor parallelism without
  // sequence parallelism) has its gradient computed whole on every device of that axis,
  // which then hold equal gradients and need no synchronisation over it.
  // grad_read_axes[parameter]: the axes its gradient is summed over. (A replicated
  // update is priced whole by the caller, from opt_replicated_b.)
  std::map<ir::OpId, intra_op::MeshAxes> grad_read_axes;
  {
    std::map<ir::OpId, std::size_t> node_of;
    for (std::size_t v = 0; v < ops.size() && v < plan.shardings.size(); ++v) node_of.emplace(ops[v], v);
    // The mesh axes longer than 1: the only ones a tensor can be split or summed over.
    const intra_op::MeshAxes mesh_axes =
        (mesh.rows > 1 ? intra_op::kAxis0 : 0u) | (mesh.cols > 1 ? intra_op::kAxis1 : 0u);
    auto spec_axes = [&](const schema::ShardingSpec& spec) {
      intra_op::MeshAxes axes = 0;
      if (spec.uses_mesh_axis(0)) axes |= intra_op::kAxis0;
      if (spec.uses_mesh_axis(1)) axes |= intra_op::kAxis1;
      return axes & mesh_axes;
    };
    // The mesh axes a tensor is split on: a node's layout, a weight gradient's parameter's.
    auto tensor_axes = [&](ir::OpId id) -> std::optional<intra_op::MeshAxes> {
      auto it = node_of.find(id);
      if (it == node_of.end()) {
        const ir::OpId param = p.gradient_param[static_cast<std::size_t>(id)];
        if (param == ir::kNoOp) return std::nullopt;
        it = node_of.find(param);
        if (it == node_of.end()) return std::nullopt;
      }
      return spec_axes(plan.shardings[it->second].output);
    };
    for (ir::OpId id : p.weight_ops[static_cast<std::size_t>(rep)]) {
      if (node_of.count(id) != 0) continue;  // priced as a node (variant 1)
      const ir::Op& op = p.graph.op(id);
      const ir::OpId param = p.gradient_param[static_cast<std::size_t>(id)];
      const std::optional<intra_op::MeshAxes> written = tensor_axes(param);
      if (!written) continue;
      // An input without a layout here (another layer's tensor only weight gradients
      // read) may be split anywhere: its gradient is synchronised as before, and no
      // extra work is charged for it.
      intra_op::MeshAxes read = 0;
      for (ir::OpId in : op.inputs) read |= tensor_axes(in).value_or(intra_op::kBothAxes);
      read &= mesh_axes;
      // A gradient summed with another layer's (a tied table's) is synchronised as before.
      grad_read_axes[param] |= p.gradient_in_other_layer[static_cast<std::size_t>(param)] != 0 ? mesh_axes : read;
      const std::int64_t read_shards = intra_op::group_size(mesh, read);
      const std::int64_t write_shards = intra_op::group_size(mesh, *written);
      const std::int64_t work_shards = intra_op::group_size(mesh, read | *written);
      // A GEMM splits its work over every axis any of its tensors is split on.
      if ((op.is_matmul() ? work_shards : std::min(read_shards, write_shards)) >= devices) continue;
      bwd_work += std::max(
          0.0, adapters::op_compute_split(p.graph, op, work_shards, read_shards, write_shards, cost_).value() -
                   adapters::op_compute(p.graph, op, devices, cost_).value());
    }
  }
  for (const auto& w : plan.weight_update_sharding) c.bwd_comm_s -= w.reduce_scatter_plus_all_gather.value();
  c.bwd_comm_s = std::max(0.0, c.bwd_comm_s);
  list_layer_calls(p, g, ops, mesh, plan, &c);
  const double comm = c.fwd_comm_s + c.bwd_comm_s + rc_comm + opt_comm;
  const auto ct = compute_for(p, rep, devices);
  c.fwd_s = ct.forward.value() + fwd_work + c.fwd_comm_s;
  c.bwd_s = ct.backward.value() + bwd_work + c.bwd_comm_s;
  c.rc_s = ct.recompute.value() + rc_comm;
  c.grad_sync_s = opt_comm;
  const std::int64_t state_per_param =
      ir::optimizer_state_bytes_per_parameter(optimizer_, in_.dtype);
  const core::DType storage = core::storage_dtype(in_.dtype);  // the weights' dtype in memory
  const std::int64_t accumulate_per_param = ir::gradient_accumulation_bytes_per_parameter(storage);
  const std::int64_t step_per_param = ir::mixed_precision_step_bytes_per_parameter(storage);
  double accumulation_s = 0;
  std::int64_t step_bytes = 0;
  // Gradient bytes per device to synchronise, by the mesh axes each weight is
  // replicated over (accumulated over the microbatches, synchronised once).
  std::map<intra_op::MeshAxes, std::int64_t> sync_bytes;
  for (std::size_t v = 0; v < g.nodes.size() && v < ops.size(); ++v) {
    const ir::Op& op = p.graph.op(ops[v]);
    if (op.layer != rep && op.kind != ir::OpKind::kParameter) continue;  // another layer's
    std::int64_t shards = devices;
    intra_op::MeshAxes used = intra_op::kBothAxes;
    if (v < plan.shardings.size()) {
      const auto& spec = plan.shardings[v].output;
      shards = std::max<std::int64_t>(1, spec.num_shards(mesh.rows, mesh.cols));
      used = (spec.uses_mesh_axis(0) ? intra_op::kAxis0 : 0u) |
             (spec.uses_mesh_axis(1) ? intra_op::kAxis1 : 0u);
    }
    const std::int64_t bytes = op.out.bytes() / shards;
    if (op.layer != rep) {  // a weight of another layer read here (tied embedding)
      c.tied_owner = op.layer;
      c.tied_param_b += bytes;
      c.tied_opt_b += op.out.num_elements() * state_per_param / devices;
      c.tied_opt_replicated_b += op.out.num_elements() * state_per_param / shards;
      continue;
    }
    if (op.grad_role == ir::GradRole::kWeightGrad || op.phase == ir::Phase::kOptimizer) continue;
    if (op.kind == ir::OpKind::kParameter) {
      c.param_b += bytes;
      c.grad_b += bytes;
      // Each microbatch's gradient is accumulated into a buffer (one memory-bound kernel
      // per weight, on its tile; a GEMM weight's only when the plan does not fuse it into
      // the weight-gradient GEMM, accumulate_gemm_s); the mixed-precision step's passes over every weight
      // are priced like the update, split over every device here (the caller scales a
      // whole-state replica's step up as it does the update's).
      const double accumulate =
          cost_.memory_bound(core::bytes(op.out.num_elements() / shards * accumulate_per_param)).value();
      (p.gemm_weight[static_cast<std::size_t>(ops[v])] != 0 ? c.accumulate_gemm_s : accumulation_s) += accumulate;
      step_bytes += op.out.num_elements() * step_per_param / devices;
      // Weight-update sharding (Alpa §4.2 / ZeRO): states split over every device.
      c.opt_b += op.out.num_elements() * state_per_param / devices;
      c.opt_replicated_b += op.out.num_elements() * state_per_param / shards;
      intra_op::MeshAxes replicated = 0;
      if (mesh.rows > 1 && !(used & intra_op::kAxis0)) replicated |= intra_op::kAxis0;
      if (mesh.cols > 1 && !(used & intra_op::kAxis1)) replicated |= intra_op::kAxis1;
      // Only over the axes its gradient is summed over (a weight gradient computed
      // whole from replicated inputs is already equal on every replica).
      if (auto it = grad_read_axes.find(ops[v]); it != grad_read_axes.end()) replicated &= it->second;
      if (replicated != 0) sync_bytes[replicated] += bytes;
    } else if (op.phase == ir::Phase::kForward) {
      bool saved_here = false, saved_later = false;
      for (ir::OpId u : p.graph.consumers(op.id)) {
        const ir::Op& user = p.graph.op(u);
        if (user.phase != ir::Phase::kBackward && user.phase != ir::Phase::kRecompute) continue;
        (user.layer == op.layer ? saved_here : saved_later) = true;
      }
      // A stored activation takes its tile's bytes on each device: a tensor the plan
      // replicates (Megatron's layer-norm outputs, residuals and dropout masks under
      // tensor parallelism without sequence parallelism) is held in full on every one.
      const std::int64_t tile = op.out.bytes() / shards;
      if (saved_here || saved_later) c.act_b += tile;
      if (saved_later) c.saved_for_next_b += tile;
      if (saved_later && !saved_here) c.saved_only_for_next_b += tile;
    } else if (op.phase == ir::Phase::kRecompute) {
      // What the recomputed forward keeps for the backward (held together when the
      // backward starts); an intermediate only other recomputed operators read is freed
      // as the recomputation goes on.
      bool read_by_backward = false;
      for (ir::OpId u : p.graph.consumers(op.id)) {
        read_by_backward |= p.graph.op(u).phase == ir::Phase::kBackward;
      }
      // A flash kernel's recomputed s x s tiles stay on chip.
      if (read_by_backward) c.work_b += ir::device_memory_bytes(p.graph, op) / shards;
    }
  }
  c.bwd_s += accumulation_s;
  // The update (every optimizer operator's bytes, split over the devices as compute_for
  // splits them) and the step's passes, as one pass over the layer's states.
  c.opt_bytes = layer_optimizer_bytes(p)[static_cast<std::size_t>(rep)] / static_cast<double>(devices) +
                static_cast<double>(step_bytes);
  if (c.opt_bytes > 0) c.opt_s = cost_.memory_bound(core::bytes(static_cast<std::int64_t>(c.opt_bytes))).value();
  // Reduce-scatter the accumulated gradients, update the shard, all-gather the weights.
  auto rs_ag_calls = std::make_shared<std::vector<sim::BlockingCollective>>();
  auto all_reduce_calls = std::make_shared<std::vector<sim::BlockingCollective>>();
  for (const auto& [axes, bytes] : sync_bytes) {
    const double rs = hook(intra_op::Collective::kReduceScatter, core::bytes(bytes), axes).value();
    const double ag = hook(intra_op::Collective::kAllGather, core::bytes(bytes), axes).value();
    const double ar = hook(intra_op::Collective::kAllReduce, core::bytes(bytes), axes).value();
    c.grad_sync_s += rs + ag;
    c.replica_sync_rs_ag_s += rs + ag;
    c.replica_sync_all_reduce_s += ar;
    // For the trace: the replicas over `axes`, each holding the gradients' `bytes`.
    const int group = static_cast<int>(intra_op::group_size(mesh, axes));
    const std::int64_t gradient_bytes = bytes;  // a lambda cannot capture a structured binding (C++17)
    auto call = [&](const char* collective, const char* algorithm, double seconds) {
      return sim::BlockingCollective{collective, gradient_bytes, group, algorithm, core::seconds(seconds),
                                     "gradients", "grad_collective"};
    };
    rs_ag_calls->push_back(call("reduce_scatter", "weight-update sharding", rs));
    rs_ag_calls->push_back(call("all_gather", "weight-update sharding", ag));
    all_reduce_calls->push_back(call("all_reduce", "replica all-reduce", ar));
  }
  c.replica_sync_calls = std::move(rs_ag_calls);
  c.replica_all_reduce_calls = std::move(all_reduce_calls);
  if (!sync_bytes.empty()) c.replica_sync_bytes = std::make_shared<const std::map<intra_op::MeshAxes, std::int64_t>>(sync_bytes);
  const auto& s = p.stats[static_cast<std::size_t>(rep)];
  c.boundary_b = s.boundary_bytes;
  const double d = static_cast<double>(devices);
  c.fwd_flops = static_cast<double>(s.flops.matmul_forward) / d;
  c.bwd_flops = static_cast<double>(s.flops.matmul_backward) / d;
  c.rc_flops = static_cast<double>(s.flops.matmul_recompute) / d;
  if (std::getenv("ALPASIM_SEARCH_DEBUG") != nullptr) {
    std::fprintf(stderr, "layer %d mbs %lld rc %d mesh %s: fwd %.3g bwd %.3g rc %.3g comm %.3g gs %.3g opt %.3g | param %lld opt %lld act %lld work %lld | %s%s %zu wus | %.3f s var %d nodes %d reduced %d\n",
                 rep, static_cast<long long>(p.mbs), static_cast<int>(p.recompute), mesh.to_string().c_str(),
                 c.fwd_s, c.bwd_s, c.rc_s, comm, c.grad_sync_s, c.opt_s, static_cast<long long>(c.param_b),
                 static_cast<long long>(c.opt_b), static_cast<long long>(c.act_b),
                 static_cast<long long>(c.work_b), plan.method.c_str(), plan.proven_optimal ? "" : " (not proven optimal)", sync_bytes.size(),
                 plan.wall_time.value(), variant, plan.nodes, plan.reduced_nodes);
  }
  return c;
}

core::Status Searcher::coalesce_replica_sync(const SubmeshShape& sub, const LogicalMesh& mesh, bool weight_update_sharding,
                                             std::vector<LayerCost>* layers) {
  std::map<intra_op::MeshAxes, std::int64_t> bytes_by_axes;
  for (LayerCost& lc : *layers) {
    if (!lc.replica_sync_bytes) continue;
    for (const auto& [axes, bytes] : *lc.replica_sync_bytes) bytes_by_axes[axes] += bytes;
    lc.grad_sync_s -= weight_update_sharding ? lc.replica_sync_rs_ag_s : lc.replica_sync_all_reduce_s;
    lc.grad_sync_s = std::max(0.0, lc.grad_sync_s);
    lc.replica_sync_calls = nullptr;
  }
  if (bytes_by_axes.empty() || layers->empty()) return core::Status();
  ALPASIM_ASSIGN_OR_RETURN(const intra_op::CollectiveCostFn* h, hook(sub, mesh));
  auto calls = std::make_shared<std::vector<sim::BlockingCollective>>();
  double total = 0;
  for (const auto& entry : bytes_by_axes) {
    // Named copies: a lambda cannot capture a structured binding (C++17; clang before 16).
    const intra_op::MeshAxes axes = entry.first;
    const std::int64_t bytes = entry.second;
    const int group = static_cast<int>(intra_op::group_size(mesh, axes));
    auto add = [&](intra_op::Collective kind, const char* name, const char* algorithm) {
      const double seconds = (*h)(kind, core::bytes(bytes), axes).value();
      total += seconds;
      std::string over = "gradients replicated over mesh axis";
      if ((axes & intra_op::kAxis0) != 0 && (axes & intra_op::kAxis1) != 0) over += "es 0 and 1";
      else over += (axes & intra_op::kAxis0) != 0 ? " 0" : " 1";
      calls->push_back(sim::BlockingCollective{name, bytes, group, algorithm, core::seconds(seconds),
                                               over + " (one buffer for the chunk)", "grad_collective"});
    };
    if (weight_update_sharding) {
      add(intra_op::Collective::kReduceScatter, "reduce_scatter", "weight-update sharding");
      add(intra_op::Collective::kAllGather, "all_gather", "weight-update sharding");
    } else {
      add(intra_op::Collective::kAllReduce, "all_reduce", "replica all-reduce");
    }
  }
  layers->front().grad_sync_s += total;
  layers->front().replica_sync_calls = std::move(calls);
  return core::Status();
}

}  // namespace alpasim::planner::search_detail
