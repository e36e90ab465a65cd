// `alpa-sim calibrate` (driver/calibrate.h) on a measured-format profile whose numbers were
// generated from a known parameter set (tests/data/profiles/synthetic-dgx-h100-measured.json,
// written by make_synthetic_profile() below): calibration must recover the parameters and
// report the held-out errors the generator put in.
#include "driver/calibrate.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "cluster/cluster_spec.h"
#include "core/json_reader.h"
#include "cost_model/calibration.h"
#include "schema/profile.h"

namespace alpasim::driver {
namespace {

using core::DType;
using schema::ProfileRole;

const std::filesystem::path kSynthetic =
    std::filesystem::path(ALPASIM_SOURCE_DIR) / "tests/data/profiles/synthetic-dgx-h100-measured.json";

// The known parameter set.
constexpr double kBf16Max = 0.74, kBf16Half = 1.5e10;  // GEMM curve: eff = max F / (F + half)
constexpr double kFp16Max = 0.71, kFp16Half = 2.5e10;
constexpr double kBase = 8e-6, kHop = 0.7e-6, kSimple = 12e-6;
constexpr double kLl = 0.45, kNvls = 0.55, kNvswitchEff = 0.82;
// Held-out GEMMs deviate from the curve by known factors: "random" shapes run 3 % slower
// (predicted / measured - 1 = +0.03) and "tp_skinny" shapes 5 % faster (1/1.05 - 1).
constexpr double kRandomSlowdown = 1.03, kTpSpeedup = 1.05;

cost_model::CalibratedParams known_params() {
  cost_model::CalibratedParams p = cost_model::default_params();
  p.compute.gemm[static_cast<std::size_t>(DType::kBf16)] = {kBf16Max, kBf16Half};
  p.compute.gemm[static_cast<std::size_t>(DType::kFp16)] = {kFp16Max, kFp16Half};
  p.collective.base_latency_s = kBase;
  p.collective.hop_latency_s = kHop;
  p.collective.simple_latency_s = kSimple;
  p.collective.ll_bandwidth_fraction = kLl;
  p.collective.nvls_efficiency = kNvls;
  for (auto cls : {cluster::LinkClass::kNvswitch, cluster::LinkClass::kNvlink}) {
    p.collective.link[static_cast<std::size_t>(cls)].bandwidth_efficiency = kNvswitchEff;
  }
  return p;
}

// Generates the synthetic profile: GEMM grid (fit) and off-grid shapes (check) from the
// curve; NCCL rows predicted by the cost model under known_params().
schema::Profile make_synthetic_profile() {
  schema::Profile p;
  auto& v = p.provenance;
  v.machine = "dgx-h100";
  v.gpu = "h100-sxm";
  v.driver_version = "synthetic";
  v.cuda_version = "synthetic";
  v.cublas_version = "synthetic";
  v.cudnn_version = "synthetic";
  v.nccl_version = "synthetic";
  v.date = "2026-11-23";
  v.measured_by =
      "SYNTHETIC TEST DATA, not a measurement: generated from a known parameter set by "
      "make_synthetic_profile() in tests/unit/driver/calibrate_test.cc, in alpa-profile's format";
  v.source = schema::ProfileSource::kMeasured;
  const cluster::ClusterSpec machine = cluster::make_preset_cluster("dgx-h100", 1).value();
  const std::string cite = "synthetic: tests/unit/driver/calibrate_test.cc";
  auto gemm = [&](std::int64_t m, std::int64_t n, std::int64_t k, DType dt, ProfileRole role,
                  const std::string& set, double factor) {
    const cost_model::GemmCurve curve = known_params().compute.gemm[static_cast<std::size_t>(dt)];
    const double f = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    const double eff = curve.max_efficiency * f / (f + curve.half_size_flops);
    schema::GemmEntry e;
    e.m = m;
    e.n = n;
    e.k = k;
    e.dtype = dt;
    e.time_us = f / (eff * machine.gpu.peak(dt).value()) * factor * 1e6;
    e.tflops_per_s = f / (e.time_us * 1e-6) / 1e12;
    e.meta = {role, schema::ProfileSource::kMeasured, cite + "; gemm set=" + set};
    p.gemm.push_back(e);
  };
  for (DType dt : {DType::kBf16, DType::kFp16}) {
    for (std::int64_t m : {256, 1024, 4096, 16384}) {
      for (std::int64_t n : {256, 1024, 4096, 16384}) {
        for (std::int64_t k : {256, 1024, 4096, 16384}) gemm(m, n, k, dt, ProfileRole::kFit, "grid", 1.0);
      }
    }
    for (auto [m, n, k] : {std::tuple{320, 2880, 704}, std::tuple{1344, 7552, 448},
                           std::tuple{5952, 640, 12480}, std::tuple{2240, 2240, 2240},
                           std::tuple{9600, 1472, 3392}, std::tuple{704, 11200, 6080}}) {
      gemm(m, n, k, dt, ProfileRole::kCheck, "random", kRandomSlowdown);
    }
    for (auto [m, n, k] : {std::tuple{6144, 3840, 5120}, std::tuple{6144, 5120, 1280},
                           std::tuple{6144, 10240, 5120}, std::tuple{6144, 5120, 2560}}) {
      gemm(m, n, k, dt, ProfileRole::kCheck, "tp_skinny", 1.0 / kTpSpeedup);
    }
  }
  const cost_model::CalibratedParams params = known_params();
  auto coll = [&](const std::string& c, const std::string& algo, const std::string& proto,
                  std::int64_t n, std::int64_t bytes, ProfileRole role) {
    schema::CollectiveEntry e;
    e.collective = c;
    e.algorithm = algo;
    e.protocol = proto;
    e.num_gpus = n;
    e.num_nodes = 1;
    e.message_bytes = bytes;
    const auto est = cost_model::predict_collective_row(e, machine, params).value();
    e.time_us = core::to_us(est.time);
    e.busbw_gbyte_per_s = core::to_gbyte_per_s(est.bus_bandwidth);
    e.meta = {role, schema::ProfileSource::kMeasured, cite + "; nccl contiguous"};
    p.collectives.push_back(e);
  };
  for (std::int64_t n : {2, 4, 8}) {
    for (std::int64_t s : {1024, 2048, 4096}) coll("all_reduce", "ring", "default", n, s, ProfileRole::kFit);
    for (std::int64_t s = std::int64_t{64} << 10; s <= (std::int64_t{1} << 20); s *= 4) {
      coll("all_reduce", "ring", "ll", n, s, ProfileRole::kFit);
    }
    for (const char* c : {"all_gather", "reduce_scatter"}) {
      for (std::int64_t s = std::int64_t{32} << 20; s <= (std::int64_t{1} << 30); s *= 2) {
        coll(c, "ring", "simple", n, s, ProfileRole::kFit);
      }
    }
  }
  for (std::int64_t n : {4, 8}) {
    for (std::int64_t s = std::int64_t{32} << 20; s <= (std::int64_t{1} << 30); s *= 2) {
      coll("all_reduce", "nvls", "simple", n, s, ProfileRole::kFit);
    }
  }
  for (std::int64_t s : {std::int64_t{64} << 20, std::int64_t{512} << 20}) {
    coll("all_gather", "ring", "simple", 8, s + (s >> 1), ProfileRole::kCheck);  // 96, 768 MiB
  }
  return p;
}

std::filesystem::path work_dir() {
  auto d = std::filesystem::path(ALPASIM_BINARY_DIR) / "tests" / "calibrate_work";
  std::filesystem::create_directories(d);
  return d;
}

std::filesystem::path write_file(const std::string& name, const std::string& text) {
  const auto path = work_dir() / name;
  std::ofstream(path) << text;
  return path;
}

double rel(double got, double want) { return std::abs(got - want) / std::abs(want); }

TEST_CASE("the synthetic profile is exactly what its generator writes") {
  const std::string want = core::dump_json(schema::profile_to_json(make_synthetic_profile()));
  if (std::getenv("ALPASIM_UPDATE_TEST_DATA") != nullptr) std::ofstream(kSynthetic) << want;
  std::ifstream f(kSynthetic);
  std::stringstream got;
  got << f.rdbuf();
  CHECK(got.str() == want);  // regenerate: ALPASIM_UPDATE_TEST_DATA=1 alpasim_driver_tests
}

TEST_CASE("calibrate recovers the generator's parameters") {
  auto rep = calibrate_profile(kSynthetic, {});
  REQUIRE_MESSAGE(rep.ok(), rep.status().message());
  const auto& P = rep->calibration.params;
  const auto& bf16 = P.compute.gemm[static_cast<std::size_t>(DType::kBf16)];
  const auto& fp16 = P.compute.gemm[static_cast<std::size_t>(DType::kFp16)];
  // GEMM: 1/eff = 1/max + (half/max)/F is linear in 1/F, and the fit rows lie exactly on it.
  CHECK(rel(bf16.max_efficiency, kBf16Max) < 1e-9);
  CHECK(rel(bf16.half_size_flops, kBf16Half) < 1e-6);
  CHECK(rel(fp16.max_efficiency, kFp16Max) < 1e-9);
  CHECK(rel(fp16.half_size_flops, kFp16Half) < 1e-6);
  const auto& C = P.collective;
  // Latency rows (<= 4 KiB) carry a bandwidth term the latency fit ignores (< 1 % of time),
  // so base and hop latency come back within a few percent; the rest follows them.
  CHECK(rel(C.base_latency_s, kBase) < 0.05);
  CHECK(rel(C.hop_latency_s, kHop) < 0.05);
  CHECK(rel(C.link[static_cast<std::size_t>(cluster::LinkClass::kNvswitch)].bandwidth_efficiency,
            kNvswitchEff) < 0.01);
  CHECK(rel(C.nvls_efficiency, kNvls) < 0.01);
  CHECK(rel(C.ll_bandwidth_fraction, kLl) < 0.05);
  CHECK(P.origin.at("gemm/bf16") == "fitted: dgx-h100 (64 rows)");  // the 4^3 grid; check rows never fit
}

TEST_CASE("calibrate reports the held-out errors the generator put in") {
  auto rep = calibrate_profile(kSynthetic, {});
  REQUIRE(rep.ok());
  // Curve predictions of check rows: random shapes +3 % (predicted / measured = 1.03),
  // tensor-parallel shapes 1/1.05 - 1 = -4.76 %. 2 dtypes x (6 + 4) = 20 rows; sorted
  // |errors| are twelve 0.03 then eight 0.0476, so the median (10th, 11th) is 0.03.
  const ErrorStats& g = rep->held_out_gemm;
  CHECK(g.rows == 20);
  CHECK(g.median_abs_rel_error == doctest::Approx(0.03).epsilon(1e-9));
  CHECK(g.max_abs_rel_error == doctest::Approx(1 - 1 / kTpSpeedup).epsilon(1e-9));
  bool found_random = false;
  for (const auto& s : rep->held_out) {
    if (s.group == "gemm/bf16 set=random") {
      found_random = true;
      CHECK(s.rows == 6);
      CHECK(s.max_abs_rel_error == doctest::Approx(0.03).epsilon(1e-9));
    }
  }
  CHECK(found_random);
  // Fit rows are reproduced (GEMM exactly; collectives to the latency fit's accuracy).
  for (const auto& s : rep->fit) {
    if (s.group.rfind("gemm/", 0) == 0) CHECK(s.max_abs_rel_error < 1e-9);
  }
  CHECK(rep->text.find("held-out GEMM, gemm (efficiency curve): 20 shapes, median 3.0%, worst "
                       "4.8% (target: median <= 5.0%, worst <= 15.0%: met)") != std::string::npos);
  // Grid interpolation predicts the same 20 rows (its error is not closed-form: log-linear
  // interpolation of a curve that is not log-linear, plus the generator's 3 % / 5 %).
  CHECK(rep->held_out_gemm_interpolated.rows == 20);
  CHECK(rep->json["held_out_gemm"]["meets_target"] == true);
  const std::string md = held_out_gemm_markdown(*rep);
  CHECK(md.find("| gemm/fp16 set=tp_skinny | 4 | 4.8% | 4.8% | ") != std::string::npos);
  CHECK(md.find("| **all held-out GEMMs** | 20 | 3.0% | 4.8% | ") != std::string::npos);
  CHECK(rep->held_out_interpolated.size() == 4);  // {bf16, fp16} x {random, tp_skinny}
}

TEST_CASE("calibrate output is byte-identical across runs") {
  auto a = calibrate_profile(kSynthetic, {});
  auto b = calibrate_profile(kSynthetic, {});
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->text == b->text);
  CHECK(core::dump_json(a->json) == core::dump_json(b->json));
}

TEST_CASE("calibrate: exact errors for broken profiles") {
  // A GEMM row without its citation: the loader names the file and the JSON pointer.
  const auto no_cite = write_file("no_cite.json", R"({"schema_version": 1,
    "provenance": {"machine": "dgx-h100", "gpu": "h100-sxm", "driver_version": "x",
      "cuda_version": "x", "cublas_version": "x", "cudnn_version": "x", "nccl_version": "x",
      "date": "2026-11-23", "measured_by": "test", "source": "measured"},
    "gemm": [{"m": 1, "n": 1, "k": 1, "dtype": "bf16", "time_us": 1.0, "role": "fit"}],
    "conv": [], "collectives": [], "links": []})");
  auto r1 = calibrate_profile(no_cite, {});
  REQUIRE_FALSE(r1.ok());
  CHECK(r1.status().message() ==
        no_cite.string() + ": /gemm/0/citation: missing required key (expected a non-empty string)");

