// exec/launch/reshard_plan.h: the copy plan of resharding instructions, checked against an
// element-by-element reference of the CPU backend's semantics (every member's source block
// copied in rank order into each destination block, the last writer's value kept), on
// closed-form cases, on many random 2-D mesh layouts (sharded, replicated, uneven and empty
// blocks, meshes of different shapes over one group) and on random boxes.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "exec/launch/comm_plan.h"
#include "exec/launch/reshard_plan.h"
#include "exec/launch/stream_plan.h"
#include "tests/unit/exec_launch/reshard_reference.h"
#include "exec/lower.h"
#include "exec/verify.h"
#include "schema/plan.h"

namespace alpasim::exec::launch {
namespace {

using testing::V;
using testing::check_against_reference;
using testing::check_program_reshards;
using testing::volume;

/// Uniform integer in [lo, hi] from the raw generator (own distribution: deterministic across
/// standard libraries).
std::int64_t pick(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
}

/// The blocks of a tensor laid out on a rows x cols mesh (ranks row-major): each tensor axis
/// is whole, split over mesh axis 0, axis 1, or both (0 major); a mesh axis splits at most
/// one tensor axis; unused mesh axes replicate. Parts are ceil(n/k) long, the last ones
/// shorter or empty when k does not divide n (uneven).
std::vector<Block> mesh_layout(const V& global, std::int64_t rows, std::int64_t cols, std::mt19937_64& rng) {
  std::vector<int> use(global.size(), 0);  // 0 whole, 1 mesh axis 0, 2 mesh axis 1, 3 both
  bool used0 = false, used1 = false;
  for (std::size_t a = 0; a < global.size(); ++a) {
    const auto u = static_cast<int>(pick(rng, 0, 3));
    if (((u & 1) && used0) || ((u & 2) && used1)) continue;
    use[a] = u;
    used0 = used0 || (u & 1);
    used1 = used1 || (u & 2);
  }
  std::vector<Block> out;
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j) {
      Block b;
      for (std::size_t a = 0; a < global.size(); ++a) {
        std::int64_t parts = 1, part = 0;
        if (use[a] == 1) parts = rows, part = i;
        if (use[a] == 2) parts = cols, part = j;
        if (use[a] == 3) parts = rows * cols, part = i * cols + j;
        const std::int64_t len = (global[a] + parts - 1) / parts;
        const std::int64_t lo = std::min(global[a], part * len), hi = std::min(global[a], lo + len);
        b.offset.push_back(lo);
        b.shape.push_back(hi - lo);
      }
      out.push_back(b);
    }
  }
  return out;
}

