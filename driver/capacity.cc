#include "driver/capacity.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <variant>

#include "cluster/cluster_spec.h"
#include "core/check.h"
#include "core/limits.h"
#include "ir/summary.h"
#include "planner/search/search.h"
#include "driver/report_html.h"
#include "driver/report_markdown.h"
#include "driver/run.h"

namespace alpasim::driver {

namespace {

using core::Json;
using core::JsonObject;
using core::JsonValue;
using core::Result;

constexpr double kSecondsPerDay = 86400;
constexpr double kSecondsPerHour = 3600;

std::string number_text(double x) {
  std::string s = core::dump_json(Json(x));
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

struct ParsedNodes {
  std::vector<std::int64_t> listed;
  std::optional<NodeRange> range;
};

Result<ParsedNodes> parse_nodes(const JsonValue& v) {
  ParsedNodes out;
  if (v.is_array()) {
    ALPASIM_ASSIGN_OR_RETURN(std::vector<JsonValue> items, v.as_array());
    if (items.empty()) return v.error("expected a non-empty array, got []");
    for (const JsonValue& item : items) {
      ALPASIM_ASSIGN_OR_RETURN(std::int64_t n, item.as_count(core::limits::kMaxNodes));
      if (!out.listed.empty() && n <= out.listed.back()) {
        return item.error("expected node counts in increasing order, got " + std::to_string(n) +
                          " after " + std::to_string(out.listed.back()));
      }
      out.listed.push_back(n);
    }
    return out;
  }
  if (!v.is_object()) return v.type_error("an array of node counts or {\"min\", \"max\"}");
  ALPASIM_ASSIGN_OR_RETURN(JsonObject obj, v.as_object());
  NodeRange r;
  ALPASIM_ASSIGN_OR_RETURN(r.min, obj.get_count("min", core::limits::kMaxNodes));
  ALPASIM_ASSIGN_OR_RETURN(r.max, obj.get_count("max", core::limits::kMaxNodes));
  ALPASIM_ASSIGN_OR_RETURN(r.step, obj.get_count_or("step", core::limits::kMaxNodes, 1));
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  if (r.max < r.min) {
    return v.error("expected max >= min, got min " + std::to_string(r.min) + ", max " +
                   std::to_string(r.max));
  }
  if ((r.max - r.min) % r.step != 0) {
    return v.error("expected max - min to be a multiple of step, got min " +
                   std::to_string(r.min) + ", max " + std::to_string(r.max) + ", step " +
                   std::to_string(r.step));
  }
  out.range = r;
  return out;
}

Result<GoodputSpec> parse_goodput(const JsonValue& v) {
  GoodputSpec g;
  if (v.is_string()) {
    ALPASIM_ASSIGN_OR_RETURN(std::string s, v.as_string());
    if (s != "ideal") return v.type_error("\"ideal\" or an object");
    g.ideal = true;
    return g;
  }
  if (!v.is_object()) return v.type_error("\"ideal\" or an object");
  ALPASIM_ASSIGN_OR_RETURN(JsonObject obj, v.as_object());
  // Bounds: an hour to a million years of GPU time; up to a day to restart; 1 MB/s to
  // 100 GB/s of checkpoint bandwidth per GPU; an interval from a second to a year.
  if (auto x = obj.optional("mtbf_gpu_hours")) {
    ALPASIM_ASSIGN_OR_RETURN(g.mtbf_gpu_hours,
                             x->as_number(1, 1e10, "GPU-hours in [1, 1e10]"));
  }
  if (auto x = obj.optional("restart_s")) {
    ALPASIM_ASSIGN_OR_RETURN(g.restart_s, x->as_number(0, 86400, "seconds in [0, 86400]"));
  }
  if (auto x = obj.optional("checkpoint_write_gbyte_per_s_per_gpu")) {
    ALPASIM_ASSIGN_OR_RETURN(g.checkpoint_write_gbyte_per_s_per_gpu,
                             x->as_number(1e-3, 100, "GB/s per GPU in [0.001, 100]"));
  }
  if (auto x = obj.optional("checkpoint_interval_s")) {
    ALPASIM_ASSIGN_OR_RETURN(double s, x->as_number(1, 3.2e7, "seconds in [1, 3.2e7]"));
    g.checkpoint_interval_s = s;
  }
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return g;
}

}  // namespace

std::optional<GpuPrice> default_gpu_price(const std::string& gpu) {
  // Mid-points of the typical on-demand ranges across Lambda, CoreWeave, RunPod and others
  // in early 2026 (pricegpu.pages.dev, "H100 vs A100 cloud pricing": A100 80GB SXM
  // $1.49-2.49, H100 SXM $2.49-3.99 per GPU-hour). Other GPUs have no default.
  static const std::string kSource =
      "default: mid-point of early-2026 on-demand cloud prices (docs/capacity.md)";
  if (gpu == "a100-80gb") return GpuPrice{1.99, kSource};
  if (gpu == "h100-sxm") return GpuPrice{3.24, kSource};
  return std::nullopt;
}

Result<CapacitySpec> parse_capacity(const JsonValue& value) {
  ALPASIM_ASSIGN_OR_RETURN(JsonObject obj, value.as_object());
  CapacitySpec spec;
  auto tokens = obj.optional("tokens_to_train");
  auto iterations = obj.optional("iterations");
  if (tokens && iterations) {
    return value.error("\"tokens_to_train\" and \"iterations\" both set the work; give one");
  }
  if (!tokens && !iterations) {
    return value.error("expected \"tokens_to_train\" or \"iterations\", got neither");
  }
  if (tokens) {
    ALPASIM_ASSIGN_OR_RETURN(double t, tokens->as_number(1, 1e18, "a number of tokens in [1, 1e18]"));
    spec.tokens_to_train = t;
  } else {
    ALPASIM_ASSIGN_OR_RETURN(std::int64_t n, iterations->as_count(std::int64_t{1} << 40));
    spec.iterations = n;
  }
  ALPASIM_ASSIGN_OR_RETURN(JsonValue deadline, obj.required("deadline_days", "a number of days"));
  ALPASIM_ASSIGN_OR_RETURN(spec.deadline_days,
                           deadline.as_number(1e-6, 1e5, "a number of days in (0, 100000]"));
  ALPASIM_ASSIGN_OR_RETURN(JsonValue cands, obj.required("candidates", "an array of candidates"));
  ALPASIM_ASSIGN_OR_RETURN(std::vector<JsonValue> items, cands.as_array());
  if (items.empty()) return cands.error("expected a non-empty array, got []");
  std::set<std::string> seen;
  for (const JsonValue& item : items) {
    ALPASIM_ASSIGN_OR_RETURN(JsonObject c, item.as_object());
    CapacityCandidate cand;
    ALPASIM_ASSIGN_OR_RETURN(cand.preset, c.get_enum("preset", cluster::cluster_preset_names()));
    if (!seen.insert(cand.preset).second) {
      return item.error("duplicate candidate preset \"" + cand.preset + "\"");
    }
    if (auto price = c.optional("price_usd_per_gpu_hour")) {
      ALPASIM_ASSIGN_OR_RETURN(cand.price_usd_per_gpu_hour,
                               price->as_number(0, 1e6, "a price in [0, 1e6] USD per GPU-hour"));
      cand.price_source = "scenario";
    } else {
      const std::string gpu = cluster::make_preset_cluster(cand.preset, 1).value().gpu.name;
      std::optional<GpuPrice> def = default_gpu_price(gpu);
      if (!def) {
        return item.error("missing \"price_usd_per_gpu_hour\": the " + gpu +
                          " has no default price (docs/capacity.md); give one");
      }
      cand.price_usd_per_gpu_hour = def->usd_per_gpu_hour;
      cand.price_source = def->source;
    }
    ALPASIM_ASSIGN_OR_RETURN(JsonValue nodes, c.required("nodes", "node counts"));
    ALPASIM_ASSIGN_OR_RETURN(ParsedNodes parsed, parse_nodes(nodes));
    cand.nodes = std::move(parsed.listed);
    cand.range = parsed.range;
    ALPASIM_RETURN_IF_ERROR(c.finish());
    spec.candidates.push_back(std::move(cand));
  }
  ALPASIM_ASSIGN_OR_RETURN(spec.planner, obj.get_enum_or("planner", planner::search_mode_names(), ""));
  if (auto g = obj.optional("goodput")) {
    ALPASIM_ASSIGN_OR_RETURN(spec.goodput, parse_goodput(*g));
  }
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return spec;
}

Result<CapacitySpec> capacity_of(const Scenario& scenario) {
  if (scenario.capacity.is_null()) {
    return core::invalid_argument(scenario.file +
                                  ": /capacity: missing; `alpa-sim capacity` needs a capacity "
                                  "block (docs/capacity.md)");
  }
  return parse_capacity(JsonValue(scenario.capacity, scenario.file, "/capacity"));
}

Goodput goodput_of(const GoodputSpec& spec, std::int64_t num_gpus, double checkpoint_bytes,
                   double compute_s) {
  ALPASIM_CHECK(num_gpus > 0 && checkpoint_bytes >= 0 && compute_s >= 0);
  Goodput g;
  if (spec.ideal) return g;
  const double n = static_cast<double>(num_gpus);
  const double m = spec.mtbf_gpu_hours * kSecondsPerHour / n;
  const double r = spec.restart_s;
  const double delta = checkpoint_bytes / (n * spec.checkpoint_write_gbyte_per_s_per_gpu * 1e9);
  g.cluster_mtbf_s = m;
  g.checkpoint_write_s = delta;
  if (m <= r) {  // a failure before the restart is done, on average: no progress
    g.fraction = 0;
    g.checkpoint_interval_s = spec.checkpoint_interval_s.value_or(0);
    g.expected_failures = std::numeric_limits<double>::infinity();
    return g;
  }
  // d/dτ of log(wall) = 0  <=>  τ² + 2δτ − 2δ(M − R) = 0.
  const double tau = spec.checkpoint_interval_s.value_or(
      -delta + std::sqrt(delta * delta + 2 * delta * (m - r)));
  g.checkpoint_interval_s = tau;
  const double lost = (r + tau / 2) / m;  // wall time lost to failures, per wall second
  const double written = tau > 0 ? tau / (tau + delta) : 1.0;
  g.fraction = lost >= 1 ? 0.0 : written * (1 - lost);
  g.expected_failures = g.fraction > 0 ? compute_s / g.fraction / m
                                       : std::numeric_limits<double>::infinity();
  return g;
}

namespace {

bool fits(const CapacityOption& o) { return o.row.ok && o.row.result.fits; }

// Plans (candidate, nodes) requests in parallel and files each option; the study's state.
class CapacityStudy {
 public:
  CapacityStudy(const Scenario& scenario, const PlanPointFn& fn, const RunOptions& options,
                CapacityResult& out)
      : scenario_(scenario), fn_(fn), options_(options), out_(out),
        done_(out.spec.candidates.size()) {}

