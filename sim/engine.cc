#include "sim/engine.h"

#include <algorithm>
#include <sstream>

#include "core/check.h"
#include "sim/event_queue.h"
#include "sim/link_model.h"

namespace alpasim::sim {
namespace {

enum EventKind : std::uint32_t {
  kTaskEnd = 0,     // id = task: a compute task (or a link-less transfer) finishes
  kLatencyEnd = 1,  // id = task: a transfer's latency has passed; its flow starts
  kFlowCheck = 2,   // the link model's earliest completion; valid if version matches
};

// Compressed sparse rows: for item i, entries [offset[i], offset[i+1]).
template <class T>
struct Csr {
  std::vector<std::int32_t> offset;
  std::vector<T> items;
};

class Engine {
 public:
  explicit Engine(const TaskGraph& g) : g_(g) {}

  core::Result<Timeline> run() {
    const auto& tasks = g_.tasks();
    const std::size_t n = tasks.size();
    Timeline out;
    out.start.assign(n, -1);
    out.end.assign(n, -1);
    tl_ = &out;

    // Successors in CSR form and in-degrees.
    pending_.assign(n, 0);
    succ_.offset.assign(n + 1, 0);
    for (auto [before, after] : g_.dependencies()) {
      ++succ_.offset[static_cast<std::size_t>(before) + 1];
      ++pending_[static_cast<std::size_t>(after)];
    }
    for (std::size_t i = 0; i < n; ++i) succ_.offset[i + 1] += succ_.offset[i];
    succ_.items.resize(g_.dependencies().size());
    {
      std::vector<std::int32_t> fill(succ_.offset.begin(), succ_.offset.end() - 1);
      for (auto [before, after] : g_.dependencies()) {
        succ_.items[static_cast<std::size_t>(fill[static_cast<std::size_t>(before)]++)] = after;
      }
    }
    // Memory operations per task, in the order they were added.
    mem_.offset.assign(n + 1, 0);
    for (const auto& op : g_.memory_ops()) ++mem_.offset[static_cast<std::size_t>(op.task) + 1];
    for (std::size_t i = 0; i < n; ++i) mem_.offset[i + 1] += mem_.offset[i];
    mem_.items.resize(g_.memory_ops().size());
    {
      std::vector<std::int32_t> fill(mem_.offset.begin(), mem_.offset.end() - 1);
      for (const auto& op : g_.memory_ops()) {
        mem_.items[static_cast<std::size_t>(fill[static_cast<std::size_t>(op.task)]++)] = op;
      }
    }
    // Memory state.
    const std::size_t num_components = g_.memory_components().size();
    const std::size_t num_devices = g_.devices().size();
    out.memory.resize(num_devices);
    current_.assign(num_devices * num_components, 0);
    total_.assign(num_devices, 0);
    num_components_ = num_components;
    for (const auto& s : g_.static_memory()) {
      current_[static_cast<std::size_t>(s.device) * num_components + static_cast<std::size_t>(s.component)] += s.bytes;
      total_[static_cast<std::size_t>(s.device)] += s.bytes;
    }
    for (std::size_t d = 0; d < num_devices; ++d) {
      auto& m = out.memory[d];
      m.peak_bytes = total_[d];
      m.peak_time = 0;
      m.peak_by_component.assign(current_.begin() + static_cast<std::ptrdiff_t>(d * num_components),
                                 current_.begin() + static_cast<std::ptrdiff_t>((d + 1) * num_components));
      m.series.push_back(MemorySample{0, total_[d]});
      m.component_series = m.peak_by_component;
    }
    // Links.
    for (const auto& [name, capacity] : g_.links()) links_.add_link(name, core::BytesPerSecond(capacity));
    flow_task_.clear();
    {
      // At most one flow per transfer task: reserve so no flow start reallocates.
      std::size_t flows = 0;
      std::size_t route_entries = 0;
      for (const auto& task : tasks) {
        if (task.bytes > 0 && task.route_end > task.route_begin) {
          ++flows;
          route_entries += static_cast<std::size_t>(task.route_end - task.route_begin);
        }
      }
      links_.reserve_flows(flows, route_entries);
      flow_task_.reserve(flows);
    }

    const auto& streams = g_.streams();
    head_.assign(streams.size(), 0);
    busy_.assign(streams.size(), 0);
    queue_.reserve(std::min<std::size_t>(n + 16, 1 << 20));

    for (std::size_t s = 0; s < streams.size(); ++s) try_start(static_cast<StreamId>(s));
    if (links_dirty_) settle_links();

    done_ = 0;
    while (!queue_.empty()) {
      Event e = queue_.pop();
      ++out.events_processed;
      now_ = e.time;
      switch (e.kind) {
        case kTaskEnd:
          finish(static_cast<TaskId>(e.id));
          ++done_;
          break;
        case kLatencyEnd:
          start_flow(static_cast<TaskId>(e.id));
          break;
        case kFlowCheck:
          if (e.version == flow_version_) links_dirty_ = true;
          break;
        default:
          ALPASIM_CHECK(false) << "unknown event kind " << e.kind;
      }
      // Rates are recomputed once per instant: events at the same time are handled first.
      if (links_dirty_ && (queue_.empty() || queue_.top().time > now_)) {
        settle_links();
      }
    }
    if (done_ != n) return stuck_error();
    out.makespan = 0;
    for (Time t : out.end) out.makespan = std::max(out.makespan, t);
    out.link_bytes = links_.bytes_carried();
    out.link_rates = links_.take_rate_series();
    return out;
  }

