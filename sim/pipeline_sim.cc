#include "sim/pipeline_sim.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/text.h"
#include "sim/schedule.h"
#include "sim/timeline_stats.h"

namespace alpasim::sim {

const char* memory_component_name(MemoryComponent component) {
  switch (component) {
    case MemoryComponent::kParameters: return "parameters";
    case MemoryComponent::kGradients: return "gradients";
    case MemoryComponent::kOptimizerStates: return "optimizer_states";
    case MemoryComponent::kStoredActivations: return "stored_activations";
    case MemoryComponent::kWorkingActivations: return "working_activations";
  }
  return "?";
}

namespace {

constexpr int kStored = static_cast<int>(MemoryComponent::kStoredActivations);
constexpr int kWorking = static_cast<int>(MemoryComponent::kWorkingActivations);

std::string human_component(MemoryComponent c) {
  std::string s = memory_component_name(c);
  std::replace(s.begin(), s.end(), '_', ' ');
  return s;
}

// Per-GPU bytes a ring collective puts on each GPU's link: all-reduce 2(n-1)/n of the
// buffer, reduce-scatter and all-gather (n-1)/n (Patarasuk & Yuan 2009; NCCL's busbw).
double ring_wire_bytes(CollectiveKind kind, double bytes, int n) {
  const double f = static_cast<double>(n - 1) / n;
  return kind == CollectiveKind::kAllReduce ? 2.0 * f * bytes : f * bytes;
}

// The streams of one device, in kPipelineStreams order.
struct DeviceStreams {
  StreamId compute, send_next, send_prev, reshard, grad_sync;
};

class Lowering {
 public:
  explicit Lowering(const PipelineProblem& pb)
      : pb_(pb),
        p_(static_cast<int>(pb.meshes.size())),
        v_(pb.interleave),
        m_(pb.num_microbatches),
        num_virtual_(p_ * v_) {}

  core::Result<TaskGraph> run() {
    ALPASIM_ASSIGN_OR_RETURN(programs_, build_schedule(pb_.schedule, p_, m_, v_));
    std::vector<std::string> names;
    for (int c = 0; c < kNumMemoryComponents; ++c) {
      names.emplace_back(memory_component_name(static_cast<MemoryComponent>(c)));
    }
    g_.set_memory_components(std::move(names));
    const std::size_t pairs = static_cast<std::size_t>(num_virtual_) * static_cast<std::size_t>(m_);
    g_.reserve(pairs * 4, pairs * 6);  // F, B, R, a send per pair; their dependencies
    for (const auto& link : pb_.links) g_.add_link(link.name, link.capacity);
    for (int d = 0; d < p_; ++d) {
      const auto& mesh = pb_.meshes[static_cast<std::size_t>(d)];
      DeviceId dev = g_.add_device("stage " + std::to_string(d), mesh.memory_limit);
      DeviceStreams s{};
      s.compute = g_.add_stream(dev, kPipelineStreams[0], StreamKind::kCompute);
      s.send_next = g_.add_stream(dev, kPipelineStreams[1], StreamKind::kCommunication);
      s.send_prev = g_.add_stream(dev, kPipelineStreams[2], StreamKind::kCommunication);
      s.reshard = g_.add_stream(dev, kPipelineStreams[3], StreamKind::kCommunication);
      s.grad_sync = g_.add_stream(dev, kPipelineStreams[4], StreamKind::kCommunication);
      streams_.push_back(s);
      for (int c = 0; c < v_; ++c) {
        const auto& st = stage(c * p_ + d);
        g_.add_static_memory(dev, static_cast<int>(MemoryComponent::kParameters), st.parameter_bytes);
        g_.add_static_memory(dev, static_cast<int>(MemoryComponent::kGradients), st.gradient_bytes);
        g_.add_static_memory(dev, static_cast<int>(MemoryComponent::kOptimizerStates),
                             st.optimizer_state_bytes);
      }
    }
    const std::size_t n = pairs;
    fwd_.assign(n, -1);
    bwd_first_.assign(n, -1);
    bwd_last_.assign(n, -1);
    fwd_arrival_.assign(n, -1);
    bwd_arrival_.assign(n, -1);
    optimizer_.assign(static_cast<std::size_t>(p_), -1);
    grads_done_.assign(static_cast<std::size_t>(p_), {});
    for (int d = 0; d < p_; ++d) ALPASIM_RETURN_IF_ERROR(lower_compute(d));
    if (pb_.optimizer_barrier) {
      // Megatron clips gradients by their global norm, all-reduced over the pipeline: no
      // optimizer step starts before every stage's gradients are synchronised.
      for (int d = 0; d < p_; ++d) {
        const TaskId opt = optimizer_[static_cast<std::size_t>(d)];
        if (opt < 0) continue;
        for (int e = 0; e < p_; ++e) {
          if (e == d) continue;
          for (TaskId t : grads_done_[static_cast<std::size_t>(e)]) g_.add_dependency(t, opt);
        }
      }
    }
    for (int d = 0; d < p_; ++d) lower_sends(d);
    for (int d = 0; d < p_; ++d) ALPASIM_RETURN_IF_ERROR(lower_receives(d));
    return std::move(g_);
  }

