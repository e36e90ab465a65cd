// The rewritten sim::LinkModel (flat routes, scratch buffers, live-link list, unsorted
// component flows) must compute exactly what the progressive filling computed before:
// same rates (bit for bit), same completion times, same finished flows, same carried
// bytes and rate series. reference_link_model.* is a frozen copy of the old code.
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include "tests/unit/sim/reference_link_model.h"
#include "sim/link_model.h"

namespace alpasim::sim {
namespace {

// One random scenario: links with capacities drawn from a few values (equal shares and
// near-ties are what exercises the round structure), flows over 1-4 random links started
// at random instants, the clock driven to each next completion or next start.
void run_scenario(std::uint64_t seed, int num_links, int num_flows, bool equal_capacities) {
  std::mt19937_64 rng(seed);
  LinkModel now_model;
  reference::LinkModel old_model;
  for (int l = 0; l < num_links; ++l) {
    const double gb = equal_capacities ? 25.0 : 1.0 + static_cast<double>(rng() % 50) / 4.0;
    now_model.add_link("l", core::gbyte_per_s(gb));
    old_model.add_link("l", core::gbyte_per_s(gb));
  }
  Time t = 0;
  int started = 0;
  std::vector<FlowId> done_new;
  while (started < num_flows || now_model.num_active() > 0) {
    // Start 0-3 flows at this instant.
    const int starts = started < num_flows ? static_cast<int>(rng() % 4) : 0;
    for (int k = 0; k < starts && started < num_flows; ++k, ++started) {
      std::vector<LinkId> route;
      const int len = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < len; ++i) route.push_back(static_cast<LinkId>(rng() % static_cast<std::uint64_t>(num_links)));
      const double bytes = static_cast<double>(1 + rng() % 100'000);
      const FlowId a = now_model.start_flow(t, route, bytes);
      const FlowId b = old_model.start_flow(t, route, bytes);
      REQUIRE(a == b);
    }
    now_model.update_rates();
    old_model.update_rates();
    for (FlowId f = 0; f < started; ++f) {
      // Rates of finished flows are stale in both; compare all, bit for bit.
      REQUIRE(now_model.rate(f).value() == old_model.rate(f).value());
    }
    const Time next_new = now_model.next_completion();
    const Time next_old = old_model.next_completion();
    REQUIRE(next_new == next_old);
    // Next instant: the next completion, or an earlier random start instant.
    Time step = started < num_flows ? static_cast<Time>(1 + rng() % 3000) : -1;
    Time next = next_new;
    if (step > 0 && (next < 0 || t + step < next)) next = t + step;
    if (next < 0) break;
    t = next;
    now_model.advance(t, done_new);
    const std::vector<FlowId> done_old = old_model.advance(t);
    REQUIRE(done_new == done_old);
  }
  CHECK(now_model.num_active() == 0);
  CHECK(old_model.num_active() == 0);
  CHECK(now_model.bytes_carried() == old_model.bytes_carried());
  const auto& a = now_model.rate_series();
  const auto& b = old_model.rate_series();
  REQUIRE(a.size() == b.size());
  for (std::size_t l = 0; l < a.size(); ++l) {
    REQUIRE(a[l].size() == b[l].size());
    for (std::size_t i = 0; i < a[l].size(); ++i) {
      CHECK(a[l][i].time == b[l][i].time);
      CHECK(a[l][i].bytes_per_s == b[l][i].bytes_per_s);
    }
  }
}

TEST_CASE("rewritten link model is bit-identical to the old progressive filling") {
  // 300 scenarios: few links (dense components, the "one pass over the link ids" path)
  // and many links (sparse components, the sorted path), equal and unequal capacities.
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    const int num_links = seed % 3 == 0 ? 64 : 2 + static_cast<int>(seed % 7);
    run_scenario(seed, num_links, 60, seed % 2 == 0);
  }
}

}  // namespace
}  // namespace alpasim::sim