 private:
  // Finishes the flows that are complete at now_ (finishing them may start others, which
  // is why it loops), then recomputes the fair rates once and schedules the next check.
  void settle_links() {
    while (true) {
      links_.advance(now_, finished_);
      if (finished_.empty()) break;
      for (FlowId f : finished_) {
        finish(flow_task_[static_cast<std::size_t>(f)]);
        ++done_;
      }
    }
    links_dirty_ = false;
    links_.update_rates();
    Time t = links_.next_completion();
    ++flow_version_;
    if (t >= 0) queue_.push(t, kFlowCheck, 0, flow_version_);
  }

  void try_start(StreamId s) {
    const auto& stream = g_.streams()[static_cast<std::size_t>(s)];
    std::size_t& head = head_[static_cast<std::size_t>(s)];
    if (busy_[static_cast<std::size_t>(s)] || head >= stream.tasks.size()) return;
    TaskId t = stream.tasks[head];
    if (pending_[static_cast<std::size_t>(t)] != 0) return;
    busy_[static_cast<std::size_t>(s)] = 1;
    ++head;
    tl_->start[static_cast<std::size_t>(t)] = now_;
    apply_memory(t, MemoryPoint::kAtStart, stream.device);
    const auto& task = g_.tasks()[static_cast<std::size_t>(t)];
    if (task.bytes < 0 || task.route_begin == task.route_end || task.bytes == 0) {
      queue_.push(now_ + task.duration, kTaskEnd, static_cast<std::uint32_t>(t));
    } else if (task.duration > 0) {
      queue_.push(now_ + task.duration, kLatencyEnd, static_cast<std::uint32_t>(t));
    } else {
      start_flow(t);
    }
  }

  void start_flow(TaskId t) {
    const auto& task = g_.tasks()[static_cast<std::size_t>(t)];
    const auto& routes = g_.routes();
    std::span<const LinkId> route(routes.data() + task.route_begin,
                                  static_cast<std::size_t>(task.route_end - task.route_begin));
    FlowId f = links_.start_flow(now_, route, static_cast<double>(task.bytes));
    if (flow_task_.size() <= static_cast<std::size_t>(f)) flow_task_.resize(static_cast<std::size_t>(f) + 1);
    flow_task_[static_cast<std::size_t>(f)] = t;
    links_dirty_ = true;
  }