 private:
  const StageCosts& stage(int vs) const { return pb_.stages[static_cast<std::size_t>(vs)]; }
  std::size_t idx(int vs, int mb) const { return static_cast<std::size_t>(vs * m_ + mb); }
  bool syncs_gradients(const StageCosts& st) const {
    if (pb_.data_parallel == 1) return st.grad_sync_s && st.grad_sync_s->value() > 0;  // in-mesh
    return st.grad_sync_bytes.value() > 0;
  }

  // A collective on `stream`: a fixed duration (given, or resolved from the cost hook by
  // resolve_collectives) or a transfer of its ring bytes over the mesh's route.
  TaskId add_collective(StreamId stream, CollectiveKind kind, core::Bytes bytes, int group,
                        std::optional<core::Seconds> given, const Route& route, TaskLabel label) {
    if (given) return g_.add_compute(stream, to_time(*given), label);
    const double wire = ring_wire_bytes(kind, static_cast<double>(bytes.value()), group);
    return g_.add_transfer(stream, route.links, core::Bytes(std::llround(wire)),
                           to_time(route.latency), label);
  }

  core::Status lower_compute(int d) {
    const auto& prog = programs_[static_cast<std::size_t>(d)];
    const DeviceStreams& s = streams_[static_cast<std::size_t>(d)];
    const auto& mesh = pb_.meshes[static_cast<std::size_t>(d)];
    const int buckets = pb_.grad_sync_buckets;
    const bool rs_ag = pb_.grad_sync_mode == GradSyncMode::kReduceScatterAllGather;
    // Position of each chunk's last backward: its gradients are complete afterwards.
    std::vector<std::size_t> last_backward(static_cast<std::size_t>(v_), prog.size());
    for (std::size_t i = 0; i < prog.size(); ++i) {
      if (prog[i].type == ScheduledOp::Type::kBackward) {
        last_backward[static_cast<std::size_t>(prog[i].chunk)] = i;
      }
    }
    std::vector<TaskId> syncs;
    for (std::size_t i = 0; i < prog.size(); ++i) {
      const ScheduledOp& op = prog[i];
      const int vs = op.chunk * p_ + d;
      const StageCosts& st = stage(vs);
      const std::size_t k = idx(vs, op.microbatch);
      if (op.type == ScheduledOp::Type::kForward) {
        TaskId f = g_.add_compute(s.compute, to_time(st.forward_s),
                                  TaskLabel{TaskKind::kForward, op.microbatch, vs, -1});
        g_.add_memory(f, kStored, st.stored_activation_bytes, MemoryPoint::kAtStart);
        if (st.forward_working_activation_bytes.value() != 0) {
          g_.add_memory(f, kWorking, st.forward_working_activation_bytes, MemoryPoint::kAtStart);
          g_.add_memory(f, kWorking, core::Bytes(0) - st.forward_working_activation_bytes, MemoryPoint::kAtEnd);
        }
        fwd_[k] = f;
        continue;
      }
      TaskId first = -1;
      if (st.recompute_s.value() > 0) {
        first = g_.add_compute(s.compute, to_time(st.recompute_s),
                               TaskLabel{TaskKind::kRecompute, op.microbatch, vs, -1});
      }
      const bool sync = syncs_gradients(st) && i == last_backward[static_cast<std::size_t>(op.chunk)];
      const int parts = sync ? buckets : 1;
      const Time total = to_time(st.backward_s);
      TaskId last = -1;
      for (int part = 0; part < parts; ++part) {
        // Integer split whose parts sum exactly to `total`.
        const Time dur = total * (part + 1) / parts - total * part / parts;
        last = g_.add_compute(s.compute, dur,
                              TaskLabel{TaskKind::kBackward, op.microbatch, vs, parts > 1 ? part : -1});
        if (first < 0) first = last;
        if (sync) {
          TaskId gs = add_collective(
              s.grad_sync, rs_ag ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce,
              // Bucket bytes split like the times, summing exactly to grad_sync_bytes.
              core::Bytes(st.grad_sync_bytes.value() * (part + 1) / parts -
                          st.grad_sync_bytes.value() * part / parts),
              pb_.data_parallel,
              st.grad_sync_s ? std::optional<core::Seconds>(*st.grad_sync_s / buckets) : std::nullopt,
              mesh.grad_sync, TaskLabel{TaskKind::kGradSync, -1, vs, part});
          g_.add_dependency(last, gs);
          syncs.push_back(gs);
        }
      }
      g_.add_memory(first, kWorking, st.working_activation_bytes, MemoryPoint::kAtStart);
      g_.add_memory(last, kStored, core::Bytes(0) - st.stored_activation_bytes, MemoryPoint::kAtEnd);
      g_.add_memory(last, kWorking, core::Bytes(0) - st.working_activation_bytes, MemoryPoint::kAtEnd);
      if (st.backward_received_ahead_bytes.value() != st.backward_received_earlier_bytes.value()) {
        g_.add_memory(last, kWorking, st.backward_received_ahead_bytes - st.backward_received_earlier_bytes,
                      MemoryPoint::kAtEnd);
      }
      bwd_first_[k] = first;
      bwd_last_[k] = last;
      g_.add_dependency(fwd_[k], first);
    }
    // Optimizer step once every gradient of the device is synchronised.
    core::Seconds step{0};
    for (int c = 0; c < v_; ++c) step += stage(c * p_ + d).optimizer_step_s;
    if (step.value() > 0 || !syncs.empty()) {
      TaskId opt = g_.add_compute(s.compute, to_time(step), TaskLabel{TaskKind::kOptimizer, -1, -1, -1});
      optimizer_[static_cast<std::size_t>(d)] = opt;
      for (TaskId gs : syncs) g_.add_dependency(gs, opt);
      grads_done_[static_cast<std::size_t>(d)] = syncs;
      if (!prog.empty()) grads_done_[static_cast<std::size_t>(d)].push_back(bwd_last_[idx(
          prog.back().chunk * p_ + d, prog.back().microbatch)]);
      if (rs_ag) {
        for (int c = 0; c < v_; ++c) {
          const int vs = c * p_ + d;
          const StageCosts& st = stage(vs);
          if (!syncs_gradients(st)) continue;
          // Precedence documented at StageCosts::param_all_gather_s (the hook, if any, has
          // already filled param_all_gather_s).
          std::optional<core::Seconds> given = st.param_all_gather_s ? st.param_all_gather_s : st.grad_sync_s;
          TaskId ag = add_collective(s.grad_sync, CollectiveKind::kAllGather, st.grad_sync_bytes,
                                     pb_.data_parallel, given, mesh.grad_sync,
                                     TaskLabel{TaskKind::kParamAllGather, -1, vs, -1});
          g_.add_dependency(opt, ag);
        }
      }
    }
    return core::ok_status();
  }