TEST_CASE("reshard plan: closed-form cases (gather, replicated source, column block, scalar)") {
  // [8] split in two halves -> whole on one member: one copy per half, higher rank first;
  // each half is one contiguous run of 4 elements.
  auto c = plan_block_copies({{{0}, {4}}, {{4}, {4}}}, {{{0}, {8}}});
  REQUIRE(c.size() == 2);
  CHECK(copy_to_text(c[0]) == "src r1 -> dst r0: extent [4] src +0 [1] dst +4 [1]");
  CHECK(copy_to_text(c[1]) == "src r0 -> dst r0: extent [4] src +0 [1] dst +0 [1]");

  // Both members hold all of [8] (replicated) -> halves: every half from rank 1 only (the
  // CPU backend's last writer); rank 0 sends nothing.
  c = plan_block_copies({{{0}, {8}}, {{0}, {8}}}, {{{0}, {4}}, {{4}, {4}}});
  REQUIRE(c.size() == 2);
  CHECK(copy_to_text(c[0]) == "src r1 -> dst r0: extent [4] src +0 [1] dst +0 [1]");
  CHECK(copy_to_text(c[1]) == "src r1 -> dst r1: extent [4] src +4 [1] dst +0 [1]");

  // A [4, 8] matrix whole on rank 0 -> columns 2..3 on rank 0: 4 rows of 2, source rows 8
  // apart starting at column 2; the destination block [4, 2] is contiguous, but the source
  // is not, so the axes stay separate.
  c = plan_block_copies({{{0, 0}, {4, 8}}}, {{{0, 2}, {4, 2}}});
  REQUIRE(c.size() == 1);
  CHECK(copy_to_text(c[0]) == "src r0 -> dst r0: extent [4, 2] src +2 [8, 1] dst +0 [2, 1]");
  // One column: the unit inner axis is kept (stride 1 on both sides), 4 runs of 1.
  c = plan_block_copies({{{0, 0}, {4, 8}}}, {{{0, 5}, {4, 1}}});
  REQUIRE(c.size() == 1);
  CHECK(copy_to_text(c[0]) == "src r0 -> dst r0: extent [4, 1] src +5 [8, 1] dst +0 [1, 1]");
  // Rows 1..2 of the same matrix: contiguous on both sides, merged into one run of 16.
  c = plan_block_copies({{{0, 0}, {4, 8}}}, {{{1, 0}, {2, 8}}});
  REQUIRE(c.size() == 1);
  CHECK(copy_to_text(c[0]) == "src r0 -> dst r0: extent [16] src +8 [1] dst +0 [1]");
  // A scalar (rank 0): one element.
  c = plan_block_copies({{{}, {}}}, {{{}, {}}});
  REQUIRE(c.size() == 1);
  CHECK(copy_to_text(c[0]) == "src r0 -> dst r0: extent [1] src +0 [1] dst +0 [1]");
  // Disjoint blocks: nothing to copy.
  CHECK(plan_block_copies({{{0}, {4}}}, {{{4}, {4}}}).empty());

  check_against_reference({8}, {{{0}, {8}}, {{0}, {8}}}, {{{0}, {4}}, {{4}, {4}}}, 1.0f);
  check_against_reference({4, 8}, {{{0, 0}, {4, 8}}}, {{{0, 5}, {4, 1}}}, 0.5f);
  check_against_reference({}, {{{}, {}}, {{}, {}}}, {{{}, {}}, {{}, {}}}, 1.0f);
}

TEST_CASE("reshard plan: overlapping sources are split so each destination element is copied once") {
  // [6] with sources [0,4) (rank 0) and [2,6) (rank 1) -> whole: rank 1 gives [2,6), rank 0
  // only [0,2) (its [2,4) is rank 1's).
  const auto c = plan_block_copies({{{0}, {4}}, {{2}, {4}}}, {{{0}, {6}}});
  REQUIRE(c.size() == 2);
  CHECK(copy_to_text(c[0]) == "src r1 -> dst r0: extent [4] src +0 [1] dst +2 [1]");
  CHECK(copy_to_text(c[1]) == "src r0 -> dst r0: extent [2] src +0 [1] dst +0 [1]");
  // A 2-D hole: rank 1's block sits inside rank 0's; rank 0's part around it is peeled into
  // up to 4 disjoint boxes (below/above on each axis).
  check_against_reference({5, 5}, {{{0, 0}, {5, 5}}, {{1, 2}, {2, 2}}}, {{{0, 0}, {5, 5}}}, 1.0f);
  const auto h = plan_block_copies({{{0, 0}, {5, 5}}, {{1, 2}, {2, 2}}}, {{{0, 0}, {5, 5}}});
  CHECK(h.size() == 5);  // 1 from rank 1, 4 from rank 0 (rows 0 and 3..4; columns 0..1 and 4 of rows 1..2)
}