  void finish(TaskId t) {
    const auto& task = g_.tasks()[static_cast<std::size_t>(t)];
    tl_->end[static_cast<std::size_t>(t)] = now_;
    const StreamId s = task.stream;
    busy_[static_cast<std::size_t>(s)] = 0;
    apply_memory(t, MemoryPoint::kAtEnd, g_.streams()[static_cast<std::size_t>(s)].device);
    const std::int32_t b = succ_.offset[static_cast<std::size_t>(t)];
    const std::int32_t e = succ_.offset[static_cast<std::size_t>(t) + 1];
    try_start(s);
    for (std::int32_t i = b; i < e; ++i) {
      TaskId next = succ_.items[static_cast<std::size_t>(i)];
      if (--pending_[static_cast<std::size_t>(next)] == 0) {
        try_start(g_.tasks()[static_cast<std::size_t>(next)].stream);
      }
    }
  }

  void apply_memory(TaskId t, MemoryPoint point, DeviceId device) {
    const std::int32_t b = mem_.offset[static_cast<std::size_t>(t)];
    const std::int32_t e = mem_.offset[static_cast<std::size_t>(t) + 1];
    if (b == e) return;
    const std::size_t d = static_cast<std::size_t>(device);
    bool changed = false;
    for (std::int32_t i = b; i < e; ++i) {
      const auto& op = mem_.items[static_cast<std::size_t>(i)];
      if (op.point != point) continue;
      current_[d * num_components_ + static_cast<std::size_t>(op.component)] += op.delta_bytes;
      total_[d] += op.delta_bytes;
      changed = true;
    }
    if (!changed) return;
    auto& m = tl_->memory[d];
    const auto row = current_.begin() + static_cast<std::ptrdiff_t>(d * num_components_);
    if (!m.series.empty() && m.series.back().time == now_) {
      m.series.back().bytes = total_[d];
      std::copy(row, row + static_cast<std::ptrdiff_t>(num_components_),
                m.component_series.end() - static_cast<std::ptrdiff_t>(num_components_));
    } else {
      m.series.push_back(MemorySample{now_, total_[d]});
      m.component_series.insert(m.component_series.end(), row,
                                row + static_cast<std::ptrdiff_t>(num_components_));
    }
    if (total_[d] > m.peak_bytes) {
      m.peak_bytes = total_[d];
      m.peak_time = now_;
      std::copy(current_.begin() + static_cast<std::ptrdiff_t>(d * num_components_),
                current_.begin() + static_cast<std::ptrdiff_t>((d + 1) * num_components_),
                m.peak_by_component.begin());
    }
  }

  core::Status stuck_error() const {
    std::ostringstream msg;
    msg << "the task graph cannot finish (a dependency cycle, or stream orders that contradict "
           "the dependencies):";
    int shown = 0;
    const auto& streams = g_.streams();
    for (std::size_t s = 0; s < streams.size() && shown < 3; ++s) {
      if (head_[s] >= streams[s].tasks.size() || busy_[s]) continue;
      TaskId t = streams[s].tasks[head_[s]];
      msg << " stream '" << streams[s].name << "' of device '"
          << g_.devices()[static_cast<std::size_t>(streams[s].device)].name << "' waits at task " << t
          << " (" << task_kind_name(g_.tasks()[static_cast<std::size_t>(t)].label.kind) << ") with "
          << pending_[static_cast<std::size_t>(t)] << " unfinished dependencies;";
      ++shown;
    }
    return core::failed_precondition(msg.str());
  }

  const TaskGraph& g_;
  Timeline* tl_ = nullptr;
  EventQueue queue_;
  LinkModel links_;
  std::vector<TaskId> flow_task_;
  std::vector<FlowId> finished_;  // scratch of settle_links, reused
  std::uint64_t flow_version_ = 0;
  bool links_dirty_ = false;
  Time now_ = 0;
  std::vector<std::int32_t> pending_;
  Csr<TaskId> succ_;
  Csr<TaskGraph::MemoryOp> mem_;
  std::vector<std::size_t> head_;
  std::vector<char> busy_;
  std::vector<std::int64_t> current_;
  std::vector<std::int64_t> total_;
  std::size_t num_components_ = 1;
  std::size_t done_ = 0;
};

}  // namespace

core::Result<Timeline> simulate(const TaskGraph& graph) { return Engine(graph).run(); }

}  // namespace alpasim::sim
