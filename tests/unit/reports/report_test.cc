#include "driver/report_html.h"

#include <map>
#include <set>
#include <string>

#include <doctest/doctest.h>

#include "driver/plan_point.h"
#include "driver/report_markdown.h"
#include "fake_plan.h"

namespace alpasim::driver {
namespace {

constexpr const char* kScenario = R"({
  "schema_version": 1,
  "name": "report <test> & co",
  "model": {"builtin": "gpt", "name": "small", "num_layers": 4, "hidden_size": 256,
            "num_heads": 4, "seq_len": 128, "vocab_size": 1000},
  "cluster": {"preset": "dgx-a100-80gb", "nodes": 1},
  "training": {"global_batch_size": 64, "dtype": "fp16", "optimizer": "adam", "microbatches": "auto"},
  "search": {"mode": "alpa"},
  "what_if": {"num_gpus": [2, 4, 8, 16]}
})";

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_CASE("the vendored libraries and the template are embedded") {
  CHECK(report_asset("vega.min.js").size() > 100000);
  CHECK(report_asset("vega-lite.min.js").size() > 100000);
  CHECK(report_asset("vega-embed.min.js").size() > 10000);
  CHECK(report_asset("template.html").find("{{SPECS}}") != std::string::npos);
  CHECK(report_asset("nope").empty());
}

TEST_CASE("the HTML report is one self-contained page with seven charts") {
  Scenario s = parse_scenario(kScenario, "s.json", ".").value();
  SweepResult sweep = run_sweep(s, testing::fake_plan, RunOptions{}).value();
  const std::string html = sweep_report_html(sweep, s);
  // Throughput, aggregate, iteration time, memory; of the best: stage memory by component,
  // compute time per stage by task, timeline.
  CHECK(html.find("data-charts-expected=\"7\"") != std::string::npos);
  for (const char* id : {"chart-throughput", "chart-aggregate", "chart-iteration", "chart-memory",
                         "chart-stage-memory", "chart-stage-busy", "chart-timeline"}) {
    CHECK(count(html, std::string("id=\"") + id + "\"") == 1);
  }
  // Nothing is fetched at view time: no external scripts, styles or images.
  CHECK(count(html, "<script src") == 0);
  CHECK(count(html, "<link") == 0);
  CHECK(count(html, "src=\"http") == 0);
  // User text is escaped.
  CHECK(html.find("report &lt;test&gt; &amp; co") != std::string::npos);
  // Same input, same bytes.
  CHECK(sweep_report_html(sweep, s) == html);
}

TEST_CASE("the Markdown report: question, answer first, a row per point") {
  Scenario s = parse_scenario(kScenario, "s.json", ".").value();
  SweepResult sweep = run_sweep(s, testing::fake_plan, RunOptions{}).value();
  const std::string md = sweep_report_markdown(sweep, s);
  CHECK(md.find("# What-if study: report <test> & co\n\n## Question\n") == 0);
  // Best: 2 GPUs, 100 - 2/4 = 99.5 TFLOP/s, 64/2 = 32 s, 32 GiB of 80 GiB.
  CHECK(md.find("- Highest throughput: 99.5 TFLOP/s per GPU at num_gpus 2 (2 GPUs), iteration "
                "32.000 s, 32.0 GiB of 75.0 GiB usable per GPU, plan fake, 2 GPUs.") !=
        std::string::npos);
  CHECK(md.find("| 3 | 16 | 16 | fake, 16 GPUs | 4.000 | 96.0 | 4.0 GiB | yes |") !=
        std::string::npos);
}

