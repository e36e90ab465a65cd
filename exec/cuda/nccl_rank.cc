// One rank of the one-process-per-GPU mode: Program device index `rank` on one GPU, NCCL
// for every collective and SEND/RECV. NEVER RUN ON A GPU YET (exec/cuda/README.md).
//
// Streams (the simulator's compute and communication streams, docs/trace.md): RUN,
// ALLOCATE and FREE on the compute stream; collectives on one collective stream; SEND and
// RECV on one stream per channel (one direction between two devices, comm_plan.h). Order
// across streams comes from the buffers: an instruction waits for the end event of the last
// instruction on another stream that touched one of its buffers. A SEND first copies its
// range into a staging buffer on the compute stream, so later users of the source buffer
// never wait for the receiver: sends are buffered, as exec/verify.h assumes, and a program
// verify_program accepts cannot deadlock on stream order.
//
// Failure containment: every communicator is non-blocking (ncclConfig_t::blocking = 0);
// each NCCL call is followed by a poll of ncclCommGetAsyncError (poll_until, timeout
// RunOptions::timeout_s); the end of the iteration polls the streams and the
// communicators' async errors. On an error or a timeout every communicator is aborted
// (ncclCommAbort) and the message names the rank and the instruction (index, kind, op).
#include "exec/cuda/modes.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#ifdef ALPASIM_EXEC_WITH_NCCL
#include <nccl.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "exec/cuda/exec_kernels.h"
#include "exec/cuda/op_runner.h"
#include "exec/launch/comm_plan.h"
#include "exec/launch/orchestrate.h"
#include "exec/launch/poll.h"
#include "exec/launch/reshard_plan.h"
#include "exec/launch/stream_plan.h"

namespace alpasim::exec::cuda {

#ifndef ALPASIM_EXEC_WITH_NCCL

core::Result<launch::RankResult> run_rank(const Program&, const RunOptions&, const launch::RankEnv& env) {
  return core::unavailable("rank " + std::to_string(env.rank) +
                           ": this build of the CUDA backend has no NCCL (cmake/FindNCCL.cmake found none); "
                           "one process per GPU needs it, the virtual-device mode does not");
}

#else

namespace {

/// Poll interval of the NCCL and stream polls: short against a collective (tens of
/// microseconds and up), long enough not to spin a core.
constexpr double kPollInterval_s = 50e-6;

core::Status nccl_check(ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess || r == ncclInProgress) return core::ok_status();
  return core::internal_error(what + ": " + ncclGetErrorString(r));
}

/// The communicators of this rank, aborted on any failure.
class Comms {
 public:
  ~Comms() {
    for (auto& [g, c] : comms_) {
      if (c) ncclCommAbort(c);
    }
  }

  /// Waits until `comm` has finished its pending non-blocking work (ok), reports an async
  /// error (kInternal) or `timeout_s` passes (kUnavailable).
  core::Status settle(ncclComm_t comm, double timeout_s, launch::Clock& clock, const std::string& what) {
    return launch::poll_until(
        [&](std::string* why) {
          ncclResult_t state = ncclSuccess;
          const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
          if (r != ncclSuccess) {
            *why = std::string("ncclCommGetAsyncError: ") + ncclGetErrorString(r);
            return launch::PollState::kFailed;
          }
          if (state == ncclInProgress) return launch::PollState::kPending;
          if (state != ncclSuccess) {
            *why = std::string("NCCL: ") + ncclGetErrorString(state) + " (" + ncclGetLastError(comm) + ")";
            return launch::PollState::kFailed;
          }
          return launch::PollState::kDone;
        },
        timeout_s, kPollInterval_s, clock, what);
  }

  /// An async error of any communicator ("" when none).
  std::string async_error() {
    for (auto& [g, c] : comms_) {
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(c, &state) != ncclSuccess) return "ncclCommGetAsyncError failed";
      if (state != ncclSuccess && state != ncclInProgress) {
        return std::string(ncclGetErrorString(state)) + " on communicator " + std::to_string(g) + " (" +
               ncclGetLastError(c) + ")";
      }
    }
    return "";
  }