  struct Request {
    std::size_t candidate = 0;
    std::int64_t nodes = 0;
    std::string found_by;
  };

  void plan(const std::vector<Request>& requests) {
    std::vector<SweepPoint> points;
    for (const Request& q : requests) {
      SweepPoint p;
      p.index = points.size();
      p.coordinates = {{"preset", out_.spec.candidates[q.candidate].preset},
                       {"nodes", std::to_string(q.nodes)}};
      p.scenario = scenario_;
      auto cluster = cluster::make_preset_cluster(out_.spec.candidates[q.candidate].preset, q.nodes);
      if (cluster.ok()) {
        p.error = cluster::move_to_gpu(*cluster, scenario_.cluster, cluster->gpu);
        if (p.error.empty()) p.scenario.cluster = *cluster;
      } else {
        p.error = cluster.status().message();
      }
      points.push_back(std::move(p));
    }
    RunOptions single = options_;
    single.rank = 0;
    single.world_size = 1;
    const std::size_t offset = planned_;
    if (options_.progress) {
      single.progress = [this, offset](std::size_t done, std::size_t total) {
        options_.progress(offset + done, offset + total);
      };
    }
    std::vector<PointRow> rows = run_points(points, fn_, single);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Request& q = requests[i];
      CapacityOption o = price(q.candidate, std::move(rows[i]), points[i].scenario);
      o.nodes = q.nodes;
      o.found_by = q.found_by;
      done_[q.candidate][q.nodes] = out_.options.size();
      out_.options.push_back(std::move(o));
    }
    planned_ += rows.size();
  }

