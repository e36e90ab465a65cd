#include "driver/capacity.h"

#include <string>

#include <doctest/doctest.h>

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
      "candidates": [
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
  CHECK(r.smallest[0] == std::optional<std::size_t>(1));
  CHECK(r.smallest[1] == std::optional<std::size_t>(3));
  CHECK(r.cost_optimal == std::optional<std::size_t>(3));
  const std::string csv = capacity_to_csv(r);
  CHECK(csv.find("3,dgx-h100,4,32,h100-sxm,1.5,ok,yes,\"fake, 32 GPUs\",2.0,92.0,") !=
        std::string::npos);
  CHECK(capacity_to_json(r)["cost_optimal"] == 3);
}

TEST_CASE("no option meets an impossible deadline") {
  auto s = parse_scenario(with(R"({"iterations": 1000000, "deadline_days": 0.001,
      "candidates": [{"preset": "dgx-h100", "price_usd_per_gpu_hour": 3, "nodes": [1]}]})"),
                          "s.json", ".");
  REQUIRE(s.ok());
  CapacityResult r = run_capacity(*s, testing::fake_plan, RunOptions{}).value();
  CHECK_FALSE(r.cost_optimal.has_value());
  CHECK_FALSE(r.smallest[0].has_value());
  CHECK(capacity_to_json(r)["cost_optimal"].is_null());
}

}  // namespace
}  // namespace alpasim::driver