TEST_CASE("reshard plan: random 2-D mesh layouts (sharded, replicated, uneven, empty) match the reference") {
  std::mt19937_64 rng(20261123);
  // Mesh shapes by group size: source and destination meshes may differ in shape over one
  // group (e.g. 2x2 -> 1x4), as resharding between operators of one stage or a group of
  // devices seen as a 1-D mesh.
  const std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> meshes = {
      {{1, 1}}, {{1, 2}, {2, 1}}, {{1, 3}, {3, 1}}, {{2, 2}, {1, 4}, {4, 1}}, {{2, 3}, {3, 2}, {1, 6}}};
  int cases = 0;
  std::size_t copies = 0;
  for (int t = 0; t < 600; ++t) {
    const auto& shapes = meshes[static_cast<std::size_t>(pick(rng, 0, static_cast<std::int64_t>(meshes.size()) - 1))];
    const auto sm = shapes[static_cast<std::size_t>(pick(rng, 0, static_cast<std::int64_t>(shapes.size()) - 1))];
    const auto dm = shapes[static_cast<std::size_t>(pick(rng, 0, static_cast<std::int64_t>(shapes.size()) - 1))];
    V global;
    const std::int64_t rank = pick(rng, 0, 4);
    for (std::int64_t a = 0; a < rank; ++a) global.push_back(pick(rng, 1, rank >= 3 ? 5 : 9));
    const auto src = mesh_layout(global, sm.first, sm.second, rng);
    const auto dst = mesh_layout(global, dm.first, dm.second, rng);
    CAPTURE(t);
    check_against_reference(global, src, dst, t % 3 == 0 ? 0.5f : 1.0f);
    copies += plan_block_copies(src, dst).size();
    ++cases;
  }
  CHECK(cases == 600);
  MESSAGE(cases << " random layouts, " << copies << " copies checked element by element");
}

TEST_CASE("reshard plan: random boxes (arbitrary offsets and overlaps) match the reference") {
  std::mt19937_64 rng(7);
  for (int t = 0; t < 300; ++t) {
    V global;
    const std::int64_t rank = pick(rng, 1, 3);
    for (std::int64_t a = 0; a < rank; ++a) global.push_back(pick(rng, 1, 7));
    auto random_blocks = [&](std::int64_t k) {
      std::vector<Block> out;
      for (std::int64_t m = 0; m < k; ++m) {
        Block b;
        for (std::int64_t x : global) {
          const std::int64_t lo = pick(rng, 0, x - 1), hi = pick(rng, lo, x);
          b.offset.push_back(lo);
          b.shape.push_back(hi - lo);
        }
        out.push_back(b);
      }
      return out;
    };
    const std::int64_t k = pick(rng, 1, 5);
    CAPTURE(t);
    check_against_reference(global, random_blocks(k), random_blocks(k), 1.0f);
  }
}

/// Runs `plan` the way the one-process-per-GPU mode does, on host arrays: every member packs
/// what each peer needs (reshard_exchange, packed_destination), the staging ranges travel
/// (a copy between host arrays stands for the grouped ncclSend/ncclRecv), every member
/// unpacks (packed_source) and does its local copies. Returns the destination arrays.
std::vector<std::vector<float>> run_exchange(const ReshardPlan& plan, const std::vector<std::vector<float>>& src,
                                             std::vector<std::vector<float>> dst) {
  const auto k = static_cast<std::int32_t>(src.size());
  std::vector<ReshardExchange> ex;
  std::vector<std::vector<float>> send(static_cast<std::size_t>(k));
  std::map<std::pair<std::int32_t, std::int32_t>, std::pair<std::int64_t, std::int64_t>> range;  // (from, to) -> at, n
  for (std::int32_t m = 0; m < k; ++m) {
    ex.push_back(reshard_exchange(plan, m));
    send[static_cast<std::size_t>(m)].assign(static_cast<std::size_t>(ex.back().send_elements), 0.0f);
    std::int64_t at = 0;
    for (const auto& [peer, list] : ex.back().send) {
      const std::int64_t start = at;
      for (std::size_t c : list) {
        apply_copy_on_host(packed_destination(plan.copies[c], at), src[static_cast<std::size_t>(m)].data(),
                           send[static_cast<std::size_t>(m)].data(), 1.0f);
        at += plan.copies[c].elements();
      }
      range[{m, peer}] = {start, at - start};
    }
    CHECK(at == ex.back().send_elements);
  }
  for (std::int32_t m = 0; m < k; ++m) {
    const ReshardExchange& x = ex[static_cast<std::size_t>(m)];
    std::vector<float> recv(static_cast<std::size_t>(x.recv_elements), 0.0f);
    std::int64_t at = 0;
    for (const auto& [peer, list] : x.recv) {
      const auto [start, n] = range.at({peer, m});
      std::int64_t want = 0;
      for (std::size_t c : list) want += plan.copies[c].elements();
      REQUIRE(n == want);  // the sender packs exactly what the receiver unpacks
      const auto& from = send[static_cast<std::size_t>(peer)];
      std::copy(from.begin() + start, from.begin() + start + n, recv.begin() + at);
      for (std::size_t c : list) {
        apply_copy_on_host(packed_source(plan.copies[c], at), recv.data(), dst[static_cast<std::size_t>(m)].data(),
                           plan.scale);
        at += plan.copies[c].elements();
      }
    }
    for (std::size_t c : x.local) {
      apply_copy_on_host(plan.copies[c], src[static_cast<std::size_t>(m)].data(), dst[static_cast<std::size_t>(m)].data(),
                         plan.scale);
    }
  }
  return dst;
}