  core::Bytes wire_bytes(const StageCosts& st) const {
    if (st.output_reshard == ReshardMode::kLocalAllGather && st.reshard_group > 1) {
      // Ceiling: the last slice is padded; the mesh all-gather restores the whole tensor.
      return core::Bytes((st.output_activation_bytes.value() + st.reshard_group - 1) / st.reshard_group);
    }
    return st.output_activation_bytes;
  }

  // Sends, in the order their producers run (a send stream is FIFO).
  void lower_sends(int d) {
    const auto& prog = programs_[static_cast<std::size_t>(d)];
    const DeviceStreams& s = streams_[static_cast<std::size_t>(d)];
    const auto& mesh = pb_.meshes[static_cast<std::size_t>(d)];
    for (std::size_t i = 0; i < prog.size(); ++i) {
      const ScheduledOp& op = prog[i];
      const int vs = op.chunk * p_ + d;
      TaskId t = -1;
      if (op.type == ScheduledOp::Type::kForward && vs + 1 < num_virtual_) {
        t = g_.add_transfer(s.send_next, mesh.send_next.links, wire_bytes(stage(vs)),
                            to_time(mesh.send_next.latency),
                            TaskLabel{TaskKind::kSend, op.microbatch, vs, -1});
        g_.add_dependency(fwd_[idx(vs, op.microbatch)], t);
        g_.set_peer(t, (vs + 1) % p_);
        fwd_arrival_[idx(vs + 1, op.microbatch)] = t;
      } else if (op.type == ScheduledOp::Type::kBackward && vs > 0) {
        t = g_.add_transfer(s.send_prev, mesh.send_prev.links, wire_bytes(stage(vs - 1)),
                            to_time(mesh.send_prev.latency),
                            TaskLabel{TaskKind::kSend, op.microbatch, vs, -1});
        g_.add_dependency(bwd_last_[idx(vs, op.microbatch)], t);
        g_.set_peer(t, (vs - 1) % p_);
        bwd_arrival_[idx(vs - 1, op.microbatch)] = t;
      }
      if (t >= 0 && pb_.blocking_p2p) {
        // The device's next step waits for the send (Megatron's blocking p2p calls).
        TaskId next = optimizer_[static_cast<std::size_t>(d)];
        if (i + 1 < prog.size()) {
          const ScheduledOp& n = prog[i + 1];
          const std::size_t k = idx(n.chunk * p_ + d, n.microbatch);
          next = n.type == ScheduledOp::Type::kForward ? fwd_[k] : bwd_first_[k];
        }
        if (next >= 0) g_.add_dependency(t, next);
      }
    }
  }

