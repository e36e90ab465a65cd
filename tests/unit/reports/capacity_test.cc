#include "driver/capacity.h"

#include <string>

#include <doctest/doctest.h>

#include "cluster/cluster_spec.h"
#include "driver/report_markdown.h"
#include "fake_plan.h"

namespace alpasim::driver {
namespace {

// seq_len 128, global batch 64: 8192 tokens per iteration.
constexpr const char* kScenario = R"({
  "schema_version": 1,
  "name": "capacity test",
  "model": {"builtin": "gpt", "name": "small", "num_layers": 4, "hidden_size": 256,
            "num_heads": 4, "seq_len": 128, "vocab_size": 1000},
  "cluster": {"preset": "dgx-a100-80gb", "nodes": 1},
  "training": {"global_batch_size": 64, "dtype": "fp16", "optimizer": "adam", "microbatches": "auto"},
  "search": {"mode": "alpa"},
  "capacity": CAPACITY
})";

std::string with(const std::string& block) {
  std::string s = kScenario;
  s.replace(s.find("CAPACITY"), 8, block);
  return s;
}

TEST_CASE("capacity is validated when the scenario loads") {
  auto err = [](const std::string& block) {
    auto s = parse_scenario(with(block), "s.json", ".");
    REQUIRE_FALSE(s.ok());
    return s.status().message();
  };
  CHECK(err(R"({"deadline_days": 1, "candidates": []})") ==
        "s.json: /capacity: expected \"tokens_to_train\" or \"iterations\", got neither");
  CHECK(err(R"({"iterations": 5, "deadline_days": 1, "candidates": []})") ==
        "s.json: /capacity/candidates: expected a non-empty array, got []");
  CHECK(err(R"({"iterations": 5, "deadline_days": 1, "candidates": [
                {"preset": "dgx-h100", "price_usd_per_gpu_hour": 2, "nodes": [4, 2]}]})") ==
        "s.json: /capacity/candidates/0/nodes/1: expected node counts in increasing order, got 2 "
        "after 4");
  CHECK(err(R"({"iterations": 5, "deadline_days": 1, "candidates": [
                {"preset": "dgx-h100", "price_usd_per_gpu_hour": 2, "nodes": [1], "gpu": 1}]})")
            .find("s.json: /capacity/candidates/0/gpu: unknown key") == 0);
}