  /// Aborts every communicator (unblocks kernels stuck in NCCL) and forgets them.
  void abort_all() {
    for (auto& [g, c] : comms_) {
      if (c) ncclCommAbort(c);
      c = nullptr;
    }
    comms_.clear();
  }

  /// Finalizes (flushes) and destroys every communicator after a successful run.
  core::Status finish(double timeout_s, launch::Clock& clock) {
    for (auto& [g, c] : comms_) {
      ALPASIM_RETURN_IF_ERROR(nccl_check(ncclCommFinalize(c), "ncclCommFinalize"));
      ALPASIM_RETURN_IF_ERROR(settle(c, timeout_s, clock, "ncclCommFinalize of communicator " + std::to_string(g)));
    }
    for (auto& [g, c] : comms_) {
      ncclCommDestroy(c);
      c = nullptr;
    }
    comms_.clear();
    return core::ok_status();
  }

  std::map<std::int32_t, ncclComm_t> comms_;  ///< group index (CommPlan) -> communicator
};

/// The end event of the last instruction that touched a buffer, and its stream.
struct LastUse {
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
};

class RankRun {
 public:
  RankRun(const Program& p, const RunOptions& o, const launch::RankEnv& env, const launch::CommPlan& plan, Comms& comms,
          cublasHandle_t blas, void* dnn, IndexCache& cache)
      : p_(p), o_(o), env_(env), plan_(plan), comms_(comms), blas_(blas), dnn_(dnn), cache_(cache),
        dev_(static_cast<std::size_t>(env.rank)) {}

  ~RankRun() {
    for (auto& [g, s] : streams_) cudaStreamDestroy(s);
    if (compute_) cudaStreamDestroy(compute_);
  }

  core::Status create_streams() {
    ALPASIM_RETURN_IF_ERROR(check(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), "cudaStreamCreate"));
    for (std::int32_t g : plan_.groups_of(env_.rank)) {
      if (plan_.groups[static_cast<std::size_t>(g)].kind == launch::CommKind::kWorld) continue;
      // One stream for all collective groups (a device blocks at each collective in program
      // order, as verify_program assumes); one per channel.
      const std::int32_t key =
          plan_.groups[static_cast<std::size_t>(g)].kind == launch::CommKind::kCollective ? launch::kCollectiveStream : g;
      if (streams_.count(key)) continue;
      cudaStream_t s = nullptr;
      ALPASIM_RETURN_IF_ERROR(check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"));
      streams_[key] = s;
    }
    return core::ok_status();
  }