TEST_CASE("reshard exchange: packing per peer, exchanging and unpacking equals the direct copies (random layouts)") {
  std::mt19937_64 rng(99);
  for (int t = 0; t < 200; ++t) {
    const std::int64_t rows = pick(rng, 1, 3), cols = pick(rng, 1, 3);
    V global;
    const std::int64_t rank = pick(rng, 1, 3);
    for (std::int64_t a = 0; a < rank; ++a) global.push_back(pick(rng, 1, 7));
    const auto src = mesh_layout(global, rows, cols, rng);
    const auto dst = pick(rng, 0, 1) ? mesh_layout(global, cols, rows, rng) : mesh_layout(global, rows, cols, rng);
    ReshardPlan plan;
    plan.copies = plan_block_copies(src, dst);
    plan.scale = 0.5f;
    std::vector<std::vector<float>> sdata, ddata;
    for (const Block& b : src) {
      sdata.emplace_back(static_cast<std::size_t>(volume(b.shape)));
      for (std::size_t i = 0; i < sdata.back().size(); ++i) sdata.back()[i] = static_cast<float>(sdata.size() * 1000 + i);
    }
    for (const Block& b : dst) ddata.emplace_back(static_cast<std::size_t>(volume(b.shape)), -1.0f);
    std::vector<std::vector<float>> direct = ddata;
    for (const BoxCopy& c : plan.copies) {
      apply_copy_on_host(c, sdata[static_cast<std::size_t>(c.source)].data(),
                         direct[static_cast<std::size_t>(c.destination)].data(), plan.scale);
    }
    CAPTURE(t);
    CHECK(run_exchange(plan, sdata, ddata) == direct);
    // Every copy is local, sent or received exactly once per side.
    std::size_t seen = 0;
    for (std::int32_t m = 0; m < static_cast<std::int32_t>(src.size()); ++m) {
      const ReshardExchange x = reshard_exchange(plan, m);
      seen += x.local.size();
      for (const auto& [peer, list] : x.send) seen += list.size();
    }
    CHECK(seen == plan.copies.size());
  }
}

/// A two-member program whose only instructions are one resharding all_gather per member.
Program two_member_reshard() {
  Program p;
  p.devices = {0, 1};
  auto buffer = [&](std::int32_t dev, V shape, V offset) {
    Buffer b;
    b.id = static_cast<BufferId>(p.buffers.size());
    b.device = dev;
    b.shape = shape;
    b.elements = volume(shape);
    b.global_shape = {4, 6};
    b.block_offset = offset;
    p.buffers.push_back(b);
    return b.id;
  };
  // Rows split (source) -> columns split (destination): each member keeps its quarter and
  // sends the other to its peer.
  const BufferId s0 = buffer(0, {2, 6}, {0, 0}), s1 = buffer(1, {2, 6}, {2, 0});
  const BufferId d0 = buffer(0, {4, 3}, {0, 0}), d1 = buffer(1, {4, 3}, {0, 3});
  p.code.resize(2);
  for (std::int32_t dev : {0, 1}) {
    Instruction in;
    in.kind = InstrKind::kAllGather;
    in.group = {0, 1};
    in.collective_id = 9;
    in.inputs = {dev == 0 ? s0 : s1};
    in.buffer = dev == 0 ? d0 : d1;
    in.scale = 0.25;
    p.code[static_cast<std::size_t>(dev)].push_back(in);
  }
  return p;
}