  // The mesh all-gather that completes a 1/k send, or the send itself.
  core::Result<TaskId> receive(int d, int boundary_stage, TaskId arrival, int mb, int vs) {
    const StageCosts& st = stage(boundary_stage);
    if (st.output_reshard != ReshardMode::kLocalAllGather || st.reshard_group <= 1) return arrival;
    ALPASIM_CHECK(st.reshard_all_gather_s) << "validate/resolve_collectives left no duration";
    TaskId ag = add_collective(streams_[static_cast<std::size_t>(d)].reshard, CollectiveKind::kAllGather,
                               st.output_activation_bytes, st.reshard_group, st.reshard_all_gather_s,
                               Route{}, TaskLabel{TaskKind::kReshardAllGather, mb, vs, -1});
    g_.add_dependency(arrival, ag);
    return ag;
  }

  // Local all-gathers and the dependencies on arrivals, in the order the consumers run
  // (so a FIFO reshard stream never holds back a tensor the compute stream needs first).
  core::Status lower_receives(int d) {
    for (const ScheduledOp& op : programs_[static_cast<std::size_t>(d)]) {
      const int vs = op.chunk * p_ + d;
      const std::size_t k = idx(vs, op.microbatch);
      if (op.type == ScheduledOp::Type::kForward && vs > 0) {
        ALPASIM_ASSIGN_OR_RETURN(TaskId src, receive(d, vs - 1, fwd_arrival_[k], op.microbatch, vs));
        g_.add_dependency(src, fwd_[k]);
      } else if (op.type == ScheduledOp::Type::kBackward && vs + 1 < num_virtual_) {
        ALPASIM_ASSIGN_OR_RETURN(TaskId src, receive(d, vs, bwd_arrival_[k], op.microbatch, vs));
        g_.add_dependency(src, bwd_first_[k]);
      }
    }
    return core::ok_status();
  }