  /// One iteration. `record`: save losses, gradients and parameters (first iteration);
  /// `timings`: this iteration's per-instruction times.
  core::Status iteration(launch::RankResult* record, std::vector<InstrTiming>* timings, double* wall_s) {
    OpRunner ops(p_, blas_, dnn_, cache_);
    launch::SteadyClock clock;
    std::vector<cudaEvent_t> events;
    auto event = [&](cudaEvent_t* e) -> core::Status {
      ALPASIM_RETURN_IF_ERROR(check(cudaEventCreate(e), "cudaEventCreate"));
      events.push_back(*e);
      return core::ok_status();
    };
    struct Cleanup {
      std::vector<cudaEvent_t>& ev;
      ~Cleanup() {
        for (cudaEvent_t e : ev) cudaEventDestroy(e);
      }
    } cleanup{events};

    // Start together: a one-element all-reduce over every rank, then the start event.
    float* token = nullptr;
    ALPASIM_RETURN_IF_ERROR(ops.alloc(&token, 1, compute_));
    ncclComm_t world = comms_.comms_.at(0);
    ALPASIM_RETURN_IF_ERROR(nccl_check(ncclAllReduce(token, token, 1, ncclFloat, ncclSum, world, compute_),
                                       where(-1) + " start barrier"));
    ALPASIM_RETURN_IF_ERROR(comms_.settle(world, o_.timeout_s, clock, where(-1) + " start barrier"));
    ALPASIM_RETURN_IF_ERROR(wait_streams(clock, nullptr));
    const auto t0 = std::chrono::steady_clock::now();
    cudaEvent_t start = nullptr;
    ALPASIM_RETURN_IF_ERROR(event(&start));
    ALPASIM_RETURN_IF_ERROR(check(cudaEventRecord(start, compute_), "cudaEventRecord"));
    for (auto& [k, s] : streams_) {
      ALPASIM_RETURN_IF_ERROR(check(cudaStreamWaitEvent(s, start, 0), "cudaStreamWaitEvent"));
    }
    ALPASIM_RETURN_IF_ERROR(check(cudaFreeAsync(token, compute_), "cudaFreeAsync"));

    last_.assign(p_.buffers.size(), LastUse{});
    const auto& code = p_.code[dev_];
    std::vector<std::pair<cudaEvent_t, cudaEvent_t>> marks(code.size(), {nullptr, nullptr});
    std::vector<BufferId> keep;  // reported buffers: copied to the host after the iteration
    for (std::size_t i = 0; i < code.size(); ++i) {
      const Instruction& in = code[i];
      cudaStream_t s = stream_of(in);
      ALPASIM_RETURN_IF_ERROR(depend(in, s));
      ALPASIM_RETURN_IF_ERROR(event(&marks[i].first));
      ALPASIM_RETURN_IF_ERROR(check(cudaEventRecord(marks[i].first, in.kind == InstrKind::kSend ? compute_ : s), "cudaEventRecord"));
      cudaEvent_t source_done = nullptr;  // SEND: the staging copy (the source buffer's last use)
      core::Status st = issue(i, in, s, ops, record != nullptr, &keep, &source_done, clock, event);
      if (!st.ok()) return st.with_context(where(static_cast<std::int64_t>(i)));
      ALPASIM_RETURN_IF_ERROR(event(&marks[i].second));
      ALPASIM_RETURN_IF_ERROR(check(cudaEventRecord(marks[i].second, s), "cudaEventRecord"));
      touch(in, s, marks[i].second, source_done);
    }
    // Wait for the GPU; on a timeout name the first instruction that has not finished.
    ALPASIM_RETURN_IF_ERROR(wait_streams(clock, &marks));
    *wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (timings) {
      for (std::size_t i = 0; i < marks.size(); ++i) {
        float a = 0, b = 0;
        ALPASIM_RETURN_IF_ERROR(check(cudaEventElapsedTime(&a, start, marks[i].first), "cudaEventElapsedTime"));
        ALPASIM_RETURN_IF_ERROR(check(cudaEventElapsedTime(&b, start, marks[i].second), "cudaEventElapsedTime"));
        timings->push_back({env_.rank, static_cast<std::int32_t>(i), static_cast<std::int64_t>(static_cast<double>(a) * 1e6),
                            static_cast<std::int64_t>(static_cast<double>(b) * 1e6)});
      }
    }
    if (record) {
      ExecutionResult r;
      std::map<BufferId, std::vector<float>> losses;
      for (BufferId b : keep) {
        ALPASIM_RETURN_IF_ERROR(ops.save(ops.buf(b), &r, &losses, &record->blocks, compute_));
        ALPASIM_RETURN_IF_ERROR(ops.release(b, compute_));
      }
      ALPASIM_RETURN_IF_ERROR(wait_streams(clock, nullptr));
      for (const auto& [id, v] : losses) record->losses[id] = v.empty() ? 0.0 : static_cast<double>(v[0]);
      record->gradients = std::move(r.gradients);
      record->parameters = std::move(r.parameters);
    }
    return core::ok_status();
  }

