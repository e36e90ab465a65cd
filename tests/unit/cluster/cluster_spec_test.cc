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

TEST_CASE("GB200/GB300 NVL72: 4-GPU trays in 18-tray NVLink domains, used as even segments") {
  ClusterSpec c = parse_text(R"({"preset": "gb200-nvl72", "nodes": 18})").value();
  CHECK(c.gpus_per_node == 4);
  CHECK(c.num_gpus() == 72);
  CHECK(c.gpu.name == "gb200");
  CHECK(c.gpu.peak(core::DType::kBf16) == core::tflops_per_s(2500));
  CHECK(c.gpu.peak(core::DType::kFp8) == core::tflops_per_s(5000));
  CHECK(c.intra_node.gpu_bandwidth_gbyte_per_s == 900);
  CHECK(c.inter_node.nics_per_node == 4);
  CHECK(c.inter_node.nic_bandwidth_gbit_per_s == 400);
  CHECK(c.nvlink_domain_nodes == 18);
  CHECK(c.nvlink_domain_gpus() == 72);
  CHECK(parse_text(R"({"preset": "gb300-nvl72", "nodes": 1})")->inter_node.nic_bandwidth_gbit_per_s == 800);
  // Domains in use: the largest divisor of the node count not above 18, so every domain
  // holds as many trays (64 trays: 4 x 16; 20: 2 x 10; 19, a prime: one tray each).
  auto in_use = [&](std::int64_t nodes) {
    ClusterSpec s = c;
    s.nodes = nodes;
    return s.nvlink_domain_nodes_in_use();
  };
  CHECK(in_use(1) == 1);
  CHECK(in_use(2) == 2);
  CHECK(in_use(18) == 18);
  CHECK(in_use(36) == 18);
  CHECK(in_use(64) == 16);
  CHECK(in_use(20) == 10);
  CHECK(in_use(19) == 1);
  // A scenario may set the domain (an NVL36 rack, or partitions), in either cluster form.
  CHECK(parse_text(R"({"preset": "gb200-nvl72", "nodes": 18, "nvlink_domain_gpus": 36})")
            ->nvlink_domain_nodes_in_use() == 9);
  ClusterSpec explicit_form = parse_text(R"({"nodes": 4, "gpus_per_node": 4, "gpu": "gb200",
      "nvlink_domain_gpus": 16,
      "intra_node": {"fabric": "nvswitch", "gpu_bandwidth_gbyte_per_s": 900},
      "inter_node": {"fabric": "infiniband", "nics_per_node": 4, "nic_bandwidth_gbit_per_s": 400}})").value();
  CHECK(explicit_form.nvlink_domain_nodes == 4);
  auto doc = core::parse_json_text(cluster_spec_to_json(explicit_form).dump(), "again.json").value();
  CHECK(parse_cluster_spec(core::JsonValue::root(doc))->nvlink_domain_nodes == 4);
  // Single-node NVLink writes no key, so those clusters print as before.
  CHECK_FALSE(cluster_spec_to_json(parse_text(R"({"preset": "dgx-h100", "nodes": 2})").value())
                  .contains("nvlink_domain_gpus"));
}

TEST_CASE("bad clusters give exact errors") {
  CHECK(parse_text(R"({"preset": "dgx-a100", "nodes": 2})").status().message() ==
        "c.json: /preset: expected one of \"aws-p3.16xlarge\", \"dgx-a100-40gb\", "
        "\"dgx-a100-80gb\", \"dgx-b200\", \"dgx-b300\", \"dgx-h100\", \"dgx-h800\", "
        "\"gb200-nvl72\", \"gb300-nvl72\", \"hgx-h200\", or \"mi300x\", got \"dgx-a100\"; "
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
  CHECK(parse_text(R"({"preset": "gb200-nvl72", "nodes": 2, "nvlink_domain_gpus": 6})").status().message() ==
        "c.json: /nvlink_domain_gpus: expected a multiple of gpus_per_node 4 (an NVLink domain holds "
        "whole nodes), got 6");
  CHECK(parse_text(R"({"preset": "gb200-nvl72", "nodes": 2, "nvlink_domain_gpus": 2})").status().message() ==
        "c.json: /nvlink_domain_gpus: expected an integer in [4, 576] (GPUs sharing one NVLink fabric, a "
        "multiple of gpus_per_node 4), got 2");
  CHECK(parse_text(R"({"nodes": 2, "gpus_per_node": 8, "gpu": "v100-16gb", "nvlink_domain_gpus": 16,
      "intra_node": {"fabric": "nvlink_hybrid_cube_mesh", "gpu_bandwidth_gbyte_per_s": 150},
      "inter_node": {"fabric": "ethernet", "nics_per_node": 1, "nic_bandwidth_gbit_per_s": 25}})")
            .status()
            .message() ==
        "c.json: /nvlink_domain_gpus: an NVLink domain spanning nodes needs the \"nvswitch\" intra-node "
        "fabric, got \"nvlink_hybrid_cube_mesh\"");
}

TEST_CASE("every GPU keeps a documented reserve, the scenario can change it") {
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
