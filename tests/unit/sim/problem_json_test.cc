#include "sim/problem_json.h"

#include <string>

#include <doctest/doctest.h>

#include "sim/pipeline_sim.h"
#include "sim/trace_writer.h"

namespace alpasim::sim {
namespace {

// Every mechanism at once: interleaving, links, grad sync over links, local all-gather,
// a hook (resolved on writing), weight-update sharding.
PipelineProblem rich_problem() {
  UniformPipelineSpec u;
  u.schedule = PipelineSchedule::kInterleaved1F1B;
  u.num_stages = 2;
  u.interleave = 2;
  u.num_microbatches = 4;
  u.data_parallel = 4;
  u.gpus_per_stage = 8;
  u.grad_sync_buckets = 2;
  u.grad_sync_mode = GradSyncMode::kReduceScatterAllGather;
  u.p2p_bandwidth = core::gbyte_per_s(12.5);
  u.p2p_latency = core::microseconds(7);
  u.memory_limit = core::gib(40);
  u.stage.forward_s = core::milliseconds(1.25);
  u.stage.backward_s = core::milliseconds(2.5);
  u.stage.recompute_s = core::milliseconds(1.25);
  u.stage.forward_flops = core::Flops(1.5e12);
  u.stage.stored_activation_bytes = core::mib(300);
  u.stage.output_activation_bytes = core::mib(12);
  u.stage.grad_sync_bytes = core::gib(1);
  PipelineProblem pb = make_uniform_problem(u);
  pb.stages[1].output_reshard = ReshardMode::kLocalAllGather;
  pb.stages[1].reshard_group = 8;
  pb.stages[2].forward_working_activation_bytes = core::mib(7);  // written only when set
  pb.stages[2].backward_received_ahead_bytes = core::mib(3);  // freed by stage 0 (mesh 0)
  pb.stages[0].backward_received_earlier_bytes = core::mib(3);
  pb.collective_cost = [](const CollectiveCall& c) {
    return core::Seconds(1e-5 + static_cast<double>(c.bytes.value()) / 100e9);
  };
  return pb;
}

core::Result<PipelineProblem> parse_text(const std::string& text) {
  auto doc = core::parse_json_text(text, "p.json");
  REQUIRE(doc.ok());
  return parse_problem(core::JsonValue::root(*doc));
}

TEST_CASE("a problem survives a JSON round trip and replays bit for bit") {
  const PipelineProblem pb = rich_problem();
  auto text = problem_to_json(pb);
  REQUIRE(text.ok());
  auto back = parse_text(*text);
  REQUIRE(back.ok());
  auto again = problem_to_json(*back);
  REQUIRE(again.ok());
  CHECK(*again == *text);
  auto a = simulate_pipeline(pb);
  auto b = simulate_pipeline(*back);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->timeline.makespan == b->timeline.makespan);
  CHECK(chrome_trace_json(a->graph, a->timeline) == chrome_trace_json(b->graph, b->timeline));
}

TEST_CASE("problem files are read strictly") {
  const std::string good = *problem_to_json(make_uniform_problem(UniformPipelineSpec{}));
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    auto at = t.find(from);
    REQUIRE(at != std::string::npos);
    t.replace(at, from.size(), to);
    auto r = parse_text(t);
    REQUIRE_FALSE(r.ok());
    return r.status().message();
  };
  CHECK(replace("\"backward_s\"", "\"backwrd_s\"") ==
        "p.json: /stages/0/backwrd_s: unknown key; did you mean \"backward_s\"?");
  CHECK(replace("\"num_gpus\": 1", "\"num_gpus\": 0") ==
        "p.json: /meshes/0/num_gpus: expected a positive integer, got 0");
  CHECK(replace("\"version\": 1", "\"version\": 2") == "p.json: /version: expected 1, got 2");
  CHECK(replace("\"schedule\": \"1f1b\"", "\"schedule\": \"1F1B\"").starts_with(
      "p.json: /schedule: expected one of"));
  CHECK(replace("\"stages\": [", "\"stages\": [{}, ") ==
        "p.json: /stages: expected 1 entries (meshes × interleave = 1 × 1), got 2");
}

}  // namespace
}  // namespace alpasim::sim
