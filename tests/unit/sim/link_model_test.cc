#include "sim/link_model.h"

#include <array>

#include <doctest/doctest.h>

namespace alpasim::sim {
namespace {

TEST_CASE("a link carrying k flows gives each capacity/k") {
  LinkModel m;
  LinkId l = m.add_link("l", core::gbyte_per_s(1));
  std::array<LinkId, 1> route{l};
  FlowId a = m.start_flow(0, route, 1e9);
  FlowId b = m.start_flow(0, route, 1e9);
  m.update_rates();
  CHECK(m.rate(a).value() == doctest::Approx(0.5e9));
  CHECK(m.rate(b).value() == doctest::Approx(0.5e9));
  // 1e9 bytes at 0.5 GB/s: 2 s = 2e9 ns.
  CHECK(m.next_completion() == 2'000'000'000);
  FlowId c = m.start_flow(0, route, 1e9);
  m.update_rates();
  CHECK(m.rate(c).value() == doctest::Approx(1e9 / 3));
}

TEST_CASE("progressive filling gives the max-min fair rates") {
  // L1 = 1 GB/s carries f1, f2; L2 = 3 GB/s carries f2, f3. L1 is the bottleneck
  // (1/2 < 3/2): f1 = f2 = 0.5 GB/s; f3 gets what L2 has left, 3 - 0.5 = 2.5 GB/s.
  LinkModel m;
  LinkId l1 = m.add_link("l1", core::gbyte_per_s(1));
  LinkId l2 = m.add_link("l2", core::gbyte_per_s(3));
  std::array<LinkId, 1> r1{l1};
  std::array<LinkId, 2> r12{l1, l2};
  std::array<LinkId, 1> r2{l2};
  FlowId f1 = m.start_flow(0, r1, 1e6);
  FlowId f2 = m.start_flow(0, r12, 1e6);
  FlowId f3 = m.start_flow(0, r2, 1e6);
  m.update_rates();
  CHECK(m.rate(f1).value() == doctest::Approx(0.5e9));
  CHECK(m.rate(f2).value() == doctest::Approx(0.5e9));
  CHECK(m.rate(f3).value() == doctest::Approx(2.5e9));
  // f3 finishes first: 1e6 B / 2.5 B/ns = 400000 ns. Then f1 and f2 have 8e5 B left.
  CHECK(m.next_completion() == 400'000);
  auto done = m.advance(400'000);
  REQUIRE(done.size() == 1);
  CHECK(done[0] == f3);
  m.update_rates();
  // L1 still limits f1 and f2 to 0.5 GB/s each: 8e5 / 0.5 = 1.6e6 ns more.
  CHECK(m.next_completion() == 2'000'000);
  CHECK(m.advance(2'000'000).size() == 2);
  CHECK(m.num_active() == 0);
  CHECK(m.bytes_carried()[static_cast<std::size_t>(l1)] == doctest::Approx(2e6));
  CHECK(m.bytes_carried()[static_cast<std::size_t>(l2)] == doctest::Approx(2e6));
}

}  // namespace
}  // namespace alpasim::sim
