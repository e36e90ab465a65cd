#include "driver/run.h"

#include <algorithm>
#include <fstream>
#include <vector>
#include <optional>
#include <sstream>

#include "core/atomic_file.h"
#include "core/text.h"
#include "core/version.h"
#include "driver/evaluate.h"
#include "driver/search_run.h"
#include "sim/trace_writer.h"
#include "ir/summary.h"

namespace alpasim::driver {
namespace {

using core::Json;

std::string describe_model(const ir::ModelConfig& m) {
  std::ostringstream s;
  if (const auto* t = std::get_if<ir::TransformerConfig>(&m.spec)) {
    s << t->builtin << ": " << t->num_layers << " layers, hidden " << t->hidden_size << ", "
      << t->num_heads << " heads";
    if (t->num_kv_heads != t->num_heads) s << " (" << t->num_kv_heads << " kv)";
    s << ", ffn " << t->ffn_hidden_size << ", seq " << t->seq_len << ", vocab " << t->vocab_size;
    if (t->num_experts > 0) {
      s << ", " << t->num_experts << " experts top-" << t->top_k << " every "
        << t->moe_layer_interval << " layer(s)";
      if (t->first_dense_layers > 0) s << " after " << t->first_dense_layers << " dense";
      if (t->dense_ffn_hidden_size > 0) s << ", dense ffn " << t->dense_ffn_hidden_size;
      if (t->shared_expert_ffn_hidden_size > 0) s << ", shared expert ffn " << t->shared_expert_ffn_hidden_size;
    }
    if (t->sliding_window > 0) {
      s << ", sliding window " << t->sliding_window;
      if (t->sliding_window_pattern > 0) s << " (every " << t->sliding_window_pattern << ". layer full)";
    }
    s << (t->fused_attention ? ", fused attention" : ", unfused attention");
    s << ", " << ir::loss_kernel_name(t->loss_kernel) << " loss kernel";
  } else if (const auto* w = std::get_if<ir::WideResNetConfig>(&m.spec)) {
    s << "wide_resnet: " << w->num_layers << " layers, base channels " << w->base_channels
      << ", width factor " << w->width_factor << ", image " << w->image_size << "x"
      << w->image_size << ", " << w->num_classes << " classes";
  } else {
    const auto& f = std::get<ir::ModelFileConfig>(m.spec);
    s << f.format << " file " << f.path_as_written;
    if (f.format == "hf_config") {
      s << (f.fused_attention ? ", fused attention" : ", unfused attention");
      s << ", " << ir::loss_kernel_name(f.loss_kernel) << " loss kernel";
    }
  }
  return s.str();
}

std::string describe_cluster(const cluster::ClusterSpec& c) {
  std::ostringstream s;
  s << (c.preset.empty() ? std::string("explicit") : c.preset) << ": " << c.nodes << " node"
    << (c.nodes == 1 ? "" : "s") << " x " << c.gpus_per_node << " GPUs = " << c.num_gpus()
    << " x " << c.gpu.display_name << " (" << core::format_bytes(c.gpu.memory.value())
    << " each, " << core::format_bytes(c.reserved_memory.value())
    << " reserved for the runtime: plans may use " << core::format_bytes(c.usable_memory().value())
    << ")";
  // Only where NVLink spans nodes, so other clusters read as before.
  if (c.nvlink_domain_nodes_in_use() > 1) {
    s << "; NVLink domains of " << c.nvlink_domain_nodes_in_use() << " nodes ("
      << c.nvlink_domain_gpus() << " GPUs)";
  } else if (c.nvlink_domain_nodes > 1 && c.nodes > 1) {
    s << "; NVLink domains of one node (" << c.nodes << " nodes do not split into equal domains of 2-"
      << c.nvlink_domain_nodes << ")";
  }
  return s.str();
}

std::string describe_search(const SearchConfig& search) {
  std::ostringstream s;
  s << search.mode;
  if (const auto& m = search.megatron) {
    s << " megatron tp=" << m->tp << " pp=" << m->pp << " dp=" << m->dp
      << " microbatch_size=" << m->microbatch_size << " interleave=" << m->interleave
      << " recompute=" << schema::recompute_name(m->recompute)
      << " sequence_parallel=" << (m->sequence_parallel ? "true" : "false")
      << " zero_stage=" << m->zero_stage;
    if (m->cp > 1) s << " cp=" << m->cp;
    if (m->ep > 1) s << " ep=" << m->ep;
    if (m->etp > 0) s << " etp=" << m->etp;
  }
  if (!search.plan_file_as_written.empty()) s << " plan " << search.plan_file_as_written;
  return s.str();
}

}  // namespace

// What the model summary accounts for: the scenario's training settings, and for a fixed
// Megatron plan its microbatch size and recomputation (activation and hardware FLOPs depend
// on both).
ir::SummaryOptions summary_options(const Scenario& scenario) {
  ir::SummaryOptions options;
  options.global_batch_size = scenario.training.global_batch_size;
  options.dtype = core::storage_dtype(scenario.training.dtype);
  bool known = ir::parse_optimizer_kind(scenario.training.optimizer, &options.optimizer);
  ALPASIM_CHECK(known) << "optimizer " << scenario.training.optimizer << " has no ir kind";
  if (const auto& m = scenario.search.megatron) {
    options.microbatch_size = m->microbatch_size;
    known = ir::parse_recompute_policy(schema::recompute_name(m->recompute), &options.recompute);
    ALPASIM_CHECK(known) << "recompute " << schema::recompute_name(m->recompute);
  }
  return options;
}

std::vector<std::string> scenario_warnings(const Scenario& scenario) {
  std::vector<std::string> out;
  const cluster::GpuSpec& gpu = scenario.cluster.gpu;
  const core::DType dtype = scenario.training.dtype;
  if (dtype != core::DType::kFp32 && gpu.peak(dtype).value() <= 0) {
    // compute_cost.cc prices such GEMMs at the fp32 peak (emulated, as frameworks run them).
    const double slower = gpu.peak_fp16.value() > 0 && gpu.peak_fp32.value() > 0
                              ? gpu.peak_fp16.value() / gpu.peak_fp32.value() : 0.0;
    out.push_back("training.dtype " + std::string(core::dtype_name(dtype)) + ": the " +
                  gpu.display_name + " has no " + std::string(core::dtype_name(dtype)) +
                  " tensor cores, so its matmuls are priced at the fp32 peak" +
                  (slower > 0 ? " (" + core::format_fixed(slower, 1) + "x below fp16)" : std::string()) +
                  "; use \"fp16\" to train in 16 bits on this GPU");
  }
  return out;
}

core::Result<RunReport> run_scenario(const Scenario& scenario, const RunSettings& settings) {
  // The header and the model summary; the summary's microbatch size and recomputation are
  // the plan's (`options`), so it is written once the plan is known.
  auto header = [&scenario](const ir::SummaryOptions& options, RunReport* report) -> core::Status {
    ALPASIM_ASSIGN_OR_RETURN(ir::ModelSummary summary, ir::summarize_model(scenario.model, options));
    std::ostringstream text;
    const auto& t = scenario.training;
    text << "alpa-sim " << core::version() << ": " << scenario.file << "\n"
         << "  scenario  " << scenario.name << "\n"
         << "  model     " << describe_model(scenario.model) << "\n"
         << "  cluster   " << describe_cluster(scenario.cluster) << "\n"
         << "  training  global batch " << t.global_batch_size << ", "
         << (t.block_scaled_dtype.empty() ? std::string(core::dtype_name(t.dtype))
                                          : t.block_scaled_dtype + " (bf16 tensors)")
         << ", " << t.optimizer << ", microbatches "
         << (t.num_microbatches ? std::to_string(*t.num_microbatches) : std::string("auto"))
         << "\n"
         << "  profile   "
         << (scenario.profile.file_as_written.empty() ? scenario.profile.preset
                                                      : scenario.profile.file_as_written)
         << "\n"
         << "  search    " << describe_search(scenario.search) << "\n"
         << "model summary (whole model, before sharding):\n"
         << ir::summary_to_text(summary);
    report->text = text.str();
    Json& j = report->json;
    j["alpa_sim_version"] = std::string(core::version());
    j["scenario_file"] = scenario.file;
    j["scenario"] = scenario_to_json(scenario);
    j["model_summary"] = ir::summary_to_json(summary);
    report->warnings = scenario_warnings(scenario);
    if (!report->warnings.empty()) j["warnings"] = report->warnings;
    return core::ok_status();
  };

  RunReport report;
  ir::SummaryOptions options = summary_options(scenario);
  // First with the scenario's settings, so a model that cannot be summarised fails before
  // a search is run for it.
  ALPASIM_RETURN_IF_ERROR(header(options, &report));
  ALPASIM_ASSIGN_OR_RETURN(cost_model::CostModel cost_model, cost_model_for_scenario(scenario));
  if (scenario.search.megatron) {
    ALPASIM_ASSIGN_OR_RETURN(Evaluation e, evaluate_fixed_plan(scenario, cost_model));
    report.text += prediction_text(e);
    report.json["status"] = "evaluated";
    report.json["prediction"] = prediction_json(e);
    report.problem = std::move(e.lowered.problem);
    report.simulation = std::move(e.simulation);
    report.plan = std::move(e.plan_file);
    return report;
  }
  SearchRun run;
  if (scenario.search.plan_file) {
    ALPASIM_ASSIGN_OR_RETURN(run, evaluate_plan_file(scenario, cost_model));
  } else {
    ALPASIM_ASSIGN_OR_RETURN(run, run_search(scenario, cost_model, settings.progress));
  }
  const schema::Plan& plan = run.result.plan;
  if (plan.num_microbatches > 0 && plan.global_batch_size % plan.num_microbatches == 0) {
    options.microbatch_size = plan.global_batch_size / plan.num_microbatches;
  }
  const bool known =
      ir::parse_recompute_policy(schema::recompute_name(plan.recompute), &options.recompute);
  ALPASIM_CHECK(known) << "recompute " << schema::recompute_name(plan.recompute);
  ALPASIM_RETURN_IF_ERROR(header(options, &report));
  report.json["status"] = scenario.search.plan_file ? "evaluated" : "planned";
  report.text += search_text(run, settings.include_timing);
  add_search_json(run, settings.include_timing, &report.json);
  if (run.result.plan_file_unavailable.empty()) report.plan = run.result.plan;
  report.problem = std::move(run.result.problem);
  report.simulation = std::move(run.simulation);
  return report;
}

core::Status write_run_outputs(const RunReport& report, const Scenario& scenario,
                               const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return core::invalid_argument(dir.string() + ": cannot create output folder: " + ec.message());
  }
  // The set this command writes; summary.json goes last and says how the run ended, so a
  // folder with a summary.json holds a whole set (or a summary with "status": "failed").
  const std::vector<std::string> set = {"summary.txt", "scenario.json", "plan.json", "trace.json",
                                        "summary.json"};
  for (const std::string& name : set) {
    if (std::filesystem::equivalent(dir / name, scenario.file, ec)) {
      return core::invalid_argument((dir / name).string() +
                                    ": refusing to overwrite the input scenario; choose another "
                                    "--out folder");
    }
  }
  // A summary.json from an earlier run must not stand beside this run's files.
  std::filesystem::remove(dir / "summary.json", ec);
  std::vector<std::pair<std::string, std::string>> files = {
      {"summary.txt", report.text},
      {"scenario.json", core::dump_json(scenario_to_json(scenario))}};
  if (report.plan) files.emplace_back("plan.json", core::dump_json(schema::plan_to_json(*report.plan)));
  if (report.simulation) {
    sim::TraceOptions trace;
    if (report.problem) {
      trace.task_slices = sim::collective_trace_slices(*report.problem, report.simulation->graph,
                                                       report.simulation->timeline);
    }
    files.emplace_back("trace.json", sim::chrome_trace_json(report.simulation->graph,
                                                            report.simulation->timeline, trace));
  }
  core::Status status;
  for (const auto& [name, contents] : files) {
    status = core::write_file_atomically(dir / name, contents);
    if (!status.ok()) break;
  }
  if (status.ok()) {
    // Stale members of the set from an earlier run (e.g. its plan.json) are removed.
    for (const std::string& name : set) {
      const bool written = name == "summary.json" ||
                           std::any_of(files.begin(), files.end(),
                                       [&](const auto& f) { return f.first == name; });
      if (!written) std::filesystem::remove(dir / name, ec);
    }
    return core::write_file_atomically(dir / "summary.json", core::dump_json(report.json));
  }
  // Best effort: mark the folder's set as failed; the first error is the one reported.
  core::Json failed = {{"status", "failed"}, {"error", status.message()}};
  (void)core::write_file_atomically(dir / "summary.json", core::dump_json(failed));
  return status;
}

}  // namespace alpasim::driver
