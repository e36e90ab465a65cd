#include "exec/cuda/microbench/nccl_bench.h"

#include <nccl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "exec/cuda/microbench/cuda_util.h"
#include "exec/cuda/microbench/profiler.h"
#include "exec/cuda/microbench/progress.h"
#include "exec/cuda/microbench/sweep.h"

namespace alpasim::exec::microbench {
namespace {

// Result lines start with this tag: NCCL_DEBUG output also goes to a worker's stdout, and
// the launcher passes every other line on to stderr.
constexpr const char* kResultTag = "ALPA_PROFILE_RESULT";

core::Status nccl_status(ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess) return core::Status();
  return core::internal_error(what + ": " + ncclGetErrorString(r));
}
#define NCCL_TRY(expr, what) ALPASIM_RETURN_IF_ERROR(nccl_status((expr), (what)))

// Iterations per timed loop: nccl-tests' default 20 (-n 20), fewer for messages above
// 256 MiB where one call already lasts milliseconds. Every rank must use the same count, so
// it depends on the size only, never on a local measurement.
TimingPolicy nccl_policy(std::int64_t bytes, bool quick) {
  TimingPolicy p;
  const bool large = bytes > (std::int64_t{256} << 20);
  p.warmup = quick ? 2 : 5;
  p.reps = quick ? 3 : 5;
  p.max_iters = large ? (quick ? 2 : 5) : (quick ? 10 : 20);
  p.target_rep_s = 0;  // fixed count: see fixed_iters below
  return p;
}

// Median seconds of `iters` calls per loop over `reps` loops; fixed counts (see above).
core::Result<double> time_fixed(cudaStream_t stream, const TimingPolicy& p,
                                const std::function<core::Status()>& launch) {
  cudaEvent_t start = nullptr, stop = nullptr;
  ALPASIM_CUDA_TRY(cudaEventCreate(&start), "cudaEventCreate");
  ALPASIM_CUDA_TRY(cudaEventCreate(&stop), "cudaEventCreate");
  auto cleanup = [&] {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  };
  std::vector<double> reps;
  core::Status st;
  for (int i = 0; i < p.warmup && st.ok(); ++i) st = launch();
  for (int r = 0; r < p.reps && st.ok(); ++r) {
    st = cuda_status(cudaEventRecord(start, stream), "cudaEventRecord");
    for (int i = 0; i < p.max_iters && st.ok(); ++i) st = launch();
    if (st.ok()) st = cuda_status(cudaEventRecord(stop, stream), "cudaEventRecord");
    if (st.ok()) st = cuda_status(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    if (st.ok()) st = cuda_status(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    reps.push_back(static_cast<double>(ms) * 1e-3 / p.max_iters);
  }
  cleanup();
  ALPASIM_RETURN_IF_ERROR(st);
  return median(reps);
}

// The sweep of one rank on an initialised world communicator. Rank 0 returns result lines.
core::Result<std::vector<std::string>> sweep_rank(ncclComm_t world, int rank, int nranks,
                                                  const NcclSweepOptions& opt) {
  cudaStream_t stream = nullptr;
  ALPASIM_CUDA_TRY(cudaStreamCreate(&stream), "cudaStreamCreate");
  // Node of every rank: hash of the host name, all-gathered through NCCL itself.
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const auto host_hash = static_cast<std::int64_t>(std::hash<std::string>{}(host) >> 1);
  DeviceBuffer hashes;
  ALPASIM_RETURN_IF_ERROR(hashes.allocate(sizeof(std::int64_t) * static_cast<std::size_t>(nranks), "hashes"));
  auto* dh = static_cast<std::int64_t*>(hashes.get());
  ALPASIM_CUDA_TRY(cudaMemcpy(dh + rank, &host_hash, sizeof host_hash, cudaMemcpyHostToDevice), "memcpy");
  NCCL_TRY(ncclAllGather(dh + rank, dh, 1, ncclInt64, world, stream), "ncclAllGather host names");
  ALPASIM_CUDA_TRY(cudaStreamSynchronize(stream), "host name exchange");
  std::vector<std::int64_t> all(static_cast<std::size_t>(nranks));
  ALPASIM_CUDA_TRY(cudaMemcpy(all.data(), dh, sizeof(std::int64_t) * all.size(), cudaMemcpyDeviceToHost), "memcpy");
  std::map<std::int64_t, int> node_index;
  std::vector<int> host_of_rank;
  for (std::int64_t h : all) {
    auto it = node_index.find(h);
    if (it == node_index.end()) it = node_index.emplace(h, static_cast<int>(node_index.size())).first;
    host_of_rank.push_back(it->second);
  }
  // Buffers: two of the largest message (all-reduce out of place), capped to 40 % of free
  // memory each, the cap agreed on by every rank (the minimum).
  std::size_t free_b = 0, total_b = 0;
  ALPASIM_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  std::int64_t cap = opt.max_bytes;
  while (cap > 1024 && static_cast<double>(cap) > 0.4 * static_cast<double>(free_b)) cap /= 2;
  DeviceBuffer cap_buf;
  ALPASIM_RETURN_IF_ERROR(cap_buf.allocate(sizeof(std::int64_t), "cap"));
  ALPASIM_CUDA_TRY(cudaMemcpy(cap_buf.get(), &cap, sizeof cap, cudaMemcpyHostToDevice), "memcpy");
  NCCL_TRY(ncclAllReduce(cap_buf.get(), cap_buf.get(), 1, ncclInt64, ncclMin, world, stream), "agree on size");
  ALPASIM_CUDA_TRY(cudaMemcpy(&cap, cap_buf.get(), sizeof cap, cudaMemcpyDeviceToHost), "memcpy");
  const std::vector<std::int64_t> sizes = nccl_sizes(cap, opt.quick);
  DeviceBuffer send, recv, tmax;
  ALPASIM_RETURN_IF_ERROR(send.allocate(static_cast<std::size_t>(cap), "NCCL send buffer"));
  ALPASIM_RETURN_IF_ERROR(recv.allocate(static_cast<std::size_t>(cap), "NCCL recv buffer"));
  ALPASIM_RETURN_IF_ERROR(tmax.allocate(sizeof(double), "time max"));
  ALPASIM_CUDA_TRY(cudaMemset(send.get(), 0, static_cast<std::size_t>(cap)), "memset");

  const std::vector<GroupPlacement> groups = nccl_groups(host_of_rank);
  std::int64_t total = 0;
  for (const auto& g : groups) total += static_cast<std::int64_t>(sizes.size()) * (g.ranks.size() == 2 ? 5 : 4);
  Progress bar("nccl", total, opt.progress && rank == 0);
  std::vector<std::string> lines;
  for (const auto& g : groups) {
    const auto pos = std::find(g.ranks.begin(), g.ranks.end(), rank);
    const bool member = pos != g.ranks.end();
    ncclComm_t sub = nullptr;
    NCCL_TRY(ncclCommSplit(world, member ? 0 : NCCL_SPLIT_NOCOLOR, rank, &sub, nullptr), "ncclCommSplit");
    if (!member) continue;
    const int n = static_cast<int>(g.ranks.size());
    const int me = static_cast<int>(pos - g.ranks.begin());
    std::string ranks_text;
    for (int r : g.ranks) ranks_text += (ranks_text.empty() ? "" : ",") + std::to_string(r);
    std::vector<std::string> colls = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"};
    if (n == 2) colls.push_back("send_recv");
    for (const std::string& coll : colls) {
      for (std::int64_t size : sizes) {
        const auto per = static_cast<std::size_t>(size / 4 / n);  // floats per rank chunk
        if (per == 0) continue;
        std::int64_t bytes = size;
        std::function<core::Status()> launch;
        float* s = static_cast<float*>(send.get());
        float* d = static_cast<float*>(recv.get());
        if (coll == "all_reduce") {
          const auto count = static_cast<std::size_t>(size / 4);
          bytes = static_cast<std::int64_t>(count * 4);
          launch = [&, count] { return nccl_status(ncclAllReduce(s, d, count, ncclFloat, ncclSum, sub, stream), coll); };
        } else if (coll == "all_gather") {
          bytes = static_cast<std::int64_t>(per * 4) * n;
          launch = [&, per] { return nccl_status(ncclAllGather(s, d, per, ncclFloat, sub, stream), coll); };
        } else if (coll == "reduce_scatter") {
          bytes = static_cast<std::int64_t>(per * 4) * n;
          launch = [&, per] { return nccl_status(ncclReduceScatter(s, d, per, ncclFloat, ncclSum, sub, stream), coll); };
        } else if (coll == "all_to_all") {
          bytes = static_cast<std::int64_t>(per * 4) * n;
          launch = [&, per] { return nccl_status(ncclAlltoAll(s, d, per, ncclFloat, sub, stream), coll); };
        } else {  // send_recv: one direction, rank 0 of the pair to rank 1
          const auto count = static_cast<std::size_t>(size / 4);
          bytes = static_cast<std::int64_t>(count * 4);
          launch = [&, count, me] {
            return nccl_status(me == 0 ? ncclSend(s, count, ncclFloat, 1, sub, stream)
                                       : ncclRecv(d, count, ncclFloat, 0, sub, stream), coll);
          };
        }
        ALPASIM_ASSIGN_OR_RETURN(double secs, time_fixed(stream, nccl_policy(size, opt.quick), launch));
        // The slowest rank's median: a collective ends when its last rank does.
        ALPASIM_CUDA_TRY(cudaMemcpy(tmax.get(), &secs, sizeof secs, cudaMemcpyHostToDevice), "memcpy");
        NCCL_TRY(ncclAllReduce(tmax.get(), tmax.get(), 1, ncclDouble, ncclMax, sub, stream), "time max");
        ALPASIM_CUDA_TRY(cudaMemcpy(&secs, tmax.get(), sizeof secs, cudaMemcpyDeviceToHost), "memcpy");
        if (rank == 0) {
          const double algbw = static_cast<double>(bytes) / secs / 1e9;
          const double busbw = algbw * busbw_factor(coll, n);
          std::ostringstream os;
          os.precision(17);
          os << kResultTag << '\t' << coll << '\t' << n << '\t' << g.num_nodes << '\t' << g.placement << '\t'
             << schema::profile_role_name(g.role) << '\t' << ranks_text << '\t' << bytes << '\t'
             << secs * 1e6 << '\t' << algbw << '\t' << busbw;
          lines.push_back(os.str());
          bar.step(coll + " " + std::to_string(n) + " GPUs " + std::to_string(bytes) + " B");
        }
      }
    }
    NCCL_TRY(ncclCommDestroy(sub), "ncclCommDestroy");
  }
  cudaStreamDestroy(stream);
  return lines;
}

core::Result<std::vector<std::string>> run_rank(int rank, int nranks, int device,
                                                const ncclUniqueId& id, const NcclSweepOptions& opt) {
  ALPASIM_CUDA_TRY(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  ncclComm_t world = nullptr;
  NCCL_TRY(ncclCommInitRank(&world, nranks, id, rank), "ncclCommInitRank");
  auto lines = sweep_rank(world, rank, nranks, opt);
  ncclCommDestroy(world);
  return lines;
}

bool read_exact(int fd, void* data, std::size_t bytes) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t got = read(fd, p, bytes);
    if (got <= 0) return false;
    p += got;
    bytes -= static_cast<std::size_t>(got);
  }
  return true;
}

bool write_all(int fd, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t put = write(fd, p, bytes);
    if (put <= 0) return false;
    p += put;
    bytes -= static_cast<std::size_t>(put);
  }
  return true;
}

std::vector<schema::CollectiveEntry> to_entries(const std::vector<std::string>& lines,
                                                const std::string& citation, core::Status& st) {
  std::vector<schema::CollectiveEntry> out;
  for (const auto& l : lines) {
    auto e = parse_result_line(l, citation);
    if (!e.ok()) {
      st = e.status();
      return {};
    }
    out.push_back(*e);
  }
  return out;
}

}  // namespace

