// The baselines: equal partitions over equal submeshes, and the Megatron-style 3D grid
// (searcher.h).
#include "planner/search/searcher.h"
#include "sim/lowering/megatron_lowering.h"

namespace alpasim::planner::search_detail {

// Equal partitions (layers or FLOPs) over p equal submeshes, intra-op costs per stage.
// With `incumbent` (a plan the caller keeps unless this returns a better one), points and
// candidates that cannot beat it or the best partition so far are skipped unsimulated
// (exact with `only`, where the alpa mode gives an incumbent: the returned plan wins
// against the incumbent exactly when it did without).
// Microbatch sizes are scanned per recompute policy in the order microbatch_sizes gives
// them (ascending by default), as the alpa mode scans its first policy: the scan stops at
// the first size whose fastest fitting plan of this family is slower than the size
// before's, or where none fits (iteration time taken as unimodal in the microbatch size:
// more microbatches shrink the bubble, smaller ones lose GEMM efficiency). The skips never
// hide that comparison: a point, partition or plan is skipped only when its bound exceeds
// max(the plan to beat, the size before's time), so a skipped one is known slower than the
// size before. A size whose time stays unknown (everything at it skipped against a faster
// plan, e.g. the first policy's best when the second policy starts) never stops the scan,
// so with skips the scan can run past the size where it stops without them: the answer is
// then the same or faster, never slower, and exactly the same when the family's time is
// unimodal (with the scan, the skips are exact only under that premise). Without the scan
// (minimize_memory, or `only` given) every size is visited; the alpa mode's seeds use
// `only` with an incumbent, and without `only` run as the baselines do (search.cc).
core::Result<Evaluated> run_equal(Searcher& s, bool by_flops, int forced_stages,
                                  std::int64_t forced_cols, const Evaluated* incumbent,
                                  const std::set<std::pair<std::int64_t, int>>* only) {
  const SearchInput& in = s.input();
  const bool cacheable = incumbent == nullptr && only == nullptr;
  const auto key = std::make_tuple(by_flops, forced_stages, forced_cols, s.minimize_memory);
  if (cacheable) {
    if (auto it = s.equal_partition_answers.find(key); it != s.equal_partition_answers.end()) return it->second;
  }
  const bool prune = in.options.prune_points && !s.minimize_memory;
  Evaluated best;
  // The fitting plan to beat: the better of the incumbent and the best partition so far.
  auto reference = [&]() -> const Evaluated* {
    const Evaluated* r = nullptr;
    for (const Evaluated* e : {incumbent, static_cast<const Evaluated*>(&best)}) {
      if (e != nullptr && e->ok && e->prediction.fits &&
          (r == nullptr || e->prediction.iteration_time_s < r->prediction.iteration_time_s)) {
        r = e;
      }
    }
    return r;
  };
  // With Searcher::deadline set, no solve or simulation starts past it: the answer is the
  // best of what ran, and s.interrupted says that it was cut.
  auto cut = [&]() {
    if (s.past_deadline()) s.interrupted = true;
    return s.interrupted;
  };
  const bool scan_unimodal = !s.minimize_memory && only == nullptr;
  for (schema::Recompute rc : in.options.recompute) {
    if (cut()) break;
    // The fastest fitting plan's time at the size before, when known exactly; kInf when
    // unknown or none (then the next size cannot stop the scan).
    double previous_s = kInf;
    for (std::int64_t mbs : microbatch_sizes(in, 1)) {
      if (cut()) break;
      if (only != nullptr && !only->count({mbs, static_cast<int>(rc)})) continue;
      ALPASIM_ASSIGN_OR_RETURN(Point * pt, s.point(mbs, rc));
      // What a skip needs a bound above: the plan to beat, and (scanning) the size before.
      auto threshold = [&]() -> std::optional<double> {
        const Evaluated* r = prune ? reference() : nullptr;
        if (r == nullptr) return std::nullopt;
        const double beat = r->prediction.iteration_time_s;
        return scan_unimodal && std::isfinite(previous_s) ? std::max(beat, previous_s) : beat;
      };
      // This size's fastest fitting plan (kInf: none evaluated), and whether anything here
      // was skipped by a bound (then its time is known only to exceed the threshold).
      double point_s = kInf;
      bool point_skipped = false;
      if (const auto t = threshold(); t && point_slower_than(s, *pt, *t)) {
        if (scan_unimodal && std::isfinite(previous_s)) break;  // slower than the size before
        continue;
      }
      const std::int64_t B = in.global_batch_size / mbs;
      for (int p = 1; p <= pt->num_layers; p *= 2) {
        if (cut()) break;
        if (forced_stages > 0 && p != forced_stages) continue;
        if (s.num_gpus() % p != 0 || !valid_submesh_size(s.num_gpus() / p, s.nodes(), s.gpn())) continue;
        const SubmeshShape sub = shape_of_size(s.num_gpus() / p, s.gpn());
        std::vector<int> starts;
        if (by_flops) {
          starts = balanced_partition(layer_weights(*pt), p);
        } else {
          for (int i = 0; i <= p; ++i) starts.push_back(i * pt->num_layers / p);
        }
        if (static_cast<int>(starts.size()) != p + 1) continue;
        if (const auto t = threshold(); t && s.partition_lower_bound_s(*pt, starts, sub.size()) > *t) {
          point_skipped = true;
          continue;  // no logical mesh can make this partition fast enough
        }
        std::vector<LogicalMesh> meshes;
        std::vector<std::pair<SubmeshShape, LogicalMesh>> to_solve;
        for (const auto& mesh : logical_shapes(sub, std::numeric_limits<std::int64_t>::max(), s.nvlink_gpus())) {
          if (forced_cols > 0 && mesh.cols != forced_cols) continue;
          if (forced_cols == 0 && !model_axis_ok(mesh.cols, s.gpn(), s.nvlink_gpus())) continue;
          meshes.push_back(mesh);
          to_solve.emplace_back(sub, mesh);
        }
        // Every mesh below is evaluated, each solving its layers' intra-op problems: solve
        // them all first, in parallel (the same solves, the same costs).
        ALPASIM_RETURN_IF_ERROR(s.ensure_costs(*pt, to_solve, /*count_queries=*/false));
        for (const auto& mesh : meshes) {
          if (cut()) break;
          for (int var = 0; var < (mesh.num_devices() > 1 ? 2 : 1); ++var) {
          std::vector<schema::PlanStage> stages;
          for (int i = 0; i < p; ++i) {
            schema::PlanStage st;
            st.layer_begin = starts[static_cast<std::size_t>(i)];
            st.layer_end = starts[static_cast<std::size_t>(i + 1)];
            st.submesh_nodes = sub.nodes;
            st.submesh_gpus_per_node = sub.gpus_per_node;
            st.logical_rows = mesh.rows;
            st.logical_cols = mesh.cols;
            stages.push_back(st);
          }
          ALPASIM_ASSIGN_OR_RETURN(schema::Plan plan,
                                   make_plan(s, stages, B, schema::Schedule::kOneFOneB, 1, rc));
          if (cut()) break;
          s.prune_above_s = threshold();
          auto e = s.evaluate(plan, std::vector<int>(stages.size(), var));
          const bool bounded = s.prune_above_s.has_value();
          s.prune_above_s.reset();
          if (!e.ok()) return e.status();
          if (e->ok && e->prediction.fits) {
            point_s = std::min(point_s, e->prediction.iteration_time_s);
          } else if (!e->ok && bounded) {
            point_skipped = true;  // above the threshold by its bound, or cannot fit
          }
          if (better(s, e.value(), best)) best = std::move(e).value();
          }
        }
      }
      if (!scan_unimodal || s.interrupted) continue;
      // Exact when nothing was skipped or the fastest plan evaluated is under the threshold
      // (every skipped one is above it); else only "above the threshold".
      const auto t = threshold();
      const bool exact = !point_skipped || (t && point_s <= *t);
      if (std::isfinite(previous_s) && (!exact || point_s > previous_s)) break;  // t >= previous_s
      if (exact && std::isfinite(point_s)) previous_s = point_s;
    }
  }
  if (!best.ok) return core::failed_precondition("no equal partition matches the cluster");
  if (cacheable && !s.interrupted) s.equal_partition_answers.emplace(key, best);
  return best;
}

// ---------------------------------------------------------------------------------------
// Megatron-style 3D grid with analytic costs (no intra-op pass): tp splits every layer's
// compute and adds Megatron's per-layer all-reduces; dp replicas sync gradients.


namespace {

// The Megatron grid proper (run_megatron). `by_bound`: the shapes of its points in
// increasing simulation lower bound (ties: grid order), for the context- and
// expert-parallel exploration around them.
// The grid's interleaving factors: 1 to this (mode megatron tries more around its answer,
// interleave_variants).
constexpr int kGridMaxInterleave = 2;

core::Result<Evaluated> run_megatron_grid(Searcher& s, const GridFilter& f, std::string* description,
                                          std::vector<schema::MegatronShape>* by_bound) {
  const SearchInput& in = s.input();
  const std::int64_t N = s.num_gpus();
  // Every grid point's simulator input and lower bound, in grid order (the tie order).
  struct GridCandidate {
    sim::PipelineProblem problem;
    schema::Plan plan;
    sim::Time bound = 0;
    // Its memory bound exceeds the limit (cannot_fit): it cannot beat a fitting point, and
    // the re-scoring takes analytically fitting points first, so it is simulated only when
    // none of those fits as written (the grid's memory is not the evaluator's).
    bool unfit = false;
    schema::MegatronShape shape;
    std::string description;
  };
  std::vector<GridCandidate> cands;
  // tp within an NVLink domain: a node, or several trays of a multi-node NVLink rack.
  for (std::int64_t tp = 1; tp <= std::min(N, std::max(s.gpn(), s.nvlink_gpus())); tp *= 2) {
    if (N % tp != 0 || (f.tp1 && tp != 1)) continue;
    if (!model_axis_ok(tp, s.gpn(), s.nvlink_gpus())) continue;  // e.g. straddling two NVLink domains
    for (std::int64_t pp = 1; pp <= N / tp; ++pp) {
      if ((N / tp) % pp != 0 || (f.pp1 && pp != 1) || (f.pp_gt1 && pp == 1)) continue;
      const std::int64_t dp = N / tp / pp;
      for (schema::Recompute rc : in.options.recompute) {
        for (std::int64_t mbs : {1, 2, 4, 8}) {
          if (in.global_batch_size % (dp * mbs) != 0) continue;
          const std::int64_t B = in.global_batch_size / (dp * mbs);
          if (in.num_microbatches && *in.num_microbatches != B) continue;
          ALPASIM_ASSIGN_OR_RETURN(Point * pt, s.point(mbs, rc, /*with_layer_graphs=*/false));
          const int L = pt->num_layers;
          if (pp > L) continue;
          for (int v = 1; v <= kGridMaxInterleave; ++v) {
            if (v > 1 && (pp == 1 || L < pp * v || B % pp != 0)) continue;
            // Layers: the chunks as equal as possible, earlier chunks taking the remainder.
            const int chunks = static_cast<int>(pp) * v;
            std::vector<int> starts;
            for (int c = 0; c <= chunks; ++c) starts.push_back(c * L / chunks);
            // Device layout: rank = stage·dp·tp + replica·tp + t (Megatron's default order).
            std::vector<schema::PlanStage> stages;
            // A stage of dp·tp GPUs that spans part of a node (12 on 8-GPU nodes) has no
            // plan (a submesh is nodes x GPUs per node): not a point of this grid. Partial
            // meshes inside one node (6 of 8) are, with contiguous ids.
            if (!schema::submesh_expressible(dp * tp, s.gpn())) continue;
            const SubmeshShape sub = shape_of_size(dp * tp, s.gpn());
            Searcher::Lowering lw;
            lw.data_parallel = static_cast<int>(dp);
            // Megatron's pipeline sends block the sender (batched send/recv) unless
            // overlap_p2p_comm, on by default, overlaps them, which Megatron-Core does only
            // in the interleaved schedule: as sim/lowering prices a fixed plan and
            // megatron_plan_file writes it (the point's plan says so below, so that the
            // evaluator prices its sends as ranked here).
            lw.blocking_p2p = v == 1;
            // Megatron-LM's scatter-gather (--scatter-gather-tensors-in-pipeline, on by
            // default): each GPU of a tensor-parallel group sends 1/tp of its replica's
            // activation, and the receiving group all-gathers it over NVLink, as
            // sim/lowering prices it.
            lw.local_all_gather = true;
            lw.all_gather_group = tp;
            lw.grad_sync_mode = f.zero >= 2 ? sim::GradSyncMode::kReduceScatterAllGather
                                            : sim::GradSyncMode::kAllReduce;
            // ZeRO-2/3 keep only their partition of the gradients, so DeepSpeed reduces
            // (reduce-scatters) each microbatch's after its backward, not once per
            // iteration (DeepSpeed issue #2252: "gradient reduction is required after every
            // backward because of gradient partitioning"); priced per layer below.
            lw.gradients_reduced_per_microbatch = f.zero >= 2 && dp > 1;
            // ZeRO-3 keeps the parameters partitioned after the step: gathered per layer.
            lw.parameters_gathered_per_layer = f.zero >= 3 && dp > 1;
            // tp group (inside an NVLink domain) and dp groups per stage.
            std::vector<std::int64_t> tp_ids;
            for (std::int64_t t = 0; t < tp; ++t) tp_ids.push_back(t);
            ALPASIM_ASSIGN_OR_RETURN(cluster::GroupInfo tp_group, s.cost().group(tp_ids));
            for (int m = 0; m < static_cast<int>(pp); ++m) {
              std::vector<std::int64_t> mesh;
              std::vector<std::vector<std::int64_t>> groups(static_cast<std::size_t>(tp));
              for (std::int64_t r = 0; r < dp; ++r) {
                for (std::int64_t t = 0; t < tp; ++t) {
                  const std::int64_t id = m * dp * tp + r * tp + t;
                  mesh.push_back(id);
                  groups[static_cast<std::size_t>(t)].push_back(id);
                }
              }
              lw.mesh_devices.push_back(mesh);
              lw.mesh_gpus.push_back(static_cast<int>(tp));
              lw.dp_groups.push_back(groups);
            }
            std::optional<cluster::GroupInfo> dp_group;
            if (dp > 1) {
              ALPASIM_ASSIGN_OR_RETURN(std::vector<cluster::GroupInfo> gi,
                                       s.cost().concurrent_groups(lw.dp_groups.front()));
              dp_group = gi.front();
            }
            auto all_reduce = [&](std::int64_t bytes) {
              if (tp == 1 || bytes <= 0) return 0.0;
              return s.cost().collective(cost_model::Collective::kAllReduce, core::bytes(bytes), tp_group).time.value();
            };
            for (int c = 0; c < chunks; ++c) {
              std::vector<LayerCost> layers;
              for (int l = starts[static_cast<std::size_t>(c)]; l < starts[static_cast<std::size_t>(c + 1)]; ++l) {
                const auto ct = s.compute_for(*pt, l, tp);
                const ir::LayerStats& st = pt->stats[static_cast<std::size_t>(l)];
                LayerCost lc;
                // Megatron TP: 2 all-reduces of the layer output in the forward, 2 in the
                // backward per transformer block (SC'21 §2.3); the vocabulary-parallel
                // embedding 1 forward, the head 1 backward; other layers: one per matmul
                // pair, i.e. Σ forward matmul outputs / 2 in each direction.
                double fwd_ar = 0, bwd_ar = 0;
                if (st.kind == "transformer" || st.kind == "moe_transformer") {
                  fwd_ar = 2 * all_reduce(st.boundary_bytes);
                  bwd_ar = fwd_ar;
                } else if (st.kind == "prologue" && l == 0) {
                  fwd_ar = all_reduce(st.boundary_bytes);
                } else if (st.kind == "epilogue") {
                  bwd_ar = all_reduce(pt->stats[static_cast<std::size_t>(l - 1)].boundary_bytes);
                } else if (tp > 1) {
                  for (const ir::Op& op : pt->graph.ops()) {
                    if (op.layer == l && op.phase == ir::Phase::kForward && op.is_matmul()) {
                      fwd_ar += all_reduce(op.out.bytes()) / 2;
                    }
                  }
                  bwd_ar = fwd_ar;
                }
                lc.fwd_comm_s = fwd_ar;
                lc.bwd_comm_s = bwd_ar + (rc != schema::Recompute::kNone ? fwd_ar : 0.0);
                lc.fwd_s = ct.forward.value() + lc.fwd_comm_s;
                lc.bwd_s = ct.backward.value() + bwd_ar;
                lc.rc_s = ct.recompute.value() + (rc != schema::Recompute::kNone ? fwd_ar : 0.0);
                const std::int64_t wb = core::dtype_bytes(in.dtype);
                const std::int64_t params = st.parameters / tp;
                const std::int64_t state = params * ir::optimizer_state_bytes_per_parameter(s.optimizer(), in.dtype);
                lc.param_b = params * wb;
                lc.grad_b = params * wb;
                lc.opt_b = state;
                // The update as the evaluator prices it (searcher_costs.cc): one memory-bound
                // pass over the layer's update bytes and the mixed-precision step's (a
                // multi-tensor kernel), not one kernel per weight; split over the replicas
                // with ZeRO, whole on each without.
                const core::DType storage = core::storage_dtype(in.dtype);
                double update_bytes = s.layer_optimizer_bytes(*pt)[static_cast<std::size_t>(l)] / static_cast<double>(tp) +
                                      static_cast<double>(params * ir::mixed_precision_step_bytes_per_parameter(storage));
                if (f.zero >= 1) {
                  lc.opt_b = state / dp;
                  update_bytes /= static_cast<double>(dp);
                }
                lc.opt_bytes = update_bytes;
                lc.opt_s = update_bytes > 0 ? s.cost().memory_bound(core::bytes(static_cast<std::int64_t>(update_bytes))).value() : 0.0;
                if (f.zero >= 2) lc.grad_b = lc.grad_b / dp;
                if (f.zero >= 2 && dp > 1 && dp_group) {
                  // Every microbatch's reduce-scatter of this layer's gradients, blocking:
                  // DeepSpeed's overlap_comm defaults off for stage 2; for stage 3 it defaults
                  // on, which this baseline does not model (nor for its all-gathers below).
                  const double rs = s.cost().collective(cost_model::Collective::kReduceScatter,
                                                        core::bytes(params * wb), *dp_group).time.value();
                  lc.bwd_s += rs;
                  lc.bwd_comm_s += rs;
                }
                if (f.zero >= 3 && dp > 1 && dp_group) {
                  lc.param_b = lc.param_b / dp;
                  const double ag = s.cost().collective(cost_model::Collective::kAllGather,
                                                        core::bytes(params * wb), *dp_group).time.value();
                  lc.fwd_s += ag;
                  lc.fwd_comm_s += ag;
                  lc.bwd_s += ag;
                  lc.bwd_comm_s += ag;
                }
                if (st.kind == "epilogue") {
                  // The head reads the tied word embedding (vocab-parallel: 1/tp per GPU):
                  // a stage without it keeps a copy (problem_of decides), as sim/lowering.
                  for (const ir::Op& op : pt->graph.ops()) {
                    if (op.kind != ir::OpKind::kParameter || op.layer == l) continue;
                    bool read = false;
                    for (ir::OpId u : pt->graph.consumers(op.id)) read = read || pt->graph.op(u).layer == l;
                    if (!read) continue;
                    const std::int64_t elems = op.out.num_elements() / tp;
                    lc.tied_owner = op.layer;
                    lc.tied_param_b += (f.zero >= 3 ? elems / dp : elems) * wb;
                    const std::int64_t tied_state =
                        elems * ir::optimizer_state_bytes_per_parameter(s.optimizer(), in.dtype);
                    lc.tied_opt_b += f.zero >= 1 ? tied_state / dp : tied_state;
                  }
                }
                lc.act_b = st.activation_bytes / tp;
                if (rc == schema::Recompute::kFull) {
                  // Working set while recomputing one layer: its activations without
                  // recomputation, approximated by the recompute FLOPs' share.
                  const double share = st.flops.total_forward > 0
                      ? static_cast<double>(st.flops.total_recompute) / static_cast<double>(st.flops.total_forward) : 0;
                  lc.work_b = static_cast<std::int64_t>(share * static_cast<double>(st.forward_bytes_accessed) / 2.0) / tp;
                }
                if (f.zero >= 2 && dp > 1) {
                  // The layer's whole gradient exists in its backward until its reduce-scatter
                  // (at least: DeepSpeed's reduce bucket, reduce_bucket_size, may hold several
                  // layers'); the larger of it and the recomputation's working set: a lower bound.
                  lc.work_b = std::max(lc.work_b, params * wb);
                }
                lc.boundary_b = st.boundary_bytes;
                lc.fwd_flops = static_cast<double>(st.flops.matmul_forward) / static_cast<double>(tp);
                lc.bwd_flops = static_cast<double>(st.flops.matmul_backward) / static_cast<double>(tp);
                lc.rc_flops = static_cast<double>(st.flops.matmul_recompute) / static_cast<double>(tp);
                layers.push_back(lc);
              }
              lw.chunk_layers.push_back(std::move(layers));
              schema::PlanStage st;
              st.layer_begin = starts[static_cast<std::size_t>(c)];
              st.layer_end = starts[static_cast<std::size_t>(c + 1)];
              st.submesh_nodes = sub.nodes;
              st.submesh_gpus_per_node = sub.gpus_per_node;
              st.logical_rows = dp;
              st.logical_cols = tp;
              st.device_ids = lw.mesh_devices[static_cast<std::size_t>(c % pp)];
              st.weight_update_sharding = f.zero >= 1;
              stages.push_back(st);
            }
            schema::Plan plan = s.base_plan();
            plan.num_microbatches = B;
            plan.schedule = v > 1 ? schema::Schedule::kInterleavedOneFOneB : schema::Schedule::kOneFOneB;
            plan.interleave = v;
            plan.p2p = lw.blocking_p2p ? schema::P2pMode::kBlocking : schema::P2pMode::kAsync;
            plan.recompute = rc;
            plan.stages = std::move(stages);
            auto pb = s.problem_of(lw, plan);
            if (!pb.ok()) continue;  // an invalid grid point is skipped, as a failed simulation
            auto bound = pipeline_lower_bound(pb.value());
            if (!bound.ok()) continue;
            GridCandidate cand;
            cand.problem = std::move(pb).value();
            cand.plan = std::move(plan);
            cand.bound = bound.value();
            auto unfit = cannot_fit(cand.problem);
            cand.unfit = unfit.ok() && unfit.value();
            schema::MegatronShape shape;
            shape.tp = tp;
            shape.pp = pp;
            shape.dp = dp;
            shape.mbs = mbs;
            shape.vp = v;
            shape.recompute = rc;
            cand.shape = shape;
            cand.description = shape.to_string();
            cands.push_back(std::move(cand));
          }
        }
      }
    }
  }
  // Bound-and-prune, exact: the grid points are simulated in increasing order of their
  // lower bound (pipeline_bound.h); one whose bound cannot beat the incumbent is skipped.
  // The winner is the same as simulating all in grid order and keeping the first best:
  // `better` is a strict weak order, and ties go to the lower grid index.
  std::vector<std::size_t> order(cands.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return cands[a].bound < cands[b].bound;
  });
  for (const std::size_t i : order) by_bound->push_back(cands[i].shape);
  // In the least-memory ranking too: its figure is what an error message tells the user
  // the mode needs, so it is the evaluator's memory of a real plan (below).
  const bool rescore = f.zero <= 1 && in.options.rescore_grid;
  // Analytic results by grid index (kept for re-scoring in the analytic order).
  std::vector<std::optional<Evaluated>> analytic(cands.size());
  Evaluated best;
  std::size_t best_index = cands.size();
  for (const std::size_t i : order) {
    GridCandidate& c = cands[i];
    // Only a fitting incumbent prunes (a fitting plan beats every one that does not fit);
    // never in the least-memory ranking.
    if (in.options.prune_grid && !s.minimize_memory && best.ok && best.prediction.fits) {
      const double bound_s = sim::to_seconds(c.bound).value();
      const double best_s = best.prediction.iteration_time_s;
      if (bound_s > best_s || (bound_s == best_s && i > best_index)) {
        ++s.grid_pruned;
        continue;
      }
      if (c.unfit) {
        ++s.grid_pruned;
        continue;
      }
    }
    auto e = rescore ? s.run_problem(c.problem, c.plan) : s.run_problem(std::move(c.problem), c.plan);
    ++s.grid_simulated;
    if (!e.ok()) continue;
    if (rescore) analytic[i] = e.value();
    if (better(s, e.value(), best) || (i < best_index && !better(s, best, e.value()))) {
      best = std::move(e).value();
      best_index = i;
    }
  }
  if (!best.ok) return core::failed_precondition("no grid point matches the cluster and batch");
  if (description) *description = cands[best_index].description;
  if (!rescore) return best;
  // The grid's analytic costs rank its points; the one evaluator prices them: a point's
  // plan written with Megatron's layouts, as its plan file reads
  // (schema::megatron_operator_shardings), priced like any plan file (Searcher::evaluate).
  // That is what alpa-sim prints and writes. The analytic memory is not the evaluator's (it
  // divides every activation by tp, where Megatron without sequence parallelism replicates
  // a third of them, and prices the optimizer per kernel), so: the analytic winner; then the
  // analytically fitting points in analytic order, the first that fits as written, at most
  // kRescored in all (the points the bound pruned simulated first if it comes to them); then,
  // only if none fits, every point simulated and the kRescored of least analytic memory
  // plus the kRescored fastest analytically unfit ones priced, the fastest that fits taken
  // (a different criterion from the first phase's "first that fits"). Plans the format
  // cannot express yet keep the analytic price: ZeRO-2/3, and models other than the
  // builtin gpt, llama without multi-head latent attention, and nemotron.
  constexpr int kRescored = 16;
  // The simulated points in increasing analytic memory (ties: grid order).
  auto least_analytic_memory = [&]() {
    std::vector<std::size_t> by_memory;
    for (std::size_t i = 0; i < cands.size(); ++i) {
      if (analytic[i]) by_memory.push_back(i);
    }
    std::stable_sort(by_memory.begin(), by_memory.end(), [&](std::size_t a, std::size_t b) {
      return analytic[a]->prediction.peak_memory_bytes < analytic[b]->prediction.peak_memory_bytes;
    });
    if (by_memory.size() > static_cast<std::size_t>(kRescored)) by_memory.resize(kRescored);
    return by_memory;
  };
  // Point i's plan written with Megatron's layouts, priced by the evaluator; nullopt when
  // the plan format cannot express it (not an answer of the one evaluator). `fitting_only`:
  // a plan that cannot fit is not simulated (Searcher::skip_unfit).
  auto priced = [&](std::size_t i, bool fitting_only) -> core::Result<std::optional<Evaluated>> {
    auto plan = s.with_megatron_layouts(analytic[i]->plan);
    if (!plan.ok()) {
      if (plan.status().code() == core::StatusCode::kUnimplemented) return std::optional<Evaluated>();
      return plan.status();
    }
    s.skip_unfit = fitting_only;
    auto evaluated = s.evaluate(*plan);
    s.skip_unfit = false;
    ALPASIM_ASSIGN_OR_RETURN(Evaluated e, std::move(evaluated));
    return std::optional<Evaluated>(std::move(e));
  };
  if (s.minimize_memory) {
    // Least memory: the kRescored points of least analytic memory (all of a small grid),
    // priced by the evaluator, the least of them. Its figure is what an error message says
    // the mode needs, so it is the evaluator's memory of a real plan, which the analytic
    // memory is not (it replicates no activation and prices the optimizer per kernel).
    // The time ranking below prices the same points before it gives up, so a mode whose
    // figure fits the limit answers with a fitting plan.
    std::optional<Evaluated> least;
    for (const std::size_t i : least_analytic_memory()) {
      ALPASIM_ASSIGN_OR_RETURN(std::optional<Evaluated> e, priced(i, false));
      if (e && (!least || e->prediction.peak_memory_bytes < least->prediction.peak_memory_bytes)) {
        if (description) *description = cands[i].description;
        least = std::move(e);
      }
    }
    return least ? std::move(*least) : best;
  }
  auto written = s.with_megatron_layouts(best.plan);
  if (!written.ok()) {
    if (written.status().code() != core::StatusCode::kUnimplemented) return written.status();
    return best;
  }
  ALPASIM_ASSIGN_OR_RETURN(Evaluated first, s.evaluate(*written));
  if (first.prediction.fits) return first;
  for (std::size_t i = 0; i < cands.size(); ++i) {
    // Only analytically fitting points are re-scored first: one that cannot fit needs no
    // simulation here (it would not enter by_time).
    if (analytic[i] || cands[i].unfit) continue;
    auto e = s.run_problem(cands[i].problem, cands[i].plan);
    ++s.grid_simulated;
    if (e.ok()) analytic[i] = std::move(e).value();
  }
  std::vector<std::size_t> by_time;
  for (std::size_t i = 0; i < cands.size(); ++i) {
    if (i != best_index && analytic[i] && analytic[i]->prediction.fits) by_time.push_back(i);
  }
  std::stable_sort(by_time.begin(), by_time.end(), [&](std::size_t a, std::size_t b) {
    return better(s, *analytic[a], *analytic[b]);
  });
  std::set<std::size_t> tried = {best_index};
  for (std::size_t k = 0; k < by_time.size() && k + 1 < static_cast<std::size_t>(kRescored); ++k) {
    tried.insert(by_time[k]);
    ALPASIM_ASSIGN_OR_RETURN(std::optional<Evaluated> e, priced(by_time[k], true));
    if (e && e->prediction.fits) {
      if (description) *description = cands[by_time[k]].description;
      return std::move(*e);
    }
  }
  // None of those fits as written. The grid's memory is not the evaluator's, so a point
  // whose analytic memory does not fit may fit as written: the kRescored points of least
  // analytic memory (those the least-memory ranking prices) and the kRescored fastest of
  // the analytically unfit points are priced, and the fastest that fits is the answer.
  // Only on this path (a grid with no fitting answer so far) are the unfit points simulated.
  for (std::size_t i = 0; i < cands.size(); ++i) {
    if (analytic[i]) continue;
    auto e = s.run_problem(cands[i].problem, cands[i].plan);
    ++s.grid_simulated;
    if (e.ok()) analytic[i] = std::move(e).value();
  }
  std::vector<std::size_t> unfit_by_time;
  for (std::size_t i = 0; i < cands.size(); ++i) {
    if (analytic[i] && !analytic[i]->prediction.fits) unfit_by_time.push_back(i);
  }
  std::stable_sort(unfit_by_time.begin(), unfit_by_time.end(), [&](std::size_t a, std::size_t b) {
    return analytic[a]->prediction.iteration_time_s < analytic[b]->prediction.iteration_time_s;
  });
  if (unfit_by_time.size() > static_cast<std::size_t>(kRescored)) unfit_by_time.resize(kRescored);
  std::vector<std::size_t> last_chance = least_analytic_memory();
  last_chance.insert(last_chance.end(), unfit_by_time.begin(), unfit_by_time.end());
  std::optional<Evaluated> fastest;
  std::size_t fastest_index = cands.size();
  for (const std::size_t i : last_chance) {
    if (!tried.insert(i).second) continue;
    ALPASIM_ASSIGN_OR_RETURN(std::optional<Evaluated> e, priced(i, true));
    if (!e || !e->prediction.fits) continue;
    if (!fastest || better(s, *e, *fastest) || (!better(s, *fastest, *e) && i < fastest_index)) {
      fastest = std::move(e);
      fastest_index = i;
    }
  }
  if (fastest) {
    if (description) *description = cands[fastest_index].description;
    return std::move(*fastest);
  }
  return first;  // none fits: the analytic winner, priced by the evaluator (does not fit)
}

// Points of the grid (after its answer, in increasing lower bound) whose context-parallel
// variants are tried; expert parallelism is tried on every point (a lowering of a MoE
// point costs about a millisecond: GShard MoE 27B on 32 GPUs, 2,900 lowerings, 2.3 s on
// one core), context parallelism on these only (a long-sequence dense model's lowering
// costs tens of milliseconds and its grid has hundreds of points).
constexpr std::size_t kContextExplored = 16;
// At most this many grid points get expert-parallel variants (a cap on the work, not
// reached by the goldens: GShard MoE 27B on 32 GPUs has 320 points).
constexpr std::size_t kExpertExplored = 1024;
// The answer and this many points of least bound get the runtime flags' variants (each
// multiplies the lowerings of a point by up to three).
constexpr std::size_t kRuntimeFlagsExplored = kContextExplored;

// The grid's answer and this many points of least bound get the interleaving factors
// beyond the grid's 1 and 2 (each multiplies the lowerings of a point by the factors tried).
constexpr std::size_t kInterleaveExplored = 3;

// Interleaving factors (virtual pipeline stages per GPU) tried on a point: its own, and with
// `explore` every v >= 2 that Megatron-LM can run there: the blocks split evenly into pp·v
// model chunks and the microbatches per replica are a multiple of pp (its interleaved
// schedule's requirements). NVIDIA's recipes use 5 (Llama 3 70B on 64 H100, pp 8), 8, 12 or
// 20, where the grid tries 1 and 2 only.
std::vector<std::int64_t> interleave_variants(const schema::MegatronShape& shape, std::int64_t blocks,
                                              std::int64_t microbatches, bool explore) {
  std::vector<std::int64_t> out = {shape.vp};
  if (!explore || shape.pp < 2 || microbatches % shape.pp != 0) return out;
  for (std::int64_t v = 2; shape.pp * v <= blocks; ++v) {
    if (v != shape.vp && blocks % (shape.pp * v) == 0) out.push_back(v);
  }
  return out;
}

// Megatron-LM runtime settings tried on a point, each a bundle of flags: Megatron-Core's
// defaults (only overlap_p2p_comm on); with data-parallel replicas (dp·cp > 1) what NeMo's
// and Megatron-Bridge's recipes run at scale (the distributed optimizer with
// overlap_grad_reduce and overlap_param_gather, and sequence parallelism with tp > 1); and
// with tp > 1 that (or, without replicas, sequence parallelism alone) plus tp_comm_overlap
// (Transformer Engine's userbuffers). Every setting but the defaults has an overlap, so a
// flagged answer is one a plan file cannot say (sequence parallelism or the distributed
// optimizer alone it could: never tried alone). Flags within a bundle are not tried one by
// one: a bundle is kept when it is faster as a whole.
struct RuntimeFlags {
  bool distributed_optimizer = false;
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;
  bool sequence_parallel = false;
  bool tp_comm_overlap = false;
};

std::vector<RuntimeFlags> runtime_flag_variants(const schema::MegatronShape& shape, bool explore) {
  std::vector<RuntimeFlags> out(1);  // Megatron-Core's defaults
  if (!explore) return out;
  const bool replicas = shape.dp * shape.cp > 1;
  RuntimeFlags recipe;
  recipe.distributed_optimizer = recipe.overlap_grad_reduce = recipe.overlap_param_gather = replicas;
  recipe.sequence_parallel = shape.tp > 1;
  if (replicas) out.push_back(recipe);
  if (shape.tp > 1) {
    recipe.tp_comm_overlap = true;
    out.push_back(recipe);
  }
  return out;
}

// What megatron_variants varies around a base point.
struct VariantsOf {
  bool context = false;     // cp > 1
  bool flags = false;       // runtime_flag_variants
  bool interleave = false;  // interleave_variants beyond the base's vp
};

// The points explore_context_and_expert_parallelism prices around `base`, in the order it
// prices them (ties go to the earlier): every cp (a power of two dividing dp, 2·cp dividing
// the sequence, the microbatches per replica as the scenario fixes them), every
// (ep, etp) of `expert_layouts` that folds over tp·dp, every interleaving, every runtime
// flag setting. A MoE model with tp > 1 always runs with sequence parallelism (Megatron-Core
// refuses to train a MoE layer with tensor parallelism but without it: MoELayer).
std::vector<schema::MegatronShape> megatron_variants(
    const SearchInput& in, const ir::TransformerConfig& transformer, const schema::MegatronShape& base,
    const std::vector<std::pair<std::int64_t, std::int64_t>>& expert_layouts, const VariantsOf& what) {
  std::vector<schema::MegatronShape> out;
  for (std::int64_t cp = 1; cp <= base.dp; cp *= 2) {
    if (base.dp % cp != 0 || (cp > 1 && (!what.context || transformer.seq_len % (2 * cp) != 0))) continue;
    // cp takes its GPUs from dp, and the microbatches per replica grow by cp: not when the
    // scenario fixes their number.
    if (cp > 1 && in.num_microbatches && in.global_batch_size / ((base.dp / cp) * base.mbs) != *in.num_microbatches) {
      continue;
    }
    // The interleavings depend on pp, dp·cp and the microbatch size only.
    schema::MegatronShape split = base;
    split.dp = base.dp / cp;
    const std::vector<std::int64_t> interleaves = interleave_variants(
        split, transformer.num_layers, in.global_batch_size / (split.dp * split.mbs), what.interleave);
    for (const auto& [ep, etp] : expert_layouts) {
      if (etp == 1 && base.tp == 1) continue;  // the same as etp = tp
      if (ep > 1 && (base.tp * base.dp) % (ep * (etp == 0 ? base.tp : etp)) != 0) continue;
      for (const std::int64_t vp : interleaves) {
        schema::MegatronShape layout = split;
        layout.cp = cp;
        layout.ep = ep;
        layout.etp = etp;
        layout.vp = vp;
        for (const RuntimeFlags& flags : runtime_flag_variants(layout, what.flags)) {
          schema::MegatronShape shape = layout;
          shape.sequence_parallel = flags.sequence_parallel || (transformer.num_experts > 1 && shape.tp > 1);
          shape.distributed_optimizer = flags.distributed_optimizer;
          shape.overlap_grad_reduce = flags.overlap_grad_reduce;
          shape.overlap_param_gather = flags.overlap_param_gather;
          shape.tp_comm_overlap = flags.tp_comm_overlap;
          out.push_back(shape);
        }
      }
    }
  }
  return out;
}

// `shape` priced by sim/lowering (overlap_p2p_comm on, Megatron-Core's default) under the
// search's memory limit, as the fixed plan it names. nullopt when the lowering refuses it
// (Megatron cannot run it or the lowering does not model it; the first reason is kept in
// `first_refusal`), or when an exact skip shows it cannot beat `best` (it cannot fit, or its
// lower bound exceeds best's time: pipeline_bound.h).
core::Result<std::optional<Evaluated>> price_by_lowering(Searcher& s, const sim::lowering::TrainingSetup& training,
                                                         const schema::MegatronShape& shape, const Evaluated& best,
                                                         std::optional<core::Status>* first_refusal) {
  const SearchInput& in = s.input();
  sim::lowering::MegatronPlan mp;
  mp.tp = shape.tp;
  mp.pp = shape.pp;
  mp.dp = shape.dp;
  mp.cp = shape.cp;
  mp.ep = shape.ep;
  mp.etp = shape.etp;
  mp.microbatch_size = shape.mbs;
  mp.interleave = shape.vp;
  mp.recompute = to_ir(shape.recompute);
  mp.overlap_p2p_comm = true;  // Megatron-Core's default (a scenario's search.megatron's)
  mp.sequence_parallel = shape.sequence_parallel;
  mp.zero_stage = shape.distributed_optimizer ? 1 : 0;
  mp.overlap_grad_reduce = shape.overlap_grad_reduce;
  mp.overlap_param_gather = shape.overlap_param_gather;
  mp.tp_comm_overlap = shape.tp_comm_overlap;
  auto lowered = sim::lowering::lower_megatron_plan(in.model, training, mp, s.cost());
  if (!lowered.ok()) {
    if (!*first_refusal) *first_refusal = lowered.status();
    return std::optional<Evaluated>();
  }
  // The search's memory limit (the GPU's usable memory, or the one asked for).
  for (sim::MeshSpec& m : lowered->problem.meshes) {
    m.memory_limit = core::bytes(static_cast<std::int64_t>(s.memory_limit()));
  }
  if (in.options.prune_grid && best.ok && best.prediction.fits) {
    auto unfit = cannot_fit(lowered->problem);
    auto bound = pipeline_lower_bound(lowered->problem);
    if ((unfit.ok() && unfit.value()) ||
        (bound.ok() && sim::to_seconds(bound.value()).value() > best.prediction.iteration_time_s)) {
      return std::optional<Evaluated>();
    }
  }
  schema::Plan plan =
      sim::lowering::megatron_plan_stages(in.model, training, mp, in.cluster, lowered->layers_per_chunk);
  plan.generator = s.base_plan().generator;
  auto e = s.run_problem(std::move(lowered->problem), plan);
  if (!e.ok()) return std::optional<Evaluated>();
  e->megatron_shape = shape;
  return std::optional<Evaluated>(std::move(e).value());
}

// Megatron-Core's context parallelism (cp: each sequence split over cp GPUs, ring
// attention), expert parallelism (ep: experts split over ep GPUs, all-to-all dispatch) and
// runtime flags (RuntimeFlags: the distributed optimizer, sequence parallelism and the
// overlaps), around the grid: for the grid's answer and then every grid point in increasing
// lower bound, every ep, and for the answer and the kContextExplored first points every cp
// (a power of two dividing dp, 2·cp dividing the sequence; dp becomes dp / cp, so
// the GPU count stays) and ep (a power of two dividing the experts, with expert tensor
// parallelism etp at Megatron-Core's default, tp, or 1; ep·etp dividing tp·cp·dp, Megatron-
// Core's folding), cp = ep = 1 included, and on the kRuntimeFlagsExplored first every
// runtime_flag_variants setting (not as the alpa mode's baseline), each priced by
// sim/lowering (the Megatron lowering a fixed plan gets, overlap_p2p_comm on as
// Megatron-Core's default; a MoE model with tp > 1 always with sequence parallelism, which
// Megatron-Core needs there). Points the lowering
// refuses (learned positions or a window with cp, experts that do not divide,
// tp_comm_overlap on a GPU whose SM count is unknown) are skipped. Variants are tried
// defaults first and a later one replaces the best only when strictly better, so a bundle
// of flags appears in the answer only where it shortens the step or makes the point fit.
// The fastest fitting point under that one price is returned (priced so: by_evaluator
// false) when it has cp or ep > 1 or a flag set, or when the grid's answer has an analytic
// price (a MoE model); otherwise nullopt, the lowering never having found the extra
// parallelism or flags faster (run_megatron also keeps an answer the evaluator priced when
// its own price is lower). Past the search's deadline: nullopt, with s.interrupted set. Not
// exhaustive: cp and the flags on kContextExplored points, ep on kExpertExplored.
core::Result<std::optional<Evaluated>> explore_context_and_expert_parallelism(
    Searcher& s, std::vector<schema::MegatronShape> bases, const Evaluated& grid_answer) {
  const SearchInput& in = s.input();
  const auto* transformer = std::get_if<ir::TransformerConfig>(&in.model.spec);
  if (transformer == nullptr) return std::optional<Evaluated>();
  const std::int64_t experts = transformer->num_experts;
  const bool context_parallel_possible = !transformer->learned_positions;
  // The runtime flags wherever mode megatron's own answer is wanted (mode megatron, and a
  // no-fit search of any mode asking what mode megatron would answer); not as a row of the
  // alpa mode's table (Searcher::baseline_row): that row stays a plan under the runtime every
  // other row and the searched plan are priced with (plan files have no words for the
  // overlaps), so the comparison is of plans, and the table's evaluator-priced grid answer
  // can still be the alpa mode's answer.
  const bool flags_wanted = !s.baseline_row;
  // fp8 and the block-scaled formats: every grid point is priced here, at that precision
  // (the grid's own prices, at bf16, only ranked them).
  const bool every_point = s.lowering_precision.has_value();
  // (A precision only the lowering prices runs in mode megatron, whose flags are wanted.)
  if (experts <= 1 && !context_parallel_possible && !flags_wanted) return std::optional<Evaluated>();
  if (const auto answer_shape = schema::megatron_shape(grid_answer.plan)) {
    bases.insert(bases.begin(), *answer_shape);
  }
  // (ep, etp): no expert parallelism, then each ep (a power of two dividing the experts)
  // with expert tensor parallelism at Megatron-Core's default (etp 0: tp) or none (1), which
  // folds the expert ranks over the tensor-parallel GPUs too.
  std::vector<std::pair<std::int64_t, std::int64_t>> expert_layouts = {{1, 0}};
  for (std::int64_t ep = 2; ep <= experts; ep *= 2) {
    if (experts % ep != 0) continue;
    expert_layouts.emplace_back(ep, 0);
    expert_layouts.emplace_back(ep, 1);
  }
  sim::lowering::TrainingSetup training;
  training.global_batch_size = in.global_batch_size;
  training.dtype = every_point ? s.lowering_precision->dtype : in.dtype;
  if (every_point) training.block_scaled = s.lowering_precision->block_scaled;
  training.optimizer = s.optimizer();
  std::set<std::string> seen;
  Evaluated best;
  std::optional<core::Status> first_refusal;  // the lowering's reason for the first point it refused
  for (std::size_t b = 0; b < bases.size() && b <= kExpertExplored; ++b) {
    // Within the search's time limit, as every baseline (the alpa mode's table then says
    // the row was cut).
    if (s.past_deadline()) {
      s.interrupted = true;
      return std::optional<Evaluated>();
    }
    const schema::MegatronShape& base = bases[b];
    VariantsOf what;
    what.context = context_parallel_possible && b <= kContextExplored;
    what.flags = flags_wanted && b <= kRuntimeFlagsExplored;
    what.interleave = flags_wanted && b <= kInterleaveExplored;
    if (!what.context && !what.flags && experts <= 1 && !every_point) break;  // nothing left to vary
    for (const schema::MegatronShape& shape : megatron_variants(in, *transformer, base, expert_layouts, what)) {
      if (!seen.insert(shape.to_string()).second) continue;
      ALPASIM_ASSIGN_OR_RETURN(std::optional<Evaluated> e,
                               price_by_lowering(s, training, shape, best, &first_refusal));
      if (e && better(s, *e, best)) best = std::move(*e);
    }
  }
  // At a precision only the lowering prices, the answer is its best point even when none
  // fits (then the one of least memory, which the caller reports).
  if (every_point) {
    if (best.ok) return std::optional<Evaluated>(std::move(best));
    if (first_refusal) return *first_refusal;  // every point refused: say why
    return std::optional<Evaluated>();
  }
  if (!best.ok || !best.prediction.fits) return std::optional<Evaluated>();
  // Without cp, ep and runtime flags the grid's answer stands when the evaluator priced it;
  // an analytic grid price (a MoE model, whose layers a plan file cannot write) is validated
  // by nothing, and the lowering's best answers instead, whatever its cp, ep and flags.
  const schema::MegatronShape& found = *best.megatron_shape;
  if (found.cp == 1 && found.ep == 1 && found.vp <= kGridMaxInterleave && !found.distributed_optimizer &&
      !found.sequence_parallel && !found.has_runtime_overlaps() && grid_answer.by_evaluator) {
    return std::optional<Evaluated>();
  }
  return std::optional<Evaluated>(std::move(best));
}

}  // namespace

