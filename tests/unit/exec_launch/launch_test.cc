// exec/launch/: rank environment, communicator plan, poll loop (fake clock), rendezvous
// files, rank results, the fork/exec launcher (with /bin/sh children) and the CUDA mode
// choice. No GPU and no timing assertions.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "dist/communicator.h"
#include "exec/launch/comm_plan.h"
#include "exec/launch/launcher.h"
#include "exec/launch/mode.h"
#include "exec/launch/orchestrate.h"
#include "exec/launch/poll.h"
#include "exec/launch/rank_env.h"
#include "exec/launch/rendezvous.h"
#include "exec/launch/stream_plan.h"
#include "exec/lower.h"
#include "exec/verify.h"
#include "ir/builders.h"
#include "tests/support/tiny_models.h"

namespace alpasim::exec::launch {
namespace {

/// Time advances only when the code under test sleeps.
class FakeClock final : public Clock {
 public:
  double now_s() override { return t; }
  void sleep_s(double s) override {
    t += s;
    ++sleeps;
  }
  double t = 100.0;
  int sleeps = 0;
};

/// A fresh folder under the build tree for one test.
std::string scratch(const std::string& name) {
  const std::string dir = std::string(ALPASIM_BINARY_DIR) + "/tests/exec_launch_work/" + name + "_" +
                          std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

Instruction make(InstrKind kind) {
  Instruction in;
  in.kind = kind;
  return in;
}

TEST_CASE("rank_env: plain process, launcher child, mpirun process, exact errors") {
  auto none = rank_env_from({});
  REQUIRE(none.ok());
  CHECK(none->source == RankSource::kNone);
  CHECK(none->world_size == 1);

  auto child = rank_env_from({{kEnvRank, "2"}, {kEnvWorldSize, "4"}, {kEnvLocalRank, "2"}, {kEnvRendezvous, "/tmp/r"},
                              {kEnvRunId, "abc"}, {"OMPI_COMM_WORLD_RANK", "0"}});
  REQUIRE(child.ok());
  CHECK(child->source == RankSource::kLauncher);  // the launcher's variables win over Open MPI's
  CHECK(child->rank == 2);
  CHECK(child->world_size == 4);
  CHECK(child->local_rank == 2);
  CHECK(child->rendezvous_dir == "/tmp/r");
  CHECK(rendezvous_path(*child, "ids") == "/tmp/r/abc.ids");

  auto mpi = rank_env_from({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"},
                            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {kEnvRendezvous, "/shared"},
                            {"OMPI_MCA_ess_base_jobid", "4242"}});
  REQUIRE(mpi.ok());
  CHECK(mpi->source == RankSource::kMpirun);
  CHECK(mpi->rank == 5);
  CHECK(mpi->local_rank == 1);  // node-local: the CUDA device
  CHECK(mpi->run_id == "4242");

  auto bad = rank_env_from({{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                            {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {kEnvRendezvous, "/shared"}});
  REQUIRE(!bad.ok());
  CHECK(bad.status().message() == "OMPI_COMM_WORLD_RANK: expected an integer in [0, 4), got \"x\"");
  auto big = rank_env_from({{kEnvRank, "4"}, {kEnvWorldSize, "4"}, {kEnvLocalRank, "0"}, {kEnvRendezvous, "/r"}});
  REQUIRE(!big.ok());
  CHECK(big.status().message() == "ALPASIM_EXEC_RANK: expected an integer in [0, 4), got \"4\"");
  auto nodir = rank_env_from({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}});
  REQUIRE(!nodir.ok());
  CHECK(nodir.status().message().rfind("ALPASIM_EXEC_RENDEZVOUS_DIR: expected a folder", 0) == 0);
  // With MPI in the build the mpirun ranks exchange over MPI: no shared folder needed.
  auto over_mpi = rank_env_from({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}},
                                /*mpi_exchange=*/true);
  REQUIRE(over_mpi.ok());
  CHECK(over_mpi->rendezvous_dir.empty());
  CHECK(exchanges_over_mpi(*over_mpi) == dist::built_with_mpi());
  auto unsafe = rank_env_from({{kEnvRank, "0"}, {kEnvWorldSize, "1"}, {kEnvLocalRank, "0"}, {kEnvRendezvous, "/r"},
                               {kEnvRunId, "../x"}});
  REQUIRE(!unsafe.ok());
  CHECK(unsafe.status().message() == "run id: expected letters, digits, '-', '_' or '.', got \"../x\"");
}

TEST_CASE("comm_plan: world, collective groups and one channel per direction, same on every rank") {
  // Device 0 sends to 1 and 1 to 0 (two channels); 0 and 2 all-reduce twice over the same
  // group in the order {2, 0} (one communicator, NCCL ranks in group order).
  Program p;
  p.devices = {10, 11, 12};
  p.code.resize(3);
  Instruction s01 = make(InstrKind::kSend), r01 = make(InstrKind::kRecv);
  s01.peer = 1;
  r01.peer = 0;
  Instruction s10 = make(InstrKind::kSend), r10 = make(InstrKind::kRecv);
  s10.peer = 0;
  r10.peer = 1;
  Instruction ar = make(InstrKind::kAllReduce);
  ar.group = {2, 0};
  p.code[0] = {s01, ar, r10, ar};
  p.code[1] = {r01, s10};
  p.code[2] = {ar, ar};
  auto plan = comm_plan(p);
  REQUIRE(plan.ok());
  REQUIRE(plan->groups.size() == 4);  // world + 1 collective + 2 channels
  CHECK(plan->groups[0].kind == CommKind::kWorld);
  CHECK(plan->groups[0].members == std::vector<std::int32_t>{0, 1, 2});
  CHECK(plan->groups[1].kind == CommKind::kCollective);
  CHECK(plan->groups[1].members == std::vector<std::int32_t>{2, 0});
  CHECK(plan->groups[2].members == std::vector<std::int32_t>{0, 1});  // channel 0 -> 1
  CHECK(plan->groups[3].members == std::vector<std::int32_t>{1, 0});  // channel 1 -> 0
  CHECK(plan->channel.at({0, 1}) == 2);
  CHECK(plan->channel.at({1, 0}) == 3);
  CHECK(plan->collective.at({2, 0}) == 1);
  CHECK(plan->groups_of(0) == std::vector<std::int32_t>{0, 1, 2, 3});
  CHECK(plan->groups_of(1) == std::vector<std::int32_t>{0, 2, 3});
  CHECK(plan->groups_of(2) == std::vector<std::int32_t>{0, 1});
  CHECK(plan->rank_in(1, 0) == 1);  // device 0 is NCCL rank 1 of group {2, 0}
  CHECK(plan->rank_in(3, 1) == 0);  // device 1 sends on channel 1 -> 0: rank 0
  CHECK(plan->rank_in(1, 1) == -1);

  Program bad = p;
  bad.code[1][0].peer = 1;  // receives from itself
  auto e = comm_plan(bad);
  REQUIRE(!e.ok());
  CHECK(e.status().message() ==
        "device index 1 instruction #0 (recv): expected a peer in [0, 3) other than itself, got 1");
  Program twice = p;
  twice.code[2][0].group = {2, 2};
  auto t = comm_plan(twice);
  REQUIRE(!t.ok());
  CHECK(t.status().message() ==
        "device index 2 instruction #0 (all_reduce): expected distinct group members in [0, 3), got 2");
}

TEST_CASE("poll_until: done, failed, and a timeout measured on a fake clock") {
  FakeClock clock;
  int calls = 0;
  // Pending twice, then done: two sleeps of 0.25 s.
  auto ok = poll_until([&](std::string*) { return ++calls < 3 ? PollState::kPending : PollState::kDone; }, 10.0, 0.25,
                       clock, "nccl init");
  CHECK(ok.ok());
  CHECK(calls == 3);
  CHECK(clock.sleeps == 2);
  CHECK(clock.t == doctest::Approx(100.5));

  // Always pending, timeout 1 s, interval 0.25 s: queries at t = 0, .25, .5, .75 and a last
  // one at t = 1.0 (the deadline), then kUnavailable; 4 sleeps.
  FakeClock c2;
  calls = 0;
  auto late = poll_until([&](std::string*) { ++calls; return PollState::kPending; }, 1.0, 0.25, c2, "rank 1 all_reduce");
  CHECK(!late.ok());
  CHECK(late.code() == core::StatusCode::kUnavailable);
  CHECK(late.message() == "rank 1 all_reduce: timed out after 1.0 s");
  CHECK(calls == 5);
  CHECK(c2.sleeps == 4);

  // Finishing exactly at the deadline is a success, not a timeout.
  FakeClock c3;
  calls = 0;
  auto edge = poll_until([&](std::string*) { return ++calls == 5 ? PollState::kDone : PollState::kPending; }, 1.0,
                         0.25, c3, "edge");
  CHECK(edge.ok());

  FakeClock c4;
  auto failed = poll_until(
      [](std::string* why) {
        *why = "ncclCommGetAsyncError: unhandled system error";
        return PollState::kFailed;
      },
      5.0, 0.1, c4, "rank 0 instruction #7 (send)");
  CHECK(failed.code() == core::StatusCode::kInternal);
  CHECK(failed.message() == "rank 0 instruction #7 (send): ncclCommGetAsyncError: unhandled system error");
  CHECK(c4.sleeps == 0);
}

TEST_CASE("rendezvous: atomic publish, wait with timeout, binary blobs") {
  const std::string dir = scratch("rdv");
  RankEnv env;
  env.rendezvous_dir = dir;
  env.run_id = "run1";
  const std::string path = rendezvous_path(env, "nccl_ids");
  // 128-byte NCCL ids are arbitrary bytes: newlines and zeros included.
  std::string id1(128, '\0'), id2(128, '\n');
  id1[5] = 'x';
  const std::string blob = encode_blobs({id1, id2});
  REQUIRE(publish_file(path, blob).ok());
  FakeClock clock;
  auto read = wait_for_file(path, 5.0, 0.1, clock);
  REQUIRE(read.ok());
  auto ids = decode_blobs(*read, 2, path);
  REQUIRE(ids.ok());
  CHECK((*ids)[0] == id1);
  CHECK((*ids)[1] == id2);
  CHECK(clock.sleeps == 0);
  CHECK(!std::filesystem::exists(path + ".tmp" + std::to_string(::getpid())));

  auto wrong = decode_blobs(blob, 3, "ids");
  REQUIRE(!wrong.ok());
  CHECK(wrong.status().message() == "ids: expected 3 blobs, got 2");
  auto cut = decode_blobs(blob.substr(0, 100), 2, "ids");
  REQUIRE(!cut.ok());
  CHECK(cut.status().message() == "ids: expected blob 0 of 2, got a truncated file (100 bytes)");
  auto junk = decode_blobs("hello\n", -1, "ids");
  CHECK(junk.status().message() == "ids: expected a header \"alpasim-blobs 1 <count>\", got \"hello\"");

  // Nobody publishes: 2 s at 0.5 s steps on the fake clock, then a timeout naming the path.
  auto missing = wait_for_file(dir + "/never", 2.0, 0.5, clock);
  REQUIRE(!missing.ok());
  CHECK(missing.status().message() == dir + "/never: timed out after 2.0 s (did rank 0 start? is the folder shared by every rank?)");
  CHECK(clock.sleeps == 4);
}

TEST_CASE("rank results: exact round trip and merge (mean loss, slowest rank, union)") {
  RankResult a;
  a.rank = 0;
  a.losses = {{3, 1.0 / 3.0}, {9, 2.5}};
  a.iteration_s = {0.125, 0.5};
  a.timings = {{0, 0, 0, 1000}, {0, 1, 1000, 2500}};
  a.gradients["w0"] = {0.1f, -2.0f, 1e-30f};
  a.parameters["w0"] = {1.0f};
  RankResult b;
  b.rank = 1;
  b.losses = {{20, 4.0}};
  b.iteration_s = {0.25, 0.375};
  b.timings = {{1, 0, 10, 20}};
  b.gradients["w1"] = {};
  auto back = decode_rank_result(encode_rank_result(a), "rank0");
  REQUIRE(back.ok());
  CHECK(back->losses == a.losses);  // hex floats: bit-exact
  CHECK(back->iteration_s == a.iteration_s);
  CHECK(back->gradients == a.gradients);
  CHECK(back->parameters == a.parameters);
  REQUIRE(back->timings.size() == 2);
  CHECK(back->timings[1].end_ns == 2500);

  auto merged = merge_rank_results({b, *back}, 2);
  REQUIRE(merged.ok());
  CHECK(merged->backend == "cuda");
  CHECK(merged->loss == doctest::Approx((1.0 / 3.0 + 2.5 + 4.0) / 3.0));  // mean over the 3 loss buffers
  CHECK(merged->iteration_s == std::vector<double>{0.25, 0.5});           // per iteration, the slowest rank
  CHECK(merged->timings.size() == 3);
  CHECK(merged->timings[0].device == 0);  // rank order
  CHECK(merged->gradients.size() == 2);

  auto missing = merge_rank_results({a}, 2);
  CHECK(missing.status().message() == "rank results: expected a result from rank 1, got none");
  RankResult err = b;
  err.error = "INTERNAL: rank 1 instruction #4 (recv): timed out\nsecond line";
  auto e2 = decode_rank_result(encode_rank_result(err), "r1");
  REQUIRE(e2.ok());
  auto failed = merge_rank_results({a, *e2}, 2);
  CHECK(failed.status().message() == "rank 1: INTERNAL: rank 1 instruction #4 (recv): timed out second line");
  auto trunc = decode_rank_result("alpasim-rank-result 1\nrank 0\n", "r0");
  CHECK(trunc.status().message() == "r0: expected a last line \"end\", got a truncated file (2 lines)");
  auto junk = decode_rank_result("alpasim-rank-result 1\nrank 0\nloss x 1\n", "r0");
  CHECK(junk.status().message() ==
        "r0: line 3: expected rank, error, loss, iteration, timing, gradient, parameter, block or end, got \"loss x 1\"");
}

TEST_CASE("rank results: blocks of sharded tensors round-trip exactly and merge into whole tensors") {
  // A [2, 3] parameter split by columns over ranks 0 and 1 ([2, 2] at column 0, [2, 1] at
  // column 2), and a replicated [2] gradient reported by both (equal values).
  RankResult a;
  a.rank = 0;
  a.blocks.push_back({false, "w", {2, 3}, {0, 0}, {2, 2}, {1.0f, 2.0f, 4.0f, 5.0f}});
  a.blocks.push_back({true, "b", {2}, {0}, {2}, {0.5f, -1e-30f}});
  RankResult b;
  b.rank = 1;
  b.blocks.push_back({false, "w", {2, 3}, {0, 2}, {2, 1}, {3.0f, 6.0f}});
  b.blocks.push_back({true, "b", {2}, {0}, {2}, {0.5f, -1e-30f}});
  auto back = decode_rank_result(encode_rank_result(a), "r0");
  REQUIRE_MESSAGE(back.ok(), back.status().message());
  REQUIRE(back->blocks.size() == 2);
  CHECK(back->blocks[0].offset == std::vector<std::int64_t>{0, 0});
  CHECK(back->blocks[0].shape == std::vector<std::int64_t>{2, 2});
  CHECK(back->blocks[0].global_shape == std::vector<std::int64_t>{2, 3});
  CHECK(back->blocks[1].gradient);
  CHECK(back->blocks[1].data == a.blocks[1].data);  // hex floats: bit-exact
  auto merged = merge_rank_results({b, *back}, 2);
  REQUIRE_MESSAGE(merged.ok(), merged.status().message());
  CHECK(merged->parameters.at("w") == std::vector<float>{1, 2, 3, 4, 5, 6});  // row-major [2, 3]
  CHECK(merged->gradients.at("b") == std::vector<float>{0.5f, -1e-30f});
  // A name reported whole by one rank and as blocks by another; a block outside its tensor.
  RankResult whole = b;
  whole.blocks.clear();
  whole.parameters["w"] = std::vector<float>(6, 0.0f);
  CHECK(merge_rank_results({a, whole}, 2).status().message() == "rank results: parameter w reported whole and as blocks");
  RankResult outside = b;
  outside.blocks[0].offset = {0, 3};
  CHECK(merge_rank_results({a, outside}, 2).status().message() ==
        "rank 1: tensor block w: expected a block inside the tensor on axis 1, got [3, 4) of 3");
  auto scalar = decode_rank_result("alpasim-rank-result 1\nrank 0\nblock gradient s 0 1 0x1p+0\nend\n", "r0");
  REQUIRE_MESSAGE(scalar.ok(), scalar.status().message());
  CHECK(scalar->blocks.at(0).data == std::vector<float>{1.0f});
  auto short_line = decode_rank_result("alpasim-rank-result 1\nrank 0\nblock gradient s 1 4 0 4 3 0x1p+0\nend\n", "r0");
  CHECK(short_line.status().message() ==
        "r0: line 3: expected a value count matching the line, got \"block gradient s 1 4 0 4 3 0x1p+0\"");
}

TEST_CASE("run_children: all succeed, one fails and the others are killed, signals, timeout") {
  const std::string dir = scratch("launcher");
  SteadyClock clock;
  auto sh = [&](const std::string& script, int rank) {
    return ChildSpec{{"/bin/sh", "-c", script}, {{"ALPASIM_TEST_RANK", std::to_string(rank)}},
                     dir + "/rank" + std::to_string(rank) + ".log"};
  };
  // Each child sees its own variable.
  CHECK(run_children({sh("test \"$ALPASIM_TEST_RANK\" = 0", 0), sh("test \"$ALPASIM_TEST_RANK\" = 1", 1)}, 60.0, 0.01,
                     clock)
            .ok());

  // Rank 1 fails at once; rank 0 would sleep for 60 s: it is killed with its process group
  // (the shell and its `sleep`), the call returns.
  auto one = run_children({sh("sleep 60", 0), sh("echo boom >&2; exit 3", 1)}, 120.0, 0.01, clock);
  REQUIRE(!one.ok());
  CHECK(one.code() == core::StatusCode::kInternal);
  CHECK(one.message().find("rank 1 (pid ") == 0);
  CHECK(one.message().find(") exited with status 3; killed ranks 0; last lines of " + dir + "/rank1.log:\nboom") !=
        std::string::npos);

  auto sig = run_children({sh("kill -9 $$", 0)}, 60.0, 0.01, clock);
  REQUIRE(!sig.ok());
  CHECK(sig.message().find(") was killed by signal 9 (Killed)") != std::string::npos);

  auto slow = run_children({sh("exit 0", 0), sh("sleep 60", 1)}, 0.2, 0.01, clock);
  REQUIRE(!slow.ok());
  CHECK(slow.code() == core::StatusCode::kUnavailable);
  // Rank 0 has normally exited by then; on a loaded machine it may still be starting.
  CHECK(slow.message().rfind("ranks ", 0) == 0);
  CHECK(slow.message().ends_with("1 still running after 0.2 s: killed them all"));

  auto noexe = run_children({{{"/nonexistent/alpa-exec"}, {}, dir + "/x.log"}}, 60.0, 0.01, clock);
  REQUIRE(!noexe.ok());
  CHECK(noexe.message().find("exited with status 127") != std::string::npos);

  auto self = own_command_line();
  REQUIRE(self.ok());
  CHECK(std::filesystem::path((*self)[0]).filename() == "alpasim_exec_launch_tests");
}

TEST_CASE("run_children: the children die with the launcher") {
  // A forked launcher starts a child that records its pid and sleeps; killing the launcher
  // (SIGKILL, no cleanup) must end the child too (PR_SET_PDEATHSIG).
  const std::string dir = scratch("pdeath");
  const pid_t launcher = ::fork();
  REQUIRE(launcher >= 0);
  if (launcher == 0) {
    SteadyClock clock;
    (void)run_children({{{"/bin/sh", "-c", "echo $$ > " + dir + "/pid.tmp && mv " + dir + "/pid.tmp " + dir +
                                             "/pid && exec sleep 60"},
                         {},
                         dir + "/child.log"}},
                       120.0, 0.01, clock);
    ::_exit(0);
  }
  FakeClock never;  // wait_for_file polls a real file; the fake clock only bounds the polls
  std::string text;
  for (int i = 0; i < 5000 && text.empty(); ++i) {
    auto t = wait_for_file(dir + "/pid", 0.0, 0.0, never);
    if (t.ok()) text = *t;
    ::usleep(1000);
  }
  REQUIRE(!text.empty());
  const pid_t child = static_cast<pid_t>(std::stol(text));
  ::kill(launcher, SIGKILL);
  int status = 0;
  ::waitpid(launcher, &status, 0);
  bool gone = false;
  for (int i = 0; i < 5000 && !gone; ++i) {  // up to ~5 s for the kernel and the reaper
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    std::string line;
    std::getline(stat, line);
    gone = !stat || line.find(") Z ") != std::string::npos;  // exited (a zombie until reaped)
    if (!gone) ::usleep(1000);
  }
  CHECK(gone);
}

TEST_CASE("choose_cuda_mode: virtual on one GPU, processes when enough GPUs, ranks under a launcher or mpirun") {
  RankEnv plain;
  CHECK(*choose_cuda_mode(plain, CudaModeRequest::kAuto, 1, 4) == CudaMode::kVirtual);
  CHECK(*choose_cuda_mode(plain, CudaModeRequest::kAuto, 8, 4) == CudaMode::kLaunch);
  CHECK(*choose_cuda_mode(plain, CudaModeRequest::kAuto, 8, 1) == CudaMode::kVirtual);  // nothing to split
  CHECK(*choose_cuda_mode(plain, CudaModeRequest::kVirtual, 8, 4) == CudaMode::kVirtual);
  auto few = choose_cuda_mode(plain, CudaModeRequest::kProcesses, 2, 4);
  CHECK(few.status().message() ==
        "one process per GPU: the plan needs 4 GPUs, this machine has 2; use mpirun across nodes or the "
        "virtual-device mode");
  CHECK(choose_cuda_mode(plain, CudaModeRequest::kAuto, 0, 4).status().code() == core::StatusCode::kUnavailable);
  RankEnv rank;
  rank.source = RankSource::kMpirun;
  rank.rank = 1;
  rank.world_size = 4;
  CHECK(*choose_cuda_mode(rank, CudaModeRequest::kAuto, 1, 4) == CudaMode::kRank);
  CHECK(choose_cuda_mode(rank, CudaModeRequest::kAuto, 1, 2).status().message() ==
        "one process per GPU: the plan has 2 devices but 4 processes were started (mpirun -np must equal the plan's "
        "device count)");
  CHECK(*parse_cuda_mode_request("processes", "--cuda-mode") == CudaModeRequest::kProcesses);
  CHECK(parse_cuda_mode_request("two", "--cuda-mode").status().message() ==
        "--cuda-mode: expected auto, virtual or processes, got \"two\"");
}

TEST_CASE("launch_and_merge: three fake ranks end to end, then a failing, a hanging and a silent rank") {
  const std::vector<std::string> argv{std::string(ALPASIM_BINARY_DIR) + "/tests/alpasim_exec_launch_fake_rank"};
  LaunchOptions o;
  o.work_dir = scratch("e2e");
  o.timeout_s = 60.0;
  // Losses 1, 2, 3 (rank + 1): mean 2; iteration time: the slowest rank's, 0.003 s.
  auto ok = launch_and_merge(argv, 3, o);
  REQUIRE_MESSAGE(ok.ok(), ok.status().message());
  CHECK(ok->loss == doctest::Approx(2.0));
  CHECK(ok->iteration_s == std::vector<double>{0.003});
  REQUIRE(ok->timings.size() == 3);
  CHECK(ok->timings[2].device == 2);

  ::setenv("ALPASIM_FAKE_FAIL_RANK", "1", 1);
  ::setenv("ALPASIM_FAKE_HANG_RANK", "2", 1);  // killed when rank 1 fails
  auto failed = launch_and_merge(argv, 3, o);
  ::unsetenv("ALPASIM_FAKE_FAIL_RANK");
  REQUIRE(!failed.ok());
  const std::string m = failed.status().message();
  CHECK(m.find("one process per GPU (logs in " + o.work_dir + "): rank 1 (pid ") == 0);
  // Rank 2 hangs, so it is always killed; rank 0 may or may not have finished by then.
  CHECK(m.find(") exited with status 3; killed ranks ") != std::string::npos);
  CHECK(m.find("2; last lines of " + o.work_dir + "/rank1.log:\nfake rank 1: failing on purpose") != std::string::npos);

  o.timeout_s = 0.5;  // rank 2 hangs alone: the timeout ends the run
  auto hung = launch_and_merge(argv, 3, o);
  ::unsetenv("ALPASIM_FAKE_HANG_RANK");
  REQUIRE(!hung.ok());
  // Ranks 0 and 1 have normally exited by then; on a loaded machine they may still be starting.
  CHECK(hung.status().message().rfind("one process per GPU (logs in " + o.work_dir + "): ranks ", 0) == 0);
  CHECK(hung.status().message().ends_with("2 still running after 0.5 s: killed them all"));

  o.timeout_s = 60.0;
  ::setenv("ALPASIM_FAKE_SILENT_RANK", "0", 1);
  auto silent = launch_and_merge(argv, 2, o);
  ::unsetenv("ALPASIM_FAKE_SILENT_RANK");
  REQUIRE(!silent.ok());
  CHECK(silent.status().message().find("rank 0 exited 0 without a result: ") != std::string::npos);
}

TEST_CASE("gather_rank_results: mpirun rank 0 merges the results the other ranks published") {
  RankEnv env;
  env.source = RankSource::kMpirun;
  env.world_size = 3;
  env.rendezvous_dir = scratch("gather");
  env.run_id = "job7";
  for (int r = 1; r < 3; ++r) {
    RankEnv other = env;
    other.rank = r;
    RankResult rr;
    rr.rank = r;
    rr.losses[r] = 10.0 * r;
    REQUIRE(publish_rank_result(other, rr).ok());
  }
  RankResult mine;
  mine.losses[0] = 0.0;
  auto merged = gather_rank_results(env, mine, 5.0);
  REQUIRE(merged.ok());
  CHECK(merged->loss == doctest::Approx(10.0));  // (0 + 10 + 20) / 3
}

/// A plan of `stages` equal stages, each a 1 x `per_stage` mesh, devices numbered in order:
/// the tiny GPT (4 layers) or the tiny Wide-ResNet (18 layers) of tests/unit/exec.
Program lowered(bool wresnet, int stages, int per_stage, schema::Schedule schedule, std::int64_t microbatches,
                std::int64_t interleave = 1) {
  ir::ModelConfig model;
  std::int64_t layers = 4;
  if (wresnet) {
    model = ::alpasim::testing::tiny_wide_resnet();
    layers = 18;
  } else {
    model = ::alpasim::testing::tiny_gpt_hidden16();
  }
  schema::Plan plan;
  plan.model = model;
  plan.global_batch_size = 8;
  plan.num_microbatches = microbatches;
  plan.schedule = schedule;
  plan.interleave = interleave;
  const std::int64_t n = stages * interleave, per = layers / n;
  for (std::int64_t s = 0; s < n; ++s) {
    schema::PlanStage st;
    st.layer_begin = per * s;
    st.layer_end = s == n - 1 ? layers : per * s + per;
    st.submesh_nodes = 1;
    st.submesh_gpus_per_node = per_stage;
    st.logical_rows = 1;
    st.logical_cols = per_stage;
    for (int d = 0; d < per_stage; ++d) st.device_ids.push_back(per_stage * (s % stages) + d);
    plan.stages.push_back(st);
  }
  auto p = lower_plan(plan);
  REQUIRE(p.ok());
  REQUIRE(verify_program(*p).ok());
  return *p;
}

TEST_CASE("stream schedule: the lowering's programs complete on NCCL's streams (no deadlock)") {
  struct Case {
    bool wresnet;
    int stages, per_stage;
    schema::Schedule schedule;
    std::int64_t microbatches, interleave;
  };
  using S = schema::Schedule;
  for (const Case& c : {Case{false, 2, 1, S::kGpipe, 4, 1}, Case{false, 2, 1, S::kOneFOneB, 4, 1},
                        Case{false, 2, 2, S::kOneFOneB, 2, 1}, Case{false, 1, 2, S::kGpipe, 2, 1},
                        Case{false, 2, 1, S::kInterleavedOneFOneB, 4, 2}, Case{true, 2, 1, S::kOneFOneB, 4, 1},
                        Case{true, 2, 2, S::kOneFOneB, 2, 1}}) {
    CAPTURE(c.wresnet);
    CAPTURE(c.stages);
    CAPTURE(c.per_stage);
    CAPTURE(static_cast<int>(c.schedule));
    const Program p = lowered(c.wresnet, c.stages, c.per_stage, c.schedule, c.microbatches, c.interleave);
    auto plan = comm_plan(p);
    REQUIRE(plan.ok());
    // Every SEND/RECV runs on its channel's stream, every collective on the collective
    // stream, everything else on the compute stream.
    for (std::size_t d = 0; d < p.code.size(); ++d) {
      for (const Instruction& in : p.code[d]) {
        const std::int32_t s = stream_of(in, static_cast<std::int32_t>(d), *plan);
        if (in.kind == InstrKind::kSend || in.kind == InstrKind::kRecv) {
          REQUIRE(s >= 0);
          CHECK(plan->groups[static_cast<std::size_t>(s)].kind == CommKind::kChannel);
        } else if (in.group.empty()) {
          CHECK(s == kComputeStream);
        } else {
          CHECK(s == kCollectiveStream);
        }
      }
    }
    const core::Status st = check_stream_schedule(p, *plan);
    CHECK_MESSAGE(st.ok(), st.message());
  }
}

TEST_CASE("stream schedule: a cycle of receives and a missing collective member are reported") {
  // Each device receives before it sends: a deadlock on any backend (verify_program rejects
  // it too); the replay names both stuck receives.
  Program cycle;
  cycle.devices = {0, 1};
  cycle.buffers.resize(2);
  cycle.code.resize(2);
  for (int d = 0; d < 2; ++d) {
    Instruction r = make(InstrKind::kRecv), s = make(InstrKind::kSend);
    r.peer = s.peer = 1 - d;
    r.buffer = s.buffer = d;
    r.count_elements = s.count_elements = 1;
    cycle.code[static_cast<std::size_t>(d)] = {r, s};
  }
  auto plan = comm_plan(cycle);
  REQUIRE(plan.ok());
  CHECK(check_stream_schedule(cycle, *plan).message() ==
        "stream schedule deadlock: rank 0 stuck at instruction #0 (recv) on stream channel 2; rank 1 stuck at "
        "instruction #0 (recv) on stream channel 1;");

  // Sends are buffered (a staging copy): each device sends, frees the source and then
  // receives; both complete although each send waits for the other device's receive.
  Program crossing = cycle;
  for (int d = 0; d < 2; ++d) {
    auto& code = cycle.code[static_cast<std::size_t>(d)];
    Instruction f = make(InstrKind::kFree);
    f.buffer = d;
    crossing.code[static_cast<std::size_t>(d)] = {code[1], f, code[0]};
  }
  CHECK(check_stream_schedule(crossing, *plan).ok());

  // Device 1 never joins device 0's all-reduce.
  Program missing;
  missing.devices = {0, 1};
  missing.buffers.resize(2);
  missing.code.resize(2);
  Instruction ar = make(InstrKind::kAllReduce);
  ar.group = {0, 1};
  ar.collective_id = 7;
  ar.buffer = 0;
  Instruction alloc = make(InstrKind::kAllocate);
  alloc.buffer = 1;
  missing.code[0] = {ar};
  missing.code[1] = {alloc};
  auto mplan = comm_plan(missing);
  REQUIRE(mplan.ok());
  CHECK(check_stream_schedule(missing, *mplan).message() ==
        "stream schedule deadlock: rank 0 stuck at instruction #0 (all_reduce) on stream collective;");
}

}  // namespace
}  // namespace alpasim::exec::launch