  // A machine preset that does not exist.
  auto r2 = calibrate_profile(kSynthetic, {.machine = "dgx-z900", .all_rows = false, .prior = {}});
  REQUIRE_FALSE(r2.ok());
  CHECK(r2.status().message() ==
        kSynthetic.string() + ": /provenance/machine: unknown cluster preset \"dgx-z900\" (pass "
                              "--machine with a preset that has this GPU)");

  // A machine whose GPU is not the profile's.
  auto r3 = calibrate_profile(kSynthetic, {.machine = "hgx-h200", .all_rows = false, .prior = {}});
  REQUIRE_FALSE(r3.ok());
  CHECK(r3.status().message() == kSynthetic.string() +
                                     ": profile of GPU \"h100-sxm\" cannot calibrate a machine of \"h200\"");
}

TEST_CASE("calibrate --prior inherits what the profile does not measure") {
  // The synthetic profile has no InfiniBand rows: with the shipped dgx-a100-80gb derived
  // profile (one InfiniBand fit row) as prior, efficiency/infiniband is inherited from it.
  const auto prior_file =
      std::filesystem::path(ALPASIM_SOURCE_DIR) / "profiles/dgx-a100-80gb/2026-08-22-derived.json";
  auto rep = calibrate_profile(kSynthetic, {.machine = "", .all_rows = false, .prior = prior_file});
  REQUIRE_MESSAGE(rep.ok(), rep.status().message());
  CHECK(rep->calibration.params.origin.at("efficiency/infiniband") == "inherited: dgx-a100-80gb (1 row)");
  CHECK(rep->text.find("prior: the calibration of " + prior_file.string()) != std::string::npos);
  // The GEMM curves still come from the synthetic profile alone.
  CHECK(rel(rep->calibration.params.compute.gemm[static_cast<std::size_t>(DType::kBf16)].max_efficiency,
            kBf16Max) < 1e-9);
}

TEST_CASE("run --profile points the scenario at the file") {
  Scenario s = load_default_scenario().value();
  REQUIRE(use_profile_file(s, kSynthetic.string()).ok());
  CHECK(s.profile.file == kSynthetic);
  CHECK(s.profile.file_as_written == kSynthetic.string());
  CHECK(s.profile.preset.empty());
  CHECK(scenario_to_json(s)["profile"]["file"] == kSynthetic.string());
  auto missing = use_profile_file(s, "no/such/profile.json");
  CHECK(missing.message() == "--profile: file not found: no/such/profile.json");
}

}  // namespace
}  // namespace alpasim::driver
