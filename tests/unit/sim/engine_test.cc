#include "sim/engine.h"

#include <array>
#include <vector>

#include <doctest/doctest.h>

#include "sim/timeline_stats.h"

namespace alpasim::sim {
namespace {

TaskLabel other() { return TaskLabel{}; }

TEST_CASE("a hand-computed graph: dependencies plus FIFO streams") {
  TaskGraph g;
  DeviceId d = g.add_device("gpu0");
  StreamId s0 = g.add_stream(d, "compute", StreamKind::kCompute);
  StreamId s1 = g.add_stream(d, "comm", StreamKind::kCommunication);
  TaskId a = g.add_compute(s0, 10, other());
  TaskId b = g.add_compute(s0, 20, other());
  TaskId dd = g.add_compute(s1, 7, other());  // first on s1, needs b
  TaskId c = g.add_compute(s1, 5, other());   // needs only a, but queued behind dd
  g.add_dependency(b, dd);
  g.add_dependency(a, c);
  auto r = simulate(g);
  REQUIRE(r.ok());
  // a [0,10], b [10,30]; dd waits for b: [30,37]; c is ready at 10 but the stream is FIFO: [37,42].
  CHECK(r->start == std::vector<Time>{0, 10, 30, 37});
  CHECK(r->end == std::vector<Time>{10, 30, 37, 42});
  CHECK(r->makespan == 42);
  // 4 task ends.
  CHECK(r->events_processed == 4);
  auto stats = device_stats(g, *r);
  // Compute [0,30]; communication [30,42] does not overlap it.
  CHECK(stats[0].compute_busy == 30);
  CHECK(stats[0].communication_busy == 12);
  CHECK(stats[0].communication_overlapped == 0);
  CHECK(stats[0].communication_exposed == 12);
}

TEST_CASE("transfers pay latency, then share links, overlap and memory are measured") {
  TaskGraph g;
  g.set_memory_components({"static", "activations"});
  DeviceId d = g.add_device("gpu0");
  StreamId comp = g.add_stream(d, "compute", StreamKind::kCompute);
  StreamId c1 = g.add_stream(d, "comm1", StreamKind::kCommunication);
  StreamId c2 = g.add_stream(d, "comm2", StreamKind::kCommunication);
  LinkId link = g.add_link("nic", core::gbyte_per_s(1));  // 1 byte/ns
  std::array<LinkId, 1> route{link};
  TaskId x = g.add_compute(comp, 500, other());
  TaskId t1 = g.add_transfer(c1, route, core::Bytes(1000), 100, other());
  TaskId t2 = g.add_transfer(c2, route, core::Bytes(250), 0, other());
  g.add_dependency(x, t2);
  g.add_static_memory(d, 0, core::Bytes(1000));
  g.add_memory(x, 1, core::Bytes(100), MemoryPoint::kAtStart);
  g.add_memory(x, 1, core::Bytes(-100), MemoryPoint::kAtEnd);
  auto r = simulate(g);
  REQUIRE(r.ok());
  // t1: latency to 100, alone at 1 B/ns until 500 (400 B). From 500 both get 0.5 B/ns:
  // t2's 250 B take 500 ns (ends 1000), t1 has 650 B done then, 350 B left alone: 1350.
  CHECK(r->start[static_cast<std::size_t>(t1)] == 0);
  CHECK(r->end[static_cast<std::size_t>(t1)] == 1350);
  CHECK(r->start[static_cast<std::size_t>(t2)] == 500);
  CHECK(r->end[static_cast<std::size_t>(t2)] == 1000);
  CHECK(r->link_bytes[0] == doctest::Approx(1250));
  // The link carries 1 GB/s from 100 ns (t1 alone, then t1 + t2 at half each, then t1
  // alone again: the total never changes) until 1350 ns.
  REQUIRE(r->link_rates[0].size() == 2);
  CHECK(r->link_rates[0][0].time == 100);
  CHECK(r->link_rates[0][0].bytes_per_s == doctest::Approx(1e9));
  CHECK(r->link_rates[0][1].time == 1350);
  CHECK(r->link_rates[0][1].bytes_per_s == 0.0);
  auto stats = device_stats(g, *r);
  // Communication covers [0,1350], compute [0,500].
  CHECK(stats[0].communication_busy == 1350);
  CHECK(stats[0].communication_overlapped == 500);
  CHECK(stats[0].communication_exposed == 850);
  // Static 1000 B plus x's 100 B from time 0 to 500.
  const auto& mem = r->memory[0];
  CHECK(mem.peak_bytes == 1100);
  CHECK(mem.peak_time == 0);
  CHECK(mem.peak_by_component == std::vector<std::int64_t>{1000, 100});
  REQUIRE(mem.series.size() == 2);
  CHECK(mem.series[0].time == 0);
  CHECK(mem.series[0].bytes == 1100);
  CHECK(mem.series[1].time == 500);
  CHECK(mem.series[1].bytes == 1000);
  CHECK(mem.component_series == std::vector<std::int64_t>{1000, 100, 1000, 0});
}

TEST_CASE("two simultaneous flows on one link each take twice as long") {
  TaskGraph g;
  DeviceId d = g.add_device("gpu0");
  LinkId link = g.add_link("l", core::gbyte_per_s(1));
  std::array<LinkId, 1> route{link};
  StreamId a = g.add_stream(d, "a", StreamKind::kCommunication);
  StreamId b = g.add_stream(d, "b", StreamKind::kCommunication);
  g.add_transfer(a, route, core::Bytes(1'000'000), 0, other());
  g.add_transfer(b, route, core::Bytes(1'000'000), 0, other());
  auto r = simulate(g);
  REQUIRE(r.ok());
  // Alone: 1e6 B at 1 B/ns = 1 ms. Sharing: 0.5 B/ns each, both end at 2 ms.
  CHECK(r->end == std::vector<Time>{2'000'000, 2'000'000});
}

TEST_CASE("zero-length work finishes at once, in order") {
  TaskGraph g;
  DeviceId d = g.add_device("gpu0");
  LinkId link = g.add_link("l", core::gbyte_per_s(1));
  std::array<LinkId, 1> route{link};
  StreamId s = g.add_stream(d, "s", StreamKind::kCommunication);
  TaskId a = g.add_compute(s, 0, other());
  TaskId b = g.add_transfer(s, route, core::Bytes(0), 0, other());   // nothing to move
  TaskId c = g.add_transfer(s, route, core::Bytes(0), 30, other());  // latency only
  TaskId e = g.add_transfer(s, route, core::Bytes(10), 0, other());  // 10 ns at 1 B/ns
  auto r = simulate(g);
  REQUIRE(r.ok());
  CHECK(r->end[static_cast<std::size_t>(a)] == 0);
  CHECK(r->end[static_cast<std::size_t>(b)] == 0);
  CHECK(r->end[static_cast<std::size_t>(c)] == 30);
  CHECK(r->start[static_cast<std::size_t>(e)] == 30);
  CHECK(r->end[static_cast<std::size_t>(e)] == 40);
}

TEST_CASE("a stream order that contradicts a dependency is reported, not hung") {
  TaskGraph g;
  DeviceId d = g.add_device("gpu0");
  StreamId s = g.add_stream(d, "compute", StreamKind::kCompute);
  TaskId x = g.add_compute(s, 1, other());
  TaskId y = g.add_compute(s, 1, other());
  g.add_dependency(y, x);
  auto r = simulate(g);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == core::StatusCode::kFailedPrecondition);
  CHECK(r.status().message() ==
        "the task graph cannot finish (a dependency cycle, or stream orders that contradict the "
        "dependencies): stream 'compute' of device 'gpu0' waits at task 0 (task) with 1 "
        "unfinished dependencies;");
}

}  // namespace
}  // namespace alpasim::sim
