#include "driver/capacity.h"

#include <cmath>
#include <set>
#include <sstream>
#include <variant>

#include "cluster/cluster_spec.h"
#include "core/check.h"
#include "planner/search/search.h"
#include "driver/report_html.h"
#include "driver/report_markdown.h"

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

Result<std::vector<std::int64_t>> parse_nodes(const JsonValue& v) {
  std::vector<std::int64_t> out;
  if (v.is_array()) {
    ALPASIM_ASSIGN_OR_RETURN(std::vector<JsonValue> items, v.as_array());
    if (items.empty()) return v.error("expected a non-empty array, got []");
    for (const JsonValue& item : items) {
      ALPASIM_ASSIGN_OR_RETURN(std::int64_t n, item.as_positive_int());
      if (!out.empty() && n <= out.back()) {
        return item.error("expected node counts in increasing order, got " + std::to_string(n) +
                          " after " + std::to_string(out.back()));
      }
      out.push_back(n);
    }
    return out;
  }
  if (!v.is_object()) return v.type_error("an array of node counts or {\"min\", \"max\"}");
  ALPASIM_ASSIGN_OR_RETURN(JsonObject obj, v.as_object());
  ALPASIM_ASSIGN_OR_RETURN(std::int64_t lo, obj.get_positive_int("min"));
  ALPASIM_ASSIGN_OR_RETURN(std::int64_t hi, obj.get_positive_int("max"));
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  if (hi < lo) {
    return v.error("expected max >= min, got min " + std::to_string(lo) + ", max " +
                   std::to_string(hi));
  }
  // Doubling from min: the sizes clusters are bought and planned in (power-of-two meshes).
  for (std::int64_t n = lo; n <= hi; n *= 2) out.push_back(n);
  return out;
}

}  // namespace

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
    ALPASIM_ASSIGN_OR_RETURN(std::int64_t n, iterations->as_positive_int());
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
    ALPASIM_ASSIGN_OR_RETURN(JsonValue price,
                             c.required("price_usd_per_gpu_hour", "a price in USD"));
    ALPASIM_ASSIGN_OR_RETURN(cand.price_usd_per_gpu_hour,
                             price.as_number(0, 1e6, "a price in [0, 1e6] USD per GPU-hour"));
    ALPASIM_ASSIGN_OR_RETURN(JsonValue nodes, c.required("nodes", "node counts"));
    ALPASIM_ASSIGN_OR_RETURN(cand.nodes, parse_nodes(nodes));
    ALPASIM_RETURN_IF_ERROR(c.finish());
    spec.candidates.push_back(std::move(cand));
  }
  ALPASIM_ASSIGN_OR_RETURN(spec.planner, obj.get_enum_or("planner", planner::search_mode_names(), ""));
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
  }

  std::vector<SweepPoint> points;
  std::vector<std::size_t> candidate_of;
  for (std::size_t c = 0; c < out.spec.candidates.size(); ++c) {
    const CapacityCandidate& cand = out.spec.candidates[c];
    for (std::int64_t n : cand.nodes) {
      SweepPoint p;
      p.index = points.size();
      p.coordinates = {{"preset", cand.preset}, {"nodes", std::to_string(n)}};
      p.scenario = scenario;
      auto cluster = cluster::make_preset_cluster(cand.preset, n);
      if (cluster.ok()) {
        p.error = cluster::move_to_gpu(*cluster, scenario.cluster, cluster->gpu);
        if (p.error.empty()) p.scenario.cluster = *cluster;
      } else {
        p.error = cluster.status().message();
      }
      points.push_back(std::move(p));
      candidate_of.push_back(c);
    }
  }
  RunOptions single = options;
  single.rank = 0;
  single.world_size = 1;
  std::vector<PointRow> rows = run_points(points, fn, single);

  const double deadline_s = out.spec.deadline_days * kSecondsPerDay;
  out.smallest.assign(out.spec.candidates.size(), std::nullopt);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    CapacityOption o;
    o.candidate = candidate_of[i];
    o.row = std::move(rows[i]);
    if (o.row.ok) {
      o.time_to_train_s = static_cast<double>(out.iterations) * o.row.result.iteration_time_s;
      o.cost_usd = o.time_to_train_s / kSecondsPerHour * static_cast<double>(o.row.num_gpus) *
                   out.spec.candidates[o.candidate].price_usd_per_gpu_hour;
      o.meets_deadline = o.row.result.fits && o.time_to_train_s <= deadline_s;
    }
    if (o.meets_deadline && !out.smallest[o.candidate]) out.smallest[o.candidate] = i;
    if (o.meets_deadline) {
      if (!out.cost_optimal) {
        out.cost_optimal = i;
      } else {
        const CapacityOption& b = out.options[*out.cost_optimal];
        if (o.cost_usd < b.cost_usd ||
            (o.cost_usd == b.cost_usd && o.row.num_gpus < b.row.num_gpus)) {
          out.cost_optimal = i;
        }
      }
    }
    out.options.push_back(std::move(o));
  }
  return out;
}

