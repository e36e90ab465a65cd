#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "sim/engine.h"
#include "sim/task_graph.h"

namespace alpasim::sim {

/// An interval drawn inside a task's event: a nested complete event on the same track
/// (Perfetto shows it as a child slice), e.g. one tensor-parallel collective of a forward.
struct TraceSlice {
  std::string name;
  std::string cat;
  Time offset = 0;    ///< from the task's start, ns; offset + duration <= the task's length
  Time duration = 0;  ///< ns
  /// Extra members of "args", already JSON (fixed order, integers and strings only), e.g.
  /// "\"bytes\":64,\"group\":8": so the text stays byte-identical run to run.
  std::string args;
};

/// What write_chrome_trace includes.
struct TraceOptions {
  bool memory_counters = true;  ///< a "memory" counter per device: bytes per component
  /// A "network" process with one counter per link that carried anything: bytes/s.
  bool link_counters = true;
  /// Per task (index = TaskId; shorter or empty: none): slices nested in its event.
  std::vector<std::vector<TraceSlice>> task_slices;
};

/// The timeline as Chrome trace-event JSON (the "JSON Object Format" that
/// ui.perfetto.dev and chrome://tracing open): one process per device, one thread
/// (track) per stream that ran something, one complete event ("ph":"X") per task, and
/// a memory counter per device. Times are microseconds written with exactly three
/// decimals, i.e. exact nanoseconds. The text depends only on the inputs (fixed key
/// order, integer formatting), so the same simulation gives byte-identical files.
/// See docs/trace.md for the schema.
std::string chrome_trace_json(const TaskGraph& graph, const Timeline& timeline,
                              const TraceOptions& options = {});

/// Writes chrome_trace_json() to `path`. Returns INVALID_ARGUMENT "`path`: cannot write
/// the trace: <reason>" when the file cannot be written.
core::Status write_chrome_trace(const std::string& path, const TaskGraph& graph,
                                const Timeline& timeline, const TraceOptions& options = {});

}  // namespace alpasim::sim