std::optional<MpiRank> mpi_rank_from_environment() {
  auto env = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
  // Open MPI, then PMI (MPICH, Intel MPI), then Slurm's srun.
  const char* kVars[][4] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "PMIX_NAMESPACE"},
      {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "PMI_JOBID"},
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_ID"},
  };
  for (const auto& v : kVars) {
    auto rank = env(v[0]), size = env(v[1]);
    if (!rank || !size) continue;
    MpiRank r;
    r.rank = std::atoi(rank->c_str());
    r.size = std::atoi(size->c_str());
    r.local_rank = std::atoi(env(v[2]).value_or(*rank).c_str());
    r.job = env(v[3]).value_or("job");
    for (char& c : r.job) {
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    return r;
  }
  return std::nullopt;
}

core::Result<schema::CollectiveEntry> parse_result_line(const std::string& line,
                                                        const std::string& citation) {
  std::vector<std::string> f;
  std::stringstream ss(line);
  std::string item;
  while (std::getline(ss, item, '\t')) f.push_back(item);
  if (f.size() != 10) {
    return core::internal_error("NCCL worker wrote a malformed line (" + std::to_string(f.size()) +
                                " fields, expected 10): " + line);
  }
  schema::CollectiveEntry e;
  try {
    e.collective = f[0];
    e.num_gpus = std::stoll(f[1]);
    e.num_nodes = std::stoll(f[2]);
    e.meta.role = f[4] == "check" ? schema::ProfileRole::kCheck : schema::ProfileRole::kFit;
    e.message_bytes = std::stoll(f[6]);
    e.time_us = std::stod(f[7]);
    e.busbw_gbyte_per_s = std::stod(f[9]);
  } catch (const std::exception&) {
    return core::internal_error("NCCL worker wrote a malformed number: " + line);
  }
  e.meta.source = schema::ProfileSource::kMeasured;
  e.meta.citation = citation + "; nccl " + f[3] + " ranks " + f[5] + ", algbw " + f[8] +
                    " GB/s, out of place, median of per-launch means, slowest rank";
  return e;
}

