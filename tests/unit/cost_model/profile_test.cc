#include "schema/profile.h"

#include <doctest/doctest.h>

namespace alpasim::schema {
namespace {

core::Result<Profile> parse(std::string_view text) {
  auto doc = core::parse_json_text(text, "p.json");
  REQUIRE(doc.ok());
  return parse_profile(core::JsonValue::root(*doc));
}

constexpr const char* kProvenance = R"("provenance": {"machine": "dgx-a100-80gb",
  "gpu": "a100-80gb", "driver_version": "535", "cuda_version": "12.2", "cublas_version": "12.2",
  "cudnn_version": "9", "nccl_version": "2.18", "date": "2026-01-01", "measured_by": "me",
  "source": "measured"})";

std::string with(const std::string& body) {
  return std::string("{\"schema_version\": 1, ") + kProvenance + (body.empty() ? "" : ", ") + body + "}";
}

TEST_CASE("a profile round-trips through JSON") {
  Profile p = parse(with(R"("gemm": [{"m": 1024, "n": 1024, "k": 1024, "dtype": "bf16",
      "tflops_per_s": 100, "role": "fit", "citation": "bench run 1"}],
      "collectives": [{"collective": "all_reduce", "num_gpus": 8, "num_nodes": 1,
      "message_bytes": 1048576, "time_us": 50, "role": "check", "citation": "nccl-tests"}],
      "links": [{"link_class": "infiniband", "measurement": "collective",
      "spec_gbyte_per_s": 25, "achieved_gbyte_per_s": 24, "role": "fit", "citation": "x"}],
      "attention": [{"batch": 2, "heads": 16, "kv_heads": 2, "seq": 4096, "head_dim": 192,
      "v_head_dim": 128, "dtype": "bf16", "kernel": "cudnn", "forward_us": 333.9,
      "backward_us": 991.9, "role": "check", "citation": "run 6 line 7"}])")).value();
  REQUIRE(p.gemm.size() == 1);
  REQUIRE(p.attention.size() == 1);
  CHECK(p.attention[0].causal);  // the default
  CHECK(p.attention[0].v_head_dim == 128);
  // time = 2 * 1024^3 FLOPs / 100 TFLOP/s = 21.47 us.
  CHECK(p.gemm[0].time_us == doctest::Approx(2.0 * 1024 * 1024 * 1024 / 100e12 * 1e6));
  CHECK(p.gemm[0].meta.source == ProfileSource::kMeasured);  // inherited from provenance
  CHECK(p.collectives[0].algorithm == "default");
  CHECK(p.collectives[0].meta.role == ProfileRole::kCheck);
  auto doc = core::parse_json_text(profile_to_json(p).dump(), "again.json").value();
  Profile again = parse_profile(core::JsonValue::root(doc)).value();
  CHECK(profile_to_json(again) == profile_to_json(p));
}

TEST_CASE("bad profiles give exact errors") {
  CHECK(parse(R"({"schema_version": 2})").status().message() ==
        "p.json: /schema_version: expected schema_version 1, got 2");
  CHECK(parse(with(R"("gemm": [{"m": 1, "n": 1, "k": 1, "dtype": "bf16", "time_us": 1,
      "tflops_per_s": 1, "role": "fit", "citation": "x"}])")).status().message() ==
        "p.json: /gemm/0: expected exactly one of \"time_us\" and \"tflops_per_s\"");
  CHECK(parse(with(R"("gemm": [{"m": 1, "n": 1, "k": 1, "dtype": "bf16", "time_us": 1,
      "role": "fit"}])")).status().message() ==
        "p.json: /gemm/0/citation: missing required key (expected a non-empty string)");
  CHECK(parse(with(R"("collectives": [{"collective": "all_reduce", "num_gpus": 8,
      "num_nodes": 1, "busbw_gbyte_per_s": 100, "role": "fitt", "citation": "x"}])"))
            .status().message() ==
        "p.json: /collectives/0/role: expected one of \"fit\" or \"check\", got \"fitt\"; did "
        "you mean \"fit\"?");
  CHECK(parse(with(R"("collectives": [{"collective": "all_reduce", "num_gpus": 8,
      "num_nodes": 1, "time_us": 5, "role": "fit", "citation": "x"}])")).status().message() ==
        "p.json: /collectives/0: an entry without \"message_bytes\" (a large-message asymptote) "
        "needs \"busbw_gbyte_per_s\"");
  CHECK(parse(with("")).status().message() ==
        "p.json: /: expected at least one entry in \"gemm\", \"conv\", \"collectives\", "
        "\"links\" or \"attention\", got none: a profile without measurements calibrates nothing");
  CHECK(parse(with(R"("gemm": [], "links": [])")).status().message() ==
        "p.json: /: expected at least one entry in \"gemm\", \"conv\", \"collectives\", "
        "\"links\" or \"attention\", got none: a profile without measurements calibrates nothing");
  CHECK(parse(with(R"("gemms": [])")).status().message() ==
        "p.json: /gemms: unknown key; did you mean \"gemm\"?");
  // Attention rows: grouped-query heads must divide the query heads; both times are needed.
  CHECK(parse(with(R"("attention": [{"batch": 1, "heads": 8, "kv_heads": 3, "seq": 128,
      "head_dim": 64, "dtype": "bf16", "kernel": "k", "forward_us": 1, "backward_us": 2,
      "role": "fit", "citation": "x"}])")).status().message() ==
        "p.json: /attention/0/kv_heads: expected a divisor of heads (8), got 3");
  CHECK(parse(with(R"("attention": [{"batch": 1, "heads": 8, "kv_heads": 2, "seq": 128,
      "head_dim": 64, "dtype": "bf16", "kernel": "k", "forward_us": 1, "role": "fit",
      "citation": "x"}])")).status().message() ==
        "p.json: /attention/0/backward_us: missing required key (expected a time in [0.001, 1e9] us)");
  // 2·8·1024²·(64 + 64) FLOPs in 0.001 us: 2.1e6 TFLOP/s, no GPU's.
  CHECK(parse(with(R"("attention": [{"batch": 1, "heads": 8, "kv_heads": 8, "seq": 1024,
      "head_dim": 64, "dtype": "bf16", "kernel": "k", "forward_us": 0.001, "backward_us": 20,
      "role": "fit", "citation": "x"}])")).status().message().rfind(
            "p.json: /attention/0/forward_us: a time of 0.001000 us for this attention kernel means up to ", 0) == 0);
}