TEST_CASE("time, cost, the smallest cluster per kind and the cost-optimal choice") {
  // 8192e3 tokens / 8192 per iteration = 1000 iterations. Fake plan: iteration = 64 / GPUs s.
  //   a100 × 1 node (8 GPUs):  8 s  -> 8000 s;  cost 8000/3600 · 8 · $2   = $35.56
  //   a100 × 2 nodes (16):     4 s  -> 4000 s;  cost 4000/3600 · 16 · $2  = $35.56
  //   h100 × 1 node (8):       8000 s; cost 8000/3600 · 8 · $1.5          = $26.67
  //   h100 × 4 nodes (32):     2 s -> 2000 s;   cost 2000/3600 · 32 · $1.5 = $26.67
  // Deadline 0.05 days = 4320 s: a100 × 2 and h100 × 4 meet it; both h100 options cost the
  // same but only the 4-node one meets the deadline, so it is the cost-optimal choice.
  auto s = parse_scenario(with(R"({"tokens_to_train": 8192000, "deadline_days": 0.05,
      "goodput": "ideal", "candidates": [
        {"preset": "dgx-a100-80gb", "price_usd_per_gpu_hour": 2, "nodes": {"min": 1, "max": 2}},
        {"preset": "dgx-h100", "price_usd_per_gpu_hour": 1.5, "nodes": [1, 4]}]})"),
                          "s.json", ".");
  REQUIRE(s.ok());
  CapacityResult r = run_capacity(*s, testing::fake_plan, RunOptions{}).value();
  CHECK(r.iterations == 1000);
  CHECK(r.tokens_per_iteration == 8192.0);
  REQUIRE(r.options.size() == 4);
  CHECK(r.options[1].time_to_train_s == doctest::Approx(4000.0));
  CHECK(r.options[1].cost_usd == doctest::Approx(4000.0 / 3600 * 16 * 2));
  CHECK_FALSE(r.options[0].meets_deadline);
  CHECK(r.options[1].meets_deadline);
  CHECK(r.answers[0].smallest_meeting_deadline == std::optional<std::size_t>(1));
  CHECK(r.answers[1].smallest_meeting_deadline == std::optional<std::size_t>(3));
  CHECK(r.cost_optimal == std::optional<std::size_t>(3));
  // Fastest: h100 × 4 (2000 s; a100 × 2 takes 4000 s).
  CHECK(r.fastest == std::optional<std::size_t>(3));
  CHECK(r.options[0].found_by == "ladder");
  CHECK(r.options[3].found_by == "listed");
  // MFU: 92 model TFLOP/s of the H100's fp16 peak; tokens: 8192 per 2 s over 32 GPUs.
  const double peak = cluster::make_preset_cluster("dgx-h100", 1)->gpu.peak(core::DType::kFp16).value();
  CHECK(r.options[3].mfu == doctest::Approx(92e12 / peak));
  CHECK(r.options[3].tokens_per_s_per_gpu == doctest::Approx(8192.0 / 2 / 32));
  CHECK(r.options[3].goodput.fraction == 1.0);
  // The A100 band is SC'21's measured 9.7 %, rounded up to 9.8.
  CHECK(r.options[1].time_to_train_high_s == doctest::Approx(4000.0 * 1.098));
  CHECK(r.options[1].cost_low_usd == doctest::Approx(4000.0 / 3600 * 16 * 2 * 0.902));
  const std::string csv = capacity_to_csv(r);
  CHECK(csv.find("3,dgx-h100,4,listed,32,h100-sxm,1.5,ok,yes,\"fake, 32 GPUs\",2.0,92.0,") !=
        std::string::npos);
  CHECK(capacity_to_json(r)["cost_optimal"] == 3);
  CHECK(capacity_to_json(r)["options"][3]["roles"] == core::Json::array({"cost-optimal", "fastest",
        "smallest of its kind meeting the deadline"}));
  CHECK(capacity_to_json(r)["options"][2]["roles"] ==
        core::Json::array({"smallest of its kind that fits"}));
}

TEST_CASE("no option meets an impossible deadline") {
  auto s = parse_scenario(with(R"({"iterations": 1000000, "deadline_days": 0.001,
      "candidates": [{"preset": "dgx-h100", "price_usd_per_gpu_hour": 3, "nodes": [1]}]})"),
                          "s.json", ".");
  REQUIRE(s.ok());
  CapacityResult r = run_capacity(*s, testing::fake_plan, RunOptions{}).value();
  CHECK_FALSE(r.cost_optimal.has_value());
  CHECK_FALSE(r.answers[0].smallest_meeting_deadline.has_value());
  CHECK(capacity_to_json(r)["cost_optimal"].is_null());
}