  const PipelineProblem& pb_;
  const int p_, v_, m_, num_virtual_;
  std::vector<std::vector<ScheduledOp>> programs_;
  TaskGraph g_;
  std::vector<DeviceStreams> streams_;
  std::vector<TaskId> fwd_, bwd_first_, bwd_last_, fwd_arrival_, bwd_arrival_;
  std::vector<TaskId> optimizer_;  // per device, -1 when it has none
  // Per device with an optimizer step: the tasks after which its gradients are final.
  std::vector<std::vector<TaskId>> grads_done_;
};

std::string seconds_text(core::Seconds s) { return core::format_fixed(s.value(), 6) + " s"; }

}  // namespace

core::Result<TaskGraph> lower_pipeline(const PipelineProblem& problem) {
  ALPASIM_RETURN_IF_ERROR(validate(problem));
  ALPASIM_ASSIGN_OR_RETURN(PipelineProblem resolved, resolve_collectives(problem));
  return Lowering(resolved).run();
}

core::Status PipelineReport::memory_status() const {
  if (overflows.empty()) return core::ok_status();
  std::string msg;
  for (const auto& o : overflows) {
    if (!msg.empty()) msg += "; ";
    msg += o.message;
  }
  return core::resource_exhausted(msg);
}

namespace {

// Appends `calls` to `out` as nested events of a task `length` ns long: in order, with the
// task's own work (its length beyond the calls) split evenly before them.
void place_calls(const std::vector<BlockingCollective>& calls, Time length, std::vector<TraceSlice>* out) {
  Time comm = 0;
  for (const BlockingCollective& c : calls) comm += to_time(c.time);
  // The calls are part of the task; if rounding made them longer, they fill it.
  const double shrink = comm > length ? static_cast<double>(length) / static_cast<double>(comm) : 1.0;
  const Time compute = std::max<Time>(0, length - comm);
  const std::int64_t k = static_cast<std::int64_t>(calls.size());
  Time at = 0;
  for (std::int64_t i = 0; i < k; ++i) {
    const BlockingCollective& c = calls[static_cast<std::size_t>(i)];
    // The work before call i: its share of the task's work, rounded so the shares sum
    // exactly to `compute`.
    at += compute * (i + 1) / k - compute * i / k;
    Time d = static_cast<Time>(static_cast<double>(to_time(c.time)) * shrink);
    d = std::min(d, length - at);
    TraceSlice s;
    s.name = c.collective + " " + c.where;
    s.cat = c.category;
    s.offset = at;
    s.duration = d;
    s.args = "\"collective\":\"" + c.collective + "\",\"bytes\":" + std::to_string(c.bytes) +
             ",\"group\":" + std::to_string(c.group_size) + ",\"algorithm\":\"" + c.algorithm +
             "\",\"layer\":\"" + c.where + "\"";
    out->push_back(std::move(s));
    at += d;
  }
}

}  // namespace

std::vector<std::vector<TraceSlice>> collective_trace_slices(const PipelineProblem& problem,
                                                             const TaskGraph& graph,
                                                             const Timeline& timeline,
                                                             std::size_t max_events) {
  const auto& tasks = graph.tasks();
  std::vector<std::vector<TraceSlice>> out(tasks.size());
  // A stage-boundary all-gather completes the send it depends on; the boundary is the
  // lower virtual stage of the two (forward: the sender's; backward: the receiver's).
  std::vector<int> boundary(tasks.size(), -1);
  for (const auto& [before, after] : graph.dependencies()) {
    const TaskLabel& a = tasks[static_cast<std::size_t>(after)].label;
    const TaskLabel& b = tasks[static_cast<std::size_t>(before)].label;
    if (a.kind == TaskKind::kReshardAllGather && b.kind == TaskKind::kSend) {
      boundary[static_cast<std::size_t>(after)] = std::min(a.chunk, b.chunk);
    }
  }
  const int buckets = std::max(1, problem.grad_sync_buckets);
  std::size_t events = 0;
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    const TaskLabel& label = tasks[t].label;
    const int chunk = label.kind == TaskKind::kReshardAllGather ? boundary[t] : label.chunk;
    if (chunk < 0 || static_cast<std::size_t>(chunk) >= problem.stages.size()) continue;
    const StageCosts& st = problem.stages[static_cast<std::size_t>(chunk)];
    const std::vector<BlockingCollective>* calls = nullptr;
    int bucket = -1;  // a gradient bucket's task shows its 1/buckets share of each call
    switch (label.kind) {
      // Split backward parts (grad-sync buckets) list none: their calls are the whole
      // backward's.
      case TaskKind::kForward: calls = label.part < 0 ? &st.forward_collectives : nullptr; break;
      case TaskKind::kBackward: calls = label.part < 0 ? &st.backward_collectives : nullptr; break;
      case TaskKind::kRecompute: calls = label.part < 0 ? &st.recompute_collectives : nullptr; break;
      case TaskKind::kGradSync:
        calls = &st.grad_sync_collectives;
        bucket = buckets > 1 ? std::max(0, label.part) : -1;
        break;
      case TaskKind::kParamAllGather: calls = &st.param_all_gather_collectives; break;
      case TaskKind::kReshardAllGather: calls = &st.reshard_collectives; break;
      default: break;
    }
    if (calls == nullptr || calls->empty()) continue;
    std::vector<BlockingCollective> shares;
    if (bucket >= 0) {
      shares = *calls;
      for (BlockingCollective& c : shares) {
        // Bytes split so the buckets' shares sum exactly to the call's.
        c.bytes = c.bytes * (bucket + 1) / buckets - c.bytes * bucket / buckets;
        c.time = core::Seconds(c.time.value() / buckets);
      }
      calls = &shares;
    }
    place_calls(*calls, timeline.end[t] - timeline.start[t], &out[t]);
    events += out[t].size();
  }
  if (events > max_events) {
    constexpr int kEdge = 4;
    const int n = problem.num_microbatches;
    for (std::size_t t = 0; t < out.size(); ++t) {
      const int mb = tasks[t].label.microbatch;
      if (mb >= kEdge && mb < n - kEdge) out[t].clear();
    }
  }
  return out;
}

