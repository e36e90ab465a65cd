#include "sim/pipeline_problem.h"

#include <cmath>
#include <sstream>

#include "core/text.h"

namespace alpasim::sim {
namespace {

std::string num(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

core::Status check_seconds(const std::string& path, core::Seconds s) {
  if (!std::isfinite(s.value()) || s.value() < 0) {
    return core::invalid_argument(path + ": expected a finite number >= 0, got " + num(s.value()));
  }
  return core::ok_status();
}
core::Status check_bytes(const std::string& path, core::Bytes b) {
  if (b.value() < 0) {
    return core::invalid_argument(path + ": expected bytes >= 0, got " + std::to_string(b.value()));
  }
  return core::ok_status();
}
core::Status check_flops(const std::string& path, core::Flops f) {
  if (!std::isfinite(f.value()) || f.value() < 0) {
    return core::invalid_argument(path + ": expected a finite number >= 0, got " + num(f.value()));
  }
  return core::ok_status();
}
core::Status check_route(const std::string& path, const Route& r, std::size_t num_links) {
  ALPASIM_RETURN_IF_ERROR(check_seconds(path + ".latency", r.latency));
  for (std::size_t i = 0; i < r.links.size(); ++i) {
    if (r.links[i] < 0 || static_cast<std::size_t>(r.links[i]) >= num_links) {
      return core::invalid_argument(path + ".links[" + std::to_string(i) +
                                    "]: expected a link id in [0, " + std::to_string(num_links) +
                                    "), got " + std::to_string(r.links[i]));
    }
  }
  return core::ok_status();
}

}  // namespace

core::Status validate(const PipelineProblem& pb) {
  const int p = static_cast<int>(pb.meshes.size());
  if (p < 1) return core::invalid_argument("meshes: expected at least one mesh, got 0");
  if (pb.num_microbatches < 1) {
    return core::invalid_argument("num_microbatches: expected >= 1, got " +
                                  std::to_string(pb.num_microbatches));
  }
  if (pb.interleave < 1) {
    return core::invalid_argument("interleave: expected >= 1, got " + std::to_string(pb.interleave));
  }
  if (pb.data_parallel < 1) {
    return core::invalid_argument("data_parallel: expected >= 1, got " +
                                  std::to_string(pb.data_parallel));
  }
  if (pb.grad_sync_buckets < 1) {
    return core::invalid_argument("grad_sync_buckets: expected >= 1, got " +
                                  std::to_string(pb.grad_sync_buckets));
  }
  const std::size_t expected_stages = static_cast<std::size_t>(p) * static_cast<std::size_t>(pb.interleave);
  if (pb.stages.size() != expected_stages) {
    return core::invalid_argument("stages: expected " + std::to_string(expected_stages) +
                                  " entries (meshes × interleave = " + std::to_string(p) + " × " +
                                  std::to_string(pb.interleave) + "), got " +
                                  std::to_string(pb.stages.size()));
  }
  // Ids are int32 and the task graph holds a few tasks per (virtual stage, microbatch).
  constexpr std::int64_t kMaxPairs = 10'000'000;  // ~40 M tasks, a few GB
  const std::int64_t pairs = static_cast<std::int64_t>(expected_stages) * pb.num_microbatches;
  if (pairs > kMaxPairs) {
    return core::invalid_argument("num_microbatches: expected at most " + std::to_string(kMaxPairs) +
                                  " (virtual stage, microbatch) pairs, got " + std::to_string(pairs));
  }
  for (std::size_t i = 0; i < pb.links.size(); ++i) {
    const double c = pb.links[i].capacity.value();
    if (!std::isfinite(c) || c <= 0) {
      return core::invalid_argument("links[" + std::to_string(i) +
                                    "].capacity: expected a finite number > 0 bytes/s, got " + num(c));
    }
  }
  for (int m = 0; m < p; ++m) {
    const auto& mesh = pb.meshes[static_cast<std::size_t>(m)];
    const std::string path = "meshes[" + std::to_string(m) + "]";
    if (mesh.num_gpus < 1) {
      return core::invalid_argument(path + ".num_gpus: expected >= 1, got " +
                                    std::to_string(mesh.num_gpus));
    }
    ALPASIM_RETURN_IF_ERROR(check_bytes(path + ".memory_limit", mesh.memory_limit));
    ALPASIM_RETURN_IF_ERROR(check_route(path + ".send_next", mesh.send_next, pb.links.size()));
    ALPASIM_RETURN_IF_ERROR(check_route(path + ".send_prev", mesh.send_prev, pb.links.size()));
    ALPASIM_RETURN_IF_ERROR(check_route(path + ".grad_sync", mesh.grad_sync, pb.links.size()));
  }
  for (std::size_t i = 0; i < pb.stages.size(); ++i) {
    const auto& s = pb.stages[i];
    const std::string path = "stages[" + std::to_string(i) + "]";
    ALPASIM_RETURN_IF_ERROR(check_seconds(path + ".forward_s", s.forward_s));
    ALPASIM_RETURN_IF_ERROR(check_seconds(path + ".backward_s", s.backward_s));
    ALPASIM_RETURN_IF_ERROR(check_seconds(path + ".recompute_s", s.recompute_s));
    ALPASIM_RETURN_IF_ERROR(check_seconds(path + ".optimizer_step_s", s.optimizer_step_s));
    ALPASIM_RETURN_IF_ERROR(check_seconds(path + ".forward_tp_comm_s", s.forward_tp_comm_s));
    ALPASIM_RETURN_IF_ERROR(check_seconds(path + ".backward_tp_comm_s", s.backward_tp_comm_s));
    if (s.forward_tp_comm_s > s.forward_s) {
      return core::invalid_argument(path + ".forward_tp_comm_s: expected at most forward_s (" +
                                    num(s.forward_s.value()) + "), got " +
                                    num(s.forward_tp_comm_s.value()));
    }
    if (s.backward_tp_comm_s > s.backward_s) {
      return core::invalid_argument(path + ".backward_tp_comm_s: expected at most backward_s (" +
                                    num(s.backward_s.value()) + "), got " +
                                    num(s.backward_tp_comm_s.value()));
    }
    ALPASIM_RETURN_IF_ERROR(check_flops(path + ".forward_flops", s.forward_flops));
    ALPASIM_RETURN_IF_ERROR(check_flops(path + ".backward_flops", s.backward_flops));
    ALPASIM_RETURN_IF_ERROR(check_flops(path + ".recompute_flops", s.recompute_flops));
    ALPASIM_RETURN_IF_ERROR(check_bytes(path + ".stored_activation_bytes", s.stored_activation_bytes));
    ALPASIM_RETURN_IF_ERROR(check_bytes(path + ".working_activation_bytes", s.working_activation_bytes));
    ALPASIM_RETURN_IF_ERROR(
        check_bytes(path + ".forward_working_activation_bytes", s.forward_working_activation_bytes));
    ALPASIM_RETURN_IF_ERROR(check_bytes(path + ".backward_received_ahead_bytes", s.backward_received_ahead_bytes));
    ALPASIM_RETURN_IF_ERROR(
        check_bytes(path + ".backward_received_earlier_bytes", s.backward_received_earlier_bytes));
    ALPASIM_RETURN_IF_ERROR(check_bytes(path + ".parameter_bytes", s.parameter_bytes));
    ALPASIM_RETURN_IF_ERROR(check_bytes(path + ".gradient_bytes", s.gradient_bytes));
    ALPASIM_RETURN_IF_ERROR(check_bytes(path + ".optimizer_state_bytes", s.optimizer_state_bytes));
    ALPASIM_RETURN_IF_ERROR(check_bytes(path + ".output_activation_bytes", s.output_activation_bytes));
    ALPASIM_RETURN_IF_ERROR(check_bytes(path + ".grad_sync_bytes", s.grad_sync_bytes));
    if (s.reshard_group < 1) {
      return core::invalid_argument(path + ".reshard_group: expected >= 1, got " +
                                    std::to_string(s.reshard_group));
    }
    if (s.reshard_all_gather_s) {
      ALPASIM_RETURN_IF_ERROR(check_seconds(path + ".reshard_all_gather_s", *s.reshard_all_gather_s));
    }
    if (s.grad_sync_s) ALPASIM_RETURN_IF_ERROR(check_seconds(path + ".grad_sync_s", *s.grad_sync_s));
    if (s.param_all_gather_s) {
      ALPASIM_RETURN_IF_ERROR(check_seconds(path + ".param_all_gather_s", *s.param_all_gather_s));
    }
    const bool last = i + 1 == pb.stages.size();
    if (!last && s.output_reshard == ReshardMode::kLocalAllGather && s.reshard_group > 1 &&
        !s.reshard_all_gather_s && !pb.collective_cost) {
      return core::invalid_argument(path +
                                    ".reshard_all_gather_s: expected a duration (or a "
                                    "collective_cost hook) for the local all-gather, got none");
    }
    const auto& mesh = pb.meshes[i % static_cast<std::size_t>(p)];
    if (pb.data_parallel > 1 && s.grad_sync_bytes.value() > 0 && !s.grad_sync_s &&
        !pb.collective_cost && mesh.grad_sync.links.empty()) {
      return core::invalid_argument(path +
                                    ".grad_sync_s: expected a duration, a collective_cost hook "
                                    "or links in meshes[" + std::to_string(i % static_cast<std::size_t>(p)) +
                                    "].grad_sync for data_parallel " +
                                    std::to_string(pb.data_parallel) + ", got none");
    }
  }
  // Bytes received ahead by one chunk's backward are freed by another's on the same mesh.
  for (std::size_t m = 0; m < static_cast<std::size_t>(p); ++m) {
    std::int64_t ahead = 0, earlier = 0;
    for (std::size_t i = m; i < pb.stages.size(); i += static_cast<std::size_t>(p)) {
      ahead += pb.stages[i].backward_received_ahead_bytes.value();
      earlier += pb.stages[i].backward_received_earlier_bytes.value();
    }
    if (ahead != earlier) {
      return core::invalid_argument("stages[" + std::to_string(m) + "].backward_received_earlier_bytes: expected the " +
                                    std::to_string(ahead) + " bytes received ahead on mesh " + std::to_string(m) +
                                    " in all, got " + std::to_string(earlier));
    }
  }
  return core::ok_status();
}

core::Result<PipelineProblem> resolve_collectives(const PipelineProblem& problem) {
  PipelineProblem out = problem;
  if (!problem.collective_cost) return out;
  const std::size_t p = problem.meshes.size();
  const int buckets = problem.grad_sync_buckets;
  const bool rs_ag = problem.grad_sync_mode == GradSyncMode::kReduceScatterAllGather;
  auto ask = [&](const CollectiveCall& call, const std::string& what) -> core::Result<core::Seconds> {
    core::Seconds t = problem.collective_cost(call);
    if (!std::isfinite(t.value()) || t.value() < 0) {
      return core::internal_error(what + ": collective_cost returned " + num(t.value()) +
                                  " s, expected a finite number >= 0");
    }
    return t;
  };
  for (std::size_t vs = 0; vs < out.stages.size(); ++vs) {
    StageCosts& st = out.stages[vs];
    const int mesh = static_cast<int>(vs % p);
    const std::string path = "stages[" + std::to_string(vs) + "]";
    if (problem.data_parallel > 1 && st.grad_sync_bytes.value() > 0) {
      if (!st.grad_sync_s) {
        ALPASIM_ASSIGN_OR_RETURN(
            core::Seconds t,
            ask(CollectiveCall{rs_ag ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce,
                               st.grad_sync_bytes / buckets, problem.data_parallel, mesh},
                path + " gradient synchronisation"));
        st.grad_sync_s = t * static_cast<double>(buckets);
      }
      if (rs_ag && !st.param_all_gather_s) {
        ALPASIM_ASSIGN_OR_RETURN(
            st.param_all_gather_s,
            ask(CollectiveCall{CollectiveKind::kAllGather, st.grad_sync_bytes, problem.data_parallel, mesh},
                path + " parameter all-gather"));
      }
    }
    if (vs + 1 < out.stages.size() && st.output_reshard == ReshardMode::kLocalAllGather &&
        st.reshard_group > 1 && !st.reshard_all_gather_s) {
      ALPASIM_ASSIGN_OR_RETURN(
          st.reshard_all_gather_s,
          ask(CollectiveCall{CollectiveKind::kAllGather, st.output_activation_bytes, st.reshard_group,
                             static_cast<int>((vs + 1) % p)},
              path + " local all-gather"));
    }
  }
  out.collective_cost = nullptr;
  return out;
}

PipelineProblem make_uniform_problem(const UniformPipelineSpec& spec) {
  ALPASIM_CHECK(spec.num_stages >= 1 && spec.interleave >= 1) << "bad uniform spec";
  PipelineProblem pb;
  pb.schedule = spec.schedule;
  pb.num_microbatches = spec.num_microbatches;
  pb.interleave = spec.interleave;
  pb.data_parallel = spec.data_parallel;
  pb.grad_sync_mode = spec.grad_sync_mode;
  pb.grad_sync_buckets = spec.grad_sync_buckets;
  pb.blocking_p2p = spec.blocking_p2p;
  const int p = spec.num_stages;
  const int v = spec.interleave;
  const bool network = spec.p2p_bandwidth.value() > 0;
  pb.meshes.resize(static_cast<std::size_t>(p));
  for (int s = 0; s < p; ++s) {
    auto& mesh = pb.meshes[static_cast<std::size_t>(s)];
    mesh.num_gpus = spec.gpus_per_stage;
    mesh.memory_limit = spec.memory_limit;
    mesh.send_next.latency = spec.p2p_latency;
    mesh.send_prev.latency = spec.p2p_latency;
    if (network) {
      // One link per direction of each boundary (full duplex); with interleaving the
      // last stage also sends to the first one.
      pb.links.push_back(LinkSpec{"stage" + std::to_string(s) + "->next", spec.p2p_bandwidth});
      mesh.send_next.links = {static_cast<LinkId>(pb.links.size() - 1)};
      pb.links.push_back(LinkSpec{"stage" + std::to_string(s) + "->prev", spec.p2p_bandwidth});
      mesh.send_prev.links = {static_cast<LinkId>(pb.links.size() - 1)};
    }
  }
  StageCosts chunk = spec.stage;
  const double inv = 1.0 / v;
  chunk.forward_s = spec.stage.forward_s * inv;
  chunk.backward_s = spec.stage.backward_s * inv;
  chunk.recompute_s = spec.stage.recompute_s * inv;
  chunk.forward_tp_comm_s = spec.stage.forward_tp_comm_s * inv;
  chunk.backward_tp_comm_s = spec.stage.backward_tp_comm_s * inv;
  // A uniform stage lists its collectives for the whole stage; with v chunks the list
  // cannot be split by layer, so the chunks keep none (times are still counted).
  if (v > 1) {
    chunk.forward_collectives.clear();
    chunk.backward_collectives.clear();
  }
  chunk.optimizer_step_s = spec.stage.optimizer_step_s * inv;
  chunk.forward_flops = spec.stage.forward_flops * inv;
  chunk.backward_flops = spec.stage.backward_flops * inv;
  chunk.recompute_flops = spec.stage.recompute_flops * inv;
  chunk.stored_activation_bytes = spec.stage.stored_activation_bytes / v;
  chunk.parameter_bytes = spec.stage.parameter_bytes / v;
  chunk.gradient_bytes = spec.stage.gradient_bytes / v;
  chunk.optimizer_state_bytes = spec.stage.optimizer_state_bytes / v;
  chunk.grad_sync_bytes = spec.stage.grad_sync_bytes / v;
  if (spec.stage.grad_sync_s) chunk.grad_sync_s = *spec.stage.grad_sync_s * inv;
  pb.stages.assign(static_cast<std::size_t>(p * v), chunk);
  return pb;
}

}  // namespace alpasim::sim
