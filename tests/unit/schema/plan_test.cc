#include "schema/plan.h"

#include <doctest/doctest.h>

namespace alpasim::schema {
namespace {

// A two-stage plan of a 4-layer GPT on one 8-GPU node: stage 0 on GPUs 0-3 as a 2x2 mesh,
// stage 1 on GPUs 4-7 as a 1x4 mesh.
constexpr const char* kPlan = R"({
  "schema_version": 1,
  "generator": "test",
  "model": {"builtin": "gpt", "name": "tiny", "num_layers": 4, "hidden_size": 64,
            "num_heads": 4, "seq_len": 32, "vocab_size": 128},
  "cluster": {"preset": "dgx-a100-80gb", "nodes": 1},
  "dtype": "fp16", "global_batch_size": 16, "num_microbatches": 4,
  "schedule": "1f1b", "recompute": "none",
  "stages": [
    {"layers": [0, 2], "submesh": [1, 4], "logical_mesh": [2, 2], "device_ids": [0, 1, 2, 3],
     "weight_update_sharding": true,
     "shardings": [{"op": "layer0.mlp.fc1", "strategy": "dot:S0R x RS1", "inputs": ["S0R", "RS1"],
                    "output": "S0S1"}]},
    {"layers": [2, 4], "submesh": [1, 4], "logical_mesh": [1, 4], "device_ids": [4, 5, 6, 7]}
  ]
})";

core::Result<Plan> parse_text(const std::string& text) {
  auto doc = core::parse_json_text(text, "p.json");
  REQUIRE(doc.ok());
  return parse_plan(core::JsonValue::root(*doc), ".");
}

std::string error_of(std::string text, const std::string& from, const std::string& to) {
  auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  auto r = parse_text(text);
  REQUIRE_FALSE(r.ok());
  return r.status().message();
}

TEST_CASE("a plan round-trips through JSON unchanged") {
  Plan plan = parse_text(kPlan).value();
  CHECK(plan.stages.size() == 2);
  CHECK(plan.stages[0].shardings[0].output.to_string() == "S0S1");
  core::Json j = plan_to_json(plan);
  auto doc = core::parse_json_text(j.dump(), "again.json").value();
  Plan again = parse_plan(core::JsonValue::root(doc), ".").value();
  CHECK(again == plan);
  CHECK(plan_to_json(again).dump() == j.dump());
}

TEST_CASE("the p2p key: async by default and not written, blocking read and written back") {
  Plan plan = parse_text(kPlan).value();
  CHECK(plan.p2p == P2pMode::kAsync);
  CHECK_FALSE(plan_to_json(plan).contains("p2p"));
  std::string text = kPlan;
  text.replace(text.find("\"schedule\""), 0, "\"p2p\": \"blocking\", ");
  Plan blocking = parse_text(text).value();
  CHECK(blocking.p2p == P2pMode::kBlocking);
  CHECK(plan_to_json(blocking)["p2p"] == "blocking");
  CHECK_FALSE(blocking == plan);
  CHECK(error_of(text, "\"blocking\"", "\"sync\"") ==
        "p.json: /p2p: expected one of \"async\" or \"blocking\", got \"sync\"; did you mean \"async\"?");
}

TEST_CASE("validation names the stage and the problem") {
  CHECK(error_of(kPlan, "\"layers\": [2, 4]", "\"layers\": [3, 4]") ==
        "p.json: /: stages/1: layers must start at 2 (contiguous from 0), got 3");
  CHECK(error_of(kPlan, "[4, 5, 6, 7]", "[3, 5, 6, 7]") ==
        "p.json: /: stages/1: device id 3 is also used by stage 0");
  CHECK(error_of(kPlan, "[4, 5, 6, 7]", "[4, 5, 6, 8]") ==
        "p.json: /: stages/1: device id 8 is outside the cluster's 8 GPUs");
  CHECK(error_of(kPlan, "\"logical_mesh\": [1, 4]", "\"logical_mesh\": [1, 2]") ==
        "p.json: /: stages/1: logical mesh [1, 2] has 2 devices, submesh has 4");
  CHECK(error_of(kPlan, "\"RS1\"", "\"RS2\"") ==
        "p.json: /stages/0/shardings/0/inputs/1: invalid sharding spec \"RS2\": S must be "
        "followed by mesh axes 0 and/or 1");
  CHECK(error_of(kPlan, "\"1f1b\"", "\"1F1B\"") ==
        "p.json: /schedule: expected one of \"gpipe\", \"1f1b\", or \"interleaved_1f1b\", got "
        "\"1F1B\"; did you mean \"1f1b\"?");
}

TEST_CASE("interleaved stages reuse meshes with period stages / interleave") {
  std::string text = kPlan;
  text.replace(text.find("\"1f1b\""), 6, "\"interleaved_1f1b\", \"interleave\": 2");
  // Stage 1 on the same devices as stage 0: with interleave 2 and 2 stages, 1 mesh.
  text.replace(text.find("\"logical_mesh\": [1, 4], \"device_ids\": [4, 5, 6, 7]"),
               std::string("\"logical_mesh\": [1, 4], \"device_ids\": [4, 5, 6, 7]").size(),
               "\"logical_mesh\": [2, 2], \"device_ids\": [0, 1, 2, 3]");
  CHECK(parse_text(text).ok());
}