 private:
  /// "rank 1 (device 5) instruction #12 (recv mb3)"; i < 0: the rank alone.
  std::string where(std::int64_t i) const {
    std::string s = "rank " + std::to_string(env_.rank) + " (device " + std::to_string(p_.devices[dev_]) + ")";
    if (i < 0) return s;
    const Instruction& in = p_.code[dev_][static_cast<std::size_t>(i)];
    s += " instruction #" + std::to_string(i) + " (" + std::string(instr_kind_name(in.kind));
    if (in.op != ir::kNoOp && in.stage >= 0) s += " " + p_.graph_of_stage(in.stage).op(in.op).name;
    if (in.peer >= 0) s += (in.kind == InstrKind::kSend ? " to device " : " from device ") + std::to_string(p_.devices[static_cast<std::size_t>(in.peer)]);
    if (in.microbatch >= 0) s += " mb" + std::to_string(in.microbatch);
    return s + ")";
  }

  /// The stream of `in` (launch::stream_of: the replay in check_stream_schedule uses the
  /// same assignment).
  cudaStream_t stream_of(const Instruction& in) const {
    const std::int32_t key = launch::stream_of(in, env_.rank, plan_);
    return key == launch::kComputeStream ? compute_ : streams_.at(key);
  }

  /// The buffers an instruction reads or writes.
  static std::vector<BufferId> touched(const Instruction& in) {
    std::vector<BufferId> b = in.inputs;
    if (in.buffer != kNoBuffer) b.push_back(in.buffer);
    return b;
  }

  /// Makes the stream that starts `in` (the compute stream for a SEND's staging copy) wait
  /// for the last use of each of its buffers on another stream.
  core::Status depend(const Instruction& in, cudaStream_t s) {
    const cudaStream_t first = in.kind == InstrKind::kSend ? compute_ : s;
    for (BufferId b : touched(in)) {
      const LastUse& u = last_[static_cast<std::size_t>(b)];
      if (u.event && u.stream != first) {
        ALPASIM_RETURN_IF_ERROR(check(cudaStreamWaitEvent(first, u.event, 0), "cudaStreamWaitEvent"));
      }
    }
    return core::ok_status();
  }

  void touch(const Instruction& in, cudaStream_t s, cudaEvent_t end, cudaEvent_t source_done) {
    for (BufferId b : touched(in)) {
      last_[static_cast<std::size_t>(b)] = in.kind == InstrKind::kSend ? LastUse{compute_, source_done} : LastUse{s, end};
    }
  }

  template <typename MakeEvent>
  core::Status issue(std::size_t i, const Instruction& in, cudaStream_t s, OpRunner& ops, bool record, std::vector<BufferId>* keep,
                     cudaEvent_t* source_done, launch::Clock& clock, MakeEvent& event) {
    switch (in.kind) {
      case InstrKind::kAllocate: return ops.allocate(in.buffer, s);
      case InstrKind::kFree:
        if (record && ops.reported(dev_, ops.buf(in.buffer), o_.report_values)) {
          keep->push_back(in.buffer);  // freed after its copy to the host
          return core::ok_status();
        }
        return ops.release(in.buffer, s);
      case InstrKind::kRun: return ops.run_op(in, s);
      case InstrKind::kSend: {
        const std::int32_t g = plan_.channel.at({env_.rank, in.peer});
        ncclComm_t comm = comms_.comms_.at(g);
        float* staging = nullptr;
        ALPASIM_RETURN_IF_ERROR(ops.alloc(&staging, in.count_elements, compute_));
        ALPASIM_RETURN_IF_ERROR(check(cudaMemcpyAsync(staging, ops.ptr(in.buffer) + in.offset_elements,
                                                      static_cast<std::size_t>(in.count_elements) * 4,
                                                      cudaMemcpyDeviceToDevice, compute_), "cudaMemcpyAsync"));
        ALPASIM_RETURN_IF_ERROR(event(source_done));
        ALPASIM_RETURN_IF_ERROR(check(cudaEventRecord(*source_done, compute_), "cudaEventRecord"));
        ALPASIM_RETURN_IF_ERROR(check(cudaStreamWaitEvent(s, *source_done, 0), "cudaStreamWaitEvent"));
        ALPASIM_RETURN_IF_ERROR(nccl_check(ncclSend(staging, static_cast<std::size_t>(in.count_elements), ncclFloat,
                                                    plan_.rank_in(g, in.peer), comm, s), "ncclSend"));
        ALPASIM_RETURN_IF_ERROR(comms_.settle(comm, o_.timeout_s, clock, "ncclSend"));
        return check(cudaFreeAsync(staging, s), "cudaFreeAsync");
      }
      case InstrKind::kRecv: {
        const std::int32_t g = plan_.channel.at({in.peer, env_.rank});
        ncclComm_t comm = comms_.comms_.at(g);
        ALPASIM_RETURN_IF_ERROR(nccl_check(ncclRecv(ops.ptr(in.buffer) + in.offset_elements,
                                                    static_cast<std::size_t>(in.count_elements), ncclFloat,
                                                    plan_.rank_in(g, in.peer), comm, s), "ncclRecv"));
        return comms_.settle(comm, o_.timeout_s, clock, "ncclRecv");
      }
      default:
        if (launch::is_reshard(in)) return reshard(i, in, s, ops, clock);
        return collective(in, s, ops, clock);
    }
  }

