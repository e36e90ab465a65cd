#include "driver/sweep.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>
#include <tuple>

#include "cluster/cluster_spec.h"
#include "cluster/gpu_spec.h"
#include "core/atomic_file.h"
#include "core/check.h"
#include "dist/communicator.h"
#include "planner/search/search.h"
#include "driver/report_html.h"
#include "driver/report_markdown.h"

namespace alpasim::driver {

namespace {

using core::Json;
using core::JsonObject;
using core::JsonValue;
using core::Result;
using core::Status;

// The axis names, in coordinate (and CSV column) order.
constexpr const char* kAxisModel = "model";
constexpr const char* kAxisPreset = "preset";
constexpr const char* kAxisGpu = "gpu";
constexpr const char* kAxisNumGpus = "num_gpus";
constexpr const char* kAxisNodes = "nodes";
constexpr const char* kAxisGpusPerNode = "gpus_per_node";
constexpr const char* kAxisNics = "nics_per_node";
constexpr const char* kAxisNicBandwidth = "nic_bandwidth_gbit_per_s";
constexpr const char* kAxisNvlinkDomain = "nvlink_domain_gpus";
constexpr const char* kAxisBatch = "global_batch_size";

// A non-empty array of unique positive integers at obj[key] (absent: empty).
Result<std::vector<std::int64_t>> int_axis(JsonObject& obj, std::string_view key) {
  std::vector<std::int64_t> out;
  auto v = obj.optional(key);
  if (!v) return out;
  ALPASIM_ASSIGN_OR_RETURN(std::vector<JsonValue> items, v->as_array());
  if (items.empty()) return v->error("expected a non-empty array, got []");
  std::set<std::int64_t> seen;
  for (const JsonValue& item : items) {
    ALPASIM_ASSIGN_OR_RETURN(std::int64_t x, item.as_positive_int());
    if (!seen.insert(x).second) return item.error("duplicate value " + std::to_string(x));
    out.push_back(x);
  }
  return out;
}

Result<std::vector<double>> number_axis(JsonObject& obj, std::string_view key) {
  std::vector<double> out;
  auto v = obj.optional(key);
  if (!v) return out;
  ALPASIM_ASSIGN_OR_RETURN(std::vector<JsonValue> items, v->as_array());
  if (items.empty()) return v->error("expected a non-empty array, got []");
  std::set<double> seen;
  for (const JsonValue& item : items) {
    ALPASIM_ASSIGN_OR_RETURN(double x, item.as_positive_number());
    if (!seen.insert(x).second) return item.error("duplicate value " + core::dump_json(Json(x)));
    out.push_back(x);
  }
  return out;
}

Result<std::vector<std::string>> name_axis(JsonObject& obj, std::string_view key,
                                           const std::vector<std::string>& choices) {
  std::vector<std::string> out;
  auto v = obj.optional(key);
  if (!v) return out;
  ALPASIM_ASSIGN_OR_RETURN(std::vector<JsonValue> items, v->as_array());
  if (items.empty()) return v->error("expected a non-empty array, got []");
  std::set<std::string> seen;
  for (const JsonValue& item : items) {
    ALPASIM_ASSIGN_OR_RETURN(std::string x, item.as_enum(choices));
    if (!seen.insert(x).second) return item.error("duplicate value \"" + x + "\"");
    out.push_back(x);
  }
  return out;
}

std::string number_text(double x) {
  std::string s = core::dump_json(Json(x));
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// Applies one point's values to a copy of the base scenario; "" or the reason it cannot.
std::string apply_point(Scenario& s, const WhatIfSpec& spec, const std::vector<std::size_t>& at) {
  std::size_t axis = 0;
  auto next = [&](bool present) -> std::size_t { return present ? at[axis++] : 0; };
  cluster::ClusterSpec& c = s.cluster;
  const cluster::ClusterSpec base_cluster = c;
  std::int64_t full_gpn = c.gpus_per_node;
  if (!c.preset.empty()) {
    auto full = cluster::make_preset_cluster(c.preset, 1);
    if (full.ok()) full_gpn = full->gpus_per_node;
  }
  if (!spec.models.empty()) {
    const ModelVariant& m = spec.models[next(true)];
    s.model = m.model;
  }
  if (!spec.presets.empty()) {
    auto made = cluster::make_preset_cluster(spec.presets[next(true)], c.nodes);
    if (!made.ok()) return made.status().message();
    c = *made;
    full_gpn = c.gpus_per_node;
  }
  if (!spec.gpus.empty()) {
    const std::string& name = spec.gpus[next(true)];
    auto gpu = cluster::find_gpu_spec(name);
    ALPASIM_CHECK(gpu.has_value()) << "validated GPU name " << name;
    if (gpu->name != c.gpu.name) {
      c.gpu = *gpu;
      c.preset.clear();  // no longer the preset's hardware (nor its profile)
    }
  }
  if (!spec.num_gpus.empty()) {
    std::int64_t n = spec.num_gpus[next(true)];
    if (n <= full_gpn) {
      c.nodes = 1;
      c.gpus_per_node = n;
    } else if (n % full_gpn == 0) {
      c.nodes = n / full_gpn;
      c.gpus_per_node = full_gpn;
    } else {
      return "num_gpus " + std::to_string(n) + " is neither at most one node nor a multiple of " +
             std::to_string(full_gpn) + " GPUs per node";
    }
  }
  if (!spec.nodes.empty()) c.nodes = spec.nodes[next(true)];
  if (!spec.gpus_per_node.empty()) {
    std::int64_t g = spec.gpus_per_node[next(true)];
    if (g > full_gpn) {
      return "gpus_per_node " + std::to_string(g) + " exceeds the node's " +
             std::to_string(full_gpn) + " GPUs";
    }
    c.gpus_per_node = g;
  }
  if (c.gpus_per_node < full_gpn && c.nodes > 1) {
    return "a partial node (" + std::to_string(c.gpus_per_node) + " of " +
           std::to_string(full_gpn) + " GPUs) needs nodes 1, got " + std::to_string(c.nodes);
  }
  if (!spec.nics_per_node.empty()) c.inter_node.nics_per_node = spec.nics_per_node[next(true)];
  if (std::string problem = cluster::move_to_gpu(c, base_cluster, c.gpu); !problem.empty()) return problem;
  if (!spec.nic_bandwidth_gbit_per_s.empty()) {
    c.inter_node.nic_bandwidth_gbit_per_s = spec.nic_bandwidth_gbit_per_s[next(true)];
  }
  if ((!spec.nics_per_node.empty() || !spec.nic_bandwidth_gbit_per_s.empty()) &&
      c.inter_node.fabric.empty()) {
    return "the cluster has no inter_node network to vary";
  }
  if (!spec.nvlink_domain_gpus.empty()) {
    const std::int64_t gpus = spec.nvlink_domain_gpus[next(true)];
    if (gpus % c.gpus_per_node != 0) {
      return "nvlink_domain_gpus " + std::to_string(gpus) + " is not a multiple of the node's " +
             std::to_string(c.gpus_per_node) + " GPUs";
    }
    if (gpus > c.gpus_per_node && c.intra_node.fabric != "nvswitch") {
      return "nvlink_domain_gpus " + std::to_string(gpus) + " spans nodes, which needs an nvswitch "
             "intra-node fabric, not " + c.intra_node.fabric;
    }
    c.nvlink_domain_nodes = gpus / c.gpus_per_node;
  }
  if (!spec.global_batch_size.empty()) {
    std::int64_t b = spec.global_batch_size[next(true)];
    s.training.global_batch_size = b;
    if (s.training.num_microbatches && b % *s.training.num_microbatches != 0) {
      return "training.microbatches " + std::to_string(*s.training.num_microbatches) +
             " does not divide global_batch_size " + std::to_string(b);
    }
  }
  return "";
}

Json row_to_json(const PointRow& row) {
  Json coords = Json::array();
  for (const auto& [axis, value] : row.coordinates) coords.push_back(Json::array({axis, value}));
  Json j = {{"index", row.index},
            {"coordinates", coords},
            {"num_gpus", row.num_gpus},
            {"gpu", row.gpu},
            {"status", row.ok ? "ok" : "error"}};
  if (row.ok) {
    j["result"] = point_result_to_json(row.result);
  } else {
    j["error"] = row.error;
  }
  return j;
}

Result<PointRow> row_from_json(const Json& j, const std::string& where) {
  PointRow row;
  try {
    row.index = j.at("index").get<std::size_t>();
    for (const Json& c : j.at("coordinates")) {
      row.coordinates.emplace_back(c.at(0).get<std::string>(), c.at(1).get<std::string>());
    }
    row.num_gpus = j.at("num_gpus").get<std::int64_t>();
    row.gpu = j.at("gpu").get<std::string>();
    row.ok = j.at("status").get<std::string>() == "ok";
    if (row.ok) {
      ALPASIM_ASSIGN_OR_RETURN(row.result, point_result_from_json(j.at("result"), where));
    } else {
      row.error = j.at("error").get<std::string>();
    }
  } catch (const std::exception& e) {
    return core::invalid_argument(where + ": not a sweep point: " + e.what());
  }
  return row;
}

}  // namespace

std::size_t WhatIfSpec::num_points() const {
  std::size_t n = 1;
  for (std::size_t size : {models.size(), presets.size(), gpus.size(), num_gpus.size(),
                           nodes.size(), gpus_per_node.size(), nics_per_node.size(),
                           nic_bandwidth_gbit_per_s.size(), nvlink_domain_gpus.size(),
                           global_batch_size.size()}) {
    if (size > 0) n *= size;
  }
  return n;
}

Result<WhatIfSpec> parse_what_if(const JsonValue& value, const std::filesystem::path& base_dir) {
  ALPASIM_ASSIGN_OR_RETURN(JsonObject obj, value.as_object());
  WhatIfSpec spec;
  if (auto models = obj.optional("models")) {
    ALPASIM_ASSIGN_OR_RETURN(std::vector<JsonValue> items, models->as_array());
    if (items.empty()) return models->error("expected a non-empty array, got []");
    std::set<std::string> labels;
    for (const JsonValue& item : items) {
      ModelVariant v;
      ALPASIM_ASSIGN_OR_RETURN(v.model, ir::parse_model_config(item, base_dir));
      v.label = v.model.name;
      if (!labels.insert(v.label).second) {
        return item.error("duplicate model name \"" + v.label + "\" (give each a \"name\")");
      }
      spec.models.push_back(std::move(v));
    }
  }
  ALPASIM_ASSIGN_OR_RETURN(spec.presets,
                           name_axis(obj, "presets", cluster::cluster_preset_names()));
  ALPASIM_ASSIGN_OR_RETURN(spec.gpus, name_axis(obj, "gpus", cluster::gpu_spec_names()));
  ALPASIM_ASSIGN_OR_RETURN(spec.num_gpus, int_axis(obj, "num_gpus"));
  ALPASIM_ASSIGN_OR_RETURN(spec.nodes, int_axis(obj, "nodes"));
  ALPASIM_ASSIGN_OR_RETURN(spec.gpus_per_node, int_axis(obj, "gpus_per_node"));
  ALPASIM_ASSIGN_OR_RETURN(spec.nics_per_node, int_axis(obj, "nics_per_node"));
  ALPASIM_ASSIGN_OR_RETURN(spec.nic_bandwidth_gbit_per_s,
                           number_axis(obj, "nic_bandwidth_gbit_per_s"));
  ALPASIM_ASSIGN_OR_RETURN(spec.nvlink_domain_gpus, int_axis(obj, kAxisNvlinkDomain));
  ALPASIM_ASSIGN_OR_RETURN(spec.global_batch_size, int_axis(obj, "global_batch_size"));
  ALPASIM_ASSIGN_OR_RETURN(spec.planner, obj.get_enum_or("planner", planner::search_mode_names(), ""));
  if (!spec.num_gpus.empty() && (!spec.nodes.empty() || !spec.gpus_per_node.empty())) {
    return value.error(
        "\"num_gpus\" and \"nodes\"/\"gpus_per_node\" both set the cluster size; give one");
  }
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  // A sweep of more than a million points is a typo, not a study.
  constexpr std::size_t kMaxPoints = 1'000'000;
  if (spec.num_points() > kMaxPoints) {
    return value.error("expected at most 1000000 points, got " +
                       std::to_string(spec.num_points()));
  }
  return spec;
}

Result<WhatIfSpec> what_if_of(const Scenario& scenario) {
  if (scenario.what_if.is_null()) {
    return core::invalid_argument(scenario.file +
                                        ": /what_if: missing; `alpa-sim sweep` needs a what_if "
                                        "block (docs/whatif.md)");
  }
  JsonValue v(scenario.what_if, scenario.file, "/what_if");
  return parse_what_if(v, std::filesystem::path(scenario.file).parent_path());
}

std::vector<SweepPoint> expand_sweep(const Scenario& base, const WhatIfSpec& spec) {
  struct Axis {
    const char* name;
    std::vector<std::string> labels;
  };
  std::vector<Axis> axes;
  auto add = [&](const char* name, std::vector<std::string> labels) {
    if (!labels.empty()) axes.push_back({name, std::move(labels)});
  };
  auto ints = [](const std::vector<std::int64_t>& v) {
    std::vector<std::string> out;
    for (std::int64_t x : v) out.push_back(std::to_string(x));
    return out;
  };
  std::vector<std::string> model_labels;
  for (const ModelVariant& m : spec.models) model_labels.push_back(m.label);
  add(kAxisModel, model_labels);
  add(kAxisPreset, spec.presets);
  add(kAxisGpu, spec.gpus);
  add(kAxisNumGpus, ints(spec.num_gpus));
  add(kAxisNodes, ints(spec.nodes));
  add(kAxisGpusPerNode, ints(spec.gpus_per_node));
  add(kAxisNics, ints(spec.nics_per_node));
  std::vector<std::string> bw;
  for (double x : spec.nic_bandwidth_gbit_per_s) bw.push_back(number_text(x));
  add(kAxisNicBandwidth, bw);
  add(kAxisNvlinkDomain, ints(spec.nvlink_domain_gpus));
  add(kAxisBatch, ints(spec.global_batch_size));

  std::vector<SweepPoint> points;
  const std::size_t n = spec.num_points();
  points.reserve(n);
  std::vector<std::size_t> at(axes.size(), 0);
  for (std::size_t index = 0; index < n; ++index) {
    // Mixed radix, last axis fastest.
    std::size_t rest = index;
    for (std::size_t a = axes.size(); a-- > 0;) {
      at[a] = rest % axes[a].labels.size();
      rest /= axes[a].labels.size();
    }
    SweepPoint p;
    p.index = index;
    for (std::size_t a = 0; a < axes.size(); ++a) {
      p.coordinates.emplace_back(axes[a].name, axes[a].labels[at[a]]);
    }
    p.scenario = base;
    p.error = apply_point(p.scenario, spec, at);
    points.push_back(std::move(p));
  }
  return points;
}

std::vector<PointRow> run_points(const std::vector<SweepPoint>& points, const PlanPointFn& fn,
                                 const RunOptions& options) {
  ALPASIM_CHECK(options.world_size >= 1 && options.rank >= 0 &&
                options.rank < options.world_size)
      << "rank " << options.rank << " of " << options.world_size;
  std::vector<const SweepPoint*> mine;
  for (const SweepPoint& p : points) {
    if (p.index % static_cast<std::size_t>(options.world_size) ==
        static_cast<std::size_t>(options.rank)) {
      mine.push_back(&p);
    }
  }
  std::vector<PointRow> rows(mine.size());
  std::atomic<std::size_t> next{0};
  std::size_t done = 0;
  std::mutex progress_mutex;
  auto work = [&] {
    for (std::size_t i = next++; i < mine.size(); i = next++) {
      const SweepPoint& p = *mine[i];
      PointRow& row = rows[i];
      row.index = p.index;
      row.coordinates = p.coordinates;
      if (p.error.empty()) {
        row.num_gpus = p.scenario.cluster.num_gpus();
        row.gpu = p.scenario.cluster.gpu.name;
      }
      if (!p.error.empty()) {
        row.error = p.error;
      } else {
        try {
          Result<PointResult> r = fn(p.scenario);
          if (r.ok()) {
            row.ok = true;
            row.result = std::move(*r);
          } else {
            row.error = r.status().message();
          }
        } catch (const std::exception& e) {
          row.error = std::string("internal error: ") + e.what();
        }
      }
      if (options.progress) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        options.progress(++done, mine.size());
      }
    }
  };
  const int threads = std::max(1, std::min<int>(options.threads, static_cast<int>(mine.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return rows;
}

Result<SweepResult> run_sweep(const Scenario& scenario, const PlanPointFn& fn,
                              const RunOptions& options) {
  ALPASIM_ASSIGN_OR_RETURN(WhatIfSpec spec, what_if_of(scenario));
  std::vector<SweepPoint> points = expand_sweep(scenario, spec);
  SweepResult out;
  out.scenario_name = scenario.name;
  out.scenario_file = scenario.file;
  out.total_points = points.size();
  out.planner = !spec.planner.empty()               ? spec.planner
                : scenario.search.mode == "fixed" ? "fixed plan"
                                                  : "alpa";
  if (!points.empty()) {
    for (const auto& [axis, value] : points.front().coordinates) out.axes.push_back(axis);
  }
  out.rows = run_points(points, fn, options);
  return out;
}

Json sweep_to_json(const SweepResult& sweep) {
  Json points = Json::array();
  for (const PointRow& row : sweep.rows) points.push_back(row_to_json(row));
  return Json{{"format", "alpa-sim sweep v1"},
              {"scenario", {{"name", sweep.scenario_name}, {"file", sweep.scenario_file}}},
              {"axes", sweep.axes},
              {"total_points", sweep.total_points},
              {"planner", sweep.planner},
              {"points", points}};
}

Result<SweepResult> sweep_from_json(const Json& json, const std::string& where) {
  SweepResult s;
  try {
    if (json.at("format").get<std::string>() != "alpa-sim sweep v1") {
      return core::invalid_argument(where + ": /format: expected \"alpa-sim sweep v1\", got " +
                                          core::describe_json_value(json.at("format")));
    }
    s.scenario_name = json.at("scenario").at("name").get<std::string>();
    s.scenario_file = json.at("scenario").at("file").get<std::string>();
    s.axes = json.at("axes").get<std::vector<std::string>>();
    s.total_points = json.at("total_points").get<std::size_t>();
    s.planner = json.at("planner").get<std::string>();
    for (const Json& p : json.at("points")) {
      ALPASIM_ASSIGN_OR_RETURN(PointRow row, row_from_json(p, where));
      s.rows.push_back(std::move(row));
    }
  } catch (const std::exception& e) {
    return core::invalid_argument(where + ": not a sweep file: " + e.what());
  }
  return s;
}

std::string csv_field(const std::string& field) {
  if (field.find_first_of(",\"\n\r") == std::string::npos) return field;
  std::string out = "\"";
  for (char ch : field) {
    if (ch == '"') out += '"';
    out += ch;
  }
  return out + "\"";
}

std::string sweep_to_csv(const SweepResult& sweep) {
  std::ostringstream os;
  os << "index";
  for (const std::string& a : sweep.axes) os << ',' << csv_field(a);
  os << ",cluster_gpus,gpu,status,fits,plan,iteration_time_s,model_tflops_per_gpu,"
        "hardware_tflops_per_gpu,memory_per_gpu_bytes,usable_memory_bytes,error\n";
  for (const PointRow& row : sweep.rows) {
    os << row.index;
    for (const auto& [axis, value] : row.coordinates) os << ',' << csv_field(value);
    os << ',' << row.num_gpus << ',' << csv_field(row.gpu) << ',' << (row.ok ? "ok" : "error");
    if (row.ok) {
      const PointResult& r = row.result;
      os << ',' << (r.fits ? "yes" : "no") << ',' << csv_field(r.plan_summary) << ','
         << number_text(r.iteration_time_s) << ',' << number_text(r.model_tflops_per_gpu) << ','
         << number_text(r.hardware_tflops_per_gpu) << ',' << r.peak_memory_bytes << ','
         << r.usable_memory_bytes << ",";
    } else {
      os << ",,,,,,,," << csv_field(row.error);
    }
    os << '\n';
  }
  return os.str();
}

int best_point(const SweepResult& sweep) {
  int best = -1;
  for (std::size_t i = 0; i < sweep.rows.size(); ++i) {
    const PointRow& r = sweep.rows[i];
    if (!r.ok || !r.result.fits) continue;
    if (best < 0) {
      best = static_cast<int>(i);
      continue;
    }
    const PointRow& b = sweep.rows[static_cast<std::size_t>(best)];
    if (r.result.model_tflops_per_gpu > b.result.model_tflops_per_gpu ||
        (r.result.model_tflops_per_gpu == b.result.model_tflops_per_gpu &&
         r.num_gpus < b.num_gpus)) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

std::string part_file_name(int rank, int world_size) {
  return "sweep.part-" + std::to_string(rank) + "-of-" + std::to_string(world_size) + ".json";
}

Status write_text_file(const std::filesystem::path& path, const std::string& text) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) {
    return core::invalid_argument(path.parent_path().string() +
                                        ": cannot create folder: " + ec.message());
  }
  // A reader (or a later run after a crash or a full disk) sees the old file or the whole
  // new one, never half of it.
  return core::write_file_atomically(path, text);
}

Status write_part(const SweepResult& part, const std::filesystem::path& dir, int rank,
                  int world_size) {
  Json j = sweep_to_json(part);
  j["rank"] = rank;
  j["world_size"] = world_size;
  // Atomic (write_text_file): the merging rank never sees half a part file.
  return write_text_file(dir / part_file_name(rank, world_size), core::dump_json(j));
}

Result<SweepResult> merge_sweep_parts(std::vector<SweepResult> parts,
                                      const std::vector<std::string>& names,
                                      const std::string& whole) {
  ALPASIM_CHECK(!parts.empty() && parts.size() == names.size()) << parts.size();
  SweepResult merged;
  for (std::size_t rank = 0; rank < parts.size(); ++rank) {
    SweepResult& part = parts[rank];
    if (rank == 0) {
      merged.scenario_name = part.scenario_name;
      merged.scenario_file = part.scenario_file;
      merged.axes = part.axes;
      merged.total_points = part.total_points;
      merged.planner = part.planner;
    } else if (part.scenario_file != merged.scenario_file || part.axes != merged.axes ||
               part.total_points != merged.total_points) {
      return core::invalid_argument(names[rank] + ": belongs to another sweep than " + names[0]);
    }
    for (PointRow& row : part.rows) merged.rows.push_back(std::move(row));
  }
  std::sort(merged.rows.begin(), merged.rows.end(),
            [](const PointRow& a, const PointRow& b) { return a.index < b.index; });
  for (std::size_t i = 0; i < merged.total_points; ++i) {
    if (i >= merged.rows.size() || merged.rows[i].index != i) {
      return core::invalid_argument(whole + ": point " + std::to_string(i) +
                                    " is in no part, or in two");
    }
  }
  if (merged.rows.size() != merged.total_points) {
    return core::invalid_argument(whole + ": more points than the sweep has");
  }
  return merged;
}

Result<SweepResult> merge_parts(const std::filesystem::path& dir, int world_size, double wait_s) {
  ALPASIM_CHECK(world_size >= 1) << world_size;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<std::int64_t>(wait_s * 1000));
  std::vector<SweepResult> parts;
  std::vector<std::string> names;
  for (int rank = 0; rank < world_size; ++rank) {
    const std::filesystem::path path = dir / part_file_name(rank, world_size);
    // wait_s 0 (the default) looks once: processes of one job meet through MPI (dist/),
    // part files are for splits run as separate jobs and merged afterwards.
    while (!std::filesystem::exists(path)) {
      if (std::chrono::steady_clock::now() >= deadline) {
        return core::invalid_argument(
            path.string() + ": missing" +
            (wait_s > 0 ? " after waiting " + number_text(wait_s) + " s" : std::string()) +
            " for rank " + std::to_string(rank) +
            "; when every part is written, merge with --merge-only");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ALPASIM_ASSIGN_OR_RETURN(core::JsonDocument doc, core::read_json_file(path));
    ALPASIM_ASSIGN_OR_RETURN(SweepResult part, sweep_from_json(doc.root, path.string()));
    parts.push_back(std::move(part));
    names.push_back(path.string());
  }
  return merge_sweep_parts(std::move(parts), names, dir.string());
}

}  // namespace alpasim::driver

namespace alpasim::driver {

Result<std::pair<int, int>> resolve_rank(int rank, int world_size) {
  if (world_size < 0) world_size = 1;
  if (rank < 0) rank = 0;
  if (world_size < 1 || rank >= world_size) {
    return core::invalid_argument("--rank " + std::to_string(rank) + ": expected a rank in [0, " +
                                  std::to_string(world_size - 1) + "] of --world-size " +
                                  std::to_string(world_size));
  }
  return std::pair{rank, world_size};
}

Status write_study_outputs(const StudyCommand& c, const std::string& stem, const std::string& csv,
                           const std::string& json, const std::function<std::string()>& html,
                           const std::function<std::string()>& markdown) {
  std::filesystem::path csv_file = c.csv_file, json_file = c.json_file,
                        report = c.report_html, md = c.markdown;
  if (!c.out_dir.empty()) {
    if (csv_file.empty()) csv_file = c.out_dir / (stem + ".csv");
    if (json_file.empty()) json_file = c.out_dir / (stem + ".json");
    if (report.empty()) report = c.out_dir / (stem + ".html");
    if (md.empty()) md = c.out_dir / (stem + ".md");
  }
  if (!csv_file.empty()) ALPASIM_RETURN_IF_ERROR(write_text_file(csv_file, csv));
  if (!json_file.empty()) ALPASIM_RETURN_IF_ERROR(write_text_file(json_file, json));
  if (!report.empty()) ALPASIM_RETURN_IF_ERROR(write_text_file(report, html()));
  if (!md.empty()) ALPASIM_RETURN_IF_ERROR(write_text_file(md, markdown()));
  return Status();
}

std::string study_stdout(const std::string& print, const std::string& csv, const std::string& json,
                         const std::function<std::string()>& markdown) {
  if (print == "json") return json;
  if (print == "csv") return csv;
  if (print == "none") return "";
  return markdown();
}

Result<std::string> sweep_command(const StudyCommand& c) {
  ALPASIM_ASSIGN_OR_RETURN(Scenario scenario, load_scenario(c.scenario_path));
  // Two ways to split: the processes of one MPI job (mpirun/srun: dist::world(), results
  // gathered by MPI), or separate jobs given --rank/--world-size (part files in --out,
  // merged by the last or by --merge-only).
  const bool by_flags = c.rank >= 0 || c.world_size >= 0 || c.merge_only;
  dist::Communicator* comm = nullptr;
  int rank = 0, world_size = 1;
  if (by_flags) {
    ALPASIM_ASSIGN_OR_RETURN(auto rank_world, resolve_rank(c.rank, c.world_size));
    std::tie(rank, world_size) = rank_world;
    if (world_size > 1 && c.out_dir.empty()) {
      return core::invalid_argument("--world-size " + std::to_string(world_size) +
                                    ": a sweep split across jobs needs --out DIR, a folder "
                                    "every rank can write (the part files meet there)");
    }
  } else {
    ALPASIM_ASSIGN_OR_RETURN(comm, dist::world());
    rank = comm->rank();
    world_size = comm->size();
  }
  SweepResult sweep;
  Status planned;
  if (!c.merge_only) {
    RunOptions options;
    options.threads = c.threads;
    options.rank = rank;
    options.world_size = world_size;
    options.progress = c.progress;
    auto run = [&]() -> Status {
      ALPASIM_ASSIGN_OR_RETURN(WhatIfSpec spec, what_if_of(scenario));
      PlanPointFn fn = c.plan ? c.plan : default_plan_point_fn(1, spec.planner);
      ALPASIM_ASSIGN_OR_RETURN(sweep, run_sweep(scenario, fn, options));
      return Status();
    };
    planned = run();
  }
  if (comm != nullptr && world_size > 1) {
    // Every rank reaches the gather, a failed one with its error, so none waits forever.
    constexpr std::string_view kFailed = "error: ";
    const std::string payload = planned.ok() ? core::dump_json(sweep_to_json(sweep))
                                             : std::string(kFailed) + planned.message();
    ALPASIM_ASSIGN_OR_RETURN(std::vector<std::string> gathered, comm->gather(payload));
    ALPASIM_RETURN_IF_ERROR(planned);
    if (rank != 0) return std::string();
    std::vector<SweepResult> parts;
    std::vector<std::string> names;
    for (std::size_t r = 0; r < gathered.size(); ++r) {
      const std::string name = "the part of MPI rank " + std::to_string(r);
      if (gathered[r].rfind(kFailed, 0) == 0) {
        return core::invalid_argument("MPI rank " + std::to_string(r) + ": " +
                                      gathered[r].substr(kFailed.size()));
      }
      ALPASIM_ASSIGN_OR_RETURN(core::JsonDocument doc, core::parse_json_text(gathered[r], name));
      ALPASIM_ASSIGN_OR_RETURN(SweepResult part, sweep_from_json(doc.root, name));
      parts.push_back(std::move(part));
      names.push_back(name);
    }
    ALPASIM_ASSIGN_OR_RETURN(sweep, merge_sweep_parts(std::move(parts), names,
                                                      "the " + std::to_string(world_size) +
                                                          " MPI ranks"));
  } else {
    ALPASIM_RETURN_IF_ERROR(planned);
    if (world_size > 1) {
      if (!c.merge_only) ALPASIM_RETURN_IF_ERROR(write_part(sweep, c.out_dir, rank, world_size));
      if (rank != 0 && !c.merge_only) return std::string();
      ALPASIM_ASSIGN_OR_RETURN(sweep, merge_parts(c.out_dir, world_size, c.merge_wait_s));
    } else if (c.merge_only) {
      return core::invalid_argument("--merge-only needs --world-size (the number of part files)");
    }
  }
  const std::string csv = sweep_to_csv(sweep);
  const std::string json = core::dump_json(sweep_to_json(sweep));
  auto html = [&] { return sweep_report_html(sweep, scenario); };
  auto md = [&] { return sweep_report_markdown(sweep, scenario); };
  ALPASIM_RETURN_IF_ERROR(write_study_outputs(c, "sweep", csv, json, html, md));
  return study_stdout(c.print, csv, json, md);
}

}  // namespace alpasim::driver
