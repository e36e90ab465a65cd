// The virtual-device mode (run_virtual, modes.h): every logical device of the program on GPU 0
// of this process. make_cuda_backend (cuda_backend.h) is defined in run_cuda.cc.
#include "exec/cuda/modes.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "exec/cuda/exec_kernels.h"
#include "exec/cuda/op_runner.h"

namespace alpasim::exec::cuda {
namespace {

/// Resharding plans by collective id, computed once per run (exec/launch/reshard_plan.h).
using ReshardPlans = std::map<std::int64_t, launch::ReshardPlan>;

struct Mail {
  float* staging = nullptr;
  cudaEvent_t ready = nullptr;
};

struct Collective {
  std::set<std::int32_t> arrived;
  bool done = false;
};

/// One iteration's state on the GPU.
class Iteration {
 public:
  Iteration(const Program& p, cublasHandle_t blas, void* dnn, const std::vector<cudaStream_t>& streams,
            IndexCache& index_cache, ReshardPlans& plans, bool timed, bool report_values)
      : p_(p),
        ops_(p, blas, dnn, index_cache),
        streams_(streams),
        plans_(plans),
        timed_(timed),
        report_values_(report_values) {}

  core::Status run(ExecutionResult* record, double timeout_s, std::vector<InstrTiming>* timings) {
    const std::size_t n = p_.code.size();
    ALPASIM_RETURN_IF_ERROR(check(cudaEventCreate(&start_), "cudaEventCreate"));
    ALPASIM_RETURN_IF_ERROR(check(cudaEventRecord(start_, streams_[0]), "cudaEventRecord"));
    for (std::size_t d = 1; d < n; ++d) {
      ALPASIM_RETURN_IF_ERROR(check(cudaStreamWaitEvent(streams_[d], start_, 0), "cudaStreamWaitEvent"));
    }
    std::vector<std::size_t> pc(n, 0);
    std::vector<std::vector<std::pair<cudaEvent_t, cudaEvent_t>>> ev(n);
    bool finished = false;
    while (!finished) {
      bool progress = false;
      finished = true;
      for (std::size_t d = 0; d < n; ++d) {
        while (pc[d] < p_.code[d].size()) {
          const std::size_t i = pc[d];
          cudaEvent_t a = nullptr, b = nullptr;
          if (timed_) {
            ALPASIM_RETURN_IF_ERROR(check(cudaEventCreate(&a), "cudaEventCreate"));
            ALPASIM_RETURN_IF_ERROR(check(cudaEventRecord(a, streams_[d]), "cudaEventRecord"));
          }
          bool issued = false;
          const auto host0 = profile_host_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
          core::Status st = issue(d, i, record, &issued);
          if (issued && profile_host_) charge_host_time(d, i, std::chrono::steady_clock::now() - host0);
          if (!st.ok()) return st.with_context(describe(p_, d, i));
          if (!issued) {
            if (a) cudaEventDestroy(a);
            break;
          }
          if (timed_) {
            ALPASIM_RETURN_IF_ERROR(check(cudaEventCreate(&b), "cudaEventCreate"));
            ALPASIM_RETURN_IF_ERROR(check(cudaEventRecord(b, streams_[d]), "cudaEventRecord"));
            ev[d].push_back({a, b});
          }
          ++pc[d];
          progress = true;
        }
        if (pc[d] < p_.code[d].size()) finished = false;
      }
      if (!finished && !progress) {
        std::string msg = "deadlock in the host issue loop:";
        for (std::size_t d = 0; d < n; ++d) {
          if (pc[d] < p_.code[d].size()) msg += " " + describe(p_, d, pc[d]) + " waits;";
        }
        return core::internal_error(msg);
      }
    }
    // Wait for the GPU with a deadline (async errors surface here), never hang.
    const auto issued_at = std::chrono::steady_clock::now();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (std::size_t d = 0; d < n; ++d) {
      for (;;) {
        const cudaError_t q = cudaStreamQuery(streams_[d]);
        if (q == cudaSuccess) break;
        if (q != cudaErrorNotReady) return check(q, "device " + std::to_string(p_.devices[d]) + " stream");
        if (std::chrono::steady_clock::now() > deadline) {
          return core::unavailable("device " + std::to_string(p_.devices[d]) + ": timed out after " +
                                   std::to_string(timeout_s) + " s waiting for the GPU");
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    finished_at_ = std::chrono::steady_clock::now();
    gpu_wait_s_ = std::chrono::duration<double>(finished_at_ - issued_at).count();
    for (std::size_t d = 0; d < n; ++d) {
      for (std::size_t k = 0; k < ev[d].size(); ++k) {
        float t0 = 0, t1 = 0;
        ALPASIM_RETURN_IF_ERROR(check(cudaEventElapsedTime(&t0, start_, ev[d][k].first), "cudaEventElapsedTime"));
        ALPASIM_RETURN_IF_ERROR(check(cudaEventElapsedTime(&t1, start_, ev[d][k].second), "cudaEventElapsedTime"));
        if (timings) {
          timings->push_back({static_cast<std::int32_t>(d), static_cast<std::int32_t>(k),
                              static_cast<std::int64_t>(static_cast<double>(t0) * 1e6),
                              static_cast<std::int64_t>(static_cast<double>(t1) * 1e6)});
        }
        cudaEventDestroy(ev[d][k].first);
        cudaEventDestroy(ev[d][k].second);
      }
    }
    cudaEventDestroy(start_);
    return core::ok_status();
  }

  /// Host time spent issuing instructions (s; recorded with ALPASIM_EXEC_HOST_PROFILE only),
  /// and waiting for the GPU after the last one. A short wait says the GPU kept up with the
  /// host, not which of them was the bottleneck: when the launch queue is full, issuing
  /// blocks, so a GPU-bound iteration also shows an issue time close to its wall time. The
  /// trace (each instruction's CUDA events) tells them apart: a busy GPU has no gaps.
  double host_issue_s() const {
    double t = 0;
    for (const auto& [key, v] : host_by_kind_) t += v.first;
    return t;
  }
  double gpu_wait_s() const { return gpu_wait_s_; }
  /// When the GPU finished the iteration's work (before its event times are read: reading
  /// tens of thousands of them took a second of host time on GPT 1.3B, not part of the
  /// iteration).
  std::chrono::steady_clock::time_point finished_at() const { return finished_at_; }
  /// "kind or op function: count, host seconds" lines, largest first.
  std::string host_profile() const {
    std::vector<std::pair<double, std::string>> rows;
    for (const auto& [key, v] : host_by_kind_) {
      char line[160];
      std::snprintf(line, sizeof line, "  %-28s %8lld calls %10.4f s host\n", key.c_str(), static_cast<long long>(v.second), v.first);
      rows.push_back({v.first, line});
    }
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::string out;
    for (const auto& r : rows) out += r.second;
    return out;
  }

 private:
  void charge_host_time(std::size_t d, std::size_t i, std::chrono::steady_clock::duration t) {
    const Instruction& in = p_.code[d][i];
    std::string key(instr_kind_name(in.kind));
    if (in.kind == InstrKind::kRun && in.op != ir::kNoOp && in.stage >= 0) {
      const ir::Op& op = p_.graph_of_stage(in.stage).op(in.op);
      key += " " + (op.function.empty() ? std::string(ir::op_kind_name(op.kind)) : op.function);
    }
    auto& slot = host_by_kind_[key];
    slot.first += std::chrono::duration<double>(t).count();
    slot.second += 1;
  }
  float* ptr(BufferId b) { return ops_.ptr(b); }
  const Buffer& buf(BufferId b) { return ops_.buf(b); }
  core::Status alloc(float** out, i64 elements, cudaStream_t s) { return ops_.alloc(out, elements, s); }

  core::Status issue(std::size_t d, std::size_t i, ExecutionResult* record, bool* issued) {
    const Instruction& in = p_.code[d][i];
    cudaStream_t s = streams_[d];
    *issued = true;
    switch (in.kind) {
      case InstrKind::kAllocate: return ops_.allocate(in.buffer, s);
      case InstrKind::kFree: {
        if (record && ops_.reported(d, buf(in.buffer), report_values_)) {
          ALPASIM_RETURN_IF_ERROR(ops_.save(buf(in.buffer), record, &losses_, &blocks_, s));
          ALPASIM_RETURN_IF_ERROR(check(cudaStreamSynchronize(s), "cudaStreamSynchronize"));
        }
        return ops_.release(in.buffer, s);
      }
      case InstrKind::kRun: return ops_.run_op(in, s);
      case InstrKind::kSend: {
        Mail m;
        ALPASIM_RETURN_IF_ERROR(alloc(&m.staging, in.count_elements, s));
        ALPASIM_RETURN_IF_ERROR(check(cudaMemcpyAsync(m.staging, ptr(in.buffer) + in.offset_elements,
                                                      static_cast<std::size_t>(in.count_elements) * 4,
                                                      cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync"));
        ALPASIM_RETURN_IF_ERROR(check(cudaEventCreateWithFlags(&m.ready, cudaEventDisableTiming), "cudaEventCreate"));
        ALPASIM_RETURN_IF_ERROR(check(cudaEventRecord(m.ready, s), "cudaEventRecord"));
        mail_[in.tag] = m;
        return core::ok_status();
      }
      case InstrKind::kRecv: {
        auto it = mail_.find(in.tag);
        if (it == mail_.end()) {
          *issued = false;
          return core::ok_status();
        }
        ALPASIM_RETURN_IF_ERROR(check(cudaStreamWaitEvent(s, it->second.ready, 0), "cudaStreamWaitEvent"));
        ALPASIM_RETURN_IF_ERROR(check(cudaMemcpyAsync(ptr(in.buffer) + in.offset_elements, it->second.staging,
                                                      static_cast<std::size_t>(in.count_elements) * 4,
                                                      cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync"));
        ALPASIM_RETURN_IF_ERROR(check(cudaFreeAsync(it->second.staging, s), "cudaFreeAsync"));
        cudaEventDestroy(it->second.ready);  // released once the GPU passes it
        mail_.erase(it);
        return core::ok_status();
      }
      default:
        if (launch::is_reshard(in)) return reshard(d, i, in, issued);
        return collective(d, in, issued);
    }
  }

  /// The lead stream waits for every member's stream (its work up to the collective).
  core::Status join(const std::vector<std::int32_t>& group, cudaStream_t lead) {
    for (std::int32_t m : group) {
      cudaEvent_t e = nullptr;
      ALPASIM_RETURN_IF_ERROR(check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
      ALPASIM_RETURN_IF_ERROR(check(cudaEventRecord(e, streams_[static_cast<std::size_t>(m)]), "cudaEventRecord"));
      ALPASIM_RETURN_IF_ERROR(check(cudaStreamWaitEvent(lead, e, 0), "cudaStreamWaitEvent"));
      cudaEventDestroy(e);  // released once the GPU passes it
    }
    return core::ok_status();
  }

  /// Every member's stream waits for the lead stream's work so far.
  core::Status release(const std::vector<std::int32_t>& group, cudaStream_t lead) {
    cudaEvent_t done = nullptr;
    ALPASIM_RETURN_IF_ERROR(check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate"));
    ALPASIM_RETURN_IF_ERROR(check(cudaEventRecord(done, lead), "cudaEventRecord"));
    for (std::int32_t m : group) {
      ALPASIM_RETURN_IF_ERROR(check(cudaStreamWaitEvent(streams_[static_cast<std::size_t>(m)], done, 0), "cudaStreamWaitEvent"));
    }
    cudaEventDestroy(done);
    return core::ok_status();
  }

  /// A resharding copy (exec/instruction.h): once every member has arrived, the first
  /// member's stream waits for all, runs the plan's strided copies (exec/launch/reshard_plan.h:
  /// each destination element written once, from the member the CPU backend's last write
  /// takes it from) from the members' source buffers into their destination buffers, and
  /// every member waits for it. All buffers are on GPU 0, so a copy is one kernel.
  core::Status reshard(std::size_t d, std::size_t i, const Instruction& in, bool* issued) {
    Collective& c = colls_[in.collective_id];
    c.arrived.insert(static_cast<std::int32_t>(d));
    if (c.done) return core::ok_status();
    if (c.arrived.size() < in.group.size()) {
      *issued = false;
      return core::ok_status();
    }
    auto it = plans_.find(in.collective_id);
    if (it == plans_.end()) {
      ALPASIM_ASSIGN_OR_RETURN(launch::ReshardPlan plan, launch::reshard_plan(p_, d, i));
      it = plans_.emplace(in.collective_id, std::move(plan)).first;
    }
    const launch::ReshardPlan& plan = it->second;
    cudaStream_t lead = streams_[static_cast<std::size_t>(in.group[0])];
    ALPASIM_RETURN_IF_ERROR(join(in.group, lead));
    for (const launch::BoxCopy& x : plan.copies) {
      ALPASIM_RETURN_IF_ERROR(launch_box_copy(x, ptr(plan.source_buffer[static_cast<std::size_t>(x.source)]),
                                              ptr(plan.destination_buffer[static_cast<std::size_t>(x.destination)]),
                                              plan.scale, lead));
    }
    ALPASIM_RETURN_IF_ERROR(release(in.group, lead));
    c.done = true;
    return core::ok_status();
  }

  core::Status collective(std::size_t d, const Instruction& in, bool* issued) {
    // Only ALL_GATHER takes an input (a resharding copy, handled by reshard()).
    if (!in.inputs.empty()) {
      return core::unimplemented(std::string(instr_kind_name(in.kind)) +
                                 " with an input: the instruction set has no such form (exec/instruction.h)");
    }
    Collective& c = colls_[in.collective_id];
    c.arrived.insert(static_cast<std::int32_t>(d));
    if (c.done) return core::ok_status();
    if (c.arrived.size() < in.group.size()) {
      *issued = false;
      return core::ok_status();
    }
    // Everyone has arrived: the first member's stream waits on all, computes, broadcasts.
    cudaStream_t lead = streams_[static_cast<std::size_t>(in.group[0])];
    std::vector<float*> bufs;
    for (std::int32_t m : in.group) {
      cudaEvent_t e = nullptr;
      ALPASIM_RETURN_IF_ERROR(check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
      ALPASIM_RETURN_IF_ERROR(check(cudaEventRecord(e, streams_[static_cast<std::size_t>(m)]), "cudaEventRecord"));
      ALPASIM_RETURN_IF_ERROR(check(cudaStreamWaitEvent(lead, e, 0), "cudaStreamWaitEvent"));
      cudaEventDestroy(e);
      bufs.push_back(member_buffer(m, in));
    }
    const i64 n = buf(member_buffer_id(in.group[0], in)).elements;
    const auto k = static_cast<i64>(in.group.size());
    const i64 chunk = n / k;
    float* tmp = nullptr;
    ALPASIM_RETURN_IF_ERROR(alloc(&tmp, n * k, lead));
    // tmp holds one result per member (row r for member r).
    for (i64 r = 0; r < k; ++r) {
      float* row = tmp + r * n;
      ALPASIM_RETURN_IF_ERROR(check(cudaMemcpyAsync(row, bufs[static_cast<std::size_t>(r)], static_cast<std::size_t>(n) * 4,
                                                    cudaMemcpyDeviceToDevice, lead), "cudaMemcpyAsync"));
      for (i64 j = 0; j < k; ++j) {
        float* src = bufs[static_cast<std::size_t>(j)];
        switch (in.kind) {
          case InstrKind::kAllReduce:
            if (j == 0) ALPASIM_RETURN_IF_ERROR(check(kernels::fill(row, 0.0f, n, lead), "fill"));
            ALPASIM_RETURN_IF_ERROR(check(kernels::axpby(row, 1.0f, src, static_cast<float>(in.scale), n, n, lead), "axpby"));
            break;
          case InstrKind::kAllGather:
            ALPASIM_RETURN_IF_ERROR(check(cudaMemcpyAsync(row + j * chunk, src + j * chunk, static_cast<std::size_t>(chunk) * 4,
                                                          cudaMemcpyDeviceToDevice, lead), "cudaMemcpyAsync"));
            break;
          case InstrKind::kReduceScatter:
            if (j == 0) ALPASIM_RETURN_IF_ERROR(check(kernels::fill(row + r * chunk, 0.0f, chunk, lead), "fill"));
            ALPASIM_RETURN_IF_ERROR(check(kernels::axpby(row + r * chunk, 1.0f, src + r * chunk, static_cast<float>(in.scale),
                                                         chunk, chunk, lead), "axpby"));
            break;
          case InstrKind::kAllToAll:
            ALPASIM_RETURN_IF_ERROR(check(cudaMemcpyAsync(row + j * chunk, src + r * chunk, static_cast<std::size_t>(chunk) * 4,
                                                          cudaMemcpyDeviceToDevice, lead), "cudaMemcpyAsync"));
            break;
          default: return core::internal_error("not a collective");
        }
      }
    }
    for (i64 r = 0; r < k; ++r) {
      ALPASIM_RETURN_IF_ERROR(check(cudaMemcpyAsync(bufs[static_cast<std::size_t>(r)], tmp + r * n, static_cast<std::size_t>(n) * 4,
                                                    cudaMemcpyDeviceToDevice, lead), "cudaMemcpyAsync"));
    }
    ALPASIM_RETURN_IF_ERROR(check(cudaFreeAsync(tmp, lead), "cudaFreeAsync"));
    cudaEvent_t done = nullptr;
    ALPASIM_RETURN_IF_ERROR(check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate"));
    ALPASIM_RETURN_IF_ERROR(check(cudaEventRecord(done, lead), "cudaEventRecord"));
    for (std::int32_t m : in.group) {
      ALPASIM_RETURN_IF_ERROR(check(cudaStreamWaitEvent(streams_[static_cast<std::size_t>(m)], done, 0), "cudaStreamWaitEvent"));
    }
    cudaEventDestroy(done);
    c.done = true;
    return core::ok_status();
  }

  /// The buffer member `m` passes to the collective `in` (found in m's program).
  BufferId member_buffer_id(std::int32_t m, const Instruction& in) {
    auto key = std::make_pair(m, in.collective_id);
    auto it = member_.find(key);
    if (it != member_.end()) return it->second;
    for (const Instruction& x : p_.code[static_cast<std::size_t>(m)]) {
      if (x.collective_id == in.collective_id && x.kind == in.kind) {
        member_[key] = x.buffer;
        return x.buffer;
      }
    }
    return kNoBuffer;
  }
  float* member_buffer(std::int32_t m, const Instruction& in) { return ptr(member_buffer_id(m, in)); }

 public:
  std::map<BufferId, std::vector<float>> losses_;
  std::vector<launch::TensorBlock> blocks_;  ///< blocks of sharded tensors (first iteration)

 private:
  const Program& p_;
  OpRunner ops_;
  const std::vector<cudaStream_t>& streams_;
  ReshardPlans& plans_;
  bool timed_;
  bool report_values_;  ///< RunOptions::report_values: gradients and parameters too, not only losses
  cudaEvent_t start_ = nullptr;
  std::map<std::int64_t, Mail> mail_;
  std::map<std::int64_t, Collective> colls_;
  std::map<std::pair<std::int32_t, std::int64_t>, BufferId> member_;
  std::map<std::string, std::pair<double, std::int64_t>> host_by_kind_;  ///< seconds, calls
  double gpu_wait_s_ = 0;
  std::chrono::steady_clock::time_point finished_at_;
  const bool profile_host_ = std::getenv("ALPASIM_EXEC_HOST_PROFILE") != nullptr;
};

}  // namespace

core::Result<ExecutionResult> run_virtual(const Program& p, const RunOptions& options) {
  ALPASIM_RETURN_IF_ERROR(check(cudaSetDevice(0), "cudaSetDevice(0)"));
  cublasHandle_t blas = nullptr;
  ALPASIM_RETURN_IF_ERROR(check(cublasCreate(&blas), "cublasCreate"));
  DnnHandle dnn;
  std::vector<cudaStream_t> streams(p.code.size(), nullptr);
  core::Status status = core::ok_status();
  for (auto& s : streams) {
    if (status.ok()) status = check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  IndexCache cache;
  ReshardPlans plans;
  ExecutionResult result;
  result.backend = "cuda";
  const int total = options.warmup_iterations + options.iterations;
  for (int it = 0; it < total && status.ok(); ++it) {
    const bool last = it == total - 1;
    Iteration iter(p, blas, dnn.get(), streams, cache, plans, last, options.report_values);
    const auto t0 = std::chrono::steady_clock::now();
    status = iter.run(it == 0 ? &result : nullptr, options.timeout_s, last ? &result.timings : nullptr);
    const auto t1 = status.ok() ? iter.finished_at() : std::chrono::steady_clock::now();
    if (status.ok()) {
      // One line per iteration on stderr (flushed: a run cut by a deadline still tells how
      // far it got and whether the host or the GPU was the bottleneck).
      if (std::getenv("ALPASIM_EXEC_HOST_PROFILE")) {
        std::fprintf(stderr, "alpa-exec cuda: iteration %d of %d: %.3f s (host issued for %.3f s, then waited %.3f s for the GPU)\n%s",
                     it + 1, total, std::chrono::duration<double>(t1 - t0).count(), iter.host_issue_s(), iter.gpu_wait_s(),
                     iter.host_profile().c_str());
      } else {
        std::fprintf(stderr, "alpa-exec cuda: iteration %d of %d: %.3f s (then waited %.3f s for the GPU)\n", it + 1, total,
                     std::chrono::duration<double>(t1 - t0).count(), iter.gpu_wait_s());
      }
      std::fflush(stderr);
    }
    if (status.ok() && it >= options.warmup_iterations) {
      result.iteration_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
    if (status.ok() && it == 0) {
      double sum = 0;
      for (const auto& [id, v] : iter.losses_) sum += v.empty() ? 0.0 : v[0];
      result.loss = iter.losses_.empty() ? 0.0 : sum / static_cast<double>(iter.losses_.size());
      for (const launch::TensorBlock& b : iter.blocks_) {
        if (status.ok()) status = launch::place_block(b, &result.gradients, &result.parameters);
      }
    }
  }
  free_index_cache(cache);
  for (auto& s : streams) {
    if (s) cudaStreamDestroy(s);
  }
  cublasDestroy(blas);
  if (!status.ok()) return status;
  return result;
}

}  // namespace alpasim::exec::cuda
