#include "sim/schedule.h"

#include <algorithm>
#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace alpasim::sim {
namespace {

// Compact program text: "F0 F1 B0 ..." with ".c" suffixes for chunks > 0.
std::string text(const std::vector<ScheduledOp>& prog) {
  std::string s;
  for (const auto& op : prog) {
    if (!s.empty()) s += ' ';
    s += op.type == ScheduledOp::Type::kForward ? 'F' : 'B';
    s += std::to_string(op.microbatch);
    if (op.chunk > 0) s += "." + std::to_string(op.chunk);
  }
  return s;
}

TEST_CASE("GPipe and 1F1B programs") {
  auto g = build_schedule(PipelineSchedule::kGPipe, 2, 3, 1);
  REQUIRE(g.ok());
  CHECK(text((*g)[0]) == "F0 F1 F2 B0 B1 B2");
  auto f = build_schedule(PipelineSchedule::kOneFOneB, 4, 6, 1);
  REQUIRE(f.ok());
  // Stage 0 warms up with p-s-1 = 3 forwards; the last stage alternates from the start.
  CHECK(text((*f)[0]) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  CHECK(text((*f)[2]) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  CHECK(text((*f)[3]) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
}

TEST_CASE("1F1B holds min(p - s, B) microbatches in flight, GPipe holds B") {
  for (int p = 1; p <= 6; ++p) {
    for (int m = 1; m <= 9; ++m) {
      auto f = build_schedule(PipelineSchedule::kOneFOneB, p, m, 1);
      auto g = build_schedule(PipelineSchedule::kGPipe, p, m, 1);
      REQUIRE(f.ok());
      REQUIRE(g.ok());
      for (int s = 0; s < p; ++s) {
        CHECK(max_in_flight((*f)[static_cast<std::size_t>(s)]) == std::min(p - s, m));
        CHECK(max_in_flight((*g)[static_cast<std::size_t>(s)]) == m);
        CHECK((*f)[static_cast<std::size_t>(s)].size() == static_cast<std::size_t>(2 * m));
      }
    }
  }
}

TEST_CASE("interleaved 1F1B follows Megatron-LM's chunk order and warm-up") {
  auto r = build_schedule(PipelineSchedule::kInterleaved1F1B, 2, 4, 2);
  REQUIRE(r.ok());
  // Forward k: chunk (k mod 4)/2, microbatch (k/4)·2 + k mod 2. Stage 0 warms up with
  // (2-0-1)·2 + (2-1)·2 = 4 forwards, stage 1 with 2.
  CHECK(text((*r)[0]) == "F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1 B3.1 B2 B3");
  CHECK(text((*r)[1]) == "F0 F1 F0.1 B0.1 F1.1 B1.1 F2 B0 F3 B1 F2.1 B2.1 F3.1 B3.1 B2 B3");
  // In flight: warm-up + 1, at most B·v; all of them when B = p (Megatron's special case).
  for (int p : {2, 4}) {
    for (int v : {2, 3}) {
      for (int m : {p, 2 * p, 4 * p}) {
        auto s = build_schedule(PipelineSchedule::kInterleaved1F1B, p, m, v);
        REQUIRE(s.ok());
        for (int st = 0; st < p; ++st) {
          const int warmup = m == p ? m * v : std::min((p - st - 1) * 2 + (v - 1) * p, m * v);
          CHECK(max_in_flight((*s)[static_cast<std::size_t>(st)]) == std::min(warmup + 1, m * v));
        }
      }
    }
  }
}

TEST_CASE("the closed-form in-flight count equals the simulated programs'") {
  for (auto schedule : {PipelineSchedule::kGPipe, PipelineSchedule::kOneFOneB,
                        PipelineSchedule::kInterleaved1F1B}) {
    for (int p = 1; p <= 6; ++p) {
      for (int v = 1; v <= 3; ++v) {
        if (v > 1 && schedule != PipelineSchedule::kInterleaved1F1B) continue;
        for (int m = 1; m <= 12; ++m) {
          auto r = build_schedule(schedule, p, m, v);
          if (!r.ok()) continue;  // interleaved needs p | m
          for (int s = 0; s < p; ++s) {
            CHECK(max_in_flight_closed_form(schedule, p, s, m, v) ==
                  max_in_flight((*r)[static_cast<std::size_t>(s)]));
          }
        }
      }
    }
  }
}

TEST_CASE("schedule errors name the parameter") {
  auto a = build_schedule(PipelineSchedule::kInterleaved1F1B, 4, 6, 2);
  REQUIRE_FALSE(a.ok());
  CHECK(a.status().message() ==
        "num_microbatches: the interleaved schedule needs a multiple of the 4 pipeline stages "
        "(Megatron-LM), got 6");
  auto b = build_schedule(PipelineSchedule::kOneFOneB, 4, 8, 2);
  REQUIRE_FALSE(b.ok());
  CHECK(b.status().message() == "interleave: expected 1 for schedule 1f1b, got 2");
  auto c = parse_schedule("1F1B");
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message() ==
        "unknown pipeline schedule '1F1B': expected \"gpipe\", \"1f1b\" or \"interleaved_1f1b\"");
  CHECK(*parse_schedule("interleaved_1f1b") == PipelineSchedule::kInterleaved1F1B);
}

}  // namespace
}  // namespace alpasim::sim