TEST_CASE("the capacity report has time, cost and throughput charts") {
  std::string text = kScenario;
  text.replace(text.find("\"what_if\": {\"num_gpus\": [2, 4, 8, 16]}"),
               std::string("\"what_if\": {\"num_gpus\": [2, 4, 8, 16]}").size(),
               R"("capacity": {"iterations": 100, "deadline_days": 1, "candidates": [
                   {"preset": "dgx-h100", "price_usd_per_gpu_hour": 3, "nodes": [1, 2]}]})");
  Scenario s = parse_scenario(text, "s.json", ".").value();
  CapacityResult r = run_capacity(s, testing::fake_plan, RunOptions{}).value();
  const std::string html = capacity_report_html(r, s);
  CHECK(html.find("data-charts-expected=\"6\"") != std::string::npos);
  CHECK(count(html, "id=\"chart-cost\"") == 1);
  const std::string md = capacity_report_markdown(r, s);
  CHECK(md.find("- Cost-optimal: dgx-h100 × 1 node (8 GPUs)") != std::string::npos);
  // The columns a planner asks for: MFU, tokens/s per GPU, goodput, days with the band.
  CHECK(md.find("| # | preset | nodes | GPUs | plan | iteration (s) | MFU | tokens/s per GPU | "
                "memory per GPU | fits | goodput | days (range) | cost | meets deadline |") !=
        std::string::npos);
  CHECK(html.find("<th>MFU</th>") != std::string::npos);
  CHECK(count(html, "id=\"chart-mfu\"") == 1);
}

// Issue 17 #6: reports of 192-1,024-microbatch iterations drew an unreadable barcode. A
// real fixed plan with 64 microbatches keeps the first and last four in its timeline, counts
// every task in the per-stage busy times, and breaks each stage's peak into components.
TEST_CASE("long iterations: the timeline keeps the first and last microbatches, busy time counts all") {
  Scenario s = parse_scenario(R"({"schema_version": 1, "name": "long",
      "model": {"builtin": "gpt", "num_layers": 4, "hidden_size": 256, "num_heads": 8,
                "seq_len": 128, "vocab_size": 1024},
      "cluster": {"preset": "dgx-a100-80gb", "nodes": 1},
      "training": {"global_batch_size": 64, "dtype": "fp16"},
      "search": {"mode": "fixed", "megatron": {"tp": 4, "pp": 2, "dp": 1,
                 "microbatch_size": 1, "recompute": "none"}}})",
                              "s.json", ".").value();
  const PointResult p = default_plan_point_fn(1)(s).value();
  CHECK(p.timeline_microbatches == 64);
  CHECK(p.timeline_edge_microbatches == 4);
  std::set<int> shown;
  for (const TimelineTask& t : p.timeline) shown.insert(t.microbatch);
  CHECK(shown == std::set<int>{-1, 0, 1, 2, 3, 60, 61, 62, 63});
  // Busy time: both stages, forward and backward of all 64 microbatches, within the iteration.
  std::map<std::pair<int, std::string>, double> busy;
  for (const StageBusy& b : p.stage_busy) busy[{b.stage, b.kind}] = b.busy_s;
  for (int stage : {0, 1}) {
    double forward_shown = 0;
    for (const TimelineTask& t : p.timeline) {
      if (t.stage == stage && t.kind == "forward") forward_shown += t.end_s - t.start_s;
    }
    // The timeline shows 8 of 64 forwards; the busy time has them all (equal durations).
    CHECK(busy.at({stage, "forward"}) == doctest::Approx(forward_shown * 8));
    double total = 0;
    for (const auto& [key, seconds] : busy) total += key.first == stage ? seconds : 0;
    CHECK(total <= p.iteration_time_s);
  }
  REQUIRE(p.stage_memory_components_bytes.size() == 2);
  for (std::size_t stage = 0; stage < 2; ++stage) {
    std::int64_t sum = 0;
    for (std::int64_t b : p.stage_memory_components_bytes[stage]) sum += b;
    CHECK(sum == p.stage_memory_bytes[stage]);
  }
  // The chart says what it left out; the JSON round-trips it all.
  SweepResult sweep;
  sweep.scenario_name = "long";
  sweep.scenario_file = "s.json";
  PointRow row;
  row.ok = true;
  row.num_gpus = 8;
  row.gpu = "a100-80gb";
  row.result = p;
  sweep.rows.push_back(row);
  const std::string html = sweep_report_html(sweep, s);
  CHECK(html.find("(8 of 64 microbatches: the steady state between is left out)") !=
        std::string::npos);
  CHECK(html.find("microbatches 60-63 (drain) and the step") != std::string::npos);
  const PointResult again =
      point_result_from_json(point_result_to_json(p), "p").value();
  CHECK(point_result_to_json(again) == point_result_to_json(p));
}

}  // namespace
}  // namespace alpasim::driver
