// Mode "alpa": the inter-op DP over stages and submeshes with the intra-op costs, and its
// seeds (searcher.h).
#include "planner/search/searcher.h"

namespace alpasim::planner::search_detail {

// ---------------------------------------------------------------------------------------
// Mode "alpa".


// Submeshes of Alpa §5.2, restricted for search speed (docs/search.md): above 4 nodes
// only power-of-two node counts; above 8 nodes only whole nodes (the DP then counts
// devices in nodes). Both keep Theorem 1's exact covering.
std::vector<SubmeshShape> alpa_submeshes(std::int64_t nodes, std::int64_t gpn) {
  std::vector<SubmeshShape> subs;
  for (const auto& sm : inter_op::submesh_shapes(nodes, gpn)) {
    if (nodes > 4 && sm.nodes > 1 && (sm.nodes & (sm.nodes - 1)) != 0) continue;
    if (nodes > 8 && sm.gpus_per_node < gpn) continue;
    subs.push_back(sm);
  }
  return subs;
}

// Every mesh size a plan of mode "alpa" (the DP's submeshes, the equal partitions' N/p)
// may use: the sizes Searcher::point_lower_bound_s minimises over.
std::set<std::int64_t> alpa_mesh_sizes(const Searcher& s) {
  std::set<std::int64_t> sizes;
  for (const auto& sm : alpa_submeshes(s.nodes(), s.gpn())) sizes.insert(sm.size());
  for (std::int64_t p = 1; p <= s.num_gpus(); p *= 2) {
    if (s.num_gpus() % p == 0 && valid_submesh_size(s.num_gpus() / p, s.nodes(), s.gpn())) {
      sizes.insert(s.num_gpus() / p);
    }
  }
  return sizes;
}

// True when point pt's lower bound (point_lower_bound_s) exceeds the fitting incumbent's
// time, so no plan of the point can beat it (SearchOptions::prune_points).
bool point_cannot_win(Searcher& s, const Point& pt, const Evaluated& incumbent) {
  if (!s.input().options.prune_points || s.minimize_memory || !incumbent.ok ||
      !incumbent.prediction.fits) {
    return false;
  }
  return point_slower_than(s, pt, incumbent.prediction.iteration_time_s);
}

bool point_slower_than(Searcher& s, const Point& pt, double time_s) {
  return s.point_lower_bound_s(pt, alpa_mesh_sizes(s)) > time_s;
}

core::Result<Evaluated> run_alpa(Searcher& s, AlpaStats& stats, Clock::time_point start,
                                 bool restrict_to_data_parallel_meshes) {
  const SearchInput& in = s.input();
  const std::int64_t nodes = s.nodes(), gpn = s.gpn();
  const std::vector<SubmeshShape> subs = alpa_submeshes(nodes, gpn);
  // Model axes up to an NVLink domain (a node, or a multi-node NVLink rack's trays).
  const std::int64_t max_cols =
      nodes > 8 ? std::max(gpn, s.nvlink_gpus()) : std::numeric_limits<std::int64_t>::max();
  std::vector<std::pair<SubmeshShape, LogicalMesh>> meshes;
  std::vector<std::vector<LogicalMesh>> logical(subs.size());
  for (std::size_t j = 0; j < subs.size(); ++j) {
    for (const auto& m : logical_shapes(subs[j], restrict_to_data_parallel_meshes ? 1 : max_cols, s.nvlink_gpus())) {
      logical[j].push_back(m);
      meshes.push_back({subs[j], m});
    }
  }
  Evaluated best;
  bool said_points_stop = false;  // "time limit reached after N points" is said once
  const std::vector<std::int64_t> sizes = microbatch_sizes(in, 1);
  std::size_t start_at = 0;  // where a recompute policy's scan starts (index into sizes)
  for (schema::Recompute rc : in.options.recompute) {
    // Iteration time is unimodal in the microbatch size (more microbatches shrink the
    // bubble, smaller ones lose GEMM efficiency): scan up from start_at while each size
    // simulates no slower than the one before, then down from below start_at the same way.
    // The first policy starts at the smallest size (an upward scan, as before); a later one
    // where the policy before it was fastest, so under unimodality it finds the same
    // minimum without the small sizes' points; it scans down only when no larger size was
    // faster than its start (else the minimum lies above, by unimodality).
    bool stop_policy = false;  // the clock or the budget ended this policy's scan
    double at_start = kInf;    // the time at sizes[start_at], for the downward scan
    double fastest = kInf;
    std::size_t fastest_at = start_at;
    for (const int direction : {+1, -1}) {
      if (stop_policy || (direction < 0 && (start_at == 0 || fastest_at != start_at))) break;
      double previous = direction > 0 ? kInf : at_start;
      for (std::size_t at = direction > 0 ? start_at : start_at - 1; at < sizes.size();
           at = direction > 0 ? at + 1 : (at == 0 ? sizes.size() : at - 1)) {
        const std::int64_t mbs = sizes[at];
        Evaluated point_best;
        const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
        if (stats.points > 0 && elapsed > in.options.time_limit_s) {
          if (!said_points_stop) {
            said_points_stop = true;
            stats.lines.push_back("stopped by the wall clock: time limit " +
                                  core::format_fixed(in.options.time_limit_s, 3) + " s reached after " +
                                  std::to_string(stats.points) + " (microbatch, recompute) points");
          }
          stats.stopped_by_clock = true;
          stop_policy = true;
          break;
        }
        if (in.options.max_points > 0 && stats.points >= in.options.max_points) {
          if (!stats.stopped_by_budget) {
            stats.lines.push_back("work budget: max_points " + std::to_string(in.options.max_points) +
                                  " (microbatch, recompute) points explored");
          }
          stats.stopped_by_budget = true;
          stop_policy = true;
          break;
        }
        const auto tp0 = Clock::now();
        ALPASIM_ASSIGN_OR_RETURN(Point * pt, s.point(mbs, rc));
        const auto tp1 = Clock::now();
        // A point whose compute alone cannot beat the best plan so far is skipped before its
        // intra-op solves. It neither stops the microbatch loop nor becomes `previous`: the
        // loop then reaches at least the points it reached before (docs/search.md), so the
        // result is never slower than without the skip.
        if (point_cannot_win(s, *pt, best)) {
          ++s.points_pruned;
          continue;
        }
        ++stats.points;
        if (in.options.progress) {
          in.options.progress("point " + std::to_string(stats.points) + ": microbatch " +
                              std::to_string(mbs) + ", recompute " +
                              std::string(schema::recompute_name(rc)));
        }
        stats.explored.insert({mbs, static_cast<int>(rc)});
        // Past the first point the time limit also stops a point in the middle: no solve
        // starts after it and none runs past it, no candidate is simulated after it, and the
        // cut point is dropped whole (its plans are not compared), so the answer is that of
        // the points before it. The first point must answer: past the limit its remaining
        // solves run under a hard limit of a millisecond and keep the layouts they reached
        // (Searcher::accept_cut_solves), and it simulates candidates until one fits.
        const bool first = stats.points == 1;
        s.deadline = Searcher::deadline_after(start, in.options.time_limit_s);
        s.accept_cut_solves = first;
        auto cut_by_clock = [&]() {
          s.deadline.reset();
          s.interrupted = false;
          stats.explored.erase({mbs, static_cast<int>(rc)});
          --stats.points;
          stats.lines.push_back("stopped by the wall clock: time limit " +
                                core::format_fixed(in.options.time_limit_s, 3) +
                                " s reached during (microbatch " + std::to_string(mbs) + ", recompute " +
                                std::string(schema::recompute_name(rc)) + "), dropped unfinished; " +
                                std::to_string(stats.points) + " (microbatch, recompute) points explored");
          stats.stopped_by_clock = true;
          said_points_stop = true;  // no "reached after N points" line after this one
        };
        const int approximate_before = s.approximate_solves;
        ALPASIM_RETURN_IF_ERROR(s.ensure_costs(*pt, meshes));
        s.accept_cut_solves = false;
        if (s.interrupted) {
          cut_by_clock();
          stop_policy = true;
          break;
        }
        if (s.approximate_solves > approximate_before) {
          stats.lines.push_back("stopped by the wall clock: time limit " +
                                core::format_fixed(in.options.time_limit_s, 3) + " s reached during the first point: " +
                                std::to_string(s.approximate_solves - approximate_before) +
                                " intra-op solves were cut at the limit and kept the layouts they had "
                                "reached (perhaps not optimal)");
          stats.stopped_by_clock = true;
        }
        const auto tp2 = Clock::now();
        const std::int64_t B = in.global_batch_size / mbs;
        // Clustered layers.
        const std::vector<int> starts = balanced_partition(layer_weights(*pt), in.options.max_layers);
        const int L = static_cast<int>(starts.size()) - 1;
        inter_op::InterOpProblem prob;
        prob.num_layers = L;
        prob.num_devices = s.num_gpus();
        prob.num_microbatches = B;
        prob.max_stages = L;
        prob.submeshes = subs;
        prob.resize();
        // Chosen logical mesh per (begin, end, submesh, s).
        std::vector<int> chosen(prob.table.size(), -1);
        for (std::size_t j = 0; j < subs.size(); ++j) {
          for (std::size_t q = 0; q < logical[j].size(); ++q) {
            for (int var = 0; var < (logical[j][q].num_devices() > 1 ? 2 : 1); ++var) {
            // Per clustered layer sums.
            std::vector<double> t(static_cast<std::size_t>(L), 0), st(static_cast<std::size_t>(L), 0),
                act(static_cast<std::size_t>(L), 0), work(static_cast<std::size_t>(L), 0);
            // Tied weights a clustered layer reads from another one (owner: its cluster):
            // a stage without the owner holds a copy, its gradient and optimizer state.
            std::vector<double> tied(static_cast<std::size_t>(L), 0);
            std::vector<int> tied_owner(static_cast<std::size_t>(L), -1);
            // Resharding between layer starts[g] and the one before, paid only when a stage
            // holds both (the boundaries inside a clustered layer are in t).
            std::vector<double> entry(static_cast<std::size_t>(L), 0);
            for (int g = 0; g < L; ++g) {
              for (int l = starts[static_cast<std::size_t>(g)]; l < starts[static_cast<std::size_t>(g + 1)]; ++l) {
                const LayerCost& c = s.layer_cost(*pt, l, subs[j], logical[j][q], var);
                const double b = s.layer_boundary(*pt, l, subs[j], logical[j][q], var).total_s();
                if (l == starts[static_cast<std::size_t>(g)]) {
                  entry[static_cast<std::size_t>(g)] = b;
                } else {
                  t[static_cast<std::size_t>(g)] += b;
                }
                t[static_cast<std::size_t>(g)] += c.total_s();
                st[static_cast<std::size_t>(g)] += static_cast<double>(c.param_b + c.grad_b + c.opt_b);
                act[static_cast<std::size_t>(g)] += static_cast<double>(c.act_b);
                work[static_cast<std::size_t>(g)] = std::max(work[static_cast<std::size_t>(g)], static_cast<double>(c.work_b));
                if (c.tied_owner >= 0) {
                  tied[static_cast<std::size_t>(g)] += static_cast<double>(2 * c.tied_param_b + c.tied_opt_b);
                  for (int h = 0; h < L; ++h) {
                    if (starts[static_cast<std::size_t>(h)] <= c.tied_owner &&
                        c.tied_owner < starts[static_cast<std::size_t>(h + 1)]) {
                      tied_owner[static_cast<std::size_t>(g)] = h;
                    }
                  }
                }
              }
            }
            for (int k = 0; k < L; ++k) {
              double tt = 0, ss = 0, aa = 0, ww = 0;
              for (int i = k + 1; i <= L; ++i) {
                tt += t[static_cast<std::size_t>(i - 1)];
                if (i - 1 > k) tt += entry[static_cast<std::size_t>(i - 1)];
                ss += st[static_cast<std::size_t>(i - 1)];
                if (tied_owner[static_cast<std::size_t>(i - 1)] >= 0 &&
                    tied_owner[static_cast<std::size_t>(i - 1)] < k) {
                  ss += tied[static_cast<std::size_t>(i - 1)];
                }
                aa += act[static_cast<std::size_t>(i - 1)];
                ww = std::max(ww, work[static_cast<std::size_t>(i - 1)]);
                for (int sfe = 1; sfe <= L; ++sfe) {
                  const double in_flight = static_cast<double>(std::min<std::int64_t>(sfe, B));
                  if (ss + in_flight * aa + ww > s.memory_limit()) continue;
                  const std::size_t idx = prob.index(k, i, static_cast<int>(j), sfe);
                  if (tt < prob.table[idx]) {
                    prob.table[idx] = tt;
                    chosen[idx] = static_cast<int>(q) * 2 + var;
                  }
                }
              }
            }
            }
          }
        }
        inter_op::InterOpOptions opt;
        opt.epsilon = in.options.epsilon;
        opt.top_k = in.options.top_k;
        const inter_op::InterOpResult res = inter_op::solve_inter_op(prob, opt);
        stats.dp_passes += res.t_max_enumerated;
        stats.t_max_candidates += res.t_max_candidates;
        bool first_cut = false;  // the first point stopped at its first fitting candidate
        for (const auto& sol : res.solutions) {
          std::vector<schema::PlanStage> stages;
          std::vector<int> vars;
          const int ns = static_cast<int>(sol.stages.size());
          for (int si = 0; si < ns; ++si) {
            const auto& c = sol.stages[static_cast<std::size_t>(si)];
            const int qv = chosen[prob.index(c.layer_begin, c.layer_end, c.submesh, ns - si)];
            const int q = qv / 2;
            vars.push_back(qv % 2);
            schema::PlanStage st;
            st.layer_begin = starts[static_cast<std::size_t>(c.layer_begin)];
            st.layer_end = starts[static_cast<std::size_t>(c.layer_end)];
            st.submesh_nodes = subs[static_cast<std::size_t>(c.submesh)].nodes;
            st.submesh_gpus_per_node = subs[static_cast<std::size_t>(c.submesh)].gpus_per_node;
            st.logical_rows = logical[static_cast<std::size_t>(c.submesh)][static_cast<std::size_t>(q)].rows;
            st.logical_cols = logical[static_cast<std::size_t>(c.submesh)][static_cast<std::size_t>(q)].cols;
            stages.push_back(st);
          }
          std::vector<std::tuple<schema::Schedule, int>> schedules = {{schema::Schedule::kOneFOneB, 1}};
          if (in.options.try_gpipe && ns > 1) schedules.push_back({schema::Schedule::kGpipe, 1});
          bool uniform = ns > 1;
          for (const auto& st : stages) {
            uniform = uniform && st.submesh_nodes == stages[0].submesh_nodes &&
                      st.submesh_gpus_per_node == stages[0].submesh_gpus_per_node &&
                      st.logical_rows == stages[0].logical_rows && st.logical_cols == stages[0].logical_cols;
          }
          if (in.options.try_interleave && uniform && pt->num_layers >= 2 * ns && B % ns == 0) {
            schedules.push_back({schema::Schedule::kInterleavedOneFOneB, 2});
          }
          for (const auto& [sched, v] : schedules) {
            std::vector<schema::PlanStage> chunks = stages;
            std::vector<int> chunk_vars = vars;
            if (v > 1) {
              const std::vector<int> cs = balanced_partition(layer_weights(*pt), ns * v);
              if (static_cast<int>(cs.size()) != ns * v + 1) continue;
              chunks.clear();
              for (int c = 0; c < ns * v; ++c) {
                schema::PlanStage st = stages[static_cast<std::size_t>(c % ns)];
                st.layer_begin = cs[static_cast<std::size_t>(c)];
                st.layer_end = cs[static_cast<std::size_t>(c + 1)];
                chunks.push_back(st);
              }
              chunk_vars.assign(chunks.size(), vars[0]);
              bool same = true;
              for (int x : vars) same = same && x == vars[0];
              if (!same) continue;
            }
            // Past the limit the first point stops once it has a fitting candidate; a later
            // point is dropped.
            const bool first_needs_more = first && !(point_best.ok && point_best.prediction.fits);
            if (s.past_deadline() && !first_needs_more) {
              if (first) {
                if (!stats.stopped_by_clock) {
                  stats.lines.push_back("stopped by the wall clock: time limit " +
                                        core::format_fixed(in.options.time_limit_s, 3) +
                                        " s reached while the first point's candidates were simulated");
                }
                stats.stopped_by_clock = true;
                first_cut = true;
                break;
              }
              s.interrupted = true;
              break;
            }
            ALPASIM_ASSIGN_OR_RETURN(schema::Plan plan, make_plan(s, chunks, B, sched, v, rc));
            ALPASIM_ASSIGN_OR_RETURN(Evaluated e, s.evaluate(plan, chunk_vars));
            ++stats.simulated;
            if (better(s, e, point_best)) point_best = std::move(e);
          }
          if (s.interrupted || first_cut) break;
        }
        if (s.interrupted) {
          cut_by_clock();
          stop_policy = true;
          break;
        }
        s.deadline.reset();
        const double t = point_best.ok && point_best.prediction.fits
                             ? point_best.prediction.iteration_time_s : kInf;
        if (std::getenv("ALPASIM_SEARCH_DEBUG") != nullptr) {
          const auto tp3 = Clock::now();
          auto sec = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
          std::fprintf(stderr, "POINT mbs %lld rc %d: graphs %.2f s, solves %.2f s, dp+sim %.2f s, best %.4f, lower bound %.4f\n",
                       static_cast<long long>(mbs), static_cast<int>(rc), sec(tp0, tp1), sec(tp1, tp2), sec(tp2, tp3), t,
                       s.point_lower_bound_s(*pt, alpa_mesh_sizes(s)));
        }
        if (better(s, point_best, best)) best = std::move(point_best);
        if (at == start_at) at_start = t;
        if (t < fastest) {
          fastest = t;
          fastest_at = at;
        }
        if (std::isfinite(previous) && t > previous) break;
        previous = std::isfinite(t) ? t : previous;
      }
    }
    start_at = fastest_at;  // the next policy starts where this one was fastest
  }
  if (!best.ok) return core::resource_exhausted("the inter-op DP found no plan that fits memory");
  return best;
}

}  // namespace alpasim::planner::search_detail