core::Result<PipelineSimulation> simulate_pipeline(const PipelineProblem& problem) {
  ALPASIM_ASSIGN_OR_RETURN(TaskGraph graph, lower_pipeline(problem));
  ALPASIM_ASSIGN_OR_RETURN(Timeline timeline, simulate(graph));
  ALPASIM_ASSIGN_OR_RETURN(auto programs, build_schedule(problem.schedule,
                                                         static_cast<int>(problem.meshes.size()),
                                                         problem.num_microbatches, problem.interleave));
  const int p = static_cast<int>(problem.meshes.size());
  PipelineReport r;
  r.iteration_time = to_seconds(timeline.makespan);
  r.events_processed = timeline.events_processed;
  for (const auto& mesh : problem.meshes) r.num_gpus += mesh.num_gpus * problem.data_parallel;
  double model = 0, hardware = 0;
  for (std::size_t vs = 0; vs < problem.stages.size(); ++vs) {
    const auto& st = problem.stages[vs];
    const double gpus = static_cast<double>(problem.meshes[vs % static_cast<std::size_t>(p)].num_gpus) *
                        problem.data_parallel;
    const double mb = problem.num_microbatches;
    model += mb * gpus * (st.forward_flops.value() + st.backward_flops.value());
    hardware += mb * gpus * (st.forward_flops.value() + st.backward_flops.value() + st.recompute_flops.value());
  }
  r.model_flops = core::Flops(model);
  r.hardware_flops = core::Flops(hardware);
  if (timeline.makespan > 0 && r.num_gpus > 0) {
    const double denom = r.iteration_time.value() * r.num_gpus;
    r.model_flops_per_gpu = core::FlopsPerSecond(model / denom);
    r.hardware_flops_per_gpu = core::FlopsPerSecond(hardware / denom);
  }
  const auto stats = device_stats(graph, timeline);
  double idle_sum = 0;
  double idle_total_s = 0, busy_total_s = 0;
  Time worst_exposed = -1;
  for (int d = 0; d < p; ++d) {
    const auto& st = stats[static_cast<std::size_t>(d)];
    const auto& mem = timeline.memory[static_cast<std::size_t>(d)];
    PipelineDeviceReport dr;
    dr.device = d;
    dr.compute_busy = to_seconds(st.compute_busy);
    dr.compute_idle = to_seconds(timeline.makespan - st.compute_busy);
    dr.communication_busy = to_seconds(st.communication_busy);
    dr.communication_overlapped = to_seconds(st.communication_overlapped);
    dr.communication_exposed = to_seconds(st.communication_exposed);
    auto exposed = [&st](TaskKind k) {
      return st.communication_exposed_by_kind[static_cast<std::size_t>(k)];
    };
    dr.p2p_exposed = to_seconds(exposed(TaskKind::kSend));
    dr.reshard_exposed = to_seconds(exposed(TaskKind::kReshardAllGather));
    // Reduce-scatter and parameter all-gather run on one FIFO stream and never overlap.
    dr.grad_sync_exposed = to_seconds(exposed(TaskKind::kGradSync) + exposed(TaskKind::kParamAllGather));
    dr.peak_memory_bytes = mem.peak_bytes;
    dr.peak_memory_time = to_seconds(mem.peak_time);
    dr.peak_memory_by_component = mem.peak_by_component;
    dr.max_in_flight = max_in_flight(programs[static_cast<std::size_t>(d)]);
    double tp_s = 0;
    for (const ScheduledOp& op : programs[static_cast<std::size_t>(d)]) {
      const auto& sc = problem.stages[static_cast<std::size_t>(op.chunk * p + d)];
      if (op.type == ScheduledOp::Type::kForward) {
        tp_s += sc.forward_tp_comm_s.value();
      } else {
        tp_s += sc.backward_tp_comm_s.value();
        if (sc.recompute_s.value() > 0) tp_s += sc.forward_tp_comm_s.value();
      }
    }
    dr.tensor_parallel_communication = core::Seconds(tp_s);
    idle_total_s += dr.compute_idle.value();
    busy_total_s += dr.compute_busy.value();
    if (timeline.makespan > 0) {
      idle_sum += static_cast<double>(timeline.makespan - st.compute_busy) /
                  static_cast<double>(timeline.makespan);
    }
    r.peak_memory_bytes = std::max(r.peak_memory_bytes, mem.peak_bytes);
    if (st.communication_exposed > worst_exposed) {
      worst_exposed = st.communication_exposed;
      r.communication_exposed = dr.communication_exposed;
      r.communication_overlapped = dr.communication_overlapped;
    }
    const std::int64_t limit = problem.meshes[static_cast<std::size_t>(d)].memory_limit.value();
    if (limit > 0 && mem.peak_bytes > limit) {
      MemoryOverflow o;
      o.device = d;
      o.limit_bytes = limit;
      o.peak_bytes = mem.peak_bytes;
      o.excess_bytes = mem.peak_bytes - limit;
      int largest = 0;
      for (int c = 1; c < kNumMemoryComponents; ++c) {
        if (mem.peak_by_component[static_cast<std::size_t>(c)] >
            mem.peak_by_component[static_cast<std::size_t>(largest)]) {
          largest = c;
        }
      }
      o.largest = static_cast<MemoryComponent>(largest);
      std::ostringstream msg;
      // A peak at t = 0 is what the device holds before its first task: weights, gradients
      // and optimizer states alone (a time there reads like a simulation artefact).
      const std::string when = mem.peak_time == 0 ? "from the start (before its first task)"
                                                  : "at its peak (t=" + seconds_text(dr.peak_memory_time) + ")";
      msg << "device " << d << " (pipeline stage " << d << ") needs " << core::format_bytes(o.peak_bytes)
          << " " << when << " but may use "
          << core::format_bytes(limit) << ": over by " << core::format_bytes(o.excess_bytes) << " ("
          << o.excess_bytes << " bytes); at the peak:";
      for (int c = 0; c < kNumMemoryComponents; ++c) {
        msg << (c == 0 ? " " : ", ") << human_component(static_cast<MemoryComponent>(c)) << " "
            << core::format_bytes(mem.peak_by_component[static_cast<std::size_t>(c)]);
      }
      msg << "; the largest component is " << human_component(o.largest);
      if (o.largest == MemoryComponent::kStoredActivations) {
        msg << " (up to " << dr.max_in_flight << " microbatch-chunks in flight under "
            << schedule_name(problem.schedule) << ")";
      }
      o.message = msg.str();
      r.overflows.push_back(std::move(o));
    }
    r.devices.push_back(std::move(dr));
  }
  for (std::size_t l = 0; l < problem.links.size(); ++l) {
    LinkReport lr;
    lr.name = problem.links[l].name;
    lr.bytes = timeline.link_bytes[l];
    if (timeline.makespan > 0) {
      lr.utilisation = lr.bytes / (problem.links[l].capacity.value() * r.iteration_time.value());
    }
    double peak = 0;
    for (const auto& sample : timeline.link_rates[l]) peak = std::max(peak, sample.bytes_per_s);
    lr.peak_rate = core::BytesPerSecond(peak);
    r.links.push_back(std::move(lr));
  }
  r.bubble_fraction = p > 0 ? idle_sum / p : 0.0;
  r.bubble_to_compute_ratio = busy_total_s > 0 ? idle_total_s / busy_total_s : 0.0;
  return PipelineSimulation{std::move(graph), std::move(timeline), std::move(r)};
}