TEST_CASE("reshard_plan(Program): members' buffers found by collective id, exact errors") {
  Program p = two_member_reshard();
  auto plan = reshard_plan(p, 1, 0);
  REQUIRE(plan.ok());
  CHECK(plan->group == std::vector<std::int32_t>{0, 1});
  CHECK(plan->source_buffer == std::vector<BufferId>{0, 1});
  CHECK(plan->destination_buffer == std::vector<BufferId>{2, 3});
  CHECK(plan->scale == 0.25f);
  // Each destination [4, 3] gets 2 rows x 3 columns from each source: 6 elements per pair.
  for (std::int32_t s : {0, 1}) {
    for (std::int32_t d : {0, 1}) CHECK(plan->elements(s, d) == 6);
  }
  REQUIRE(plan->copies.size() == 4);
  CHECK(copy_to_text(plan->copies[0]) == "src r1 -> dst r0: extent [2, 3] src +0 [6, 1] dst +6 [3, 1]");
  CHECK(is_reshard(p.code[0][0]));

  Program bad = p;
  bad.code[1][0].collective_id = 10;
  CHECK(reshard_plan(bad, 0, 0).status().message() ==
        "device index 0 instruction #0: expected device index 1 to take part in collective 9, got none");
  bad = p;
  bad.code[1][0].group = {1, 0};
  CHECK(reshard_plan(bad, 0, 0).status().message() ==
        "device index 0 instruction #0: expected device index 1 to use the same group for collective 9, got another");
  bad = p;
  bad.code[0][0].inputs.clear();
  CHECK(reshard_plan(bad, 0, 0).status().message() ==
        "device index 0 instruction #0: expected a resharding all_gather (one input), got all_gather with 0 inputs");
  CHECK(!is_reshard(bad.code[0][0]));
  bad = p;
  bad.buffers[1].block_offset = {2};
  CHECK(reshard_plan(bad, 0, 0).status().message() ==
        "device index 0 instruction #0: expected blocks of rank 2, got b1 with shape rank 2 and offset rank 1");
  CHECK(reshard_plan(p, 0, 3).status().message() ==
        "device index 0 instruction #3: expected an instruction of the program, got none");
}

}  // namespace
}  // namespace alpasim::exec::launch

namespace alpasim::exec::launch {
namespace {

TEST_CASE("reshard plan: every resharding copy of the Megatron tiny GPT plan (two 1x2 stages) matches the reference, "
          "the program replays on NCCL's streams") {
  auto plan = schema::read_plan_file(ALPASIM_SOURCE_DIR "/tests/unit/exec/data/tiny_gpt_megatron_2stage.json");
  REQUIRE_MESSAGE(plan.ok(), plan.status().message());
  auto p = lower_plan(*plan);
  REQUIRE_MESSAGE(p.ok(), p.status().message());
  REQUIRE(verify_program(*p).ok());
  const int n = check_program_reshards(*p);
  CHECK(n > 0);  // a sharded plan: operators with different layouts are joined by reshards
  MESSAGE(n << " resharding instructions checked");
  auto comms = comm_plan(*p);
  REQUIRE(comms.ok());
  const core::Status st = check_stream_schedule(*p, *comms);
  CHECK_MESSAGE(st.ok(), st.message());
}

}  // namespace
}  // namespace alpasim::exec::launch
