// Helpers shared by the search modes (searcher.h).
#include "planner/search/searcher.h"

namespace alpasim::planner::search_detail {

// ---------------------------------------------------------------------------------------
// Helpers shared by the modes.

std::vector<std::int64_t> microbatch_sizes(const SearchInput& in, std::int64_t min_divisor) {
  std::vector<std::int64_t> out;
  if (in.num_microbatches) {
    if (in.global_batch_size % *in.num_microbatches == 0) {
      out.push_back(in.global_batch_size / *in.num_microbatches);
    }
    return out;
  }
  std::vector<std::int64_t> cand = in.options.microbatch_sizes;
  if (cand.empty()) cand = {1, 2, 4, 8, 16, 32};
  for (std::int64_t m : cand) {
    if (m >= 1 && in.global_batch_size % m == 0 && m % min_divisor == 0 &&
        m <= in.global_batch_size) {
      out.push_back(m);
    }
  }
  return out;
}

// Contiguous groups of layers with near-equal FLOPs: minimises the heaviest group (exact
// linear-partition DP), at most `groups` groups. Returns the group starts + num_layers.
std::vector<int> balanced_partition(const std::vector<double>& w, int groups) {
  const int n = static_cast<int>(w.size());
  groups = std::max(1, std::min(groups, n));
  std::vector<double> pre(static_cast<std::size_t>(n + 1), 0);
  for (int i = 0; i < n; ++i) pre[static_cast<std::size_t>(i + 1)] = pre[static_cast<std::size_t>(i)] + w[static_cast<std::size_t>(i)];
  // best[g][i]: min max-weight of splitting the first i layers into g groups.
  std::vector<std::vector<double>> best(static_cast<std::size_t>(groups + 1),
                                        std::vector<double>(static_cast<std::size_t>(n + 1), kInf));
  std::vector<std::vector<int>> cut(best.size(), std::vector<int>(static_cast<std::size_t>(n + 1), 0));
  best[0][0] = 0;
  for (int g = 1; g <= groups; ++g) {
    for (int i = g; i <= n; ++i) {
      for (int j = g - 1; j < i; ++j) {
        const double v = std::max(best[static_cast<std::size_t>(g - 1)][static_cast<std::size_t>(j)],
                                  pre[static_cast<std::size_t>(i)] - pre[static_cast<std::size_t>(j)]);
        if (v < best[static_cast<std::size_t>(g)][static_cast<std::size_t>(i)]) {
          best[static_cast<std::size_t>(g)][static_cast<std::size_t>(i)] = v;
          cut[static_cast<std::size_t>(g)][static_cast<std::size_t>(i)] = j;
        }
      }
    }
  }
  std::vector<int> starts;
  int i = n;
  for (int g = groups; g >= 1; --g) {
    starts.push_back(i);
    i = cut[static_cast<std::size_t>(g)][static_cast<std::size_t>(i)];
  }
  starts.push_back(0);
  std::reverse(starts.begin(), starts.end());
  return starts;  // groups + 1 entries
}

std::vector<double> layer_weights(const Point& p) {
  std::vector<double> w;
  for (const auto& s : p.stats) {
    w.push_back(static_cast<double>(s.flops.total_forward + s.flops.total_backward) + 1.0);
  }
  return w;
}

std::string describe_plan(const schema::Plan& plan) {
  std::ostringstream os;
  os << plan.stages.size() / static_cast<std::size_t>(plan.interleave) << " stage(s)";
  if (plan.interleave > 1) os << " x " << plan.interleave << " chunks";
  os << ", " << plan.num_microbatches << " microbatches of "
     << plan.global_batch_size / plan.num_microbatches << ", " << schema::schedule_name(plan.schedule)
     << ", recompute " << schema::recompute_name(plan.recompute) << ":";
  for (const auto& st : plan.stages) {
    os << " [" << st.layer_begin << "," << st.layer_end << ") " << st.submesh_nodes << "x"
       << st.submesh_gpus_per_node << " as " << st.logical_rows << "x" << st.logical_cols << ";";
  }
  return os.str();
}

bool better(const Searcher& s, const Evaluated& a, const Evaluated& b) {
  if (!b.ok) return a.ok;
  if (!a.ok) return false;
  if (s.minimize_memory) {
    if (a.prediction.peak_memory_bytes != b.prediction.peak_memory_bytes) {
      return a.prediction.peak_memory_bytes < b.prediction.peak_memory_bytes;
    }
    return a.prediction.iteration_time_s < b.prediction.iteration_time_s;
  }
  if (a.prediction.fits != b.prediction.fits) return a.prediction.fits;
  if (!a.prediction.fits) return a.prediction.peak_memory_bytes < b.prediction.peak_memory_bytes;
  return a.prediction.iteration_time_s < b.prediction.iteration_time_s;
}

// Plans with stages placed by assign_devices.
core::Result<schema::Plan> make_plan(Searcher& s, const std::vector<schema::PlanStage>& stages_in,
                                     std::int64_t num_microbatches, schema::Schedule schedule,
                                     int interleave, schema::Recompute rc) {
  schema::Plan plan = s.base_plan();
  plan.num_microbatches = num_microbatches;
  plan.schedule = schedule;
  plan.interleave = interleave;
  plan.recompute = rc;
  const int p = static_cast<int>(stages_in.size()) / interleave;
  std::vector<SubmeshShape> subs;
  for (int i = 0; i < p; ++i) {
    subs.push_back({stages_in[static_cast<std::size_t>(i)].submesh_nodes,
                    stages_in[static_cast<std::size_t>(i)].submesh_gpus_per_node});
  }
  ALPASIM_ASSIGN_OR_RETURN(std::vector<inter_op::Placement> place,
                           inter_op::assign_devices(subs, s.nodes(), s.gpn()));
  plan.stages = stages_in;
  for (std::size_t c = 0; c < plan.stages.size(); ++c) {
    auto& st = plan.stages[c];
    const auto& pl = place[c % static_cast<std::size_t>(p)];
    st.device_ids = adapters::mesh_device_ids({st.submesh_nodes, st.submesh_gpus_per_node},
                                              {st.logical_rows, st.logical_cols}, s.gpn(),
                                              pl.first_node, pl.first_local);
    // The rule fill_shardings writes into the final plan; candidates are priced with it.
    st.weight_update_sharding = st.logical_rows * st.logical_cols > 1;
  }
  return plan;
}

SubmeshShape shape_of_size(std::int64_t size, std::int64_t gpn) {
  if (size <= gpn) return {1, size};
  return {size / gpn, gpn};
}

bool valid_submesh_size(std::int64_t size, std::int64_t nodes, std::int64_t gpn) {
  if (size <= 0) return false;
  if (size < gpn) return (size & (size - 1)) == 0;
  return size % gpn == 0 && size / gpn <= nodes;
}

}  // namespace alpasim::planner::search_detail