std::string format_report(const PipelineReport& r) {
  std::ostringstream out;
  out << "iteration time: " << seconds_text(r.iteration_time) << "\n";
  out << "GPUs: " << r.num_gpus << "\n";
  out << "model TFLOP/s per GPU (no recomputation): "
      << core::format_fixed(core::to_tflops_per_s(r.model_flops_per_gpu), 2) << "\n";
  out << "hardware TFLOP/s per GPU (with recomputation): "
      << core::format_fixed(core::to_tflops_per_s(r.hardware_flops_per_gpu), 2) << "\n";
  out << "bubble fraction (mean compute idle / iteration): " << core::format_fixed(r.bubble_fraction, 4)
      << "\n";
  out << "bubble / compute time (Megatron's bubble time fraction): "
      << core::format_fixed(r.bubble_to_compute_ratio, 4) << "\n";
  out << "peak memory per GPU (max over devices): " << core::format_bytes(r.peak_memory_bytes) << " ("
      << r.peak_memory_bytes << " bytes)\n";
  out << "communication exposed / overlapped (worst device): " << seconds_text(r.communication_exposed)
      << " / " << seconds_text(r.communication_overlapped) << "\n";
  // A fixed-width table: one row per device (pipeline stage), seconds and bytes.
  auto cell = [&out](const std::string& text, int width) {
    out << std::string(static_cast<std::size_t>(std::max<int>(1, width - static_cast<int>(text.size()))), ' ')
        << text;
  };
  cell("device", 6);
  cell("compute_busy_s", 16);
  cell("compute_idle_s", 16);
  cell("comm_exposed_s", 16);
  cell("comm_overlapped_s", 19);
  cell("tp_comm_s", 11);
  cell("peak_memory", 14);
  cell("in_flight", 11);
  out << "\n";
  for (const auto& d : r.devices) {
    cell(std::to_string(d.device), 6);
    cell(core::format_fixed(d.compute_busy.value(), 6), 16);
    cell(core::format_fixed(d.compute_idle.value(), 6), 16);
    cell(core::format_fixed(d.communication_exposed.value(), 6), 16);
    cell(core::format_fixed(d.communication_overlapped.value(), 6), 19);
    cell(core::format_fixed(d.tensor_parallel_communication.value(), 6), 11);
    cell(core::format_bytes(d.peak_memory_bytes), 14);
    cell(std::to_string(d.max_in_flight), 11);
    out << "\n";
  }
  if (!r.links.empty()) {
    cell("link", 24);
    cell("bytes", 14);
    cell("utilisation", 13);
    cell("peak_gbyte_per_s", 18);
    out << "\n";
    for (const auto& l : r.links) {
      cell(l.name, 24);
      cell(core::format_bytes(static_cast<std::int64_t>(std::llround(l.bytes))), 14);
      cell(core::format_fixed(l.utilisation, 4), 13);
      cell(core::format_fixed(core::to_gbyte_per_s(l.peak_rate), 3), 18);
      out << "\n";
    }
  }
  for (const auto& o : r.overflows) out << "memory overflow: " << o.message << "\n";
  return out.str();
}