TEST_CASE("a node range is searched: the smallest size meeting the deadline by bisection") {
  // Fake plan on dgx-a100-80gb: iteration 64 / (8n) s, so 1000 iterations take 8000/n s.
  // Deadline 219.18 s: 36 nodes take 222.2 s, 37 take 216.2 s. Cost 8000/n/3600 · 8n · $2
  // is the same at every size, so the cheapest meeting it is the smallest (fewer GPUs).
  const std::string block = R"({"iterations": 1000, "deadline_days": 0.0025367800,
      "goodput": "ideal", "candidates": [
        {"preset": "dgx-a100-80gb", "price_usd_per_gpu_hour": 2, "nodes": NODES}]})";
  auto study = [&](const std::string& nodes) {
    std::string b = block;
    b.replace(b.find("NODES"), 5, nodes);
    auto s = parse_scenario(with(b), "s.json", ".");
    REQUIRE(s.ok());
    return run_capacity(*s, testing::fake_plan, RunOptions{}).value();
  };
  const CapacityResult searched = study(R"({"min": 1, "max": 64})");
  std::string every = "[1";
  for (int n = 2; n <= 64; ++n) every += ", " + std::to_string(n);
  const CapacityResult enumerated = study(every + "]");
  auto nodes_of = [](const CapacityResult& r, const std::optional<std::size_t>& i) {
    REQUIRE(i.has_value());
    return r.options[*i].nodes;
  };
  CHECK(nodes_of(enumerated, enumerated.answers[0].smallest_meeting_deadline) == 37);
  CHECK(nodes_of(searched, searched.answers[0].smallest_meeting_deadline) == 37);
  CHECK(nodes_of(searched, searched.answers[0].cheapest_meeting_deadline) == 37);
  CHECK(nodes_of(searched, searched.answers[0].smallest_fitting) == 1);
  CHECK(nodes_of(searched, searched.answers[0].fastest) == 64);
  // Ladder 1, 2, 4, ..., 64 (7 sizes), then 48, 40, 36, 38, 37: 12 plans instead of 64.
  REQUIRE(searched.options.size() == 12);
  std::vector<std::int64_t> sizes;
  for (const CapacityOption& o : searched.options) sizes.push_back(o.nodes);
  CHECK(sizes == std::vector<std::int64_t>{1, 2, 4, 8, 16, 32, 36, 37, 38, 40, 48, 64});
  CHECK(searched.options[7].found_by == "bisection");
  const std::string md = capacity_report_markdown(searched, parse_scenario(with(R"({"iterations": 1,
      "deadline_days": 1, "candidates": [{"preset": "dgx-h100", "nodes": [1]}]})"), "s.json", ".").value());
  CHECK(md.find("- dgx-a100-80gb: smallest that fits 1 node; smallest meeting the deadline 37 "
                "nodes; fastest 64 nodes. Band ±9.8 %: Megatron-LM SC'21 Table 1 (10 runs, "
                "32-3,072 A100, fp16): MAPE 9.7 %.\n") != std::string::npos);

  // On a grid of 4 nodes the answer is the first grid size past the threshold: 40.
  const CapacityResult stepped = study(R"({"min": 4, "max": 64, "step": 4})");
  CHECK(nodes_of(stepped, stepped.answers[0].smallest_meeting_deadline) == 40);
  for (const CapacityOption& o : stepped.options) CHECK(o.nodes % 4 == 0);
}

TEST_CASE("goodput: the Young/Daly model in closed form, and its optimum") {
  // 10 GPUs at 1000 GPU-hours each: M = 360,000 s; restart 600 s; a 1 TB checkpoint at
  // 1 GB/s per GPU: δ = 100 s. τ* = -δ + sqrt(δ² + 2δ(M - R)) = 8378.797 s.
  GoodputSpec spec;
  spec.mtbf_gpu_hours = 1000;
  spec.restart_s = 600;
  spec.checkpoint_write_gbyte_per_s_per_gpu = 1;
  const Goodput g = goodput_of(spec, 10, 1e12, 1e6);
  CHECK(g.cluster_mtbf_s == doctest::Approx(360000.0));
  CHECK(g.checkpoint_write_s == doctest::Approx(100.0));
  CHECK(g.checkpoint_interval_s == doctest::Approx(8378.797084492588));
  CHECK(g.fraction == doctest::Approx(0.9750588969875206));
  CHECK(g.expected_failures == doctest::Approx(1e6 / 0.9750588969875206 / 360000.0));
  // The optimum: a 1 % shorter or longer interval gives less goodput.
  for (double scale : {0.99, 1.01}) {
    GoodputSpec other = spec;
    other.checkpoint_interval_s = g.checkpoint_interval_s * scale;
    CHECK(goodput_of(other, 10, 1e12, 1e6).fraction < g.fraction);
  }
  // Failures faster than a restart: the run never finishes.
  spec.mtbf_gpu_hours = 1;
  CHECK(goodput_of(spec, 8, 1e12, 1e6).fraction == 0);
  GoodputSpec ideal;
  ideal.ideal = true;
  CHECK(goodput_of(ideal, 1024, 1e15, 1e6).fraction == 1);
}

