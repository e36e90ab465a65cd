// The measured trace follows docs/trace.md's layout, and the summary adds up.
#include "exec/trace.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

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

namespace alpasim::exec {
namespace {

TEST_CASE("a simulator report gives predicted columns and the error in percent") {
  const std::filesystem::path dir = std::filesystem::path(ALPASIM_BINARY_DIR) / "tests" / "exec_trace_test";
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "report.json") << R"({"iteration_time_s": 0.5, "num_gpus": 2,
      "devices": [{"device": 0, "compute_busy_s": 0.25, "peak_memory_bytes": 1000}]})";
    std::ofstream(dir / "bad.json") << R"({"devices": []})";
  }
  auto pr = read_prediction(dir / "report.json");
  REQUIRE(pr.ok());
  CHECK(pr->iteration_s == 0.5);
  CHECK(pr->stage_compute_s == std::vector<double>{0.25});
  CHECK(pr->stage_peak_bytes == std::vector<std::int64_t>{1000});
  auto bad = read_prediction(dir / "bad.json");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        (dir / "bad.json").string() +
            ": /iteration_time_s: expected a number (a simulator report, or alpa-sim's summary.json "
            "or --json output), got nothing");

  // Measured 0.75 s against 0.5 s predicted: +50 %; stage 0 measured 0.2 s against 0.25: -20 %.
  Program p;
  p.stage_devices = {{0}};
  MeasuredSummary s;
  s.iteration_mean_s = 0.75;
  s.stage_compute_s = {0.2};
  const core::Json j = summary_to_json(p, s, {4096}, *pr);
  CHECK(j["iteration_error_pct"].get<double>() == doctest::Approx(50.0));
  CHECK(j["stages"][0]["compute_error_pct"].get<double>() == doctest::Approx(-20.0));
  CHECK(j["stages"][0]["peak_memory_bytes"].get<std::int64_t>() == 4096);
  CHECK(j["stages"][0]["predicted_peak_memory_bytes"].get<std::int64_t>() == 1000);
  const std::string text = summary_to_text(p, s, {4096}, *pr);
  CHECK(text.find("predicted 500.000 ms, error 50.0 %") != std::string::npos);
}

TEST_CASE("alpa-sim's summary.json is a prediction, against the CPU backend no error percent") {
  const std::filesystem::path dir = std::filesystem::path(ALPASIM_BINARY_DIR) / "tests" / "exec_trace_test";
  std::filesystem::create_directories(dir);
  {
    // The shape of alpa-sim --json / --out summary.json (tests/golden/*.json).
    std::ofstream(dir / "summary.json") << R"({"status": "planned",
      "scenario": {"cluster": {"gpu": "v100-16gb", "nodes": 1}},
      "prediction": {"iteration_time_s": 2.0, "num_gpus": 1,
        "devices": [{"stage": 0, "compute_busy_s": 1.5, "peak_memory_bytes": 2048}]}})";
    std::ofstream(dir / "summary_bad.json") << R"({"prediction": {"devices": []}})";
  }
  auto pr = read_prediction(dir / "summary.json");
  REQUIRE(pr.ok());
  CHECK(pr->iteration_s == 2.0);
  CHECK(pr->gpu == "v100-16gb");
  CHECK(pr->stage_compute_s == std::vector<double>{1.5});
  CHECK(pr->stage_peak_bytes == std::vector<std::int64_t>{2048});
  auto bad = read_prediction(dir / "summary_bad.json");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        (dir / "summary_bad.json").string() +
            ": /prediction/iteration_time_s: expected a number (a simulator report, or alpa-sim's "
            "summary.json or --json output), got nothing");

  Program p;
  p.stage_devices = {{0}};
  MeasuredSummary s;
  s.iteration_mean_s = 3.0;
  s.stage_compute_s = {1.0};
  // On a GPU backend: compared, error in percent.
  CHECK(summary_to_text(p, s, {4096}, *pr).find("predicted 2000.000 ms for v100-16gb, error 50.0 %") !=
        std::string::npos);
  // On the CPU backend: side by side, no percentage anywhere, memory still compared.
  pr->times_comparable = false;
  const core::Json j = summary_to_json(p, s, {4096}, *pr);
  CHECK_FALSE(j.contains("iteration_error_pct"));
  CHECK_FALSE(j["stages"][0].contains("compute_error_pct"));
  CHECK(j["times_compared"] == false);
  CHECK(j["predicted_gpu"] == "v100-16gb");
  CHECK(j["stages"][0]["predicted_peak_memory_bytes"].get<std::int64_t>() == 2048);
  const std::string text = summary_to_text(p, s, {4096}, *pr);
  CHECK(text.find("; predicted 2000.000 ms for v100-16gb (not compared: measured on another kind of "
                  "device; memory is compared)") != std::string::npos);
  CHECK(text.find("error") == std::string::npos);
  CHECK(text.find("%") == std::string::npos);
}

}  // namespace
}  // namespace alpasim::exec