  /// A resharding copy (exec/instruction.h) on the collective stream: pack what each peer
  /// needs into one staging buffer (the plan's strided copies, peers in rank order), one
  /// grouped ncclSend/ncclRecv per peer over the instruction's group communicator, unpack
  /// (times the scale), and the local copies. Both sides derive the same packing order from
  /// the same plan (launch::reshard_exchange), so no metadata travels. A member that neither
  /// sends nor receives makes no NCCL call (point-to-point needs only the pairs).
  core::Status reshard(std::size_t i, const Instruction& in, cudaStream_t s, OpRunner& ops, launch::Clock& clock) {
    auto it = plans_.find(in.collective_id);
    if (it == plans_.end()) {
      ALPASIM_ASSIGN_OR_RETURN(launch::ReshardPlan plan, launch::reshard_plan(p_, dev_, i));
      it = plans_.emplace(in.collective_id, std::move(plan)).first;
    }
    const launch::ReshardPlan& plan = it->second;
    const auto me = static_cast<std::int32_t>(std::find(plan.group.begin(), plan.group.end(), env_.rank) - plan.group.begin());
    const launch::ReshardExchange x = launch::reshard_exchange(plan, me);
    const float* src = ops.ptr(plan.source_buffer[static_cast<std::size_t>(me)]);
    float* dst = ops.ptr(plan.destination_buffer[static_cast<std::size_t>(me)]);
    float* send = nullptr;
    float* recv = nullptr;
    if (x.send_elements > 0) ALPASIM_RETURN_IF_ERROR(ops.alloc(&send, x.send_elements, s));
    if (x.recv_elements > 0) ALPASIM_RETURN_IF_ERROR(ops.alloc(&recv, x.recv_elements, s));
    i64 at = 0;
    for (const auto& [peer, list] : x.send) {
      for (std::size_t c : list) {
        ALPASIM_RETURN_IF_ERROR(launch_box_copy(launch::packed_destination(plan.copies[c], at), src, send, 1.0f, s));
        at += plan.copies[c].elements();
      }
    }
    if (!x.send.empty() || !x.recv.empty()) {
      const std::int32_t g = plan_.collective.at(in.group);
      ncclComm_t comm = comms_.comms_.at(g);
      ALPASIM_RETURN_IF_ERROR(nccl_check(ncclGroupStart(), "ncclGroupStart"));
      i64 off = 0;
      for (const auto& [peer, list] : x.send) {
        const i64 n = plan.elements(me, peer);
        ALPASIM_RETURN_IF_ERROR(nccl_check(ncclSend(send + off, static_cast<std::size_t>(n), ncclFloat,
                                                    plan_.rank_in(g, plan.group[static_cast<std::size_t>(peer)]), comm, s),
                                           "ncclSend"));
        off += n;
      }
      off = 0;
      for (const auto& [peer, list] : x.recv) {
        const i64 n = plan.elements(peer, me);
        ALPASIM_RETURN_IF_ERROR(nccl_check(ncclRecv(recv + off, static_cast<std::size_t>(n), ncclFloat,
                                                    plan_.rank_in(g, plan.group[static_cast<std::size_t>(peer)]), comm, s),
                                           "ncclRecv"));
        off += n;
      }
      ALPASIM_RETURN_IF_ERROR(nccl_check(ncclGroupEnd(), "ncclGroupEnd"));
      ALPASIM_RETURN_IF_ERROR(comms_.settle(comm, o_.timeout_s, clock, "resharding send/recv"));
    }
    at = 0;
    for (const auto& [peer, list] : x.recv) {
      for (std::size_t c : list) {
        ALPASIM_RETURN_IF_ERROR(launch_box_copy(launch::packed_source(plan.copies[c], at), recv, dst, plan.scale, s));
        at += plan.copies[c].elements();
      }
    }
    for (std::size_t c : x.local) ALPASIM_RETURN_IF_ERROR(launch_box_copy(plan.copies[c], src, dst, plan.scale, s));
    if (send) ALPASIM_RETURN_IF_ERROR(check(cudaFreeAsync(send, s), "cudaFreeAsync"));
    if (recv) ALPASIM_RETURN_IF_ERROR(check(cudaFreeAsync(recv, s), "cudaFreeAsync"));
    return core::ok_status();
  }

