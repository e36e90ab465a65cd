#include "exec/trace.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/text.h"

namespace alpasim::exec {
namespace {

/// Microseconds with exactly three decimals from integer nanoseconds.
std::string us(std::int64_t ns) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000),
                static_cast<long long>(ns % 1000));
  return buf;
}

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

int track_of(InstrKind k) {
  switch (k) {
    case InstrKind::kSend:
    case InstrKind::kRecv: return 1;
    case InstrKind::kAllReduce:
    case InstrKind::kAllGather:
    case InstrKind::kReduceScatter:
    case InstrKind::kAllToAll: return 2;
    default: return 0;
  }
}

std::string category(const Instruction& in) {
  switch (in.kind) {
    case InstrKind::kRun:
      return in.task == TaskKind::kInit ? "task" : std::string(task_kind_name(in.task));
    case InstrKind::kSend:
    case InstrKind::kRecv: return "send";
    case InstrKind::kAllGather: return "reshard_all_gather";
    case InstrKind::kAllReduce:
    case InstrKind::kReduceScatter: return "grad_sync";
    default: return "task";
  }
}

double pct(double measured, double predicted) {
  return predicted > 0 ? 100.0 * (measured - predicted) / predicted : 0.0;
}

}  // namespace

std::string measured_trace_json(const Program& p, const ExecutionResult& r, const std::string& generator) {
  std::ostringstream os;
  os << "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"" << escape(generator)
     << "\",\"time_unit\":\"us\"},\n\"traceEvents\":[\n";
  bool first = true;
  auto line = [&](const std::string& s) {
    os << (first ? "" : ",\n") << s;
    first = false;
  };
  static const char* kTracks[] = {"compute", "p2p", "collective"};
  const std::size_t n = p.devices.size();
  for (std::size_t d = 0; d < n; ++d) {
    const std::string pid = std::to_string(d + 1);
    line("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"name\":\"device " +
         std::to_string(p.devices[d]) + "\"}}");
    line("{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"sort_index\":" +
         std::to_string(d) + "}}");
    for (int t = 0; t < 3; ++t) {
      const std::string tid = std::to_string(d * 3 + static_cast<std::size_t>(t) + 1);
      line("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + tid +
           ",\"args\":{\"name\":\"" + kTracks[t] + "\"}}");
      line("{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + tid +
           ",\"args\":{\"sort_index\":" + std::to_string(t) + "}}");
    }
  }
  for (const InstrTiming& t : r.timings) {
    const auto d = static_cast<std::size_t>(t.device);
    const Instruction& in = p.code[d][static_cast<std::size_t>(t.instruction)];
    std::string name(instr_kind_name(in.kind));
    if (in.op != ir::kNoOp && in.stage >= 0) name += " " + p.graph_of_stage(in.stage).op(in.op).name;
    if (in.microbatch >= 0) name += " mb" + std::to_string(in.microbatch);
    if (in.stage >= 0) name += " vs" + std::to_string(in.stage);
    std::string args = "\"instruction\":" + std::to_string(t.instruction);
    if (in.microbatch >= 0) args += ",\"microbatch\":" + std::to_string(in.microbatch);
    if (in.stage >= 0) args += ",\"virtual_stage\":" + std::to_string(in.stage);
    if (in.kind == InstrKind::kSend || in.kind == InstrKind::kRecv) {
      const Buffer& b = p.buffers[static_cast<std::size_t>(in.buffer)];
      args += ",\"bytes\":" + std::to_string(in.count_elements * b.element_bytes);
    }
    line("{\"name\":\"" + escape(name) + "\",\"cat\":\"" + category(in) + "\",\"ph\":\"X\",\"pid\":" +
         std::to_string(d + 1) + ",\"tid\":" + std::to_string(d * 3 + static_cast<std::size_t>(track_of(in.kind)) + 1) +
         ",\"ts\":" + us(t.start_ns) + ",\"dur\":" + us(t.end_ns - t.start_ns) + ",\"args\":{" + args + "}}");
  }
  // Memory counters: bytes per role after each ALLOCATE/FREE, at its end time.
  std::vector<std::map<std::string, std::int64_t>> mem(n);
  for (const InstrTiming& t : r.timings) {
    const auto d = static_cast<std::size_t>(t.device);
    const Instruction& in = p.code[d][static_cast<std::size_t>(t.instruction)];
    if (in.kind != InstrKind::kAllocate && in.kind != InstrKind::kFree) continue;
    const Buffer& b = p.buffers[static_cast<std::size_t>(in.buffer)];
    mem[d][std::string(buffer_role_name(b.role))] += in.kind == InstrKind::kAllocate ? b.bytes : -b.bytes;
    std::string args;
    for (const auto& [k, v] : mem[d]) args += (args.empty() ? "\"" : ",\"") + k + "\":" + std::to_string(v);
    line("{\"name\":\"memory\",\"ph\":\"C\",\"pid\":" + std::to_string(d + 1) + ",\"ts\":" + us(t.end_ns) +
         ",\"args\":{" + args + "}}");
  }
  os << "\n]}\n";
  return os.str();
}