core::Result<Evaluated> run_megatron(Searcher& s, const GridFilter& f, std::string* description) {
  std::vector<schema::MegatronShape> by_bound;
  auto grid = run_megatron_grid(s, f, description, &by_bound);
  const bool full_grid = !f.tp1 && !f.pp1 && !f.pp_gt1 && f.zero == 0;
  if (s.lowering_precision) {
    // fp8, mxfp8, nvfp4: the grid ranked its points at bf16; the answer is priced by the
    // lowering at the run's precision.
    ALPASIM_CHECK(full_grid && !s.minimize_memory) << "a precision only the lowering prices outside mode megatron";
    if (!grid.ok()) return grid;
    ALPASIM_ASSIGN_OR_RETURN(std::optional<Evaluated> priced,
                             explore_context_and_expert_parallelism(s, std::move(by_bound), grid.value()));
    if (!priced) return core::failed_precondition("the Megatron lowering priced no grid point");
    if (description) *description = priced->megatron_shape->to_string();
    return std::move(*priced);
  }
  if (!grid.ok() || !full_grid || s.minimize_memory || !s.input().options.explore_megatron_parallelism) {
    return grid;
  }
  ALPASIM_ASSIGN_OR_RETURN(std::optional<Evaluated> explored,
                           explore_context_and_expert_parallelism(s, std::move(by_bound), grid.value()));
  if (!explored) return grid;
  // Against an answer the evaluator priced: faster under the lowering than the grid's points
  // without cp and ep, and faster than that answer's own price, so a user never reads a
  // slower answer for the extra parallelism.
  if (grid.value().by_evaluator && grid.value().prediction.fits &&
      explored->prediction.iteration_time_s >= grid.value().prediction.iteration_time_s) {
    return grid;
  }
  if (description) *description = explored->megatron_shape->to_string();
  return std::move(*explored);
}

}  // namespace alpasim::planner::search_detail