int run_nccl_worker(const NcclWorkerOptions& o) {
  ncclUniqueId id;
  if (!read_exact(STDIN_FILENO, &id, sizeof id)) {
    std::fprintf(stderr, "alpa-profile worker %d: no NCCL id on stdin\n", o.rank);
    return 2;
  }
  NcclSweepOptions opt{o.quick, o.max_bytes, o.progress, ""};
  auto lines = run_rank(o.rank, o.nranks, o.device, id, opt);
  if (!lines.ok()) {
    std::fprintf(stderr, "alpa-profile worker %d: %s\n", o.rank, lines.status().message().c_str());
    return 1;
  }
  for (const auto& l : *lines) std::printf("%s\n", l.c_str());
  std::fflush(stdout);
  return 0;
}

core::Result<std::vector<schema::CollectiveEntry>> run_nccl_launcher(
    int num_gpus, const std::filesystem::path& self_exe, const NcclSweepOptions& options) {
  ncclUniqueId id;
  NCCL_TRY(ncclGetUniqueId(&id), "ncclGetUniqueId");
  struct Child {
    pid_t pid = -1;
    int to_child = -1, from_child = -1;
  };
  std::vector<Child> children;
  for (int r = 0; r < num_gpus; ++r) {
    int in_p[2], out_p[2];
    if (pipe(in_p) != 0 || pipe(out_p) != 0) return core::internal_error("pipe() failed");
    std::vector<std::string> args = {self_exe.string(), "--nccl-worker", "--rank", std::to_string(r),
                                     "--nranks", std::to_string(num_gpus), "--device", std::to_string(r),
                                     "--nccl-max-bytes", std::to_string(options.max_bytes)};
    if (options.quick) args.push_back("--quick");
    if (!options.progress) args.push_back("--no-progress");
    const pid_t pid = fork();
    if (pid < 0) return core::internal_error("fork() failed");
    if (pid == 0) {
      dup2(in_p[0], STDIN_FILENO);
      dup2(out_p[1], STDOUT_FILENO);
      for (int fd : {in_p[0], in_p[1], out_p[0], out_p[1]}) close(fd);
      for (const Child& c : children) {
        close(c.to_child);
        close(c.from_child);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(in_p[0]);
    close(out_p[1]);
    children.push_back({pid, in_p[1], out_p[0]});
  }
  bool sent = true;
  for (Child& c : children) {
    sent = write_all(c.to_child, &id, sizeof id) && sent;
    close(c.to_child);
  }
  // Drain every worker's stdout while they run (poll), and watch for exits: when one worker
  // fails, the others would wait for it inside NCCL forever, so they are stopped (SIGTERM).
  std::vector<std::string> text(children.size());
  std::vector<bool> open(children.size(), true), running(children.size(), true);
  std::vector<int> status(children.size(), 0);
  bool stopping = false;
  auto any = [](const std::vector<bool>& v) { return std::find(v.begin(), v.end(), true) != v.end(); };
  while (any(open) || any(running)) {
    std::vector<pollfd> fds;
    std::vector<std::size_t> who;
    for (std::size_t r = 0; r < children.size(); ++r) {
      if (open[r]) {
        fds.push_back({children[r].from_child, POLLIN, 0});
        who.push_back(r);
      }
    }
    if (!fds.empty()) poll(fds.data(), fds.size(), 200);  // milliseconds
    else usleep(200000);
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buf[4096];
      const ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        text[who[i]].append(buf, static_cast<std::size_t>(got));
      } else {
        close(fds[i].fd);
        open[who[i]] = false;
      }
    }
    for (std::size_t r = 0; r < children.size(); ++r) {
      if (!running[r] || waitpid(children[r].pid, &status[r], WNOHANG) != children[r].pid) continue;
      running[r] = false;
      const bool ok = WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0;
      if (!ok && !stopping) {
        stopping = true;
        for (std::size_t o = 0; o < children.size(); ++o) {
          if (running[o]) kill(children[o].pid, SIGTERM);
        }
      }
    }
  }
  std::vector<std::string> lines;
  {
    std::stringstream ss(text[0]);
    std::string l;
    while (std::getline(ss, l)) {
      if (l.rfind(std::string(kResultTag) + "\t", 0) == 0) {
        lines.push_back(l.substr(std::string(kResultTag).size() + 1));
      } else if (!l.empty()) {
        std::fprintf(stderr, "%s\n", l.c_str());  // e.g. NCCL_DEBUG=INFO lines
      }
    }
  }
  std::string failures;
  for (std::size_t r = 0; r < children.size(); ++r) {
    const int st = status[r];
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      failures += (failures.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) +
                  (WIFEXITED(st) ? " exited with " + std::to_string(WEXITSTATUS(st))
                                 : std::string(" stopped by signal ") + std::to_string(WTERMSIG(st)));
    }
  }
  if (!sent) return core::internal_error("could not send the NCCL id to the workers");
  if (!failures.empty()) return core::internal_error("NCCL workers failed: " + failures);
  core::Status st;
  auto out = to_entries(lines, options.citation, st);
  ALPASIM_RETURN_IF_ERROR(st);
  return out;
}