TEST_CASE("wall-clock days divide compute time by goodput, a cluster that never finishes") {
  auto s = parse_scenario(with(R"({"iterations": 1000, "deadline_days": 10,
      "goodput": {"mtbf_gpu_hours": 1000, "restart_s": 600,
                  "checkpoint_write_gbyte_per_s_per_gpu": 0.5},
      "candidates": [{"preset": "dgx-a100-80gb", "nodes": [1, 2]}]})"),
                          "s.json", ".");
  REQUIRE(s.ok());
  CapacityResult r = run_capacity(*s, testing::fake_plan, RunOptions{}).value();
  REQUIRE(r.options.size() == 2);
  // The checkpoint: weights and optimizer state of the 4-layer model.
  CHECK(r.checkpoint_bytes > 0);
  const CapacityOption& o = r.options[1];
  const Goodput g = goodput_of(r.spec.goodput, 16, r.checkpoint_bytes, o.compute_time_s);
  CHECK(o.goodput.fraction == g.fraction);
  CHECK(o.goodput.fraction < 1);
  CHECK(o.time_to_train_s == doctest::Approx(o.compute_time_s / g.fraction));
  CHECK(o.gpu_hours == doctest::Approx(o.time_to_train_s / 3600 * 16));
  // The default price of an A100 80GB.
  CHECK(r.spec.candidates[0].price_usd_per_gpu_hour == 1.99);
  CHECK(o.cost_usd == doctest::Approx(o.gpu_hours * 1.99));

  auto never = parse_scenario(with(R"({"iterations": 1000, "deadline_days": 10,
      "goodput": {"mtbf_gpu_hours": 1}, "candidates": [
        {"preset": "dgx-a100-80gb", "price_usd_per_gpu_hour": 2, "nodes": [1]}]})"),
                              "s.json", ".");
  REQUIRE(never.ok());
  CapacityResult n = run_capacity(*never, testing::fake_plan, RunOptions{}).value();
  CHECK(n.options[0].goodput.fraction == 0);
  CHECK_FALSE(n.options[0].meets_deadline);
  CHECK_FALSE(n.fastest.has_value());
  CHECK(capacity_to_json(n)["options"][0]["time_to_train_days"].is_null());
  const std::string md = capacity_report_markdown(n, *never);
  CAPTURE(md);
  CHECK(md.find("| 0.0 % | never |  | no (smallest of its kind that fits) |") != std::string::npos);
}

TEST_CASE("capacity errors: a GPU without a default price, a step that does not divide") {
  auto err = [](const std::string& block) {
    auto s = parse_scenario(with(block), "s.json", ".");
    REQUIRE_FALSE(s.ok());
    return s.status().message();
  };
  CHECK(err(R"({"iterations": 5, "deadline_days": 1, "candidates": [
                {"preset": "aws-p3.16xlarge", "nodes": [1]}]})") ==
        "s.json: /capacity/candidates/0: missing \"price_usd_per_gpu_hour\": the v100-16gb has "
        "no default price (docs/capacity.md); give one");
  CHECK(err(R"({"iterations": 5, "deadline_days": 1, "candidates": [
                {"preset": "dgx-h100", "nodes": {"min": 2, "max": 9, "step": 2}}]})") ==
        "s.json: /capacity/candidates/0/nodes: expected max - min to be a multiple of step, got "
        "min 2, max 9, step 2");
  CHECK(err(R"({"iterations": 5, "deadline_days": 1, "goodput": "perfect", "candidates": [
                {"preset": "dgx-h100", "nodes": [1]}]})") ==
        "s.json: /capacity/goodput: expected \"ideal\" or an object, got the string \"perfect\"");
  CHECK(err(R"({"iterations": 5, "deadline_days": 1, "candidates": [
                {"preset": "dgx-h100", "nodes": [20000]}]})")
            .find("s.json: /capacity/candidates/0/nodes/0: expected") == 0);
}

}  // namespace
}  // namespace alpasim::driver
