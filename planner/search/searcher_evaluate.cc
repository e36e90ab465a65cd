// The one evaluator: a plan lowered onto the simulator (per-layer costs, memory by the
// executor's rules, sends over the topology) and simulated (searcher.h).
#include "planner/search/searcher.h"

namespace alpasim::planner::search_detail {

core::Result<Evaluated> Searcher::simulate(const Lowering& lw, const schema::Plan& plan) {
  ALPASIM_ASSIGN_OR_RETURN(sim::PipelineProblem pb, problem_of(lw, plan));
  if (prune_above_s || skip_unfit) {
    auto overflows = cannot_fit(pb);
    const bool unfit = overflows.ok() && overflows.value();
    if (prune_above_s) {
      // Exact skips: the simulated time is >= the bound (pipeline_bound.h), so a plan whose
      // bound exceeds *prune_above_s cannot beat the plan the caller compares with; nor
      // can a plan whose memory bound says it does not fit (that plan fits).
      auto bound = pipeline_lower_bound(pb);
      if (unfit || (bound.ok() && sim::to_seconds(bound.value()).value() > *prune_above_s)) {
        ++candidates_pruned;
        Evaluated skipped;
        skipped.error = "pruned by its lower bound";
        return skipped;  // ok = false: never better than anything
      }
    } else if (unfit) {
      Evaluated skipped;
      skipped.prediction.fits = false;
      skipped.error = "cannot fit by its memory bound";
      return skipped;
    }
  }
  return run_problem(std::move(pb), plan);
}

double Searcher::send_flow_bandwidth(const std::vector<std::int64_t>& from, const std::vector<std::int64_t>& to) {
  auto key = std::make_pair(from, to);
  if (auto it = send_bandwidth_.find(key); it != send_bandwidth_.end()) return it->second;
  const cluster::Topology& topo = cost_.topology();
  std::vector<std::vector<std::int64_t>> pairs;
  double bandwidth = topo.point_to_point(from.front(), to.front()).bandwidth.value();
  for (std::size_t i = 0; i < std::min(from.size(), to.size()); ++i) {
    if (from[i] == to[i]) continue;
    bandwidth = std::min(bandwidth, topo.point_to_point(from[i], to[i]).bandwidth.value());
    if (topo.domain_of(from[i]) != topo.domain_of(to[i])) pairs.push_back({from[i], to[i]});
  }
  if (!pairs.empty()) {
    auto groups = topo.concurrent_groups(pairs);
    ALPASIM_CHECK(groups.ok()) << groups.status().message();  // pairs are disjoint and valid
    for (const cluster::GroupInfo& g : groups.value()) {
      bandwidth = std::min(bandwidth, g.inter_rank_bandwidth.value());
    }
  }
  send_bandwidth_.emplace(std::move(key), bandwidth);
  return bandwidth;
}

core::Result<sim::PipelineProblem> Searcher::problem_of(const Lowering& lw, const schema::Plan& plan) {
  sim::PipelineProblem pb;
  const int p = static_cast<int>(lw.mesh_devices.size());
  const int chunks = static_cast<int>(lw.chunk_layers.size());
  const int v = chunks / p;
  pb.schedule = plan.schedule == schema::Schedule::kGpipe ? sim::PipelineSchedule::kGPipe
                : v > 1 ? sim::PipelineSchedule::kInterleaved1F1B
                        : sim::PipelineSchedule::kOneFOneB;
  pb.num_microbatches = static_cast<int>(plan.num_microbatches);
  pb.interleave = v;
  pb.data_parallel = lw.data_parallel;
  pb.grad_sync_mode = lw.grad_sync_mode;
  pb.blocking_p2p = lw.blocking_p2p;
  for (int m = 0; m < p; ++m) {
    sim::MeshSpec ms;
    ms.num_gpus = lw.mesh_gpus[static_cast<std::size_t>(m)];
    ms.memory_limit = core::bytes(memory_limit_);
    pb.meshes.push_back(ms);
  }
  // One link per mesh pair and direction, carrying one receiving GPU's flow (the
  // simulator moves each GPU's part, all at once): the point-to-point bandwidth of the
  // meshes' first GPUs, or less where the flows of all the receiving GPUs leave a node
  // through the NICs they share (send_flow_bandwidth).
  auto route = [&](int from, int to) {
    const auto& from_devices = lw.mesh_devices[static_cast<std::size_t>(from)];
    const auto& to_devices = lw.mesh_devices[static_cast<std::size_t>(to)];
    const auto a = from_devices.front();
    const auto b = to_devices.front();
    sim::Route r;
    if (a == b) return r;
    const cluster::PathInfo path = cost_.topology().point_to_point(a, b);
    sim::LinkSpec link;
    link.name = "mesh" + std::to_string(from) + "->mesh" + std::to_string(to);
    link.capacity = core::BytesPerSecond(send_flow_bandwidth(from_devices, to_devices));
    pb.links.push_back(link);
    r.links.push_back(static_cast<sim::LinkId>(pb.links.size() - 1));
    r.latency = path.latency;
    return r;
  };
  if (p > 1) {
    for (int m = 0; m < p; ++m) {
      const int next = (m + 1) % p;
      const int prev = (m + p - 1) % p;
      if (m + 1 < p || v > 1) pb.meshes[static_cast<std::size_t>(m)].send_next = route(m, next);
      if (m > 0 || v > 1) pb.meshes[static_cast<std::size_t>(m)].send_prev = route(m, prev);
    }
  }
  // Tied weights read by a chunk on a mesh that does not own them (GPT's word embedding
  // on the head's mesh): that mesh holds a copy, its gradient and optimizer state
  // (counted on its first chunk that reads it), and after the backward each device
  // all-reduces the copy's gradient with its peer on the owner's mesh, as Megatron does
  // and sim/lowering prices it (megatron/training.py, "All-reduce word_embeddings' grad
  // across first and last stages"): once per iteration, on both chunks.
  std::vector<std::int64_t> tied_b(static_cast<std::size_t>(chunks), 0);
  std::vector<std::int64_t> tied_os(static_cast<std::size_t>(chunks), 0);
  std::vector<double> tied_ar_s(static_cast<std::size_t>(chunks), 0);
  std::vector<std::vector<sim::BlockingCollective>> tied_calls(static_cast<std::size_t>(chunks));
  {
    std::set<std::pair<int, int>> counted;  // (mesh, owner layer)
    for (int c = 0; c < chunks; ++c) {
      for (const LayerCost& l : lw.chunk_layers[static_cast<std::size_t>(c)]) {
        if (l.tied_owner < 0 || l.tied_param_b <= 0) continue;
        int oc = -1;
        for (int k = 0; k < chunks && k < static_cast<int>(plan.stages.size()); ++k) {
          const auto& sk = plan.stages[static_cast<std::size_t>(k)];
          if (sk.layer_begin <= l.tied_owner && l.tied_owner < sk.layer_end) oc = k;
        }
        if (oc < 0 || oc % p == c % p || !counted.insert({c % p, l.tied_owner}).second) continue;
        tied_b[static_cast<std::size_t>(c)] += l.tied_param_b;
        tied_os[static_cast<std::size_t>(c)] += l.tied_opt_b;
        const auto& reader = lw.mesh_devices[static_cast<std::size_t>(c % p)];
        const auto& owner = lw.mesh_devices[static_cast<std::size_t>(oc % p)];
        std::vector<std::vector<std::int64_t>> pairs;
        for (std::size_t i = 0; i < std::min(reader.size(), owner.size()); ++i) {
          pairs.push_back({owner[i], reader[i]});
        }
        if (pairs.empty()) continue;
        ALPASIM_ASSIGN_OR_RETURN(std::vector<cluster::GroupInfo> gi, cost_.concurrent_groups(pairs));
        const cost_model::CollectiveEstimate e =
            cost_.collective(cost_model::Collective::kAllReduce, core::bytes(l.tied_param_b), gi.front());
        tied_ar_s[static_cast<std::size_t>(c)] += e.time.value();
        tied_ar_s[static_cast<std::size_t>(oc)] += e.time.value();
        const sim::BlockingCollective call = traced_collective(
            cost_model::Collective::kAllReduce, l.tied_param_b, 2, e, "tied weights of layer " +
            std::to_string(l.tied_owner));
        tied_calls[static_cast<std::size_t>(c)].push_back(call);
        tied_calls[static_cast<std::size_t>(oc)].push_back(call);
      }
    }
  }
  for (int c = 0; c < chunks; ++c) {
    const auto& layers = lw.chunk_layers[static_cast<std::size_t>(c)];
    sim::StageCosts st;
    double fwd = 0, bwd = 0, rc = 0, fc = 0, bc = 0, gs = 0, opt = 0, ff = 0, bf = 0, rf = 0;
    std::int64_t act = 0, work = 0, par = 0, grad = 0, os = 0;
    for (const LayerCost& l : layers) {
      fwd += l.fwd_s; bwd += l.bwd_s; rc += l.rc_s; fc += l.fwd_comm_s; bc += l.bwd_comm_s;
      if (!plan.gradient_accumulation_fusion) bwd += l.accumulate_gemm_s;
      gs += l.grad_sync_s; opt += l.opt_s; ff += l.fwd_flops; bf += l.bwd_flops; rf += l.rc_flops;
      act += l.act_b; work = std::max(work, l.work_b); par += l.param_b; grad += l.grad_b;
      os += l.opt_b;
    }
    // A tensor saved for the next layer's backward is stored by the chunk that runs it.
    if (c + 1 < chunks && !layers.empty()) act -= layers.back().saved_only_for_next_b;
    if (c > 0 && !lw.chunk_layers[static_cast<std::size_t>(c - 1)].empty()) {
      act += lw.chunk_layers[static_cast<std::size_t>(c - 1)].back().saved_for_next_b;
    }
    par += tied_b[static_cast<std::size_t>(c)];
    grad += tied_b[static_cast<std::size_t>(c)];
    os += tied_os[static_cast<std::size_t>(c)];
    st.forward_s = core::seconds(fwd);
    st.backward_s = core::seconds(bwd);
    st.recompute_s = core::seconds(rc);
    st.forward_tp_comm_s = core::seconds(std::min(fc, fwd));
    st.backward_tp_comm_s = core::seconds(std::min(bc, bwd));
    if (list_collectives && c < static_cast<int>(plan.stages.size())) {
      // The backward runs the chunk's layers last to first; the forward (and its
      // recomputation) first to last. Each call is named after the layer that runs it.
      const std::int64_t first_layer = plan.stages[static_cast<std::size_t>(c)].layer_begin;
      auto add = [&](const LayerCost::Calls& calls, std::size_t i, std::vector<sim::BlockingCollective>* to) {
        if (!calls) return;
        for (sim::BlockingCollective call : *calls) {
          call.where = "layer " + std::to_string(first_layer + static_cast<std::int64_t>(i)) + " " + call.where;
          to->push_back(std::move(call));
        }
      };
      for (std::size_t i = 0; i < layers.size(); ++i) {
        add(layers[i].fwd_calls, i, &st.forward_collectives);
        add(layers[i].rc_calls, i, &st.recompute_collectives);
      }
      for (std::size_t i = layers.size(); i-- > 0;) add(layers[i].bwd_calls, i, &st.backward_collectives);
    }
    st.forward_flops = core::Flops(ff);
    st.backward_flops = core::Flops(bf);
    st.recompute_flops = core::Flops(rf);
    st.stored_activation_bytes = core::bytes(act);
    st.working_activation_bytes = core::bytes(work);
    st.parameter_bytes = core::bytes(par);
    st.gradient_bytes = core::bytes(grad);
    st.optimizer_state_bytes = core::bytes(os);
    if (c < static_cast<int>(lw.chunk_memory.size()) && lw.chunk_memory[static_cast<std::size_t>(c)]) {
      const StageMemory& sm = *lw.chunk_memory[static_cast<std::size_t>(c)];
      st.stored_activation_bytes = core::bytes(sm.stored_bytes);
      st.forward_working_activation_bytes = core::bytes(sm.forward_working_bytes);
      st.working_activation_bytes = core::bytes(sm.backward_working_bytes);
      st.backward_received_ahead_bytes = core::bytes(sm.backward_received_ahead_bytes);
      st.backward_received_earlier_bytes = core::bytes(sm.backward_received_earlier_bytes);
      st.parameter_bytes = core::bytes(sm.parameter_bytes + sm.received_parameter_bytes);
      st.gradient_bytes = core::bytes(sm.gradient_bytes);
      st.optimizer_state_bytes = core::bytes(sm.optimizer_state_bytes);
    }
    const int mesh = c % p;
    const int next_mesh = (c + 1) % p;
    if (c + 1 < chunks && !layers.empty()) {
      st.output_activation_bytes = core::bytes(layers.back().boundary_b);
      const auto& nd = lw.mesh_devices[static_cast<std::size_t>(next_mesh)];
      if (lw.local_all_gather && nd.size() > 1) {
        st.output_reshard = sim::ReshardMode::kLocalAllGather;
        st.reshard_group = static_cast<int>(nd.size());
        const auto mesh_size = static_cast<std::int64_t>(nd.size());
        const std::int64_t gather = lw.all_gather_group > 0 ? lw.all_gather_group : mesh_size;
        ALPASIM_CHECK(mesh_size % gather == 0) << gather << " does not divide " << mesh_size;
        st.reshard_all_gather_s = core::seconds(0.0);
        if (gather > 1) {
          const std::vector<std::int64_t> first_group(nd.begin(), nd.begin() + gather);
          ALPASIM_ASSIGN_OR_RETURN(cluster::GroupInfo g, cost_.group(first_group));
          const std::int64_t bytes = layers.back().boundary_b / (mesh_size / gather);
          const cost_model::CollectiveEstimate e =
              cost_.collective(cost_model::Collective::kAllGather, core::bytes(bytes), g);
          st.reshard_all_gather_s = e.time;
          if (list_collectives) {
            st.reshard_collectives = {traced_collective(cost_model::Collective::kAllGather, bytes,
                                                        static_cast<int>(gather), e, "stage boundary",
                                                        "reshard_collective")};
          }
        }
      }
    }
    if (lw.data_parallel > 1) {
      st.grad_sync_bytes = core::bytes(par);
      st.optimizer_step_s = core::seconds(opt);
      if (par > 0) {
        const auto& groups = lw.dp_groups[static_cast<std::size_t>(mesh)];
        ALPASIM_ASSIGN_OR_RETURN(std::vector<cluster::GroupInfo> gi, cost_.concurrent_groups(groups));
        const auto kind = lw.grad_sync_mode == sim::GradSyncMode::kAllReduce
                              ? cost_model::Collective::kAllReduce
                              : cost_model::Collective::kReduceScatter;
        const int group = static_cast<int>(groups.front().size());
        st.grad_sync_s = core::seconds(0.0);  // ZeRO-2/3: reduced in each backward
        if (!lw.gradients_reduced_per_microbatch) {
          const cost_model::CollectiveEstimate e = cost_.collective(kind, core::bytes(par), gi.front());
          st.grad_sync_s = e.time;
          if (list_collectives) st.grad_sync_collectives = {traced_collective(kind, par, group, e, "gradients")};
        }
        if (lw.grad_sync_mode == sim::GradSyncMode::kReduceScatterAllGather) st.param_all_gather_s = core::seconds(0.0);
        if (lw.grad_sync_mode == sim::GradSyncMode::kReduceScatterAllGather && !lw.parameters_gathered_per_layer) {
          const cost_model::CollectiveEstimate ag =
              cost_.collective(cost_model::Collective::kAllGather, core::bytes(par), gi.front());
          st.param_all_gather_s = ag.time;
          if (list_collectives) {
            st.param_all_gather_collectives = {
                traced_collective(cost_model::Collective::kAllGather, par, group, ag, "parameters")};
          }
        }
      }
    } else {
      // Gradient collectives inside the stage mesh (the intra-op pass's weight-update
      // sharding, the replicas' all-reduce of a data-parallel mesh) run once per
      // iteration as their own task after the chunk's last backward, before the step.
      st.optimizer_step_s = core::seconds(opt);
      if (gs > 0) st.grad_sync_s = core::seconds(gs);
      if (list_collectives && c < static_cast<int>(plan.stages.size())) {
        const std::int64_t first_layer = plan.stages[static_cast<std::size_t>(c)].layer_begin;
        for (std::size_t i = 0; i < layers.size(); ++i) {
          for (const LayerCost::Calls& calls : {layers[i].sync_calls, layers[i].replica_sync_calls}) {
            if (!calls) continue;
            for (sim::BlockingCollective call : *calls) {
              call.where = "layer " + std::to_string(first_layer + static_cast<std::int64_t>(i)) + " " +
                           call.where;
              st.grad_sync_collectives.push_back(std::move(call));
            }
          }
        }
      }
    }
    if (const double ar = tied_ar_s[static_cast<std::size_t>(c)]; ar > 0) {
      const auto& calls = tied_calls[static_cast<std::size_t>(c)];
      if (st.grad_sync_s) {
        *st.grad_sync_s += core::seconds(ar);
        if (list_collectives) st.grad_sync_collectives.insert(st.grad_sync_collectives.end(), calls.begin(), calls.end());
      } else if (lw.data_parallel == 1) {
        st.grad_sync_s = core::seconds(ar);
        if (list_collectives) st.grad_sync_collectives = calls;
      } else {
        st.optimizer_step_s += core::seconds(ar);  // a data-parallel chunk with no gradients
      }
    }
    pb.stages.push_back(st);
  }
  ALPASIM_RETURN_IF_ERROR(sim::validate(pb));
  return pb;
}

core::Result<Evaluated> Searcher::run_problem(sim::PipelineProblem pb, const schema::Plan& plan) {
  ALPASIM_ASSIGN_OR_RETURN(sim::PipelineSimulation s, sim::simulate_pipeline(pb));
  Evaluated e;
  e.plan = plan;
  e.problem = std::move(pb);
  const sim::PipelineReport& r = s.report;
  Prediction& pr = e.prediction;
  pr.iteration_time_s = r.iteration_time.value();
  pr.model_tflops_per_gpu = r.model_flops_per_gpu.value() / 1e12;
  pr.hardware_tflops_per_gpu = r.hardware_flops_per_gpu.value() / 1e12;
  pr.samples_per_s = pr.iteration_time_s > 0
                         ? static_cast<double>(plan.global_batch_size) / pr.iteration_time_s
                         : 0;
  pr.bubble_fraction = r.bubble_fraction;
  pr.peak_memory_bytes = r.peak_memory_bytes;
  for (const auto& d : r.devices) pr.peak_memory_bytes_per_stage.push_back(d.peak_memory_bytes);
  pr.fits = r.overflows.empty();
  if (!pr.fits) pr.memory_message = r.memory_status().message();
  e.ok = true;
  return e;
}

core::Result<Evaluated> Searcher::evaluate(const schema::Plan& plan, std::vector<int> variants) {
  // A plan from outside (evaluate_plan) runs as written; a search candidate's multi-GPU
  // stages get the intra-op solution's shardings afterwards (fill_shardings).
  const bool as_written = variants.empty();
  if (plan.global_batch_size % plan.num_microbatches != 0) {
    return core::invalid_argument("global batch " + std::to_string(plan.global_batch_size) +
                                  " is not divisible by " +
                                  std::to_string(plan.num_microbatches) + " microbatches");
  }
  const std::int64_t mbs = plan.global_batch_size / plan.num_microbatches;
  ALPASIM_ASSIGN_OR_RETURN(Point * pt, point(mbs, plan.recompute));
  std::vector<std::pair<SubmeshShape, LogicalMesh>> meshes;
  for (const auto& st : plan.stages) {
    meshes.push_back({{st.submesh_nodes, st.submesh_gpus_per_node},
                      {st.logical_rows, st.logical_cols}});
  }
  // A multi-GPU stage that lists a weight's layout is not the search's (which lists
  // none): it is priced as written without solving the search's layouts to compare.
  std::vector<bool> lists_weights(plan.stages.size(), false);
  if (as_written) {
    std::set<std::string> weight_names;
    for (std::size_t c = 0; c < plan.stages.size(); ++c) {
      const auto& st = plan.stages[c];
      if (st.shardings.empty() || st.logical_rows * st.logical_cols == 1) continue;
      if (weight_names.empty()) {
        for (const ir::Op& op : pt->graph.ops()) {
          if (op.kind == ir::OpKind::kParameter) weight_names.insert(op.name);
        }
      }
      for (const auto& sh : st.shardings) {
        if (weight_names.count(sh.op) != 0) {
          lists_weights[c] = true;
          break;
        }
      }
    }
  }
  {
    std::vector<std::pair<SubmeshShape, LogicalMesh>> search_meshes;
    for (std::size_t c = 0; c < meshes.size(); ++c) {
      if (!lists_weights[c]) search_meshes.push_back(meshes[c]);
    }
    ALPASIM_RETURN_IF_ERROR(ensure_costs(*pt, search_meshes));
    if (interrupted) {  // some layer was left unsolved at the deadline
      Evaluated cut;  // ok = false: never better than anything, and no fitting answer
      cut.prediction.fits = false;
      cut.error = "stopped by the time limit";
      return cut;
    }
  }
  const int v = static_cast<int>(plan.interleave);
  const int chunks = static_cast<int>(plan.stages.size());
  if (chunks % v != 0) return core::invalid_argument("stages are not a multiple of interleave");
  if (plan.stages.back().layer_end != pt->num_layers) {
    return core::invalid_argument("the plan's stages end at layer " +
                                  std::to_string(plan.stages.back().layer_end) +
                                  " but the model has " + std::to_string(pt->num_layers) +
                                  " layers");
  }
  // Per chunk: the layouts it writes that are not the search's solution (a plan written
  // by hand or by another tool), by layer (price_written_layouts); empty otherwise.
  std::vector<std::map<int, std::string>> written(static_cast<std::size_t>(chunks));
  if (variants.empty()) {
    for (std::size_t c = 0; c < plan.stages.size(); ++c) {
      const auto& st = plan.stages[c];
      int var = 0;
      if (!st.shardings.empty() && st.logical_rows * st.logical_cols > 1) {
        // The search's own layouts (variant 1, or 0) keep its costs; others are priced
        // as written.
        bool own = false;
        for (int candidate : {1, 0}) {
          if (lists_weights[c]) break;
          schema::PlanStage probe = st;
          probe.shardings.clear();
          fill_shardings(*pt, &probe, candidate);
          if (probe.shardings == st.shardings) {
            var = candidate;
            own = true;
            break;
          }
        }
        if (!own) {
          ALPASIM_ASSIGN_OR_RETURN(written[c], price_written_layouts(*pt, st, static_cast<int>(c),
                                                                     meshes[c].first, meshes[c].second, &var));
        }
      }
      variants.push_back(var);
    }
  }
  Lowering lw;
  lw.blocking_p2p = plan.p2p == schema::P2pMode::kBlocking;
  const int p = chunks / v;
  for (int c = 0; c < chunks; ++c) {
    const auto& st = plan.stages[static_cast<std::size_t>(c)];
    const auto& written_c = written[static_cast<std::size_t>(c)];
    std::vector<LayerCost> layers;
    for (auto l = st.layer_begin; l < st.layer_end; ++l) {
      const auto w = written_c.find(static_cast<int>(l));
      LayerCost lc = layer_cost(*pt, static_cast<int>(l), meshes[static_cast<std::size_t>(c)].first,
                                meshes[static_cast<std::size_t>(c)].second,
                                variants[static_cast<std::size_t>(c)],
                                w == written_c.end() ? std::string() : w->second);
      if (!st.weight_update_sharding && lc.opt_replicated_b > lc.opt_b) {
        // The plan keeps every replica's optimizer states whole: each device holds and
        // updates the states of its parameter shards (the step is memory-bound over them).
        if (lc.opt_b > 0 && lc.opt_bytes > 0) {
          lc.opt_bytes *= static_cast<double>(lc.opt_replicated_b) / static_cast<double>(lc.opt_b);
          lc.opt_s = cost_.memory_bound(core::bytes(static_cast<std::int64_t>(lc.opt_bytes))).value();
        }
        lc.opt_b = lc.opt_replicated_b;
      }
      if (!st.weight_update_sharding) {
        lc.tied_opt_b = lc.tied_opt_replicated_b;
        // Whole states on every replica: the replicas all-reduce their gradients.
        lc.grad_sync_s += lc.replica_sync_all_reduce_s - lc.replica_sync_rs_ag_s;
        lc.replica_sync_calls = lc.replica_all_reduce_calls;
      }
      if (l > st.layer_begin) {
        const BoundaryCost& b = layer_boundary(*pt, static_cast<int>(l), meshes[static_cast<std::size_t>(c)].first,
                                               meshes[static_cast<std::size_t>(c)].second,
                                               variants[static_cast<std::size_t>(c)],
                                               written_c.empty() ? nullptr : &written_c);
        lc.fwd_s += b.forward_s;
        lc.fwd_comm_s += b.forward_s;
        lc.bwd_s += b.backward_s;
        lc.bwd_comm_s += b.backward_s;
        lc.rc_s += b.recompute_s;
        if (list_collectives) {
          // The tensors from the layer before, resharded into this layer's layouts when it
          // starts (forward, recomputation), and their gradients back when its backward ends.
          auto with_boundary = [&](const LayerCost::Calls& calls, double seconds, bool at_end) {
            auto out = std::make_shared<std::vector<sim::BlockingCollective>>();
            if (calls) *out = *calls;
            if (!(seconds > 0)) return LayerCost::Calls(std::move(out));
            sim::BlockingCollective call;
            call.collective = "reshard";
            call.algorithm = "layer boundary";
            call.group_size = static_cast<int>(meshes[static_cast<std::size_t>(c)].second.num_devices());
            call.time = core::seconds(seconds);
            call.where = "boundary from the layer before";
            out->insert(at_end ? out->end() : out->begin(), std::move(call));
            return LayerCost::Calls(std::move(out));
          };
          lc.fwd_calls = with_boundary(lc.fwd_calls, b.forward_s, false);
          lc.bwd_calls = with_boundary(lc.bwd_calls, b.backward_s, true);
          lc.rc_calls = with_boundary(lc.rc_calls, b.recompute_s, false);
        }
      }
      layers.push_back(lc);
    }
    ALPASIM_RETURN_IF_ERROR(coalesce_replica_sync(meshes[static_cast<std::size_t>(c)].first,
                                                  meshes[static_cast<std::size_t>(c)].second,
                                                  st.weight_update_sharding, &layers));
    lw.chunk_layers.push_back(std::move(layers));
    if (c < p) {
      lw.mesh_devices.push_back(st.device_ids);
      lw.mesh_gpus.push_back(static_cast<int>(st.device_ids.size()));
    }
  }
  lw.all_gather_group = written_send_gather_group(*pt, plan, meshes, variants, written);
  ALPASIM_RETURN_IF_ERROR(fill_stage_memory(plan, as_written, &lw));
  ALPASIM_ASSIGN_OR_RETURN(Evaluated e, simulate(lw, plan));
  e.variants = std::move(variants);
  e.by_evaluator = true;
  return e;
}

std::int64_t Searcher::written_send_gather_group(const Point& p, const schema::Plan& plan,
                                                 const std::vector<std::pair<SubmeshShape, LogicalMesh>>& meshes,
                                                 const std::vector<int>& variants,
                                                 const std::vector<std::map<int, std::string>>& written) const {
  std::optional<std::int64_t> group;
  for (std::size_t c = 0; c + 1 < plan.stages.size(); ++c) {
    const auto& mesh = meshes[c].second;
    if (written[c].empty() || variants[c] != 0 || !(meshes[c + 1].second == mesh)) return 0;
    const int last = static_cast<int>(plan.stages[c].layer_end) - 1;
    const auto& solved = layer_plan(p, last, meshes[c].first, mesh, 0, written[c].at(last));
    for (const BoundaryEdge& e : p.boundary[static_cast<std::size_t>(last + 1)]) {
      if (e.producer_layer != last || e.phase != ir::Phase::kForward) continue;
      const schema::ShardingSpec& spec = solved.shardings.at(static_cast<std::size_t>(e.producer_node)).output;
      const bool rows = mesh.rows > 1 && spec.uses_mesh_axis(0);
      const bool cols = mesh.cols > 1 && spec.uses_mesh_axis(1);
      const std::int64_t g = rows && cols ? 1 : rows ? mesh.cols : cols ? 0 : mesh.num_devices();
      if (g == 0 || (group && *group != g)) return 0;
      group = g;
    }
  }
  return group && *group < meshes.front().second.num_devices() ? *group : 0;
}

core::Status Searcher::fill_stage_memory(const schema::Plan& plan, bool as_written, Lowering* lw) {
  const auto chunks = plan.stages.size();
  lw->chunk_memory.assign(chunks, std::nullopt);
  const int p = static_cast<int>(lw->mesh_devices.size());
  const std::int64_t mbs = plan.global_batch_size / plan.num_microbatches;
  std::vector<std::int64_t> starts;
  for (const auto& st : plan.stages) starts.push_back(st.layer_begin);
  starts.push_back(plan.stages.back().layer_end);
  // The whole plan's part of the sharded walks, prepared at the first sharded chunk.
  std::optional<core::Result<ShardedPlanMemory>> sharded;
  for (std::size_t c = 0; c < chunks; ++c) {
    const auto& st = plan.stages[c];
    const auto d = static_cast<std::int64_t>(st.device_ids.size());
    if (d < 1 || (d > 1 && !as_written) || mbs % d != 0) continue;
    if (d > 1 && !st.shardings.empty()) {
      // Lowered operator by operator unless every sharding is data parallel (nullopt
      // below: the data-parallel walk).
      if (!sharded) {
        ALPASIM_ASSIGN_OR_RETURN(Point * full, point(mbs, plan.recompute, false));
        ALPASIM_ASSIGN_OR_RETURN(Point * one, point(1, plan.recompute, false));
        ALPASIM_ASSIGN_OR_RETURN(Point * two, point(2, plan.recompute, false));
        ShardedStageMemoryInput ssi;
        ssi.plan = &plan;
        ssi.microbatch_graph = &full->graph;
        ssi.one_sample_graph = &one->graph;
        ssi.two_sample_graph = &two->graph;
        sharded = ShardedPlanMemory::prepare(ssi);
      }
      auto sm = sharded->ok() ? sharded->value().stage(static_cast<int>(c))
                              : core::Result<std::optional<StageMemory>>(sharded->status());
      if (!sm.ok()) {
        if (sm.status().code() != core::StatusCode::kUnimplemented) return sm.status();
        continue;  // unsupported layouts keep the sums
      }
      if (*sm) {
        lw->chunk_memory[c] = **sm;
        continue;
      }
    }
    const StageMemoryKey key{mbs / d, static_cast<int>(plan.recompute), starts, p,
                             static_cast<int>(c), d, st.weight_update_sharding};
    auto it = stage_memory_.find(key);
    if (it == stage_memory_.end()) {
      ALPASIM_ASSIGN_OR_RETURN(Point * pt, point(mbs / d, plan.recompute, false));
      StageMemoryInput smi;
      smi.graph = &pt->graph;
      smi.stage_starts = starts;
      smi.meshes = p;
      smi.stage = static_cast<int>(c);
      smi.mesh_size = d;
      smi.weight_update_sharding = st.weight_update_sharding;
      auto sm = stage_memory(smi);
      // Unsupported layouts (a tensor shared by two chunks of one mesh) keep the sums.
      std::optional<StageMemory> value;
      if (sm.ok()) {
        value = *sm;
      } else if (sm.status().code() != core::StatusCode::kUnimplemented) {
        return sm.status();
      }
      it = stage_memory_.emplace(key, value).first;
    }
    lw->chunk_memory[c] = it->second;
  }
  return core::ok_status();
}

schema::Plan Searcher::base_plan() const {
  schema::Plan plan;
  plan.model = in_.model;
  plan.cluster = in_.cluster;
  plan.dtype = in_.dtype;
  plan.global_batch_size = in_.global_batch_size;
  plan.generator = "alpa-sim search.mode=" + in_.mode;
  return plan;
}

core::Result<schema::Plan> Searcher::with_megatron_layouts(const schema::Plan& plan) {
  schema::Plan out = plan;
  const std::int64_t mbs = plan.global_batch_size / plan.num_microbatches;
  ALPASIM_ASSIGN_OR_RETURN(Point * pt, point(mbs, plan.recompute, false));
  for (auto& st : out.stages) {
    if (st.logical_rows * st.logical_cols == 1) continue;
    if (st.submesh_nodes * st.submesh_gpus_per_node != st.logical_rows * st.logical_cols) {
      // E.g. dp 3 x tp 4 = 12 GPUs on 8-GPU nodes: a node and a half, which a plan file's
      // submesh (nodes x GPUs per node) cannot describe. The grid no longer makes such
      // points (schema::submesh_expressible); a plan from elsewhere may still.
      return core::unimplemented("a stage of " + std::to_string(st.logical_rows * st.logical_cols) +
                                 " GPUs spans part of a node: not expressible as a submesh of " +
                                 std::to_string(gpn()) + "-GPU nodes");
    }
    ALPASIM_ASSIGN_OR_RETURN(st.shardings,
                             schema::megatron_operator_shardings(pt->graph, in_.model, mbs, st.layer_begin,
                                                                 st.layer_end, st.logical_rows,
                                                                 st.logical_cols, false));
  }
  return out;
}

}  // namespace alpasim::planner::search_detail