  bool planned(std::size_t candidate, std::int64_t nodes) const {
    return done_[candidate].count(nodes) != 0;
  }

  // The next size to plan to find the smallest one of `candidate`'s range satisfying
  // `holds`, or nullopt when the planned sizes already answer it: the smallest planned size
  // that holds, and the largest planned below it that does not, are adjacent on the grid.
  template <typename Pred>
  std::optional<std::int64_t> next_bisection(std::size_t candidate, Pred holds) const {
    const NodeRange& r = *out_.spec.candidates[candidate].range;
    const auto& planned_sizes = done_[candidate];
    auto hi = std::find_if(planned_sizes.begin(), planned_sizes.end(), [&](const auto& kv) {
      return holds(out_.options[kv.second]);
    });
    if (hi == planned_sizes.end() || hi == planned_sizes.begin()) return std::nullopt;
    const std::int64_t lo_k = (std::prev(hi)->first - r.min) / r.step;
    const std::int64_t hi_k = (hi->first - r.min) / r.step;
    if (hi_k - lo_k <= 1) return std::nullopt;
    return r.min + (lo_k + (hi_k - lo_k) / 2) * r.step;
  }

 private:
  CapacityOption price(std::size_t candidate, PointRow row, const Scenario& point) const {
    CapacityOption o;
    o.candidate = candidate;
    o.row = std::move(row);
    if (!o.row.ok) return o;
    const PointResult& p = o.row.result;
    const double gpus = static_cast<double>(o.row.num_gpus);
    const double price = out_.spec.candidates[candidate].price_usd_per_gpu_hour;
    const double error = out_.answers[candidate].band.relative_error;
    o.compute_time_s = static_cast<double>(out_.iterations) * p.iteration_time_s;
    o.goodput = goodput_of(out_.spec.goodput, o.row.num_gpus, out_.checkpoint_bytes,
                           o.compute_time_s);
    o.time_to_train_s = o.goodput.fraction > 0 ? o.compute_time_s / o.goodput.fraction
                                               : std::numeric_limits<double>::infinity();
    o.time_to_train_low_s = o.time_to_train_s * (1 - error);
    o.time_to_train_high_s = o.time_to_train_s * (1 + error);
    o.gpu_hours = o.time_to_train_s / kSecondsPerHour * gpus;
    o.cost_usd = o.gpu_hours * price;
    o.cost_low_usd = o.cost_usd * (1 - error);
    o.cost_high_usd = o.cost_usd * (1 + error);
    const double peak = point.cluster.gpu.peak(scenario_.training.dtype).value();
    o.mfu = peak > 0 ? p.model_tflops_per_gpu * 1e12 / peak : 0;
    o.tokens_per_s_per_gpu =
        p.iteration_time_s > 0 ? out_.tokens_per_iteration / p.iteration_time_s / gpus : 0;
    const double deadline_s = out_.spec.deadline_days * kSecondsPerDay;
    o.meets_deadline = p.fits && o.time_to_train_s <= deadline_s;
    o.meets_deadline_at_band_high = p.fits && o.time_to_train_high_s <= deadline_s;
    return o;
  }