MeasuredSummary summarize(const Program& p, const ExecutionResult& r) {
  MeasuredSummary s;
  if (!r.iteration_s.empty()) {
    double sum = 0;
    s.iteration_min_s = r.iteration_s[0];
    for (double t : r.iteration_s) {
      sum += t;
      s.iteration_min_s = std::min(s.iteration_min_s, t);
    }
    s.iteration_mean_s = sum / static_cast<double>(r.iteration_s.size());
  }
  const std::size_t stages = p.stage_devices.size();
  std::vector<std::map<std::int32_t, double>> busy(stages);
  for (const auto& name : all_instr_kinds()) {
    s.kind_count[std::string(instr_kind_name(name))] = 0;
    s.kind_total_s[std::string(instr_kind_name(name))] = 0;
  }
  for (const InstrTiming& t : r.timings) {
    const Instruction& in = p.code[static_cast<std::size_t>(t.device)][static_cast<std::size_t>(t.instruction)];
    const double sec = static_cast<double>(t.end_ns - t.start_ns) * 1e-9;
    const std::string k(instr_kind_name(in.kind));
    ++s.kind_count[k];
    s.kind_total_s[k] += sec;
    ++s.instructions;
    if (in.kind == InstrKind::kRun && in.stage >= 0) busy[static_cast<std::size_t>(in.stage)][t.device] += sec;
  }
  for (const auto& b : busy) {
    double mx = 0;
    for (const auto& [dev, sec] : b) mx = std::max(mx, sec);
    s.stage_compute_s.push_back(mx);
  }
  return s;
}

core::Result<Prediction> read_prediction(const std::filesystem::path& path) {
  ALPASIM_ASSIGN_OR_RETURN(core::JsonDocument doc, core::read_json_file(path));
  const std::string file = path.string();
  Prediction pr;
  // alpa-sim's summary.json / --json carries the simulator report under "prediction".
  const bool is_summary = doc.root.is_object() && doc.root.contains("prediction");
  const std::string at = is_summary ? "/prediction" : "";
  const auto& root = is_summary ? doc.root["prediction"] : doc.root;
  if (!root.is_object() || !root.contains("iteration_time_s") || !root["iteration_time_s"].is_number()) {
    return core::invalid_argument(
        file + ": " + at + "/iteration_time_s: expected a number (a simulator report, or " +
        "alpa-sim's summary.json or --json output), got " +
        (root.is_object() && root.contains("iteration_time_s")
             ? core::describe_json_value(root["iteration_time_s"])
             : std::string("nothing")));
  }
  if (is_summary) {
    const core::Json* gpu = &doc.root;
    for (const char* key : {"scenario", "cluster", "gpu"}) {
      gpu = gpu->is_object() && gpu->contains(key) ? &(*gpu)[key] : nullptr;
      if (gpu == nullptr) break;
    }
    if (gpu != nullptr && gpu->is_string()) pr.gpu = gpu->get<std::string>();
  }
  pr.iteration_s = root["iteration_time_s"].get<double>();
  if (root.contains("devices") && root["devices"].is_array()) {
    for (std::size_t i = 0; i < root["devices"].size(); ++i) {
      const auto& d = root["devices"][i];
      if (!d.is_object() || !d.contains("compute_busy_s") || !d["compute_busy_s"].is_number()) {
        return core::invalid_argument(file + ": " + at + "/devices/" + std::to_string(i) +
                                      "/compute_busy_s: expected a number, got " +
                                      (d.is_object() && d.contains("compute_busy_s")
                                           ? core::describe_json_value(d["compute_busy_s"])
                                           : std::string("nothing")));
      }
      pr.stage_compute_s.push_back(d["compute_busy_s"].get<double>());
      pr.stage_peak_bytes.push_back(d.contains("peak_memory_bytes") && d["peak_memory_bytes"].is_number_integer()
                                        ? d["peak_memory_bytes"].get<std::int64_t>()
                                        : -1);
    }
  }
  return pr;
}

