#include "sim/trace_writer.h"

#include <array>

#include <doctest/doctest.h>

namespace alpasim::sim {
namespace {

TEST_CASE("trace JSON text is exact") {
  TaskGraph g;
  DeviceId d = g.add_device("stage \"0\"");
  StreamId c = g.add_stream(d, "compute", StreamKind::kCompute);
  g.add_stream(d, "idle", StreamKind::kCommunication);  // no tasks: no track
  StreamId s = g.add_stream(d, "send", StreamKind::kCommunication);
  TaskId f = g.add_compute(c, 1500, TaskLabel{TaskKind::kForward, 2, 1, -1});
  TaskId t = g.add_transfer(s, {}, core::Bytes(64), 250, TaskLabel{TaskKind::kSend, 2, 1, -1});
  g.add_dependency(f, t);
  g.add_memory(f, 0, core::Bytes(4096), MemoryPoint::kAtStart);
  auto r = simulate(g);
  REQUIRE(r.ok());
  const std::string expected =
      "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"alpa-sim simulator\",\"time_unit\":\"us\"},\n"
      "\"traceEvents\":[\n"
      "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"stage \\\"0\\\"\"}},\n"
      "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":1,\"args\":{\"sort_index\":0}},\n"
      "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"compute\"}},\n"
      "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"sort_index\":0}},\n"
      "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":3,\"args\":{\"name\":\"send\"}},\n"
      "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":3,\"args\":{\"sort_index\":2}},\n"
      "{\"name\":\"forward mb2 vs1\",\"cat\":\"forward\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":0.000,"
      "\"dur\":1.500,\"args\":{\"task\":0,\"microbatch\":2,\"virtual_stage\":1}},\n"
      "{\"name\":\"send mb2 vs1\",\"cat\":\"send\",\"ph\":\"X\",\"pid\":1,\"tid\":3,\"ts\":1.500,"
      "\"dur\":0.250,\"args\":{\"task\":1,\"microbatch\":2,\"virtual_stage\":1,\"bytes\":64}},\n"
      "{\"name\":\"memory\",\"ph\":\"C\",\"pid\":1,\"ts\":0.000,\"args\":{\"memory\":4096}}\n"
      "]}\n";
  CHECK(chrome_trace_json(g, *r) == expected);
}

TEST_CASE("links that carried traffic get a counter track in a network process") {
  TaskGraph g;
  DeviceId d = g.add_device("gpu0");
  StreamId s = g.add_stream(d, "send", StreamKind::kCommunication);
  LinkId l = g.add_link("nic", core::gbyte_per_s(2));
  std::array<LinkId, 1> route{l};
  g.add_transfer(s, route, core::Bytes(1000), 100, TaskLabel{});  // 100-600 ns at 2 B/ns
  auto r = simulate(g);
  REQUIRE(r.ok());
  const std::string text = chrome_trace_json(g, *r);
  CHECK(text.find("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":2,\"args\":{\"name\":\"network\"}}") !=
        std::string::npos);
  CHECK(text.find("{\"name\":\"link nic\",\"ph\":\"C\",\"pid\":2,\"ts\":0.100,"
                  "\"args\":{\"bytes_per_s\":2000000000}}") != std::string::npos);
  CHECK(text.find("{\"name\":\"link nic\",\"ph\":\"C\",\"pid\":2,\"ts\":0.600,"
                  "\"args\":{\"bytes_per_s\":0}}") != std::string::npos);
  TraceOptions no_links;
  no_links.link_counters = false;
  CHECK(chrome_trace_json(g, *r, no_links).find("network") == std::string::npos);
}

TEST_CASE("an unwritable trace path is an error naming the path") {
  TaskGraph g;
  auto r = simulate(g);
  REQUIRE(r.ok());
  auto st = write_chrome_trace("/nonexistent-dir/trace.json", g, *r);
  CHECK(st.code() == core::StatusCode::kInvalidArgument);
  CHECK(st.message() == "/nonexistent-dir/trace.json: cannot write the trace: No such file or directory");
}

}  // namespace
}  // namespace alpasim::sim