  /// In-place collectives over `in.group` (positions in the group are NCCL ranks, as the
  /// instruction's semantics, instruction.h).
  core::Status collective(const Instruction& in, cudaStream_t s, OpRunner& ops, launch::Clock& clock) {
    // Only ALL_GATHER takes an input (a resharding copy, handled by reshard()).
    if (!in.inputs.empty()) {
      return core::unimplemented(std::string(instr_kind_name(in.kind)) +
                                 " with an input: the instruction set has no such form (exec/instruction.h)");
    }
    const std::int32_t g = plan_.collective.at(in.group);
    ncclComm_t comm = comms_.comms_.at(g);
    const std::int32_t r = plan_.rank_in(g, env_.rank);
    const auto k = static_cast<i64>(in.group.size());
    float* b = ops.ptr(in.buffer);
    const i64 n = ops.buf(in.buffer).elements;
    const i64 chunk = n / k;
    const auto chunk_u = static_cast<std::size_t>(chunk);
    switch (in.kind) {
      case InstrKind::kAllReduce:
        ALPASIM_RETURN_IF_ERROR(nccl_check(ncclAllReduce(b, b, static_cast<std::size_t>(n), ncclFloat, ncclSum, comm, s), "ncclAllReduce"));
        ALPASIM_RETURN_IF_ERROR(comms_.settle(comm, o_.timeout_s, clock, "ncclAllReduce"));
        if (in.scale != 1.0) {  // b = 0·b + scale·b
          ALPASIM_RETURN_IF_ERROR(check(kernels::axpby(b, 0.0f, b, static_cast<float>(in.scale), n, n, s), "scale"));
        }
        return core::ok_status();
      case InstrKind::kAllGather:
        ALPASIM_RETURN_IF_ERROR(nccl_check(ncclAllGather(b + r * chunk, b, chunk_u, ncclFloat, comm, s), "ncclAllGather"));
        return comms_.settle(comm, o_.timeout_s, clock, "ncclAllGather");
      case InstrKind::kReduceScatter:
        ALPASIM_RETURN_IF_ERROR(nccl_check(ncclReduceScatter(b, b + r * chunk, chunk_u, ncclFloat, ncclSum, comm, s), "ncclReduceScatter"));
        ALPASIM_RETURN_IF_ERROR(comms_.settle(comm, o_.timeout_s, clock, "ncclReduceScatter"));
        if (in.scale != 1.0) {
          ALPASIM_RETURN_IF_ERROR(check(kernels::axpby(b + r * chunk, 0.0f, b + r * chunk, static_cast<float>(in.scale), chunk, chunk, s), "scale"));
        }
        return core::ok_status();
      case InstrKind::kAllToAll: {
        // No NCCL all-to-all: grouped send/recv of each slice (slice j of rank r goes to slice
        // r of rank j) into a temporary, copied back.
        float* tmp = nullptr;
        ALPASIM_RETURN_IF_ERROR(ops.alloc(&tmp, n, s));
        ALPASIM_RETURN_IF_ERROR(nccl_check(ncclGroupStart(), "ncclGroupStart"));
        for (i64 j = 0; j < k; ++j) {
          ALPASIM_RETURN_IF_ERROR(nccl_check(ncclSend(b + j * chunk, chunk_u, ncclFloat, static_cast<int>(j), comm, s), "ncclSend"));
          ALPASIM_RETURN_IF_ERROR(nccl_check(ncclRecv(tmp + j * chunk, chunk_u, ncclFloat, static_cast<int>(j), comm, s), "ncclRecv"));
        }
        ALPASIM_RETURN_IF_ERROR(nccl_check(ncclGroupEnd(), "ncclGroupEnd"));
        ALPASIM_RETURN_IF_ERROR(comms_.settle(comm, o_.timeout_s, clock, "all-to-all"));
        ALPASIM_RETURN_IF_ERROR(check(cudaMemcpyAsync(b, tmp, static_cast<std::size_t>(k * chunk) * 4, cudaMemcpyDeviceToDevice, s),
                                      "cudaMemcpyAsync"));
        return check(cudaFreeAsync(tmp, s), "cudaFreeAsync");
      }
      default: return core::internal_error("not a collective");
    }
  }