std::string summary_to_text(const Program& p, const MeasuredSummary& s,
                            const std::vector<std::int64_t>& peak_bytes,
                            const std::optional<Prediction>& pr) {
  std::ostringstream os;
  auto ms = [](double sec) { return core::format_fixed(sec * 1e3, 3); };
  os << "end to end: " << ms(s.iteration_mean_s) << " ms per iteration (mean; min " << ms(s.iteration_min_s)
     << " ms)";
  const std::string predicted_for = pr && !pr->gpu.empty() ? " for " + pr->gpu : "";
  if (pr && pr->times_comparable) {
    os << ", predicted " << ms(pr->iteration_s) << " ms" << predicted_for << ", error "
       << core::format_fixed(pct(s.iteration_mean_s, pr->iteration_s), 1) << " %";
  } else if (pr) {
    os << "; predicted " << ms(pr->iteration_s) << " ms" << predicted_for
       << " (not compared: measured on another kind of device; memory is compared)";
  }
  os << "\n\nper stage (compute = time in RUN instructions, slowest device of the mesh):\n";
  os << "  stage  devices  compute_ms  peak_memory";
  if (pr) os << (pr->times_comparable ? "  predicted_ms  error_%  predicted_memory" : "  predicted_ms  predicted_memory");
  os << "\n";
  for (std::size_t st = 0; st < s.stage_compute_s.size(); ++st) {
    std::int64_t peak = 0;
    for (std::int32_t d : p.stage_devices[st]) peak = std::max(peak, peak_bytes[static_cast<std::size_t>(d)]);
    os << "  " << st << "      " << p.stage_devices[st].size() << "        " << ms(s.stage_compute_s[st])
       << "      " << core::format_bytes(peak);
    if (pr && st < pr->stage_compute_s.size()) {
      os << "  " << ms(pr->stage_compute_s[st]) << "  ";
      if (pr->times_comparable) os << core::format_fixed(pct(s.stage_compute_s[st], pr->stage_compute_s[st]), 1) << "  ";
      os << (pr->stage_peak_bytes[st] >= 0 ? core::format_bytes(pr->stage_peak_bytes[st]) : std::string("-"));
    }
    os << "\n";
  }
  os << "\nper instruction kind (all devices, last iteration):\n  kind            count    total_ms   mean_us\n";
  for (const auto& [k, c] : s.kind_count) {
    if (c == 0) continue;
    const double tot = s.kind_total_s.at(k);
    char buf[128];
    std::snprintf(buf, sizeof buf, "  %-14s %6lld  %10s  %8s\n", k.c_str(), static_cast<long long>(c),
                  ms(tot).c_str(), core::format_fixed(tot * 1e6 / static_cast<double>(c), 2).c_str());
    os << buf;
  }
  return os.str();
}

core::Json summary_to_json(const Program& p, const MeasuredSummary& s,
                           const std::vector<std::int64_t>& peak_bytes,
                           const std::optional<Prediction>& pr) {
  core::Json j;
  j["iteration_mean_s"] = s.iteration_mean_s;
  j["iteration_min_s"] = s.iteration_min_s;
  if (pr) {
    j["predicted_iteration_s"] = pr->iteration_s;
    j["predicted_gpu"] = pr->gpu.empty() ? core::Json(nullptr) : core::Json(pr->gpu);
    j["times_compared"] = pr->times_comparable;
    if (pr->times_comparable) j["iteration_error_pct"] = pct(s.iteration_mean_s, pr->iteration_s);
  }
  core::Json stages = core::Json::array();
  for (std::size_t st = 0; st < s.stage_compute_s.size(); ++st) {
    core::Json sj;
    std::int64_t peak = 0;
    for (std::int32_t d : p.stage_devices[st]) peak = std::max(peak, peak_bytes[static_cast<std::size_t>(d)]);
    sj["stage"] = st;
    sj["devices"] = p.stage_devices[st].size();
    sj["compute_s"] = s.stage_compute_s[st];
    sj["peak_memory_bytes"] = peak;
    if (pr && st < pr->stage_compute_s.size()) {
      sj["predicted_compute_s"] = pr->stage_compute_s[st];
      if (pr->times_comparable) sj["compute_error_pct"] = pct(s.stage_compute_s[st], pr->stage_compute_s[st]);
      sj["predicted_peak_memory_bytes"] = pr->stage_peak_bytes[st];
    }
    stages.push_back(sj);
  }
  j["stages"] = stages;
  core::Json kinds = core::Json::object();
  for (const auto& [k, c] : s.kind_count) {
    kinds[k] = {{"count", c}, {"total_s", s.kind_total_s.at(k)}};
  }
  j["instruction_kinds"] = kinds;
  j["instructions_per_iteration"] = s.instructions;
  return j;
}

}  // namespace alpasim::exec