  const Scenario& scenario_;
  const PlanPointFn& fn_;
  const RunOptions& options_;
  CapacityResult& out_;
  std::vector<std::map<std::int64_t, std::size_t>> done_;  // nodes -> index into options
  std::size_t planned_ = 0;
};

// Index of the best of `options` under `better` (strict), scanning in order.
template <typename Keep, typename Better>
std::optional<std::size_t> best_option(const std::vector<CapacityOption>& options, Keep keep,
                                       Better better) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < options.size(); ++i) {
    if (!keep(options[i])) continue;
    if (!best || better(options[i], options[*best])) best = i;
  }
  return best;
}

}  // namespace

Result<CapacityResult> run_capacity(const Scenario& scenario, const PlanPointFn& fn,
                                    const RunOptions& options) {
  CapacityResult out;
  out.scenario_name = scenario.name;
  out.scenario_file = scenario.file;
  ALPASIM_ASSIGN_OR_RETURN(out.spec, capacity_of(scenario));
  if (out.spec.tokens_to_train) {
    const auto* t = std::get_if<ir::TransformerConfig>(&scenario.model.spec);
    if (t == nullptr) {
      return core::invalid_argument(scenario.file +
                                    ": /capacity/tokens_to_train: needs a built-in transformer "
                                    "model (tokens = sequences × seq_len); give \"iterations\"");
    }
    out.tokens_per_iteration = static_cast<double>(scenario.training.global_batch_size) *
                               static_cast<double>(t->seq_len);
    out.iterations = static_cast<std::int64_t>(
        std::ceil(*out.spec.tokens_to_train / out.tokens_per_iteration));
  } else {
    out.iterations = *out.spec.iterations;
    if (const auto* t = std::get_if<ir::TransformerConfig>(&scenario.model.spec)) {
      out.tokens_per_iteration = static_cast<double>(scenario.training.global_batch_size) *
                                 static_cast<double>(t->seq_len);
    }
  }
  // A checkpoint holds the weights and the optimizer state, as the model summary counts them.
  ALPASIM_ASSIGN_OR_RETURN(ir::ModelSummary model,
                           ir::summarize_model(scenario.model, summary_options(scenario)));
  out.checkpoint_bytes = static_cast<double>(model.parameter_bytes.value()) +
                         static_cast<double>(model.optimizer_state_bytes.value());

  for (const CapacityCandidate& c : out.spec.candidates) {
    CandidateAnswer a;
    a.band = cost_model::validated_error(cluster::make_preset_cluster(c.preset, 1).value().gpu.name,
                                         scenario.training.dtype,
                                         scenario.training.block_scaled_dtype);
    out.answers.push_back(a);
  }

  CapacityStudy study(scenario, fn, options, out);
  // Round 0: the listed sizes; for a range, the doubling ladder from its min (snapped down
  // to the range's grid) and its max.
  std::vector<CapacityStudy::Request> first;
  for (std::size_t c = 0; c < out.spec.candidates.size(); ++c) {
    const CapacityCandidate& cand = out.spec.candidates[c];
    if (!cand.range) {
      for (std::int64_t n : cand.nodes) first.push_back({c, n, "listed"});
      continue;
    }
    const NodeRange& r = *cand.range;
    std::set<std::int64_t> ladder;
    for (std::int64_t n = r.min; n <= r.max; n *= 2) {
      ladder.insert(r.min + (n - r.min) / r.step * r.step);
      if (n > r.max / 2) break;
    }
    ladder.insert(r.max);
    for (std::int64_t n : ladder) first.push_back({c, n, "ladder"});
  }
  study.plan(first);
  // Bisection rounds: per range, one size for the smallest that fits and one for the
  // smallest that meets the deadline, planned together.
  for (;;) {
    std::vector<CapacityStudy::Request> round;
    std::set<std::pair<std::size_t, std::int64_t>> asked;
    for (std::size_t c = 0; c < out.spec.candidates.size(); ++c) {
      if (!out.spec.candidates[c].range) continue;
      for (auto next : {study.next_bisection(c, fits),
                        study.next_bisection(c, [](const CapacityOption& o) {
                          return o.meets_deadline;
                        })}) {
        if (next && !study.planned(c, *next) && asked.insert({c, *next}).second) {
          round.push_back({c, *next, "bisection"});
        }
      }
    }
    if (round.empty()) break;
    study.plan(round);
  }

  // Options in candidate order, then node count.
  std::stable_sort(out.options.begin(), out.options.end(),
                   [](const CapacityOption& a, const CapacityOption& b) {
                     return a.candidate != b.candidate ? a.candidate < b.candidate
                                                       : a.nodes < b.nodes;
                   });
  auto fewer_gpus_on_tie = [](double a, double b, const CapacityOption& x,
                              const CapacityOption& y) {
    return a < b || (a == b && x.row.num_gpus < y.row.num_gpus);
  };
  auto faster = [&](const CapacityOption& x, const CapacityOption& y) {
    return fewer_gpus_on_tie(x.time_to_train_s, y.time_to_train_s, x, y);
  };
  auto cheaper = [&](const CapacityOption& x, const CapacityOption& y) {
    return fewer_gpus_on_tie(x.cost_usd, y.cost_usd, x, y);
  };
  auto meets = [](const CapacityOption& o) { return o.meets_deadline; };
  auto finishes = [](const CapacityOption& o) {
    return fits(o) && std::isfinite(o.time_to_train_s);
  };
  for (std::size_t c = 0; c < out.spec.candidates.size(); ++c) {
    auto of = [c](auto pred) {
      return [c, pred](const CapacityOption& o) { return o.candidate == c && pred(o); };
    };
    auto never = [](const CapacityOption&, const CapacityOption&) { return false; };
    CandidateAnswer& a = out.answers[c];
    a.smallest_fitting = best_option(out.options, of(fits), never);
    a.smallest_meeting_deadline = best_option(out.options, of(meets), never);
    a.fastest = best_option(out.options, of(finishes), faster);
    a.cheapest_meeting_deadline = best_option(out.options, of(meets), cheaper);
  }
  out.cost_optimal = best_option(out.options, meets, cheaper);
  out.fastest = best_option(out.options, finishes, faster);
  return out;
}

