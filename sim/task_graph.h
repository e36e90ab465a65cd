#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/units.h"
#include "sim/link_model.h"
#include "sim/time.h"

namespace alpasim::sim {

/// Index of a task in a TaskGraph (dense, in creation order).
using TaskId = std::int32_t;
/// Index of a simulated device (dense, in creation order).
using DeviceId = std::int32_t;
/// Index of a stream over all devices (dense, in creation order).
using StreamId = std::int32_t;

/// What a stream executes: compute kernels, or communication (which may overlap compute).
enum class StreamKind : std::uint8_t { kCompute, kCommunication };

/// What a task represents; used by reports (busy time, exposed communication) and traces.
enum class TaskKind : std::uint8_t {
  kForward,           ///< forward pass of one microbatch through one stage (chunk)
  kBackward,          ///< backward pass (or one bucket-sized part of it)
  kRecompute,         ///< activation recomputation before a backward
  kSend,              ///< cross-stage activation or gradient transfer
  kReshardAllGather,  ///< Alpa's local all-gather after a 1/k cross-mesh send
  kGradSync,          ///< data-parallel gradient all-reduce or reduce-scatter
  kParamAllGather,    ///< all-gather of updated parameters (weight-update sharding)
  kOptimizer,         ///< optimizer step
  kOther,             ///< anything else (tests, custom graphs)
};

/// Short lower-case name of a task kind ("forward", "send", ...), as written in traces.
const char* task_kind_name(TaskKind kind);

/// Identifies a task for reports and traces. Plain data.
struct TaskLabel {
  TaskKind kind = TaskKind::kOther;
  std::int32_t microbatch = -1;  ///< -1 when not tied to a microbatch
  std::int32_t chunk = -1;       ///< virtual stage (model chunk) index, -1 when none
  std::int32_t part = -1;        ///< bucket index of a split task, -1 when whole
};

/// When a task's memory change applies.
enum class MemoryPoint : std::uint8_t { kAtStart, kAtEnd };

/// A DAG of tasks on device streams, the input of simulate().
///
/// Semantics (CUDA-stream-like): every stream runs its tasks one at a time in the order
/// they were added to it; a task starts when it is at the head of its stream, the
/// previous task on the stream has finished, and all its dependencies have finished.
/// A compute task lasts its fixed duration. A transfer task waits `latency`, then moves
/// its bytes over its route through the shared LinkModel (max-min fair); its end is
/// when the last byte arrives. Tasks may allocate or free memory on their device at
/// start or end, per named component (parameters, activations, ...).
class TaskGraph {
 public:
  /// Names the memory components (in report order). Call before add_memory; default is
  /// a single component "memory".
  void set_memory_components(std::vector<std::string> names);
  /// Component names, index = component id.
  const std::vector<std::string>& memory_components() const { return component_names_; }

  /// Adds a device; `memory_limit` 0 means unlimited.
  DeviceId add_device(std::string name, core::Bytes memory_limit = core::Bytes(0));
  /// Adds a stream on `device`.
  StreamId add_stream(DeviceId device, std::string name, StreamKind kind);
  /// Adds a network link (see LinkModel).
  LinkId add_link(std::string name, core::BytesPerSecond capacity);

  /// Appends a task of fixed `duration` (ns, >= 0) to `stream`.
  TaskId add_compute(StreamId stream, Time duration, TaskLabel label);
  /// Appends a transfer of `bytes` over `route` to `stream`, after `latency` ns. An empty
  /// route means no modelled network: the transfer takes only its latency.
  TaskId add_transfer(StreamId stream, std::span<const LinkId> route, core::Bytes bytes,
                      Time latency, TaskLabel label);
  /// Records the receiving device of a transfer, so reports count the transfer as
  /// communication of both ends (a receiver waiting for data is waiting on the network).
  void set_peer(TaskId transfer, DeviceId peer);
  /// `after` may not start before `before` has finished.
  void add_dependency(TaskId before, TaskId after);
  /// Changes the memory of `task`'s device by `delta` (+ allocates, - frees) in
  /// `component` at the task's start or end.
  void add_memory(TaskId task, int component, core::Bytes delta, MemoryPoint point);
  /// Memory held from time 0 to the end (parameters, optimizer states...).
  void add_static_memory(DeviceId device, int component, core::Bytes bytes);

  // Read access (used by the engine and the reports).
  /// A device as added.
  struct Device {
    std::string name;                     ///< for reports and traces
    std::int64_t memory_limit_bytes = 0;  ///< 0 = unlimited
    std::vector<StreamId> streams;        ///< in creation order
  };
  /// A stream as added, with its tasks.
  struct Stream {
    DeviceId device = 0;                     ///< owner
    std::string name;                        ///< for traces
    StreamKind kind = StreamKind::kCompute;  ///< compute or communication
    std::vector<TaskId> tasks;               ///< in execution order
  };
  /// A task as added.
  struct Task {
    StreamId stream = 0;         ///< where it runs
    Time duration = 0;           ///< compute: its length; transfer: its latency
    std::int64_t bytes = -1;     ///< transfer size; -1 for compute tasks
    std::int32_t route_begin = 0, route_end = 0;  ///< range in routes()
    TaskLabel label;             ///< what it is
    DeviceId peer = -1;  ///< the other end of a transfer (-1: none or unknown)
  };
  /// A memory change of a task (add_memory).
  struct MemoryOp {
    TaskId task = 0;                            ///< whose start or end
    std::int32_t component = 0;                 ///< index into memory_components()
    MemoryPoint point = MemoryPoint::kAtStart;  ///< start or end of the task
    std::int64_t delta_bytes = 0;               ///< + allocates, - frees
  };
  /// Memory held all along (add_static_memory).
  struct StaticMemory {
    DeviceId device = 0;         ///< whose memory
    std::int32_t component = 0;  ///< index into memory_components()
    std::int64_t bytes = 0;      ///< held from time 0 to the end
  };
  /// Devices, index = DeviceId.
  const std::vector<Device>& devices() const { return devices_; }
  /// Streams, index = StreamId.
  const std::vector<Stream>& streams() const { return streams_; }
  /// Tasks, index = TaskId.
  const std::vector<Task>& tasks() const { return tasks_; }
  /// Concatenated routes of the transfers (Task::route_begin/route_end).
  const std::vector<LinkId>& routes() const { return routes_; }
  /// Dependency edges (before, after) in the order added.
  const std::vector<std::pair<TaskId, TaskId>>& dependencies() const { return deps_; }
  /// Memory changes in the order added.
  const std::vector<MemoryOp>& memory_ops() const { return memory_ops_; }
  /// Static memory in the order added.
  const std::vector<StaticMemory>& static_memory() const { return static_memory_; }
  /// Links as (name, capacity bytes/s).
  const std::vector<std::pair<std::string, double>>& links() const { return links_; }
  /// True for tasks made by add_transfer.
  bool is_transfer(TaskId t) const { return tasks_[static_cast<std::size_t>(t)].bytes >= 0; }
  /// Pre-allocates room for `n` tasks and dependencies (optional).
  void reserve(std::size_t tasks, std::size_t deps);

 private:
  TaskId add_task(StreamId stream, Task task);
  std::vector<std::string> component_names_{"memory"};
  std::vector<Device> devices_;
  std::vector<Stream> streams_;
  std::vector<Task> tasks_;
  std::vector<LinkId> routes_;
  std::vector<std::pair<TaskId, TaskId>> deps_;
  std::vector<MemoryOp> memory_ops_;
  std::vector<StaticMemory> static_memory_;
  std::vector<std::pair<std::string, double>> links_;
};

}  // namespace alpasim::sim