Json capacity_to_json(const CapacityResult& r) {
  Json cands = Json::array();
  for (std::size_t c = 0; c < r.spec.candidates.size(); ++c) {
    const CapacityCandidate& cand = r.spec.candidates[c];
    Json j = {{"preset", cand.preset},
              {"price_usd_per_gpu_hour", cand.price_usd_per_gpu_hour},
              {"nodes", cand.nodes}};
    if (r.smallest[c]) {
      j["smallest_meeting_deadline"] = *r.smallest[c];
    } else {
      j["smallest_meeting_deadline"] = nullptr;
    }
    cands.push_back(j);
  }
  Json options = Json::array();
  for (std::size_t i = 0; i < r.options.size(); ++i) {
    const CapacityOption& o = r.options[i];
    Json j = {{"option", i},
              {"preset", r.spec.candidates[o.candidate].preset},
              {"nodes", o.row.coordinates.at(1).second},
              {"num_gpus", o.row.num_gpus},
              {"gpu", o.row.gpu},
              {"status", o.row.ok ? "ok" : "error"},
              {"meets_deadline", o.meets_deadline}};
    if (o.row.ok) {
      j["time_to_train_s"] = o.time_to_train_s;
      j["time_to_train_days"] = o.time_to_train_s / kSecondsPerDay;
      j["cost_usd"] = o.cost_usd;
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
  Json j = {{"format", "alpa-sim capacity v1"},
            {"scenario", {{"name", r.scenario_name}, {"file", r.scenario_file}}},
            {"work", work},
            {"deadline_days", r.spec.deadline_days},
            {"candidates", cands},
            {"options", options}};
  if (r.cost_optimal) {
    j["cost_optimal"] = *r.cost_optimal;
  } else {
    j["cost_optimal"] = nullptr;
  }
  return j;
}

std::string capacity_to_csv(const CapacityResult& r) {
  std::ostringstream os;
  os << "option,preset,nodes,num_gpus,gpu,price_usd_per_gpu_hour,status,fits,plan,"
        "iteration_time_s,model_tflops_per_gpu,memory_per_gpu_bytes,time_to_train_days,"
        "cost_usd,meets_deadline,smallest_of_kind,cost_optimal,error\n";
  for (std::size_t i = 0; i < r.options.size(); ++i) {
    const CapacityOption& o = r.options[i];
    const CapacityCandidate& cand = r.spec.candidates[o.candidate];
    os << i << ',' << csv_field(cand.preset) << ',' << o.row.coordinates.at(1).second << ','
       << o.row.num_gpus << ',' << csv_field(o.row.gpu) << ','
       << number_text(cand.price_usd_per_gpu_hour) << ',' << (o.row.ok ? "ok" : "error") << ',';
    if (o.row.ok) {
      const PointResult& p = o.row.result;
      os << (p.fits ? "yes" : "no") << ',' << csv_field(p.plan_summary) << ','
         << number_text(p.iteration_time_s) << ',' << number_text(p.model_tflops_per_gpu) << ','
         << p.peak_memory_bytes << ',' << number_text(o.time_to_train_s / kSecondsPerDay) << ','
         << number_text(o.cost_usd) << ',';
    } else {
      os << ",,,,,,,";
    }
    os << (o.meets_deadline ? "yes" : "no") << ','
       << (r.smallest[o.candidate] == i ? "yes" : "no") << ','
       << (r.cost_optimal == i ? "yes" : "no") << ',' << csv_field(o.row.ok ? "" : o.row.error)
       << '\n';
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
