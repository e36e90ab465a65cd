#include "ir/summary.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/text.h"
#include "ir/accounting.h"

namespace alpasim::ir {
namespace {

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", v);
  return buf;
}

}  // namespace

ModelSummary summarize_training_graph(const Graph& g, std::int64_t global_batch_size) {
  ModelSummary s;
  s.name = g.meta.model_name;
  s.family = g.meta.family;
  s.parameters = parameter_count(g);
  s.num_layers = g.num_layers();
  s.num_ops = static_cast<std::int64_t>(g.size());
  s.num_forward_ops = std::count_if(g.ops().begin(), g.ops().end(),
                                    [](const Op& o) { return o.phase == Phase::kForward; });
  s.global_batch_size = global_batch_size;
  s.microbatch_size = g.meta.samples_per_microbatch;
  s.num_microbatches = global_batch_size / std::max<std::int64_t>(1, s.microbatch_size);
  s.dtype = std::string(core::dtype_name(g.meta.dtype));
  s.optimizer = g.meta.optimizer;
  s.recompute = g.meta.recompute;
  const IterationFlops f = flops_per_iteration(g, global_batch_size);
  s.model_flops_per_iteration = f.model;
  s.hardware_flops_per_iteration = f.hardware;
  s.all_ops_flops_per_iteration = f.hardware_all_ops;
  OptimizerKind opt = OptimizerKind::kAdam;
  ALPASIM_CHECK(parse_optimizer_kind(g.meta.optimizer, &opt)) << "graph has no optimizer";
  const StateBytes state = training_state_bytes(s.parameters, g.meta.dtype, opt);
  s.parameter_bytes = state.parameters;
  s.gradient_bytes = state.gradients;
  s.optimizer_state_bytes = state.optimizer_states;
  s.activation_bytes_per_layer = activation_bytes_per_layer(g);
  std::int64_t total = 0, peak = 0;
  for (std::int64_t b : s.activation_bytes_per_layer) {
    total += b;
    peak = std::max(peak, b);
  }
  s.activation_bytes_per_microbatch = core::Bytes(total);
  s.max_layer_activation_bytes_per_microbatch = core::Bytes(peak);
  return s;
}

core::Result<ModelSummary> summarize_model(const ModelConfig& config, const SummaryOptions& options) {
  if (options.microbatch_size <= 0 || options.global_batch_size <= 0 ||
      options.global_batch_size % options.microbatch_size != 0) {
    return core::invalid_argument("model summary: global batch size " +
                                  std::to_string(options.global_batch_size) +
                                  " is not a positive multiple of the microbatch size " +
                                  std::to_string(options.microbatch_size));
  }
  BuildOptions build;
  build.microbatch_size = options.microbatch_size;
  build.dtype = options.dtype;
  ALPASIM_ASSIGN_OR_RETURN(Graph forward, build_forward_graph(config, build));
  if (options.global_batch_size % forward.meta.samples_per_microbatch != 0) {
    // Graph files fix their own batch dimension.
    return core::invalid_argument("model summary: global batch size " +
                                  std::to_string(options.global_batch_size) +
                                  " is not a multiple of the graph's batch size " +
                                  std::to_string(forward.meta.samples_per_microbatch));
  }
  Graph training = derive_training_graph(forward, {options.optimizer, options.recompute});
  ModelSummary s = summarize_training_graph(training, options.global_batch_size);
  if (!config.name.empty()) s.name = config.name;
  return s;
}

core::Json summary_to_json(const ModelSummary& s) {
  core::Json j;
  j["name"] = s.name;
  j["family"] = s.family;
  j["parameters"] = s.parameters;
  j["num_layers"] = s.num_layers;
  j["num_ops"] = s.num_ops;
  j["num_forward_ops"] = s.num_forward_ops;
  j["global_batch_size"] = s.global_batch_size;
  j["microbatch_size"] = s.microbatch_size;
  j["num_microbatches"] = s.num_microbatches;
  j["dtype"] = s.dtype;
  j["optimizer"] = s.optimizer;
  j["recompute"] = s.recompute;
  j["model_flops_per_iteration"] = s.model_flops_per_iteration.value();
  j["hardware_flops_per_iteration"] = s.hardware_flops_per_iteration.value();
  j["all_ops_flops_per_iteration"] = s.all_ops_flops_per_iteration.value();
  j["parameter_bytes"] = s.parameter_bytes.value();
  j["gradient_bytes"] = s.gradient_bytes.value();
  j["optimizer_state_bytes"] = s.optimizer_state_bytes.value();
  j["activation_bytes_per_microbatch"] = s.activation_bytes_per_microbatch.value();
  j["max_layer_activation_bytes_per_microbatch"] = s.max_layer_activation_bytes_per_microbatch.value();
  j["activation_bytes_per_layer"] = s.activation_bytes_per_layer;
  return j;
}

std::string summary_to_text(const ModelSummary& s) {
  std::ostringstream o;
  auto line = [&](const std::string& label, const std::string& value) {
    o << "  " << label << std::string(label.size() < 34 ? 34 - label.size() : 1, ' ') << value << "\n";
  };
  line("model", s.name + " (" + s.family + ")");
  line("parameters", core::format_count(static_cast<double>(s.parameters)) + " (" +
                         std::to_string(s.parameters) + ")");
  line("layers / ops", std::to_string(s.num_layers) + " layers, " + std::to_string(s.num_forward_ops) +
                           " forward ops, " + std::to_string(s.num_ops) + " training ops per microbatch");
  line("batch", std::to_string(s.global_batch_size) + " samples/iteration = " +
                    std::to_string(s.num_microbatches) + " microbatches x " +
                    std::to_string(s.microbatch_size));
  line("training", s.dtype + ", optimizer " + s.optimizer + ", recompute " + s.recompute);
  line("model FLOPs per iteration", sci(s.model_flops_per_iteration.value()) +
                                        " FLOP (matmuls, forward + backward)");
  line("hardware FLOPs per iteration", sci(s.hardware_flops_per_iteration.value()) +
                                           " FLOP (model FLOPs + recomputed forward matmuls)");
  line("all-op FLOPs per iteration", sci(s.all_ops_flops_per_iteration.value()) +
                                         " FLOP (hardware FLOPs + pointwise, norms, optimizer)");
  line("parameter memory", core::format_bytes(s.parameter_bytes.value()) + " (" + s.dtype + ")");
  line("gradient memory", core::format_bytes(s.gradient_bytes.value()) + " (" + s.dtype + ")");
  const bool mixed = s.dtype != "fp32" && s.dtype != "tf32";
  const std::string states = s.optimizer == "adam" ? "2 fp32 moments" : "fp32 momentum";
  line("optimizer state memory", core::format_bytes(s.optimizer_state_bytes.value()) + " (" +
                                     (mixed ? "fp32 master + " : "") + states + ")");
  line("activation memory per microbatch", core::format_bytes(s.activation_bytes_per_microbatch.value()) +
                                               " (all layers, kept for backward)");
  line("largest layer activations", core::format_bytes(s.max_layer_activation_bytes_per_microbatch.value()) +
                                        " per microbatch");
  return o.str();
}

}  // namespace alpasim::ir
