#include "cluster/cluster_spec.h"

#include <doctest/doctest.h>

namespace alpasim::cluster {
namespace {

core::Result<ClusterSpec> parse_text(std::string_view text) {
  auto doc = core::parse_json_text(text, "c.json");
  REQUIRE(doc.ok());
  return parse_cluster_spec(core::JsonValue::root(*doc));
}

TEST_CASE("presets expand to the documented hardware") {
  ClusterSpec c = parse_text(R"({"preset": "dgx-a100-80gb", "nodes": 64})").value();
  CHECK(c.num_gpus() == 512);
  CHECK(c.gpu.name == "a100-80gb");
  CHECK(c.inter_node.nics_per_node == 8);
  CHECK(c.inter_node.nic_bandwidth_gbit_per_s == 200);
  ClusterSpec p3 = parse_text(R"({"preset": "aws-p3.16xlarge", "nodes": 1, "gpus_per_node": 4})").value();
  CHECK(p3.num_gpus() == 4);
  CHECK(p3.gpu.peak(core::DType::kFp16) == core::tflops_per_s(125));
}

TEST_CASE("an explicit cluster round-trips") {
  ClusterSpec c = parse_text(R"({"nodes": 2, "gpus_per_node": 4, "gpu": "h100-sxm",
      "intra_node": {"fabric": "pcie", "gpu_bandwidth_gbyte_per_s": 64},
      "inter_node": {"fabric": "efa", "nics_per_node": 4, "nic_bandwidth_gbit_per_s": 100,
                     "topology": "fat_tree", "oversubscription": 2}})").value();
  CHECK(c.num_gpus() == 8);
  auto doc = core::parse_json_text(cluster_spec_to_json(c).dump(), "again.json").value();
  ClusterSpec again = parse_cluster_spec(core::JsonValue::root(doc)).value();
  CHECK(cluster_spec_to_json(again) == cluster_spec_to_json(c));
}

TEST_CASE("bad clusters give exact errors") {
  CHECK(parse_text(R"({"preset": "dgx-a100", "nodes": 2})").status().message() ==
        "c.json: /preset: expected one of \"aws-p3.16xlarge\", \"dgx-a100-40gb\", "
        "\"dgx-a100-80gb\", \"dgx-b200\", \"dgx-h100\", \"dgx-h800\", or \"hgx-h200\", got \"dgx-a100\"; "
        "did you mean \"dgx-a100-40gb\"?");
  CHECK(parse_text(R"({"preset": "dgx-h100", "nodes": -1})").status().message() ==
        "c.json: /nodes: expected a positive integer at most 16384, got -1");
  CHECK(parse_text(R"({"preset": "dgx-h100", "nodes": 2, "gpus_per_node": 4})").status().message() ==
        "c.json: /gpus_per_node: a partial node (gpus_per_node < 8) needs \"nodes\": 1");
  CHECK(parse_text(R"({"preset": "dgx-h100", "nodes": 1, "gpus_per_node": 9})").status().message() ==
        "c.json: /gpus_per_node: expected an integer in [1, 8] (the GPUs of a dgx-h100 node), got 9");
  CHECK(parse_text(R"({"nodes": 2, "gpus_per_node": 8, "gpu": "a100-80gb",
      "intra_node": {"fabric": "nvswitch", "gpu_bandwidth_gbyte_per_s": 300}})").status().message() ==
        "c.json: /inter_node: missing required key (expected an object)");
}

TEST_CASE("every GPU keeps a documented reserve; the scenario can change it") {
  // 0.5 GiB context + 0.5 GiB NCCL + 5 % of the capacity, rounded down to a MiB.
  CHECK(default_reserved_memory(*find_gpu_spec("a100-80gb")) == core::gib(5));
  CHECK(default_reserved_memory(*find_gpu_spec("h100-sxm")) == core::gib(5));
  CHECK(default_reserved_memory(*find_gpu_spec("a100-40gb")) == core::gib(3));
  CHECK(default_reserved_memory(*find_gpu_spec("v100-16gb")) == core::mib(1024 + 819));
  CHECK(default_reserved_memory(*find_gpu_spec("h200")) == core::mib(1024 + 6723));

  ClusterSpec preset = parse_text(R"({"preset": "dgx-h100", "nodes": 2})").value();
  CHECK(preset.reserved_memory == core::gib(5));
  CHECK(preset.usable_memory() == core::gib(75));
  ClusterSpec chosen =
      parse_text(R"({"preset": "aws-p3.16xlarge", "nodes": 1, "reserved_memory_gib": 0.5})").value();
  CHECK(chosen.usable_memory() == core::mib(16 * 1024 - 512));
  ClusterSpec none = parse_text(R"({"nodes": 1, "gpus_per_node": 8, "gpu": "a100-40gb",
      "intra_node": {"fabric": "nvswitch", "gpu_bandwidth_gbyte_per_s": 300},
      "reserved_memory_gib": 0})").value();
  CHECK(none.usable_memory() == core::gib(40));
  // The reserve travels with the cluster (plan files, the scenario echo) and reads back.
  auto doc = core::parse_json_text(cluster_spec_to_json(chosen).dump(), "again.json").value();
  CHECK(parse_cluster_spec(core::JsonValue::root(doc)).value().reserved_memory == core::mib(512));

  CHECK(parse_text(R"({"preset": "dgx-h100", "nodes": 1, "reserved_memory_gib": 80})")
            .status()
            .message() ==
        "c.json: /reserved_memory_gib: expected GiB in [0, 79.999] (less than the h100-sxm's "
        "memory), got 80");
  CHECK(parse_text(R"({"preset": "dgx-h100", "nodes": 1, "reserved_memory_gib": -1})").status().ok() ==
        false);

  // What-if and capacity studies move a scenario to other GPUs: a default reserve becomes
  // the new GPU's default, a chosen one stays.
  const GpuSpec h200 = *find_gpu_spec("h200");
  CHECK(reserve_on_gpu(preset, h200) == default_reserved_memory(h200));
  CHECK(reserve_on_gpu(chosen, h200) == core::mib(512));
}

}  // namespace
}  // namespace alpasim::cluster
