#include "sim/schedule.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace alpasim::sim {

std::string_view schedule_name(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::kGPipe: return "gpipe";
    case PipelineSchedule::kOneFOneB: return "1f1b";
    case PipelineSchedule::kInterleaved1F1B: return "interleaved_1f1b";
  }
  return "?";
}

core::Result<PipelineSchedule> parse_schedule(std::string_view name) {
  for (auto s : {PipelineSchedule::kGPipe, PipelineSchedule::kOneFOneB,
                 PipelineSchedule::kInterleaved1F1B}) {
    if (schedule_name(s) == name) return s;
  }
  return core::invalid_argument("unknown pipeline schedule '" + std::string(name) +
                                "': expected \"gpipe\", \"1f1b\" or \"interleaved_1f1b\"");
}

namespace {
using Op = ScheduledOp;
Op fwd(int mb, int chunk) { return Op{Op::Type::kForward, mb, chunk}; }
Op bwd(int mb, int chunk) { return Op{Op::Type::kBackward, mb, chunk}; }
}  // namespace

core::Result<std::vector<std::vector<ScheduledOp>>> build_schedule(PipelineSchedule schedule,
                                                                   int p, int m, int v) {
  if (p < 1) return core::invalid_argument("num_stages: expected >= 1, got " + std::to_string(p));
  if (m < 1) {
    return core::invalid_argument("num_microbatches: expected >= 1, got " + std::to_string(m));
  }
  if (v < 1) return core::invalid_argument("interleave: expected >= 1, got " + std::to_string(v));
  if (schedule != PipelineSchedule::kInterleaved1F1B && v != 1) {
    return core::invalid_argument("interleave: expected 1 for schedule " +
                                  std::string(schedule_name(schedule)) + ", got " +
                                  std::to_string(v));
  }
  std::vector<std::vector<ScheduledOp>> programs(static_cast<std::size_t>(p));
  for (int s = 0; s < p; ++s) {
    auto& prog = programs[static_cast<std::size_t>(s)];
    prog.reserve(static_cast<std::size_t>(2 * m * v));
    switch (schedule) {
      case PipelineSchedule::kGPipe:
        for (int i = 0; i < m; ++i) prog.push_back(fwd(i, 0));
        for (int i = 0; i < m; ++i) prog.push_back(bwd(i, 0));
        break;
      case PipelineSchedule::kOneFOneB: {
        const int warmup = std::min(p - s - 1, m);
        for (int i = 0; i < warmup; ++i) prog.push_back(fwd(i, 0));
        for (int i = 0; i < m - warmup; ++i) {
          prog.push_back(fwd(warmup + i, 0));
          prog.push_back(bwd(i, 0));
        }
        for (int i = m - warmup; i < m; ++i) prog.push_back(bwd(i, 0));
        break;
      }
      case PipelineSchedule::kInterleaved1F1B: {
        if (m % p != 0) {
          return core::invalid_argument(
              "num_microbatches: the interleaved schedule needs a multiple of the " +
              std::to_string(p) + " pipeline stages (Megatron-LM), got " + std::to_string(m));
        }
        const int total = m * v;
        const int group = p * v;
        auto chunk_f = [&](int k) { return (k % group) / p; };
        auto chunk_b = [&](int k) { return v - 1 - (k % group) / p; };
        auto micro = [&](int k) { return (k / group) * p + k % p; };
        int warmup = (m == p) ? total : std::min((p - s - 1) * 2 + (v - 1) * p, total);
        for (int k = 0; k < warmup; ++k) prog.push_back(fwd(micro(k), chunk_f(k)));
        for (int i = 0; i < total - warmup; ++i) {
          const int k = warmup + i;
          prog.push_back(fwd(micro(k), chunk_f(k)));
          prog.push_back(bwd(micro(i), chunk_b(i)));
        }
        for (int k = total - warmup; k < total; ++k) prog.push_back(bwd(micro(k), chunk_b(k)));
        break;
      }
    }
  }
  return programs;
}

int max_in_flight(const std::vector<ScheduledOp>& program) {
  int now = 0;
  int peak = 0;
  for (const auto& op : program) {
    now += op.type == ScheduledOp::Type::kForward ? 1 : -1;
    peak = std::max(peak, now);
  }
  return peak;
}

int max_in_flight_closed_form(PipelineSchedule schedule, int p, int s, int m, int v) {
  ALPASIM_CHECK(s >= 0 && s < p) << "stage " << s << " of " << p;
  switch (schedule) {
    case PipelineSchedule::kGPipe: return m;
    case PipelineSchedule::kOneFOneB: return std::min(p - s, m);
    case PipelineSchedule::kInterleaved1F1B: {
      const int total = m * v;
      const int warmup = m == p ? total : std::min((p - s - 1) * 2 + (v - 1) * p, total);
      return std::min(warmup + 1, total);
    }
  }
  return m;
}

}  // namespace alpasim::sim