std::string report_json(const PipelineReport& r) {
  using Json = nlohmann::ordered_json;
  Json j;
  j["iteration_time_s"] = r.iteration_time.value();
  j["num_gpus"] = r.num_gpus;
  j["model_flops_per_iteration"] = r.model_flops.value();
  j["hardware_flops_per_iteration"] = r.hardware_flops.value();
  j["model_tflops_per_gpu"] = core::to_tflops_per_s(r.model_flops_per_gpu);
  j["hardware_tflops_per_gpu"] = core::to_tflops_per_s(r.hardware_flops_per_gpu);
  j["bubble_fraction"] = r.bubble_fraction;
  j["bubble_to_compute_ratio"] = r.bubble_to_compute_ratio;
  j["peak_memory_bytes"] = r.peak_memory_bytes;
  j["communication_exposed_s"] = r.communication_exposed.value();
  j["communication_overlapped_s"] = r.communication_overlapped.value();
  j["events_processed"] = r.events_processed;
  Json devices = Json::array();
  for (const auto& d : r.devices) {
    Json dj;
    dj["device"] = d.device;
    dj["compute_busy_s"] = d.compute_busy.value();
    dj["compute_idle_s"] = d.compute_idle.value();
    dj["communication_busy_s"] = d.communication_busy.value();
    dj["communication_overlapped_s"] = d.communication_overlapped.value();
    dj["communication_exposed_s"] = d.communication_exposed.value();
    dj["p2p_exposed_s"] = d.p2p_exposed.value();
    dj["reshard_exposed_s"] = d.reshard_exposed.value();
    dj["grad_sync_exposed_s"] = d.grad_sync_exposed.value();
    dj["tensor_parallel_communication_s"] = d.tensor_parallel_communication.value();
    dj["peak_memory_bytes"] = d.peak_memory_bytes;
    dj["peak_memory_time_s"] = d.peak_memory_time.value();
    Json comp;
    for (int c = 0; c < kNumMemoryComponents && static_cast<std::size_t>(c) < d.peak_memory_by_component.size(); ++c) {
      comp[std::string(memory_component_name(static_cast<MemoryComponent>(c))) + "_bytes"] =
          d.peak_memory_by_component[static_cast<std::size_t>(c)];
    }
    dj["peak_memory_by_component"] = comp;
    dj["max_in_flight"] = d.max_in_flight;
    devices.push_back(std::move(dj));
  }
  j["devices"] = std::move(devices);
  Json overflows = Json::array();
  for (const auto& o : r.overflows) {
    Json oj;
    oj["device"] = o.device;
    oj["limit_bytes"] = o.limit_bytes;
    oj["peak_bytes"] = o.peak_bytes;
    oj["excess_bytes"] = o.excess_bytes;
    oj["largest_component"] = memory_component_name(o.largest);
    oj["message"] = o.message;
    overflows.push_back(std::move(oj));
  }
  j["memory_overflows"] = std::move(overflows);
  Json links = Json::array();
  for (const auto& l : r.links) {
    Json lj;
    lj["name"] = l.name;
    lj["bytes"] = l.bytes;
    lj["utilisation"] = l.utilisation;
    lj["peak_bytes_per_s"] = l.peak_rate.value();
    links.push_back(std::move(lj));
  }
  j["links"] = std::move(links);
  return j.dump(2) + "\n";
}

}  // namespace alpasim::sim