  /// Polls every stream until idle, checking the communicators' async errors; on an error
  /// or after timeout_s aborts the communicators and names the first unfinished instruction.
  core::Status wait_streams(launch::Clock& clock, const std::vector<std::pair<cudaEvent_t, cudaEvent_t>>* marks) {
    std::vector<cudaStream_t> all{compute_};
    for (auto& [k, s] : streams_) all.push_back(s);
    core::Status st = launch::poll_until(
        [&](std::string* why) {
          const std::string e = comms_.async_error();
          if (!e.empty()) {
            *why = e;
            return launch::PollState::kFailed;
          }
          for (cudaStream_t s : all) {
            const cudaError_t q = cudaStreamQuery(s);
            if (q == cudaErrorNotReady) return launch::PollState::kPending;
            if (q != cudaSuccess) {
              *why = cudaGetErrorString(q);
              return launch::PollState::kFailed;
            }
          }
          return launch::PollState::kDone;
        },
        o_.timeout_s, kPollInterval_s, clock, "waiting for the GPU");
    if (st.ok()) return st;
    std::string at = where(-1);
    if (marks) {
      for (std::size_t i = 0; i < marks->size(); ++i) {
        if ((*marks)[i].second && cudaEventQuery((*marks)[i].second) != cudaSuccess) {
          at = where(static_cast<std::int64_t>(i)) + " has not finished";
          break;
        }
      }
    }
    comms_.abort_all();
    return core::Status(st.code(), at + ": " + st.message() + "; aborted the NCCL communicators");
  }

  const Program& p_;
  const RunOptions& o_;
  const launch::RankEnv& env_;
  const launch::CommPlan& plan_;
  Comms& comms_;
  cublasHandle_t blas_;
  void* dnn_;
  IndexCache& cache_;
  std::size_t dev_;
  cudaStream_t compute_ = nullptr;
  std::map<std::int32_t, cudaStream_t> streams_;  ///< kCollectiveStream, or a channel's group index
  std::vector<LastUse> last_;
  std::map<std::int64_t, launch::ReshardPlan> plans_;  ///< by collective id, computed once per run
};

/// Rank 0 creates one NCCL unique id per communicator; every rank gets them (MPI_Bcast under
/// mpirun in a build with MPI, else the rendezvous file; launch::share_from_rank0).
core::Result<std::vector<std::string>> exchange_ids(const launch::CommPlan& plan, const launch::RankEnv& env,
                                                    double timeout_s) {
  auto make = [&]() -> core::Result<std::string> {
    std::vector<std::string> ids;
    for (std::size_t g = 0; g < plan.groups.size(); ++g) {
      ncclUniqueId id;
      ALPASIM_RETURN_IF_ERROR(nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId"));
      ids.emplace_back(id.internal, sizeof id.internal);
    }
    return launch::encode_blobs(ids);
  };
  ALPASIM_ASSIGN_OR_RETURN(std::string bytes, launch::share_from_rank0(env, "nccl_ids", make, timeout_s));
  return launch::decode_blobs(bytes, static_cast<std::int64_t>(plan.groups.size()), "the NCCL ids of rank 0");
}

}  // namespace

