#include "sim/layered_problem.h"

#include <algorithm>

namespace alpasim::sim {

core::Result<PipelineProblem> make_layered_problem(const LayeredPipelineSpec& spec) {
  if (spec.num_stages < 1) {
    return core::invalid_argument("num_stages: expected >= 1, got " + std::to_string(spec.num_stages));
  }
  if (spec.interleave < 1) {
    return core::invalid_argument("interleave: expected >= 1, got " + std::to_string(spec.interleave));
  }
  const int chunks = spec.num_stages * spec.interleave;
  const int num_layers = static_cast<int>(spec.layers.size());
  std::vector<int> per_chunk = spec.layers_per_chunk;
  if (per_chunk.empty()) {
    if (num_layers < chunks) {
      return core::invalid_argument("layers: expected at least " + std::to_string(chunks) +
                                    " layers for " + std::to_string(spec.num_stages) + " stages × " +
                                    std::to_string(spec.interleave) + " chunks, got " +
                                    std::to_string(num_layers));
    }
    for (int c = 0; c < chunks; ++c) per_chunk.push_back(num_layers / chunks + (c < num_layers % chunks ? 1 : 0));
  }
  if (static_cast<int>(per_chunk.size()) != chunks) {
    return core::invalid_argument("layers_per_chunk: expected " + std::to_string(chunks) +
                                  " entries (stages × interleave), got " +
                                  std::to_string(per_chunk.size()));
  }
  int total = 0;
  for (std::size_t c = 0; c < per_chunk.size(); ++c) {
    if (per_chunk[c] < 1) {
      return core::invalid_argument("layers_per_chunk[" + std::to_string(c) + "]: expected >= 1, got " +
                                    std::to_string(per_chunk[c]));
    }
    total += per_chunk[c];
  }
  if (total != num_layers) {
    return core::invalid_argument("layers_per_chunk: expected a sum of " + std::to_string(num_layers) +
                                  " (the number of layers), got " + std::to_string(total));
  }

  if (!spec.gpus_per_mesh.empty() &&
      spec.gpus_per_mesh.size() != static_cast<std::size_t>(spec.num_stages)) {
    return core::invalid_argument("gpus_per_mesh: expected " + std::to_string(spec.num_stages) +
                                  " entries (one per stage), got " +
                                  std::to_string(spec.gpus_per_mesh.size()));
  }
  PipelineProblem pb;
  pb.schedule = spec.schedule;
  pb.num_microbatches = spec.num_microbatches;
  pb.interleave = spec.interleave;
  pb.data_parallel = spec.data_parallel;
  pb.grad_sync_mode = spec.grad_sync_mode;
  pb.grad_sync_buckets = spec.grad_sync_buckets;
  pb.blocking_p2p = spec.blocking_p2p;
  pb.optimizer_barrier = spec.optimizer_barrier;
  pb.meshes.resize(static_cast<std::size_t>(spec.num_stages));
  for (std::size_t m = 0; m < pb.meshes.size(); ++m) {
    pb.meshes[m].num_gpus = spec.gpus_per_mesh.empty() ? spec.gpus_per_stage : spec.gpus_per_mesh[m];
    pb.meshes[m].memory_limit = spec.memory_limit;
  }
  const bool full = spec.recompute == Recompute::kFull;
  std::size_t next = 0;
  for (int c = 0; c < chunks; ++c) {
    StageCosts st;
    std::int64_t largest_activation = 0;
    for (int i = 0; i < per_chunk[static_cast<std::size_t>(c)]; ++i, ++next) {
      const LayerCosts& l = spec.layers[next];
      st.forward_s += l.forward_s;
      st.backward_s += l.backward_s;
      st.forward_tp_comm_s += l.forward_tp_comm_s;
      st.backward_tp_comm_s += l.backward_tp_comm_s;
      st.forward_collectives.insert(st.forward_collectives.end(), l.forward_collectives.begin(),
                                    l.forward_collectives.end());
      // The backward runs the layers in reverse: this layer's collectives come first.
      st.backward_collectives.insert(st.backward_collectives.begin(),
                                     l.backward_collectives.begin(), l.backward_collectives.end());
      st.forward_flops += l.forward_flops;
      st.backward_flops += l.backward_flops;
      st.stored_activation_bytes += full ? l.checkpoint_bytes : l.activation_bytes;
      largest_activation = std::max(largest_activation, l.activation_bytes.value());
      st.parameter_bytes += l.parameter_bytes;
      st.gradient_bytes += l.gradient_bytes;
      st.optimizer_state_bytes += l.optimizer_state_bytes;
      st.grad_sync_bytes += l.grad_sync_bytes;
      st.optimizer_step_s += l.optimizer_step_s;
      st.output_activation_bytes = l.output_bytes;
    }
    if (full) {
      st.recompute_s = st.forward_s;
      st.recompute_collectives = st.forward_collectives;
      st.recompute_flops = st.forward_flops;
      st.working_activation_bytes = core::Bytes(largest_activation);
    }
    pb.stages.push_back(st);
  }
  // Not validated here: the caller still adds routes, links or the collective hook;
  // simulate_pipeline() validates the finished problem.
  return pb;
}

}  // namespace alpasim::sim
