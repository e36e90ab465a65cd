// The plan of alpa-profile's sweeps (exec/cuda/microbench/sweep.h): which shapes are fitted,
// which are held out, nccl-tests conventions. No GPU needed.
#include <doctest/doctest.h>

#include <set>
#include <tuple>

#include "exec/cuda/microbench/sweep.h"

namespace mb = alpasim::exec::microbench;
using alpasim::core::DType;
using alpasim::schema::ProfileRole;

TEST_CASE("gemm sweep: a complete grid of fit rows per dtype, held-out rows never on it") {
  const auto ladder = mb::gemm_grid_ladder(false);
  CHECK(ladder == std::vector<std::int64_t>{128, 256, 512, 1024, 2048, 4096, 8192, 16384});
  const auto cases = mb::gemm_sweep({DType::kBf16, DType::kFp8}, false, 1);
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t, int>> grid;
  int check = 0;
  std::set<mb::GemmSet> sets;
  for (const auto& c : cases) {
    if (c.role == ProfileRole::kFit) {
      CHECK(c.set == mb::GemmSet::kGrid);
      CHECK(c.batch == 1);
      grid.insert({c.m, c.n, c.k, static_cast<int>(c.dtype)});
    }
  }
  // 8 values per axis: 8^3 = 512 grid points per dtype, each measured once.
  CHECK(grid.size() == 2 * 512);
  const std::set<std::int64_t> on(ladder.begin(), ladder.end());
  for (const auto& c : cases) {
    if (c.role != ProfileRole::kCheck) continue;
    ++check;
    sets.insert(c.set);
    CHECK(c.set != mb::GemmSet::kGrid);
    // Off the grid: at least one dimension is not a ladder value (or it is batched).
    CHECK((c.batch > 1 || !on.contains(c.m) || !on.contains(c.n) || !on.contains(c.k)));
    // Inside the grid's range (m x batch for batched GEMMs), where the model interpolates.
    CHECK(c.m * c.batch >= 128);
    CHECK(c.m * c.batch <= 16384);
    CHECK(c.n >= 128);
    CHECK(c.n <= 16384);
    CHECK(c.k >= 128);
    CHECK(c.k <= 16384);
  }
  CHECK(sets.size() == 3);  // random, tp_skinny, batched
  CHECK(check >= 2 * 32);
}

TEST_CASE("gemm sweep: deterministic for a seed, different for another") {
  const auto a = mb::gemm_sweep({DType::kFp16}, true, 7);
  const auto b = mb::gemm_sweep({DType::kFp16}, true, 7);
  const auto c = mb::gemm_sweep({DType::kFp16}, true, 8);
  REQUIRE(a.size() == b.size());
  bool same_as_b = true, same_as_c = a.size() == c.size();
  for (std::size_t i = 0; i < a.size(); ++i) {
    same_as_b = same_as_b && a[i].m == b[i].m && a[i].n == b[i].n && a[i].k == b[i].k;
    if (same_as_c) same_as_c = a[i].m == c[i].m && a[i].n == c[i].n && a[i].k == c[i].k;
  }
  CHECK(same_as_b);
  CHECK_FALSE(same_as_c);
  // Quick: 3^3 = 27 grid points; 8 random shapes.
  int grid = 0, random = 0;
  for (const auto& x : a) {
    grid += x.set == mb::GemmSet::kGrid;
    random += x.set == mb::GemmSet::kRandom;
  }
  CHECK(grid == 27);
  CHECK(random == 8);
}

TEST_CASE("gemm sweep: tensor-parallel shapes divide N or K by the degree") {
  // h = 5120, 6144 tokens, t = 4 (quick): QKV 6144 x 3840 x 5120, projection 6144 x 5120 x 1280.
  const auto cases = mb::gemm_sweep({DType::kBf16}, true, 1);
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t>> tp;
  for (const auto& c : cases) {
    if (c.set == mb::GemmSet::kTpSkinny) tp.insert({c.m, c.n, c.k});
  }
  CHECK(tp.contains({6144, 3840, 5120}));
  CHECK(tp.contains({6144, 5120, 1280}));
  CHECK(tp.contains({6144, 5120, 5120 / 2 * 4}));  // MLP second GEMM at t = 2: K = 4h/2
  // 3 degrees x 4 GEMMs, less two duplicates: at t = 4 the first MLP GEMM (N = 4h/4) and the
  // second (K = 4h/4) are both 6144 x 5120 x 5120; the projection at t = 2 (K = h/2 = 2560)
  // equals the second MLP GEMM at t = 8 (K = 4h/8 = 2560).
  CHECK(tp.size() == 3 * 4 - 2);
}