core::Result<launch::RankResult> run_rank(const Program& p, const RunOptions& options, const launch::RankEnv& env) {
  const std::string me = "rank " + std::to_string(env.rank);
  if (env.world_size != static_cast<int>(p.devices.size())) {
    return core::failed_precondition(me + ": the plan has " + std::to_string(p.devices.size()) + " devices, the run " +
                                     std::to_string(env.world_size) + " ranks");
  }
  ALPASIM_RETURN_IF_ERROR(check(cudaSetDevice(env.local_rank), me + ": cudaSetDevice(" + std::to_string(env.local_rank) + ")"));
  ALPASIM_ASSIGN_OR_RETURN(launch::CommPlan plan, launch::comm_plan(p));
  ALPASIM_ASSIGN_OR_RETURN(std::vector<std::string> ids, exchange_ids(plan, env, options.timeout_s));

  Comms comms;
  launch::SteadyClock clock;
  // Every rank creates its communicators in CommPlan order, each non-blocking, then waits
  // for all of them: no rank blocks inside ncclCommInitRank while another waits elsewhere.
  for (std::int32_t g : plan.groups_of(env.rank)) {
    const auto& grp = plan.groups[static_cast<std::size_t>(g)];
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclUniqueId id;
    const std::string& bytes = ids[static_cast<std::size_t>(g)];
    if (bytes.size() != sizeof id.internal) {
      return core::invalid_argument(me + ": NCCL unique id " + std::to_string(g) + ": expected " +
                                    std::to_string(sizeof id.internal) + " bytes, got " + std::to_string(bytes.size()));
    }
    std::memcpy(id.internal, bytes.data(), sizeof id.internal);
    ncclComm_t c = nullptr;
    ALPASIM_RETURN_IF_ERROR(nccl_check(ncclCommInitRankConfig(&c, static_cast<int>(grp.members.size()), id,
                                                              plan.rank_in(g, env.rank), &config),
                                       me + ": ncclCommInitRankConfig of communicator " + std::to_string(g)));
    comms.comms_[g] = c;
  }
  for (auto& [g, c] : comms.comms_) {
    ALPASIM_RETURN_IF_ERROR(comms.settle(c, options.timeout_s, clock, me + ": NCCL init of communicator " + std::to_string(g)));
  }

  launch::RankResult result;
  result.rank = env.rank;
  cublasHandle_t blas = nullptr;
  ALPASIM_RETURN_IF_ERROR(check(cublasCreate(&blas), me + ": cublasCreate"));
  core::Status status = core::ok_status();
  {
    DnnHandle dnn;
    IndexCache cache;
    RankRun run(p, options, env, plan, comms, blas, dnn.get(), cache);
    status = run.create_streams();
    const int total = options.warmup_iterations + options.iterations;
    for (int it = 0; it < total && status.ok(); ++it) {
      const bool last = it == total - 1;
      double wall_s = 0;
      status = run.iteration(it == 0 ? &result : nullptr, last ? &result.timings : nullptr, &wall_s);
      if (status.ok() && it >= options.warmup_iterations) result.iteration_s.push_back(wall_s);
    }
    // Finalizing may wait for peers still in their last operations: a longer limit, so a
    // peer's own timeout (which names its instruction) is what ends a failed run.
    if (status.ok()) status = comms.finish(2 * options.timeout_s + 10.0, clock);
    free_index_cache(cache);
  }
  cublasDestroy(blas);
  if (!status.ok()) {
    comms.abort_all();
    result.error = status.to_string();
  }
  return result;
}

#endif  // ALPASIM_EXEC_WITH_NCCL

}  // namespace alpasim::exec::cuda
