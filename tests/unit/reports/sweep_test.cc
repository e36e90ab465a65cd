#include "driver/sweep.h"

#include <filesystem>
#include <string>

#include <doctest/doctest.h>

#include "fake_plan.h"

namespace alpasim::driver {
namespace {

constexpr const char* kScenario = R"({
  "schema_version": 1,
  "name": "sweep test",
  "model": {"builtin": "gpt", "name": "small", "num_layers": 4, "hidden_size": 256,
            "num_heads": 4, "seq_len": 128, "vocab_size": 1000},
  "cluster": {"preset": "dgx-a100-80gb", "nodes": 1},
  "training": {"global_batch_size": 64, "dtype": "fp16", "optimizer": "adam", "microbatches": "auto"},
  "search": {"mode": "alpa"},
  "what_if": WHAT_IF
})";

std::string with_what_if(const std::string& what_if) {
  std::string s = kScenario;
  s.replace(s.find("WHAT_IF"), 7, what_if);
  return s;
}

Scenario scenario_with(const std::string& what_if) {
  auto s = parse_scenario(with_what_if(what_if), "s.json", ".");
  REQUIRE_MESSAGE(s.ok(), s.status().message());
  return *s;
}

std::string load_error(const std::string& what_if) {
  auto s = parse_scenario(with_what_if(what_if), "s.json", ".");
  REQUIRE_FALSE(s.ok());
  return s.status().message();
}

const char* kTwoModels = R"({"models": [
    {"builtin": "gpt", "name": "A", "num_layers": 4, "hidden_size": 256, "num_heads": 4,
     "seq_len": 128, "vocab_size": 1000},
    {"builtin": "gpt", "name": "B", "num_layers": 8, "hidden_size": 256, "num_heads": 4,
     "seq_len": 128, "vocab_size": 1000}],
  "num_gpus": [4, 8, 12, 16], "global_batch_size": [64, 128]})";

TEST_CASE("what_if is validated when the scenario loads, naming the JSON pointer") {
  CHECK(load_error(R"({"num_gpus": [8, 8]})") == "s.json: /what_if/num_gpus/1: duplicate value 8");
  CHECK(load_error(R"({"num_gpus": []})") ==
        "s.json: /what_if/num_gpus: expected a non-empty array, got []");
  CHECK(load_error(R"({"num_gpus": [4], "nodes": [2]})") ==
        "s.json: /what_if: \"num_gpus\" and \"nodes\"/\"gpus_per_node\" both set the cluster "
        "size; give one");
  CHECK(load_error(R"({"num_gpu": [4]})").find("s.json: /what_if/num_gpu: unknown key") == 0);
  CHECK(load_error(R"({"presets": ["dgx-z100"]})").find("s.json: /what_if/presets/0:") == 0);
  CHECK(load_error(R"({"num_gpus": [0]})").find("s.json: /what_if/num_gpus/0:") == 0);
  CHECK(load_error(R"({"planner": "magic"})").find("s.json: /what_if/planner:") == 0);
}

TEST_CASE("the product has one point per combination, last axis fastest") {
  Scenario s = scenario_with(kTwoModels);
  WhatIfSpec spec = what_if_of(s).value();
  CHECK(spec.num_points() == 2 * 4 * 2);
  std::vector<SweepPoint> points = expand_sweep(s, spec);
  REQUIRE(points.size() == 16);
  // Index 5 = model 0, num_gpus index 2 (12), batch index 1 (128): 0·8 + 2·2 + 1.
  CHECK(points[5].coordinates ==
        std::vector<std::pair<std::string, std::string>>{
            {"model", "A"}, {"num_gpus", "12"}, {"global_batch_size", "128"}});
  // 12 GPUs is neither part of one 8-GPU node nor whole nodes.
  CHECK(points[5].error ==
        "num_gpus 12 is neither at most one node nor a multiple of 8 GPUs per node");
  // Index 0: 4 GPUs = part of one node. Index 14: model B, 16 GPUs = 2 nodes of 8.
  CHECK(points[0].scenario.cluster.nodes == 1);
  CHECK(points[0].scenario.cluster.gpus_per_node == 4);
  CHECK(points[14].scenario.cluster.nodes == 2);
  CHECK(points[14].scenario.cluster.gpus_per_node == 8);
  CHECK(points[14].scenario.model.name == "B");
  CHECK(points[14].scenario.training.global_batch_size == 64);
}

TEST_CASE("network, GPU kind and preset axes change the cluster") {
  Scenario s = scenario_with(R"({"presets": ["dgx-a100-80gb", "dgx-h100"], "nodes": [2],
                                 "nic_bandwidth_gbit_per_s": [100, 400.5], "nics_per_node": [4]})");
  std::vector<SweepPoint> points = expand_sweep(s, what_if_of(s).value());
  REQUIRE(points.size() == 4);
  CHECK(points[3].scenario.cluster.preset == "dgx-h100");
  CHECK(points[3].scenario.cluster.nodes == 2);
  CHECK(points[3].scenario.cluster.inter_node.nic_bandwidth_gbit_per_s == 400.5);
  CHECK(points[3].scenario.cluster.inter_node.nics_per_node == 4);
  // Coordinates in axis order: preset, nodes, nics_per_node, nic_bandwidth_gbit_per_s.
  CHECK(points[3].coordinates[3].second == "400.5");
  Scenario g = scenario_with(R"({"gpus": ["a100-40gb"]})");
  std::vector<SweepPoint> gp = expand_sweep(g, what_if_of(g).value());
  REQUIRE(gp.size() == 1);
  CHECK(gp[0].scenario.cluster.gpu.name == "a100-40gb");
  CHECK(gp[0].scenario.cluster.preset.empty());  // no longer the preset's hardware
}

