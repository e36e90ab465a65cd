#include "ir/accounting.h"

#include <algorithm>

#include "core/check.h"

namespace alpasim::ir {

std::int64_t parameter_count(const Graph& graph) {
  std::int64_t n = 0;
  for (const Op& o : graph.ops()) {
    if (o.kind == OpKind::kParameter) n += o.out.num_elements();
  }
  return n;
}

PhaseFlops phase_flops(const Graph& graph) {
  PhaseFlops f;
  for (const Op& o : graph.ops()) {
    const std::int64_t mm = o.is_model_matmul() ? o.flops : 0;
    switch (o.phase) {
      case Phase::kForward:
        f.matmul_forward += mm;
        f.total_forward += o.flops;
        break;
      case Phase::kRecompute:
        f.matmul_recompute += mm;
        f.total_recompute += o.flops;
        break;
      case Phase::kBackward:
        f.matmul_backward += mm;
        f.total_backward += o.flops;
        break;
      case Phase::kOptimizer: f.total_optimizer += o.flops; break;
    }
  }
  return f;
}

IterationFlops flops_per_iteration(const Graph& g, std::int64_t global_batch_size) {
  const std::int64_t mb = g.meta.samples_per_microbatch;
  ALPASIM_CHECK(g.meta.has_backward) << "flops_per_iteration needs a training graph";
  ALPASIM_CHECK(mb > 0 && global_batch_size > 0 && global_batch_size % mb == 0)
      << "global batch " << global_batch_size << " is not a multiple of the microbatch " << mb;
  const double micro = static_cast<double>(global_batch_size / mb);
  const PhaseFlops p = phase_flops(g);
  IterationFlops r;
  r.model = core::Flops(micro * static_cast<double>(p.matmul_forward + p.matmul_backward));
  r.hardware = core::Flops(
      micro * static_cast<double>(p.matmul_forward + p.matmul_backward + p.matmul_recompute));
  r.hardware_all_ops = core::Flops(
      micro * static_cast<double>(p.total_forward + p.total_backward + p.total_recompute) +
      static_cast<double>(p.total_optimizer));
  return r;
}

std::vector<std::int64_t> activation_bytes_per_layer(const Graph& g) {
  std::vector<std::int64_t> bytes(static_cast<std::size_t>(std::max(g.num_layers(), 1)), 0);
  for (const Op& o : g.ops()) {
    if (o.phase != Phase::kForward || o.kind == OpKind::kParameter) continue;
    for (OpId c : g.consumers(o.id)) {
      const Phase p = g.op(c).phase;
      if (p == Phase::kBackward || p == Phase::kRecompute) {
        bytes[static_cast<std::size_t>(o.layer)] += o.out.bytes();
        break;
      }
    }
  }
  return bytes;
}

std::vector<LayerStats> layer_stats(const Graph& g) {
  const auto n = static_cast<std::size_t>(std::max(g.num_layers(), 1));
  std::vector<LayerStats> out(n);
  for (std::size_t i = 0; i < n && i < g.layers.size(); ++i) {
    out[i].name = g.layers[i].name;
    out[i].kind = g.layers[i].kind;
  }
  const std::vector<std::int64_t> kept = activation_bytes_per_layer(g);
  for (std::size_t i = 0; i < n; ++i) out[i].activation_bytes = kept[i];
  for (const Op& o : g.ops()) {
    LayerStats& l = out[static_cast<std::size_t>(o.layer)];
    const std::int64_t mm = o.is_model_matmul() ? o.flops : 0;
    const std::int64_t bytes = memory_traffic_bytes(g, o);
    switch (o.phase) {
      case Phase::kForward:
        if (o.kind == OpKind::kParameter) {
          l.parameters += o.out.num_elements();
          break;
        }
        if (o.kind != OpKind::kInput) ++l.num_forward_ops;
        l.flops.matmul_forward += mm;
        l.flops.total_forward += o.flops;
        l.forward_bytes_accessed += bytes;
        for (OpId c : g.consumers(o.id)) {
          const Op& user = g.op(c);
          if (user.phase == Phase::kForward && user.layer > o.layer) {
            l.boundary_bytes += o.out.bytes();
            break;
          }
        }
        break;
      case Phase::kRecompute:
        l.flops.matmul_recompute += mm;
        l.flops.total_recompute += o.flops;
        l.backward_bytes_accessed += bytes;
        break;
      case Phase::kBackward:
        l.flops.matmul_backward += mm;
        l.flops.total_backward += o.flops;
        l.backward_bytes_accessed += bytes;
        break;
      case Phase::kOptimizer: l.flops.total_optimizer += o.flops; break;
    }
  }
  return out;
}

StateBytes training_state_bytes(std::int64_t parameters, core::DType dtype, OptimizerKind opt) {
  StateBytes s;
  s.parameters = core::Bytes(parameters * core::dtype_bytes(dtype));
  s.gradients = core::Bytes(parameters * core::dtype_bytes(dtype));
  s.optimizer_states = core::Bytes(parameters * optimizer_state_bytes_per_parameter(opt, dtype));
  return s;
}

std::int64_t megatron_eq2_parameters(std::int64_t l, std::int64_t h, std::int64_t V,
                                     std::int64_t s) {
  return 12 * l * h * h + 13 * l * h + (V + s) * h;
}

std::int64_t megatron_eq3_flops_per_sequence(std::int64_t s, std::int64_t l, std::int64_t h,
                                             std::int64_t V) {
  return 96 * s * l * h * h + 16 * s * s * l * h + 6 * s * h * V;
}

std::int64_t korthikanti_eq7_model_flops_per_sequence(std::int64_t s, std::int64_t L,
                                                      std::int64_t h, std::int64_t V) {
  return 72 * s * L * h * h + 12 * s * s * L * h + 6 * s * h * V;
}

std::int64_t korthikanti_eq8_hardware_flops_per_sequence(std::int64_t s, std::int64_t L,
                                                         std::int64_t h, std::int64_t V) {
  return 72 * s * L * h * h + 24 * s * s * L * h + 6 * s * h * V;
}

std::int64_t korthikanti_activation_bytes_per_layer(std::int64_t s, std::int64_t b,
                                                    std::int64_t h, std::int64_t a,
                                                    std::int64_t t, bool sp,
                                                    RecomputePolicy recompute) {
  ALPASIM_CHECK(t > 0) << "tensor-parallel size must be positive";
  const std::int64_t sbh = s * b * h;
  switch (recompute) {
    case RecomputePolicy::kFull: return sp ? 2 * sbh / t : 2 * sbh;
    case RecomputePolicy::kSelective: return sp ? 34 * sbh / t : 10 * sbh + 24 * sbh / t;
    case RecomputePolicy::kNone: {
      const std::int64_t attn = 5 * a * s * s * b / t;
      return (sp ? 34 * sbh / t : 10 * sbh + 24 * sbh / t) + attn;
    }
  }
  return 0;
}

}  // namespace alpasim::ir
