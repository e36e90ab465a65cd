#include "driver/report_html.h"

#include <string>

#include <doctest/doctest.h>

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

TEST_CASE("the HTML report is one self-contained page with six charts") {
  Scenario s = parse_scenario(kScenario, "s.json", ".").value();
  SweepResult sweep = run_sweep(s, testing::fake_plan, RunOptions{}).value();
  const std::string html = sweep_report_html(sweep, s);
  // Throughput, aggregate, iteration time, memory; stage memory and timeline of the best.
  CHECK(html.find("data-charts-expected=\"6\"") != std::string::npos);
  for (const char* id : {"chart-throughput", "chart-aggregate", "chart-iteration", "chart-memory",
                         "chart-stage-memory", "chart-timeline"}) {
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
  CHECK(html.find("data-charts-expected=\"5\"") != std::string::npos);
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

}  // namespace
}  // namespace alpasim::driver