TEST_CASE("the NVLink domain axis: NVL72 against NVL36 and 8-GPU domains on GB200 trays") {
  Scenario s = scenario_with(R"({"presets": ["gb200-nvl72", "dgx-h100"], "nodes": [18],
                                 "nvlink_domain_gpus": [72, 36, 8, 6]})");
  std::vector<SweepPoint> points = expand_sweep(s, what_if_of(s).value());
  REQUIRE(points.size() == 8);
  CHECK(points[0].coordinates[2] == std::make_pair(std::string("nvlink_domain_gpus"), std::string("72")));
  CHECK(points[0].error.empty());
  CHECK(points[0].scenario.cluster.nvlink_domain_nodes_in_use() == 18);
  CHECK(points[1].scenario.cluster.nvlink_domain_nodes_in_use() == 9);   // two NVL36 racks
  CHECK(points[2].scenario.cluster.nvlink_domain_nodes_in_use() == 2);   // 8-GPU domains
  CHECK(points[3].error == "nvlink_domain_gpus 6 is not a multiple of the node's 4 GPUs");
  // DGX H100 nodes (NVSwitch): 72 GPUs = 9 nodes per domain, a hypothetical multi-node NVLink
  // H100 cluster; 36 is no whole number of 8-GPU nodes.
  CHECK(points[4].error.empty());
  CHECK(points[4].scenario.cluster.nvlink_domain_nodes_in_use() == 9);
  CHECK(points[5].error == "nvlink_domain_gpus 36 is not a multiple of the node's 8 GPUs");
  CHECK(points[6].error.empty());  // 8: one node, as the preset
  CHECK(points[6].scenario.cluster.nvlink_domain_nodes_in_use() == 1);
}

TEST_CASE("rows come back in index order whatever the thread count") {
  Scenario s = scenario_with(kTwoModels);
  RunOptions one;
  RunOptions four;
  four.threads = 4;
  std::size_t calls = 0;
  four.progress = [&](std::size_t done, std::size_t total) {
    ++calls;
    CHECK(done <= total);
  };
  std::string a = core::dump_json(sweep_to_json(run_sweep(s, testing::fake_plan, one).value()));
  SweepResult four_result = run_sweep(s, testing::fake_plan, four).value();
  CHECK(core::dump_json(sweep_to_json(four_result)) == a);
  CHECK(calls == 16);
  // 16 GPUs, batch 64: 64 / 16 = 4 s; 100 - 16/4 = 96 TFLOP/s.
  const PointRow& r = four_result.rows[14];
  CHECK(r.ok);
  CHECK(r.result.iteration_time_s == 4.0);
  CHECK(r.result.model_tflops_per_gpu == 96.0);
  CHECK_FALSE(four_result.rows[5].ok);
  // Best: fitting point with the highest TFLOP/s = fewest GPUs (4): 100 - 1 = 99, index 0.
  CHECK(best_point(four_result) == 0);
}

TEST_CASE("split across ranks and merged: byte-identical to one process") {
  Scenario s = scenario_with(kTwoModels);
  const SweepResult whole = run_sweep(s, testing::fake_plan, RunOptions{}).value();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "alpasim_reports_merge_test";
  std::filesystem::remove_all(dir);
  constexpr int kWorld = 3;
  for (int rank = 0; rank < kWorld; ++rank) {
    RunOptions o;
    o.rank = rank;
    o.world_size = kWorld;
    o.threads = 2;
    SweepResult part = run_sweep(s, testing::fake_plan, o).value();
    // Rank r plans indices r, r+3, ...: 16 points -> 6, 5, 5.
    CHECK(part.rows.size() == (rank == 0 ? 6u : 5u));
    REQUIRE(write_part(part, dir, rank, kWorld).ok());
  }
  SweepResult merged = merge_parts(dir, kWorld, 0).value();
  CHECK(core::dump_json(sweep_to_json(merged)) == core::dump_json(sweep_to_json(whole)));
  CHECK(sweep_to_csv(merged) == sweep_to_csv(whole));
  // A missing part is named once the wait is over.
  std::filesystem::remove(dir / part_file_name(2, kWorld));
  auto missing = merge_parts(dir, kWorld, 0);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message() == (dir / "sweep.part-2-of-3.json").string() +
                                          ": missing for rank 2; when every part is written, "
                                          "merge with --merge-only");
  std::filesystem::remove_all(dir);
}

TEST_CASE("CSV: one header, one line per point, RFC 4180 quoting") {
  Scenario s = scenario_with(R"({"num_gpus": [8, 12]})");
  SweepResult r = run_sweep(s, testing::fake_plan, RunOptions{}).value();
  // 8 GPUs, batch 64: 8 s, 98 TFLOP/s, 64 GiB / 8 = 8589934592 bytes of 80 GiB.
  CHECK(sweep_to_csv(r) ==
        "index,num_gpus,cluster_gpus,gpu,status,fits,plan,iteration_time_s,model_tflops_per_gpu,"
        "hardware_tflops_per_gpu,memory_per_gpu_bytes,usable_memory_bytes,error\n"
        "0,8,8,a100-80gb,ok,yes,\"fake, 8 GPUs\",8.0,98.0,98.0,8589934592,80530636800,\n"
        "1,12,0,,error,,,,,,,,num_gpus 12 is neither at most one node nor a multiple of 8 GPUs "
        "per node\n");
  CHECK(csv_field("a\"b") == "\"a\"\"b\"");
}

TEST_CASE("a split by flags: the rank and world size come from the command line") {
  CHECK(resolve_rank(2, 4).value() == std::pair{2, 4});
  CHECK(resolve_rank(4, 4).status().message() ==
        "--rank 4: expected a rank in [0, 3] of --world-size 4");
}

}  // namespace
}  // namespace alpasim::driver