namespace {

// A finite double, or null (a run that never finishes has no time or cost).
Json finite_or_null(double x) { return std::isfinite(x) ? Json(x) : Json(nullptr); }

Json index_or_null(const std::optional<std::size_t>& i) {
  return i ? Json(*i) : Json(nullptr);
}

}  // namespace

std::vector<std::string> capacity_roles(const CapacityResult& r, std::size_t i) {
  const CandidateAnswer& a = r.answers[r.options[i].candidate];
  std::vector<std::string> roles;
  if (r.cost_optimal == i) roles.emplace_back("cost-optimal");
  if (r.fastest == i) roles.emplace_back("fastest");
  if (a.cheapest_meeting_deadline == i && r.cost_optimal != i) {
    roles.emplace_back("cheapest of its kind meeting the deadline");
  }
  if (a.smallest_meeting_deadline == i) roles.emplace_back("smallest of its kind meeting the deadline");
  if (a.smallest_fitting == i) roles.emplace_back("smallest of its kind that fits");
  if (a.fastest == i && r.fastest != i) roles.emplace_back("fastest of its kind");
  return roles;
}


Json capacity_to_json(const CapacityResult& r) {
  Json cands = Json::array();
  for (std::size_t c = 0; c < r.spec.candidates.size(); ++c) {
    const CapacityCandidate& cand = r.spec.candidates[c];
    const CandidateAnswer& a = r.answers[c];
    Json j = {{"preset", cand.preset},
              {"price_usd_per_gpu_hour", cand.price_usd_per_gpu_hour},
              {"price_source", cand.price_source},
              {"prediction_error_band",
               {{"relative_error", a.band.relative_error},
                {"validated", a.band.validated},
                {"source", a.band.source}}},
              {"smallest_fitting", index_or_null(a.smallest_fitting)},
              {"smallest_meeting_deadline", index_or_null(a.smallest_meeting_deadline)},
              {"fastest", index_or_null(a.fastest)},
              {"cheapest_meeting_deadline", index_or_null(a.cheapest_meeting_deadline)}};
    if (cand.range) {
      j["nodes"] = {{"min", cand.range->min}, {"max", cand.range->max}, {"step", cand.range->step}};
    } else {
      j["nodes"] = cand.nodes;
    }
    cands.push_back(j);
  }
  Json options = Json::array();
  for (std::size_t i = 0; i < r.options.size(); ++i) {
    const CapacityOption& o = r.options[i];
    Json j = {{"option", i},
              {"preset", r.spec.candidates[o.candidate].preset},
              {"nodes", o.nodes},
              {"found_by", o.found_by},
              {"num_gpus", o.row.num_gpus},
              {"gpu", o.row.gpu},
              {"status", o.row.ok ? "ok" : "error"},
              {"roles", capacity_roles(r, i)},
              {"meets_deadline", o.meets_deadline},
              {"meets_deadline_at_band_high", o.meets_deadline_at_band_high}};
    if (o.row.ok) {
      j["compute_time_s"] = o.compute_time_s;
      j["goodput"] = {{"fraction", o.goodput.fraction},
                      {"cluster_mtbf_s", o.goodput.cluster_mtbf_s},
                      {"checkpoint_write_s", o.goodput.checkpoint_write_s},
                      {"checkpoint_interval_s", o.goodput.checkpoint_interval_s},
                      {"expected_failures", finite_or_null(o.goodput.expected_failures)}};
      j["time_to_train_s"] = finite_or_null(o.time_to_train_s);
      j["time_to_train_days"] = finite_or_null(o.time_to_train_s / kSecondsPerDay);
      j["time_to_train_days_low"] = finite_or_null(o.time_to_train_low_s / kSecondsPerDay);
      j["time_to_train_days_high"] = finite_or_null(o.time_to_train_high_s / kSecondsPerDay);
      j["gpu_hours"] = finite_or_null(o.gpu_hours);
      j["cost_usd"] = finite_or_null(o.cost_usd);
      j["cost_usd_low"] = finite_or_null(o.cost_low_usd);
      j["cost_usd_high"] = finite_or_null(o.cost_high_usd);
      j["mfu"] = o.mfu;
      j["tokens_per_s_per_gpu"] = o.tokens_per_s_per_gpu;
      j["result"] = point_result_to_json(o.row.result);
    } else {
      j["error"] = o.row.error;
    }
    options.push_back(j);
  }
  Json work = Json::object();
  if (r.spec.tokens_to_train) work["tokens_to_train"] = *r.spec.tokens_to_train;
  work["iterations"] = r.iterations;
  work["tokens_per_iteration"] = r.tokens_per_iteration;
  work["checkpoint_bytes"] = r.checkpoint_bytes;
  const GoodputSpec& g = r.spec.goodput;
  Json goodput = {{"model", g.ideal ? "ideal" : "young-daly"}};
  if (!g.ideal) {
    goodput["mtbf_gpu_hours"] = g.mtbf_gpu_hours;
    goodput["restart_s"] = g.restart_s;
    goodput["checkpoint_write_gbyte_per_s_per_gpu"] = g.checkpoint_write_gbyte_per_s_per_gpu;
    goodput["checkpoint_interval_s"] =
        g.checkpoint_interval_s ? Json(*g.checkpoint_interval_s) : Json("optimal");
  }
  return {{"format", "alpa-sim capacity v2"},
          {"scenario", {{"name", r.scenario_name}, {"file", r.scenario_file}}},
          {"work", work},
          {"goodput", goodput},
          {"deadline_days", r.spec.deadline_days},
          {"candidates", cands},
          {"options", options},
          {"cost_optimal", index_or_null(r.cost_optimal)},
          {"fastest", index_or_null(r.fastest)}};
}