TEST_CASE("conv sweep: Wide-ResNet layers of Alpa table 8, held-out configs as check rows") {
  const auto quick = mb::conv_sweep(8, DType::kFp16, true);
  // The 250M config's stem: 3 -> 160 channels, 7x7 stride 2 on 224x224, padding 3.
  REQUIRE_FALSE(quick.empty());
  CHECK(quick[0].in_channels == 3);
  CHECK(quick[0].out_channels == 160);
  CHECK(quick[0].kernel == 7);
  CHECK(quick[0].stride == 2);
  CHECK(quick[0].padding == 3);
  CHECK(quick[0].height == 224);
  for (const auto& c : quick) CHECK(c.role == ProfileRole::kFit);  // 250M and 1B only
  const auto full = mb::conv_sweep(32, DType::kFp32, false);
  int check = 0;
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t>> seen;
  for (const auto& c : full) {
    CHECK(seen.insert({c.in_channels, c.out_channels, c.height, c.kernel, c.stride}).second);
    if (c.role == ProfileRole::kCheck) {
      ++check;
      // Only the 2B and 6.8B configs are held out.
      CHECK((c.source.rfind("wresnet-2B ", 0) == 0 || c.source.rfind("wresnet-6.8B ", 0) == 0));
    }
  }
  CHECK(check > 0);
  // 13B stage 3 (7x7): conv2 is 3x3 from 320*8 = 2560 to 2560*16 = 40960 channels.
  bool found = false;
  for (const auto& c : full) {
    found = found || (c.in_channels == 2560 && c.out_channels == 40960 && c.height == 7 && c.kernel == 3);
  }
  CHECK(found);
}

TEST_CASE("nccl sizes and bus-bandwidth factors follow nccl-tests") {
  const auto full = mb::nccl_sizes(std::int64_t{4} << 30, false);
  CHECK(full.front() == 1024);
  CHECK(full.back() == (std::int64_t{4} << 30));
  CHECK(full.size() == 23);  // 2^10 .. 2^32
  const auto quick = mb::nccl_sizes(std::int64_t{4} << 30, true);
  CHECK(quick.back() == (std::int64_t{256} << 20));  // 2^10 * 4^9 = 2^28
  CHECK(quick.size() == 10);
  // all_reduce 2(n-1)/n: 8 ranks -> 1.75; all_gather (n-1)/n: 4 ranks -> 0.75; p2p 1.
  CHECK(mb::busbw_factor("all_reduce", 8) == doctest::Approx(1.75));
  CHECK(mb::busbw_factor("all_gather", 4) == doctest::Approx(0.75));
  CHECK(mb::busbw_factor("reduce_scatter", 2) == doctest::Approx(0.5));
  CHECK(mb::busbw_factor("all_to_all", 8) == doctest::Approx(0.875));
  CHECK(mb::busbw_factor("send_recv", 2) == doctest::Approx(1.0));
}

TEST_CASE("nccl groups: every size and placement of one node, and across nodes") {
  // One node of 8 GPUs: sizes 2..8 contiguous (7 fit), strided where 8/g >= 2: g = 2, 3, 4.
  const auto one = mb::nccl_groups({0, 0, 0, 0, 0, 0, 0, 0});
  int fit = 0, check = 0;
  for (const auto& g : one) (g.role == ProfileRole::kFit ? fit : check)++;
  CHECK(fit == 7);
  CHECK(check == 3);
  CHECK(one[1].ranks == std::vector<int>{0, 4});  // g = 2 strided
  CHECK(one[1].placement == "strided");
  // Two nodes of 2 GPUs: intra 2 (fit), then 2 nodes x 1 (check) and 2 nodes x 2 (fit).
  const auto two = mb::nccl_groups({0, 0, 1, 1});
  REQUIRE(two.size() == 3);
  CHECK(two[1].ranks == std::vector<int>{0, 2});
  CHECK(two[1].num_nodes == 2);
  CHECK(two[1].placement == "one-per-node");
  CHECK(two[2].ranks == std::vector<int>{0, 1, 2, 3});
  CHECK(two[2].role == ProfileRole::kFit);
}

TEST_CASE("op selection and GPU names") {
  auto sel = mb::parse_op_selection("nccl,gemm");
  REQUIRE(sel.ok());
  CHECK(sel->gemm);
  CHECK(sel->nccl);
  CHECK_FALSE(sel->conv);
  CHECK_FALSE(sel->hbm);
  auto bad = mb::parse_op_selection("gemm,fft");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        "--ops: unknown operator family \"fft\" (expected gemm, conv, hbm or nccl)");
  CHECK(mb::parse_op_selection("gemm,gemm").status().message() ==
        "--ops: operator family \"gemm\" given twice");
  const std::int64_t gib = std::int64_t{1} << 30;
  CHECK(mb::gpu_spec_name_for_device("NVIDIA H100 80GB HBM3", 80 * gib) == "h100-sxm");
  CHECK(mb::gpu_spec_name_for_device("NVIDIA H200", 141 * gib) == "h200");
  CHECK(mb::gpu_spec_name_for_device("NVIDIA A100-SXM4-40GB", 40 * gib) == "a100-40gb");
  CHECK_FALSE(mb::gpu_spec_name_for_device("NVIDIA GeForce RTX 4090", 24 * gib).has_value());
  CHECK(mb::gpu_spec_name_for_device("NVIDIA B200", 179 * gib) == "b200");
  CHECK(mb::preset_for_gpu("h100-sxm") == "dgx-h100");
  CHECK(mb::preset_for_gpu("b200") == "dgx-b200");
  CHECK(mb::default_profile_path("dgx-h100", "2026-11-23") == "profiles/dgx-h100/2026-11-23-measured.json");
  CHECK(mb::median({3, 1, 2}) == 2);
  CHECK(mb::median({4, 1, 2, 3}) == doctest::Approx(2.5));
}
