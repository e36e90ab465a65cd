#include "sim/trace_writer.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

namespace alpasim::sim {
namespace {

void append_escaped(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[(c >> 4) & 0xf];
          out += kHex[c & 0xf];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// Nanoseconds as microseconds with three decimals: 1234567 -> "1234.567".
void append_us(std::string& out, Time ns) {
  if (ns < 0) {
    out += '-';
    ns = -ns;
  }
  out += std::to_string(ns / 1000);
  out += '.';
  const Time frac = ns % 1000;
  out += static_cast<char>('0' + frac / 100);
  out += static_cast<char>('0' + (frac / 10) % 10);
  out += static_cast<char>('0' + frac % 10);
}

std::string task_name(const TaskLabel& l) {
  std::string s = task_kind_name(l.kind);
  if (l.microbatch >= 0) s += " mb" + std::to_string(l.microbatch);
  if (l.chunk >= 0) s += " vs" + std::to_string(l.chunk);
  if (l.part >= 0) s += " part" + std::to_string(l.part);
  return s;
}

}  // namespace

std::string chrome_trace_json(const TaskGraph& g, const Timeline& tl, const TraceOptions& options) {
  std::string out;
  out.reserve(256 + g.tasks().size() * 160);
  out += "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"alpa-sim simulator\",\"time_unit\":\"us\"},\n\"traceEvents\":[";
  bool first = true;
  auto begin_event = [&]() {
    out += first ? "\n" : ",\n";
    first = false;
  };
  const auto& devices = g.devices();
  const auto& streams = g.streams();
  // Metadata: names and sort order of processes (devices) and threads (streams).
  // pid = device + 1 and tid = global stream id + 1: Perfetto treats pid/tid 0 specially
  // (the Linux idle task) and keys threads by tid, so both stay non-zero and unique.
  auto pid_of = [](std::size_t device) { return std::to_string(device + 1); };
  auto tid_of = [](StreamId stream) { return std::to_string(stream + 1); };
  for (std::size_t d = 0; d < devices.size(); ++d) {
    const std::string pid = pid_of(d);
    begin_event();
    out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"name\":";
    append_escaped(out, devices[d].name);
    out += "}}";
    begin_event();
    out += "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + pid +
           ",\"args\":{\"sort_index\":" + std::to_string(d) + "}}";
    for (std::size_t i = 0; i < devices[d].streams.size(); ++i) {
      const auto& stream = streams[static_cast<std::size_t>(devices[d].streams[i])];
      if (stream.tasks.empty()) continue;
      const std::string tid = tid_of(devices[d].streams[i]);
      begin_event();
      out += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + tid +
             ",\"args\":{\"name\":";
      append_escaped(out, stream.name);
      out += "}}";
      begin_event();
      out += "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + tid +
             ",\"args\":{\"sort_index\":" + std::to_string(i) + "}}";
    }
  }
  // Tasks, stream by stream in execution order.
  for (std::size_t d = 0; d < devices.size(); ++d) {
    const std::string pid = pid_of(d);
    for (std::size_t i = 0; i < devices[d].streams.size(); ++i) {
      const auto& stream = streams[static_cast<std::size_t>(devices[d].streams[i])];
      const std::string tid = tid_of(devices[d].streams[i]);
      for (TaskId t : stream.tasks) {
        const auto& task = g.tasks()[static_cast<std::size_t>(t)];
        const Time a = tl.start[static_cast<std::size_t>(t)];
        const Time b = tl.end[static_cast<std::size_t>(t)];
        begin_event();
        out += "{\"name\":";
        append_escaped(out, task_name(task.label));
        out += ",\"cat\":\"";
        out += task_kind_name(task.label.kind);
        out += "\",\"ph\":\"X\",\"pid\":" + pid + ",\"tid\":" + tid + ",\"ts\":";
        append_us(out, a);
        out += ",\"dur\":";
        append_us(out, b - a);
        out += ",\"args\":{\"task\":" + std::to_string(t);
        if (task.label.microbatch >= 0) out += ",\"microbatch\":" + std::to_string(task.label.microbatch);
        if (task.label.chunk >= 0) out += ",\"virtual_stage\":" + std::to_string(task.label.chunk);
        if (task.label.part >= 0) out += ",\"part\":" + std::to_string(task.label.part);
        if (task.bytes >= 0) out += ",\"bytes\":" + std::to_string(task.bytes);
        out += "}}";
        if (static_cast<std::size_t>(t) < options.task_slices.size()) {
          for (const TraceSlice& s : options.task_slices[static_cast<std::size_t>(t)]) {
            ALPASIM_CHECK(s.offset >= 0 && s.duration >= 0 && s.offset + s.duration <= b - a)
                << "slice " << s.name << " outside task " << t;
            begin_event();
            out += "{\"name\":";
            append_escaped(out, s.name);
            out += ",\"cat\":";
            append_escaped(out, s.cat);
            out += ",\"ph\":\"X\",\"pid\":" + pid + ",\"tid\":" + tid + ",\"ts\":";
            append_us(out, a + s.offset);
            out += ",\"dur\":";
            append_us(out, s.duration);
            out += ",\"args\":{\"task\":" + std::to_string(t);
            if (!s.args.empty()) out += "," + s.args;
            out += "}}";
          }
        }
      }
    }
  }
  if (options.memory_counters) {
    for (std::size_t d = 0; d < devices.size() && d < tl.memory.size(); ++d) {
      const std::string pid = pid_of(d);
      const auto& mem = tl.memory[d];
      const auto& names = g.memory_components();
      for (std::size_t i = 0; i < mem.series.size(); ++i) {
        begin_event();
        out += "{\"name\":\"memory\",\"ph\":\"C\",\"pid\":" + pid + ",\"ts\":";
        append_us(out, mem.series[i].time);
        // One key per component: Perfetto stacks them, so the chart shows what the
        // memory is made of; the keys sum to the device total.
        out += ",\"args\":{";
        for (std::size_t c = 0; c < names.size(); ++c) {
          if (c > 0) out += ',';
          append_escaped(out, names[c]);
          out += ':';
          out += std::to_string(mem.component_series[i * names.size() + c]);
        }
        out += "}}";
      }
    }
  }
  if (options.link_counters) {
    bool any = false;
    for (const auto& series : tl.link_rates) any = any || !series.empty();
    if (any) {
      const std::string pid = pid_of(devices.size());
      begin_event();
      out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"name\":\"network\"}}";
      begin_event();
      out += "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + pid +
             ",\"args\":{\"sort_index\":" + std::to_string(devices.size()) + "}}";
      for (std::size_t l = 0; l < tl.link_rates.size() && l < g.links().size(); ++l) {
        for (const auto& sample : tl.link_rates[l]) {
          begin_event();
          out += "{\"name\":";
          append_escaped(out, "link " + g.links()[l].first);
          out += ",\"ph\":\"C\",\"pid\":" + pid + ",\"ts\":";
          append_us(out, sample.time);
          // Whole bytes/s: integer text, so no floating-point formatting in the file.
          out += ",\"args\":{\"bytes_per_s\":" + std::to_string(std::llround(sample.bytes_per_s)) + "}}";
        }
      }
    }
  }
  out += "\n]}\n";
  return out;
}

core::Status write_chrome_trace(const std::string& path, const TaskGraph& graph,
                                const Timeline& timeline, const TraceOptions& options) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) {
    return core::invalid_argument(path + ": cannot write the trace: " + std::strerror(errno));
  }
  const std::string text = chrome_trace_json(graph, timeline, options);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  f.close();
  if (!f) return core::invalid_argument(path + ": cannot write the trace: write failed");
  return core::ok_status();
}

}  // namespace alpasim::sim