TEST_CASE("physically impossible profile values are errors naming the entry and key") {
  // Issue 18 (6): a bus bandwidth of 1e300, a time of 1e-300 (which put NaN into the fit) or
  // a GEMM of 2^62 per dimension used to be accepted.
  auto message = [](const std::string& body) { return parse(with(body)).status().message(); };
  CHECK(message(R"("collectives": [{"collective": "all_reduce", "num_gpus": 8, "num_nodes": 1,
      "busbw_gbyte_per_s": 1e300, "role": "fit", "citation": "x"}])") ==
        "p.json: /collectives/0/busbw_gbyte_per_s: expected a bandwidth in (0, 1e5] GB/s, got 1e+300");
  CHECK(message(R"("collectives": [{"collective": "all_reduce", "num_gpus": 8, "num_nodes": 1,
      "message_bytes": 1024, "time_us": 1e-300, "busbw_gbyte_per_s": 10, "role": "fit",
      "citation": "x"}])") == "p.json: /collectives/0/time_us: expected a time in [0.001, 1e9] us, got 1e-300");
  CHECK(message(R"("gemm": [{"m": 4611686018427387904, "n": 1, "k": 1, "dtype": "bf16",
      "time_us": 1, "role": "fit", "citation": "x"}])") ==
        "p.json: /gemm/0/m: expected an integer in [1, 2147483648], got 4611686018427387904");
  // A time that is in range but impossible for the GEMM's size: 2·8192³ FLOPs in 1 ns.
  CHECK(message(R"("gemm": [{"m": 8192, "n": 8192, "k": 8192, "dtype": "bf16",
      "time_us": 0.001, "role": "fit", "citation": "x"}])") ==
        "p.json: /gemm/0/time_us: a time of 0.001000 us for this GEMM means 1099511628 TFLOP/s, "
        "above the physical bound of 100000 TFLOP/s per GPU");
  CHECK(message(R"("links": [{"link_class": "infiniband", "measurement": "collective",
      "spec_gbyte_per_s": 25, "achieved_gbyte_per_s": -3, "role": "fit", "citation": "x"}])") ==
        "p.json: /links/0/achieved_gbyte_per_s: expected a bandwidth in (0, 1e5] GB/s, got -3");
  // The bounds are wide: an H100 GEMM at 989 TFLOP/s and NVLink at 450 GB/s still parse.
  CHECK(parse(with(R"("gemm": [{"m": 8192, "n": 8192, "k": 8192, "dtype": "bf16",
      "tflops_per_s": 989, "role": "fit", "citation": "x"}], "links": [{"link_class": "nvswitch",
      "measurement": "p2p", "spec_gbyte_per_s": 450, "achieved_gbyte_per_s": 396.4, "role": "fit",
      "citation": "x"}])")).ok());
}

TEST_CASE("the shipped profiles load") {
  for (const char* machine :
       {"dgx-a100-80gb", "hgx-h200", "dgx-h100", "aws-p3.16xlarge", "dgx-b200", "mi300x"}) {
    auto p = read_profile_file(std::string(ALPASIM_SOURCE_DIR "/profiles/") + machine +
                               "/2026-08-22-derived.json");
    CHECK_MESSAGE(p.ok(), p.status().to_string());
    if (p.ok()) {
      CHECK(p->provenance.machine == machine);
      CHECK(p->provenance.source == ProfileSource::kDerived);
    }
  }
}

}  // namespace
}  // namespace alpasim::schema
