#include "schema/sharding_spec.h"

#include <doctest/doctest.h>

namespace alpasim::schema {
namespace {

TEST_CASE("Alpa notation parses and prints back") {
  for (const char* text : {"R", "RR", "S0R", "RS1", "S01R", "S0S1", "S1S0", "RS10", "S0RR"}) {
    auto spec = ShardingSpec::parse(text);
    REQUIRE(spec.ok());
    CHECK(spec->to_string() == text);
  }
  auto s = ShardingSpec::parse("S01R").value();
  CHECK(s.rank() == 2);
  CHECK(s.mesh_axes(0) == std::vector<int>{0, 1});
  CHECK(s.mesh_axes(1).empty());
  // On a 2x4 mesh S01 splits into 8 shards, S1 into 4, R into 1.
  CHECK(s.num_shards(2, 4) == 8);
  CHECK(ShardingSpec::parse("RS1")->num_shards(2, 4) == 4);
  CHECK(ShardingSpec::replicated(3).num_shards(2, 4) == 1);
  CHECK(ShardingSpec::replicated(3).to_string() == "RRR");
}

TEST_CASE("invalid specs say why") {
  CHECK(ShardingSpec::parse("S0S0").status().message() ==
        "invalid sharding spec \"S0S0\": mesh axis 0 is used twice");
  CHECK(ShardingSpec::parse("SR").status().message() ==
        "invalid sharding spec \"SR\": S must be followed by mesh axes 0 and/or 1");
  CHECK(ShardingSpec::parse("S2").status().message() ==
        "invalid sharding spec \"S2\": S must be followed by mesh axes 0 and/or 1");
  CHECK(ShardingSpec::parse("S02").status().message() ==
        "invalid sharding spec \"S02\": a 2D mesh has axes 0 and 1 only");
  CHECK(ShardingSpec::parse("X").status().message() ==
        "invalid sharding spec \"X\": unexpected 'X'; expected R or S");
}

}  // namespace
}  // namespace alpasim::schema
