#include "sim/task_graph.h"

#include <cmath>

#include "core/check.h"

namespace alpasim::sim {

const char* task_kind_name(TaskKind kind) {
  switch (kind) {
    case TaskKind::kForward: return "forward";
    case TaskKind::kBackward: return "backward";
    case TaskKind::kRecompute: return "recompute";
    case TaskKind::kSend: return "send";
    case TaskKind::kReshardAllGather: return "reshard_all_gather";
    case TaskKind::kGradSync: return "grad_sync";
    case TaskKind::kParamAllGather: return "param_all_gather";
    case TaskKind::kOptimizer: return "optimizer";
    case TaskKind::kOther: return "task";
  }
  return "task";
}

void TaskGraph::set_memory_components(std::vector<std::string> names) {
  ALPASIM_CHECK(!names.empty()) << "at least one memory component";
  ALPASIM_CHECK(memory_ops_.empty() && static_memory_.empty())
      << "set_memory_components after memory was added";
  component_names_ = std::move(names);
}

DeviceId TaskGraph::add_device(std::string name, core::Bytes memory_limit) {
  ALPASIM_CHECK(memory_limit.value() >= 0) << "negative memory limit";
  devices_.push_back(Device{std::move(name), memory_limit.value(), {}});
  return static_cast<DeviceId>(devices_.size() - 1);
}

StreamId TaskGraph::add_stream(DeviceId device, std::string name, StreamKind kind) {
  ALPASIM_CHECK(device >= 0 && static_cast<std::size_t>(device) < devices_.size())
      << "unknown device " << device;
  streams_.push_back(Stream{device, std::move(name), kind, {}});
  StreamId id = static_cast<StreamId>(streams_.size() - 1);
  devices_[static_cast<std::size_t>(device)].streams.push_back(id);
  return id;
}

LinkId TaskGraph::add_link(std::string name, core::BytesPerSecond capacity) {
  ALPASIM_CHECK(capacity.value() > 0 && std::isfinite(capacity.value()))
      << "link '" << name << "' needs a positive finite capacity";
  links_.emplace_back(std::move(name), capacity.value());
  return static_cast<LinkId>(links_.size() - 1);
}

TaskId TaskGraph::add_task(StreamId stream, Task task) {
  ALPASIM_CHECK(stream >= 0 && static_cast<std::size_t>(stream) < streams_.size())
      << "unknown stream " << stream;
  task.stream = stream;
  tasks_.push_back(task);
  TaskId id = static_cast<TaskId>(tasks_.size() - 1);
  streams_[static_cast<std::size_t>(stream)].tasks.push_back(id);
  return id;
}

TaskId TaskGraph::add_compute(StreamId stream, Time duration, TaskLabel label) {
  ALPASIM_CHECK(duration >= 0) << "negative duration " << duration << " ns";
  Task t;
  t.duration = duration;
  t.label = label;
  return add_task(stream, t);
}

TaskId TaskGraph::add_transfer(StreamId stream, std::span<const LinkId> route, core::Bytes bytes,
                               Time latency, TaskLabel label) {
  ALPASIM_CHECK(latency >= 0) << "negative latency " << latency << " ns";
  ALPASIM_CHECK(bytes.value() >= 0) << "negative transfer size " << bytes.value();
  Task t;
  t.duration = latency;
  t.bytes = bytes.value();
  t.label = label;
  t.route_begin = static_cast<std::int32_t>(routes_.size());
  for (LinkId l : route) {
    ALPASIM_CHECK(l >= 0 && static_cast<std::size_t>(l) < links_.size()) << "unknown link " << l;
    routes_.push_back(l);
  }
  t.route_end = static_cast<std::int32_t>(routes_.size());
  return add_task(stream, t);
}

void TaskGraph::set_peer(TaskId transfer, DeviceId peer) {
  ALPASIM_CHECK(transfer >= 0 && static_cast<std::size_t>(transfer) < tasks_.size()) << "bad task";
  ALPASIM_CHECK(peer >= 0 && static_cast<std::size_t>(peer) < devices_.size()) << "bad device";
  tasks_[static_cast<std::size_t>(transfer)].peer = peer;
}

void TaskGraph::add_dependency(TaskId before, TaskId after) {
  ALPASIM_CHECK(before >= 0 && static_cast<std::size_t>(before) < tasks_.size()) << "bad task";
  ALPASIM_CHECK(after >= 0 && static_cast<std::size_t>(after) < tasks_.size()) << "bad task";
  ALPASIM_CHECK(before != after) << "task " << before << " depends on itself";
  deps_.emplace_back(before, after);
}

void TaskGraph::add_memory(TaskId task, int component, core::Bytes delta, MemoryPoint point) {
  ALPASIM_CHECK(task >= 0 && static_cast<std::size_t>(task) < tasks_.size()) << "bad task";
  ALPASIM_CHECK(component >= 0 && static_cast<std::size_t>(component) < component_names_.size())
      << "unknown memory component " << component;
  if (delta.value() == 0) return;
  memory_ops_.push_back(MemoryOp{task, component, point, delta.value()});
}

void TaskGraph::add_static_memory(DeviceId device, int component, core::Bytes bytes) {
  ALPASIM_CHECK(device >= 0 && static_cast<std::size_t>(device) < devices_.size()) << "bad device";
  ALPASIM_CHECK(component >= 0 && static_cast<std::size_t>(component) < component_names_.size())
      << "unknown memory component " << component;
  ALPASIM_CHECK(bytes.value() >= 0) << "negative static memory";
  static_memory_.push_back(StaticMemory{device, component, bytes.value()});
}

void TaskGraph::reserve(std::size_t tasks, std::size_t deps) {
  tasks_.reserve(tasks);
  deps_.reserve(deps);
}

}  // namespace alpasim::sim