core::Result<std::vector<schema::CollectiveEntry>> run_nccl_mpi(
    const MpiRank& r, const std::filesystem::path& rendezvous_dir, const NcclSweepOptions& options) {
  const auto file = rendezvous_dir / ("alpa-profile-nccl-id-" + r.job + ".bin");
  ncclUniqueId id;
  if (r.rank == 0) {
    NCCL_TRY(ncclGetUniqueId(&id), "ncclGetUniqueId");
    const auto tmp = file.string() + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary);
      f.write(reinterpret_cast<const char*>(&id), sizeof id);
      if (!f) return core::invalid_argument(tmp + ": cannot write the NCCL id (--rendezvous folder)");
    }
    std::filesystem::rename(tmp, file);  // atomic: readers never see half an id
  } else {
    // Wait up to 120 s for rank 0 to publish the id.
    bool got = false;
    for (int i = 0; i < 1200 && !got; ++i) {
      std::ifstream f(file, std::ios::binary);
      if (f && f.read(reinterpret_cast<char*>(&id), sizeof id)) {
        got = true;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    if (!got) {
      // Not kUnavailable: alpa-profile would report that as "no GPU" and exit 77 (skipped).
      return core::failed_precondition(file.string() + ": rank 0 did not publish the NCCL id within 120 s "
                                                       "(is --rendezvous a folder every node sees?)");
    }
  }
  NcclSweepOptions opt = options;
  opt.progress = options.progress && r.rank == 0;
  auto lines = run_rank(r.rank, r.size, r.local_rank, id, opt);
  if (r.rank == 0) {
    std::error_code ec;
    std::filesystem::remove(file, ec);  // every rank has joined once init returned
  }
  ALPASIM_RETURN_IF_ERROR(lines.status());
  std::vector<std::string> untagged;
  for (const auto& l : *lines) untagged.push_back(l.substr(std::string(kResultTag).size() + 1));
  core::Status st;
  auto out = to_entries(untagged, options.citation, st);
  ALPASIM_RETURN_IF_ERROR(st);
  return out;
}

}  // namespace alpasim::exec::microbench
