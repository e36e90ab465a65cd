// The measured trace follows docs/trace.md's layout, and the summary adds up.
#include "exec/trace.h"

#include <doctest/doctest.h>

#include "core/json_reader.h"
#include "exec/cpu/cpu_backend.h"
#include "tests/unit/exec/exec_fixtures.h"

namespace alpasim::exec {
namespace {

TEST_CASE("measured trace: one complete event per instruction, metadata per device and track") {
  LowerOptions o;
  o.build_forward = [](std::int64_t b) -> core::Result<ir::Graph> { return testing::build_mlp(b, 2); };
  const auto plan = testing::make_plan({"mlp", ir::TransformerConfig{}}, {{0, 2, 1, 1, {0}}, {2, 4, 1, 1, {1}}},
                                       schema::Schedule::kOneFOneB, 2, 4);
  auto p = lower_plan(plan, o);
  REQUIRE(p.ok());
  RunOptions ro;
  ro.iterations = 2;
  auto r = cpu::make_cpu_backend()->run(*p, ro);
  REQUIRE(r.ok());
  CHECK(r->iteration_s.size() == 2);
  const std::size_t instructions = p->code[0].size() + p->code[1].size();
  CHECK(r->timings.size() == instructions);
  const std::string text = measured_trace_json(*p, *r, "test");
  auto doc = core::parse_json_text(text, "trace.json");
  REQUIRE(doc.ok());
  std::size_t complete = 0, meta = 0;
  for (const auto& e : doc->root["traceEvents"]) {
    if (e["ph"] == "X") ++complete;
    if (e["ph"] == "M") ++meta;
  }
  CHECK(complete == instructions);
  CHECK(meta == 2 * (2 + 3 * 2));  // per device: process name+index, 3 tracks x name+index
  const MeasuredSummary s = summarize(*p, *r);
  CHECK(s.instructions == static_cast<std::int64_t>(instructions));
  CHECK(s.kind_count.at("send") == 4);  // 2 microbatches x (activation + gradient)
  CHECK(s.stage_compute_s.size() == 2);
}

}  // namespace
}  // namespace alpasim::exec