TEST_CASE("a 3D grid plan reads in Megatron-LM's terms, other plans do not") {
  // kPlan: a 2x2 and a 1x4 mesh: not one grid.
  Plan plan = parse_text(kPlan).value();
  CHECK_FALSE(megatron_shape(plan).has_value());
  // Both stages 2x2 (rows = data parallel 2, cols = tensor parallel 2): 16 sequences in 4
  // microbatches of 4, 2 per replica.
  plan.stages[1].logical_rows = 2;
  plan.stages[1].logical_cols = 2;
  auto shape = megatron_shape(plan);
  REQUIRE(shape.has_value());
  CHECK(shape->to_string() == "tp=2 pp=2 dp=2 cp=1 ep=1 mbs=2 vp=1 recompute=none");
  CHECK(shape->to_json() == core::Json{{"tp", 2}, {"pp", 2}, {"dp", 2}, {"cp", 1}, {"ep", 1},
                                        {"mbs", 2}, {"vp", 1}, {"recompute", "none"}});
  // Interleaved: two chunks per mesh, so pp = stages / 2.
  Plan chunks = plan;
  chunks.interleave = 2;
  chunks.schedule = Schedule::kInterleavedOneFOneB;
  chunks.recompute = Recompute::kFull;
  chunks.stages.push_back(plan.stages[0]);
  chunks.stages.push_back(plan.stages[1]);
  CHECK(megatron_shape(chunks)->to_string() == "tp=2 pp=2 dp=2 cp=1 ep=1 mbs=2 vp=2 recompute=full");
  // Megatron-LM's runtime flags, in search.megatron's spellings, each only when set.
  MegatronShape flags = *shape;
  flags.sequence_parallel = flags.distributed_optimizer = flags.overlap_grad_reduce = true;
  flags.tp_comm_overlap = true;
  CHECK(flags.to_string() ==
        "tp=2 pp=2 dp=2 cp=1 ep=1 mbs=2 vp=1 recompute=none sequence_parallel distributed_optimizer "
        "overlap_grad_reduce tp_comm_overlap");
  CHECK(flags.has_runtime_overlaps());
  CHECK(flags.to_json() == core::Json{{"tp", 2}, {"pp", 2}, {"dp", 2}, {"cp", 1}, {"ep", 1}, {"mbs", 2},
                                      {"vp", 1}, {"recompute", "none"}, {"sequence_parallel", true},
                                      {"distributed_optimizer", true}, {"overlap_grad_reduce", true},
                                      {"tp_comm_overlap", true}});
  flags.overlap_grad_reduce = flags.tp_comm_overlap = false;
  CHECK_FALSE(flags.has_runtime_overlaps());  // the optimizer and sequence parallelism are not overlaps
  // A microbatch of 4 does not split over 8 rows; GPipe is not Megatron's schedule; a model
  // axis wider than the submesh's node share is not a tensor-parallel group.
  Plan rows = plan;
  for (auto& st : rows.stages) {
    st.logical_rows = 4;
    st.logical_cols = 1;
  }
  CHECK(megatron_shape(rows)->to_string() == "tp=1 pp=2 dp=4 cp=1 ep=1 mbs=1 vp=1 recompute=none");
  rows.num_microbatches = 8;  // 2 sequences per microbatch, 4 rows
  CHECK_FALSE(megatron_shape(rows).has_value());
  Plan gpipe = plan;
  gpipe.schedule = Schedule::kGpipe;
  CHECK_FALSE(megatron_shape(gpipe).has_value());
  Plan wide = plan;
  for (auto& st : wide.stages) {
    st.submesh_nodes = 2;
    st.submesh_gpus_per_node = 2;
    st.logical_rows = 1;
    st.logical_cols = 4;
  }
  CHECK_FALSE(megatron_shape(wide).has_value());
  // ... unless the nodes share one NVLink domain (GB200 NVL72 trays): then it is one.
  wide.cluster = cluster::make_preset_cluster("gb200-nvl72", 2).value();
  REQUIRE(wide.cluster.nvlink_domain_nodes_in_use() == 2);
  CHECK(megatron_shape(wide)->to_string() == "tp=4 pp=2 dp=1 cp=1 ep=1 mbs=4 vp=1 recompute=none");
  // 36 trays use two 18-tray (72-GPU) domains: an 8-wide axis divides a domain, a 16-wide
  // one would straddle two of them (GPUs 64-79), so it is no tensor-parallel group.
  wide.cluster = cluster::make_preset_cluster("gb200-nvl72", 36).value();
  REQUIRE(wide.cluster.nvlink_domain_gpus() == 72);
  for (auto& st : wide.stages) {
    st.submesh_nodes = 4;
    st.submesh_gpus_per_node = 4;
    st.logical_rows = 2;
    st.logical_cols = 8;
  }
  CHECK(megatron_shape(wide)->tp == 8);
  for (auto& st : wide.stages) {
    st.logical_rows = 1;
    st.logical_cols = 16;
  }
  CHECK_FALSE(megatron_shape(wide).has_value());
}

}  // namespace
}  // namespace alpasim::schema