std::string capacity_to_csv(const CapacityResult& r) {
  std::ostringstream os;
  os << "option,preset,nodes,found_by,num_gpus,gpu,price_usd_per_gpu_hour,status,fits,plan,"
        "iteration_time_s,model_tflops_per_gpu,mfu_percent,tokens_per_s_per_gpu,"
        "memory_per_gpu_bytes,goodput_percent,time_to_train_days,time_to_train_days_low,"
        "time_to_train_days_high,gpu_hours,cost_usd,cost_usd_low,cost_usd_high,meets_deadline,"
        "meets_deadline_at_band_high,answer,error\n";
  auto finite = [](double x) { return std::isfinite(x) ? number_text(x) : std::string(); };
  for (std::size_t i = 0; i < r.options.size(); ++i) {
    const CapacityOption& o = r.options[i];
    const CapacityCandidate& cand = r.spec.candidates[o.candidate];
    os << i << ',' << csv_field(cand.preset) << ',' << o.nodes << ',' << o.found_by << ','
       << o.row.num_gpus << ',' << csv_field(o.row.gpu) << ','
       << number_text(cand.price_usd_per_gpu_hour) << ',' << (o.row.ok ? "ok" : "error") << ',';
    if (o.row.ok) {
      const PointResult& p = o.row.result;
      os << (p.fits ? "yes" : "no") << ',' << csv_field(p.plan_summary) << ','
         << number_text(p.iteration_time_s) << ',' << number_text(p.model_tflops_per_gpu) << ','
         << number_text(o.mfu * 100) << ',' << number_text(o.tokens_per_s_per_gpu) << ','
         << p.peak_memory_bytes << ',' << number_text(o.goodput.fraction * 100) << ','
         << finite(o.time_to_train_s / kSecondsPerDay) << ','
         << finite(o.time_to_train_low_s / kSecondsPerDay) << ','
         << finite(o.time_to_train_high_s / kSecondsPerDay) << ',' << finite(o.gpu_hours) << ','
         << finite(o.cost_usd) << ',' << finite(o.cost_low_usd) << ','
         << finite(o.cost_high_usd) << ',';
    } else {
      os << ",,,,,,,,,,,,,,,";
    }
    std::string roles;
    for (const std::string& role : capacity_roles(r, i)) roles += (roles.empty() ? "" : "; ") + role;
    os << (o.meets_deadline ? "yes" : "no") << ','
       << (o.meets_deadline_at_band_high ? "yes" : "no") << ',' << csv_field(roles) << ','
       << csv_field(o.row.ok ? "" : o.row.error) << '\n';
  }
  return os.str();
}

}  // namespace alpasim::driver

namespace alpasim::driver {

core::Result<std::string> capacity_command(const StudyCommand& c) {
  ALPASIM_ASSIGN_OR_RETURN(Scenario scenario, load_scenario(c.scenario_path));
  RunOptions options;
  options.threads = c.threads;
  options.progress = c.progress;
  ALPASIM_ASSIGN_OR_RETURN(CapacitySpec spec, capacity_of(scenario));
  PlanPointFn fn = c.plan ? c.plan : default_plan_point_fn(1, spec.planner);
  ALPASIM_ASSIGN_OR_RETURN(CapacityResult result, run_capacity(scenario, fn, options));
  const std::string csv = capacity_to_csv(result);
  const std::string json = core::dump_json(capacity_to_json(result));
  auto html = [&] { return capacity_report_html(result, scenario); };
  auto md = [&] { return capacity_report_markdown(result, scenario); };
  ALPASIM_RETURN_IF_ERROR(write_study_outputs(c, "capacity", csv, json, html, md));
  return study_stdout(c.print, csv, json, md);
}

}  // namespace alpasim::driver
