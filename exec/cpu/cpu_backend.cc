#include "exec/cpu/cpu_backend.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <tuple>

#include "core/check.h"
#include "exec/cpu/counting_allocator.h"
#include "exec/cpu/cpu_kernels.h"

namespace alpasim::exec::cpu {
namespace {

using Clock = std::chrono::steady_clock;

/// Copies the intersection of two blocks of one global tensor (row-major, offsets and
/// shapes per axis) from `src` to `dst`, times `scale`.
void copy_box(const float* src, const std::vector<std::int64_t>& soff, const std::vector<std::int64_t>& sshape,
              float* dst, const std::vector<std::int64_t>& doff, const std::vector<std::int64_t>& dshape,
              float scale) {
  const std::size_t r = soff.size();
  if (r == 0) {
    dst[0] = src[0] * scale;
    return;
  }
  std::vector<std::int64_t> lo(r), hi(r), ss(r, 1), ds(r, 1);
  for (std::size_t a = 0; a < r; ++a) {
    lo[a] = std::max(soff[a], doff[a]);
    hi[a] = std::min(soff[a] + sshape[a], doff[a] + dshape[a]);
    if (lo[a] >= hi[a]) return;
  }
  for (std::size_t a = r - 1; a-- > 0;) {
    ss[a] = ss[a + 1] * sshape[a + 1];
    ds[a] = ds[a + 1] * dshape[a + 1];
  }
  std::vector<std::int64_t> idx = lo;
  const std::int64_t run = hi[r - 1] - lo[r - 1];
  while (true) {
    std::int64_t si = 0, di = 0;
    for (std::size_t a = 0; a < r; ++a) {
      si += (idx[a] - soff[a]) * ss[a];
      di += (idx[a] - doff[a]) * ds[a];
    }
    for (std::int64_t j = 0; j < run; ++j) dst[di + j] = scale == 1.0f ? src[si + j] : src[si + j] * scale;
    std::size_t a = r - 1;
    while (a-- > 0) {
      if (++idx[a] < hi[a]) break;
      idx[a] = lo[a];
    }
    if (a == static_cast<std::size_t>(-1)) break;
  }
}

/// Offsets of a buffer's block (zeros for a whole tensor).
std::vector<std::int64_t> offsets_of(const Buffer& b) {
  return b.block_offset.empty() ? std::vector<std::int64_t>(b.shape.size(), 0) : b.block_offset;
}

/// Shared-memory communicator: a mailbox for SEND/RECV (sends never block) and a
/// three-phase rendezvous per collective (arrive, compute into a private copy, write back).
class Communicator {
 public:
  explicit Communicator(double timeout_s) : timeout_s_(timeout_s) {}

  void abort() {
    std::lock_guard lk(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

  core::Status send(int iter, std::int32_t src, std::int32_t dst, std::int64_t tag, const float* data,
                    std::int64_t n) {
    std::lock_guard lk(mu_);
    mail_[{iter, src, dst, tag}] = std::vector<float>(data, data + n);
    cv_.notify_all();
    return core::ok_status();
  }

  core::Status recv(int iter, std::int32_t src, std::int32_t dst, std::int64_t tag, float* data,
                    std::int64_t n, const std::string& who) {
    std::unique_lock lk(mu_);
    const auto key = std::make_tuple(iter, src, dst, tag);
    ALPASIM_RETURN_IF_ERROR(wait(lk, [&] { return mail_.count(key) > 0; }, who));
    auto it = mail_.find(key);
    if (static_cast<std::int64_t>(it->second.size()) != n) {
      return core::internal_error(who + ": received " + std::to_string(it->second.size()) +
                                  " elements, expected " + std::to_string(n));
    }
    std::copy(it->second.begin(), it->second.end(), data);
    mail_.erase(it);
    return core::ok_status();
  }

  /// The resharding copy (kAllGather with an input): every member fills its own block from
  /// the members' source blocks (three phases, so no source is freed while read).
  core::Status reshard(int iter, const Instruction& in, std::int32_t rank, const float* src, const Buffer& sb,
                       float* dst, const Buffer& db, const std::string& who) {
    const auto k = static_cast<std::int32_t>(in.group.size());
    std::unique_lock lk(mu_);
    Slot& s = slots_[{iter, in.collective_id}];
    s.srcs.resize(static_cast<std::size_t>(k), nullptr);
    s.metas.resize(static_cast<std::size_t>(k), nullptr);
    s.srcs[static_cast<std::size_t>(rank)] = src;
    s.metas[static_cast<std::size_t>(rank)] = &sb;
    ++s.arrived;
    cv_.notify_all();
    ALPASIM_RETURN_IF_ERROR(wait(lk, [&] { return s.arrived == k; }, who));
    lk.unlock();
    const std::vector<std::int64_t> doff = offsets_of(db);
    for (std::int32_t r = 0; r < k; ++r) {
      const Buffer& m = *s.metas[static_cast<std::size_t>(r)];
      copy_box(s.srcs[static_cast<std::size_t>(r)], offsets_of(m), m.shape, dst, doff, db.shape,
               static_cast<float>(in.scale));
    }
    lk.lock();
    ++s.computed;
    cv_.notify_all();
    ALPASIM_RETURN_IF_ERROR(wait(lk, [&] { return s.computed == k; }, who));
    if (++s.left == k) slots_.erase({iter, in.collective_id});
    return core::ok_status();
  }

  core::Status collective(int iter, const Instruction& in, std::int32_t rank, float* data,
                          std::int64_t n, const std::string& who) {
    const auto k = static_cast<std::int32_t>(in.group.size());
    const std::int64_t chunk = n / k;
    std::unique_lock lk(mu_);
    Slot& s = slots_[{iter, in.collective_id}];
    s.ptrs.resize(static_cast<std::size_t>(k), nullptr);
    s.ptrs[static_cast<std::size_t>(rank)] = data;
    ++s.arrived;
    cv_.notify_all();
    ALPASIM_RETURN_IF_ERROR(wait(lk, [&] { return s.arrived == k; }, who));
    lk.unlock();
    std::vector<float> result(data, data + n);
    switch (in.kind) {
      case InstrKind::kAllReduce:
        for (std::int64_t i = 0; i < n; ++i) {
          double sum = 0;  // rank order: deterministic
          for (float* p : s.ptrs) sum += p[i];
          result[static_cast<std::size_t>(i)] = static_cast<float>(sum * in.scale);
        }
        break;
      case InstrKind::kAllGather:
        for (std::int32_t r = 0; r < k; ++r) {
          std::copy(s.ptrs[static_cast<std::size_t>(r)] + r * chunk,
                    s.ptrs[static_cast<std::size_t>(r)] + (r + 1) * chunk, result.begin() + r * chunk);
        }
        break;
      case InstrKind::kReduceScatter:
        for (std::int64_t i = rank * chunk; i < (rank + 1) * chunk; ++i) {
          double sum = 0;
          for (float* p : s.ptrs) sum += p[i];
          result[static_cast<std::size_t>(i)] = static_cast<float>(sum * in.scale);
        }
        break;
      case InstrKind::kAllToAll:
        for (std::int32_t j = 0; j < k; ++j) {
          std::copy(s.ptrs[static_cast<std::size_t>(j)] + rank * chunk,
                    s.ptrs[static_cast<std::size_t>(j)] + (rank + 1) * chunk, result.begin() + j * chunk);
        }
        break;
      default: return core::internal_error(who + ": not a collective");
    }
    lk.lock();
    ++s.computed;
    cv_.notify_all();
    ALPASIM_RETURN_IF_ERROR(wait(lk, [&] { return s.computed == k; }, who));
    std::copy(result.begin(), result.end(), data);
    if (++s.left == k) slots_.erase({iter, in.collective_id});
    return core::ok_status();
  }

 private:
  struct Slot {
    std::vector<float*> ptrs;
    std::vector<const float*> srcs;
    std::vector<const Buffer*> metas;
    std::int32_t arrived = 0, computed = 0, left = 0;
  };

  core::Status wait(std::unique_lock<std::mutex>& lk, const std::function<bool()>& ready,
                    const std::string& who) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(timeout_s_));
    while (!ready()) {
      if (aborted_) return core::unavailable("aborted: " + who + " (another device failed)");
      if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && !ready()) {
        aborted_ = true;
        cv_.notify_all();
        return core::unavailable(who + ": timed out after " + std::to_string(timeout_s_) +
                                 " s waiting for its peers");
      }
    }
    return core::ok_status();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool aborted_ = false;
  double timeout_s_;
  std::map<std::tuple<int, std::int32_t, std::int32_t, std::int64_t>, std::vector<float>> mail_;
  std::map<std::pair<int, std::int64_t>, Slot> slots_;
};

std::string describe(const Program& p, std::size_t dev, std::size_t i) {
  const Instruction& in = p.code[dev][i];
  std::string s = "device " + std::to_string(p.devices[dev]) + " instruction #" + std::to_string(i) +
                  " (" + std::string(instr_kind_name(in.kind));
  if (in.op != ir::kNoOp && in.stage >= 0) s += " " + p.graph_of_stage(in.stage).op(in.op).name;
  if (in.microbatch >= 0) s += " mb" + std::to_string(in.microbatch);
  return s + ")";
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  core::Result<ExecutionResult> run(const Program& p, const RunOptions& options) override {
    const std::size_t n = p.code.size();
    // Host memory the run needs: every device's high-water mark of fp32 elements.
    std::int64_t need = 0;
    for (const auto& code : p.code) {
      std::int64_t now = 0, peak = 0;
      for (const Instruction& in : code) {
        if (in.kind == InstrKind::kAllocate) now += p.buffers[static_cast<std::size_t>(in.buffer)].elements * 4;
        if (in.kind == InstrKind::kFree) now -= p.buffers[static_cast<std::size_t>(in.buffer)].elements * 4;
        peak = std::max(peak, now);
      }
      need += peak;
    }
    if (need > options.host_memory_limit_bytes) {
      return core::resource_exhausted(
          "the CPU backend would need " + std::to_string(need >> 20) + " MiB of host memory for this plan (limit " +
          std::to_string(options.host_memory_limit_bytes >> 20) +
          " MiB); it runs small models (use --backend cuda, or a smaller model or batch)");
    }
    Communicator comm(options.timeout_s);
    // Every buffer's storage counts against its device: host bytes as stored (fp32) and
    // the same elements at the plan dtype; kernel scratch against the device's workspace.
    std::vector<MemoryCounter> host_mem(n), plan_mem(n), workspace_mem(n);
    std::vector<CountedFloats> data;
    data.reserve(p.buffers.size());
    for (const Buffer& b : p.buffers) {
      const auto d = static_cast<std::size_t>(b.device);
      ALPASIM_CHECK(d < n);
      data.emplace_back(CountingAllocator<float>(&host_mem[d], &plan_mem[d], b.bytes, b.elements));
    }
    std::vector<core::Status> status(n);
    ExecutionResult result;
    result.backend = name();
    std::mutex result_mu;
    std::map<BufferId, float> losses;
    std::map<std::string, BufferId> grad_from, param_from;
    const int total = options.warmup_iterations + options.iterations;
    std::vector<std::vector<InstrTiming>> timings(n);
    Clock::time_point start;
    std::vector<double> iter_s;
    int phase = 0;  // even: an iteration starts; odd: it ended
    std::barrier sync(static_cast<std::ptrdiff_t>(n), [&]() noexcept {
      const auto now = Clock::now();
      if (phase++ % 2 == 0) {
        start = now;
      } else {
        iter_s.push_back(std::chrono::duration<double>(now - start).count());
      }
    });

    const Recorder record = [&](std::size_t dev, const Buffer& b) {
      if (!options.report_values && b.role != BufferRole::kLoss) return;
      if (!b.global_shape.empty() && b.role != BufferRole::kLoss) {
        // A block of a sharded stage: every device contributes its block of the tensor.
        if (b.received || b.superseded || b.partial) return;
        if (b.role != BufferRole::kParameter && b.role != BufferRole::kGradient) return;
        const auto& v = data[static_cast<std::size_t>(b.id)];
        std::int64_t whole = 1;
        for (std::int64_t x : b.global_shape) whole *= x;
        std::lock_guard lk(result_mu);
        const std::string& name = b.role == BufferRole::kGradient
                                      ? p.graph_of_stage(b.stage).op(p.gradient_of[static_cast<std::size_t>(b.tensor)]).name
                                      : p.graph_of_stage(b.stage).op(b.tensor).name;
        auto& full = b.role == BufferRole::kGradient ? result.gradients[name] : result.parameters[name];
        full.resize(static_cast<std::size_t>(whole), 0.0f);
        copy_box(v.data(), offsets_of(b), b.shape, full.data(), std::vector<std::int64_t>(b.global_shape.size(), 0),
                 b.global_shape, 1.0f);
        return;
      }
      const auto& owners = p.stage_devices[static_cast<std::size_t>(b.stage)];
      if (b.received || owners.empty() || static_cast<std::size_t>(owners[0]) != dev) {
        if (b.role != BufferRole::kLoss) return;
      }
      const auto& v = data[static_cast<std::size_t>(b.id)];
      std::lock_guard lk(result_mu);
      const std::string& name = p.graph_of_stage(b.stage).op(b.tensor).name;
      if (b.role == BufferRole::kLoss) {
        losses[b.id] = v.empty() ? 0.0f : v[0];
      } else if (b.role == BufferRole::kGradient && !b.reduce_scattered) {
        const std::string& pname = p.graph_of_stage(b.stage).op(
            p.gradient_of[static_cast<std::size_t>(b.tensor)]).name;
        if (!grad_from.count(pname) || grad_from[pname] > b.id) {
          grad_from[pname] = b.id;
          result.gradients[pname].assign(v.begin(), v.end());
        }
      } else if (b.role == BufferRole::kParameter) {
        if (!param_from.count(name) || param_from[name] > b.id) {
          param_from[name] = b.id;
          result.parameters[name].assign(v.begin(), v.end());
        }
      }
    };

    auto device_main = [&](std::size_t dev) {
      CountedFloats scratch{CountingAllocator<float>(&workspace_mem[dev])};
      for (int iter = 0; iter < total; ++iter) {
        sync.arrive_and_wait();
        const bool measured = iter >= options.warmup_iterations;
        const bool last = iter == total - 1;
        if (status[dev].ok()) {
          status[dev] = run_device(p, dev, iter, comm, data, scratch, iter == 0 ? record : Recorder(),
                                   last && measured ? &timings[dev] : nullptr, start, workspace_mem[dev]);
          if (!status[dev].ok()) comm.abort();
        }
        sync.arrive_and_wait();
      }
    };
    std::vector<std::thread> threads;
    for (std::size_t d = 0; d < n; ++d) threads.emplace_back(device_main, d);
    for (auto& t : threads) t.join();
    // The root cause: the first failure that is not another device's abort.
    for (const auto& s : status) {
      if (!s.ok() && s.message().rfind("aborted", 0) != 0) return s;
    }
    for (const auto& s : status) {
      if (!s.ok()) return s;
    }
    double sum = 0;
    for (const auto& [id, v] : losses) sum += v;
    result.loss = losses.empty() ? 0.0 : sum / static_cast<double>(losses.size());
    for (std::size_t i = static_cast<std::size_t>(options.warmup_iterations); i < iter_s.size(); ++i) {
      result.iteration_s.push_back(iter_s[i]);
    }
    for (auto& t : timings) result.timings.insert(result.timings.end(), t.begin(), t.end());
    for (std::size_t d = 0; d < n; ++d) {
      // Every iteration frees what it allocates (verify_program), so nothing may be left.
      ALPASIM_CHECK(host_mem[d].current() == 0);
      result.measured_peak_host_bytes.push_back(host_mem[d].peak());
      result.measured_peak_plan_bytes.push_back(plan_mem[d].peak());
      result.measured_peak_workspace_bytes.push_back(workspace_mem[d].peak());
    }
    return result;
  }

 private:
  using Recorder = std::function<void(std::size_t, const Buffer&)>;

  static core::Status run_device(const Program& p, std::size_t dev, int iter, Communicator& comm,
                                 std::vector<CountedFloats>& data, CountedFloats& scratch,
                                 const Recorder& record, std::vector<InstrTiming>* timings,
                                 Clock::time_point start, MemoryCounter& workspace) {
    const auto& code = p.code[dev];
    const auto d = static_cast<std::int32_t>(dev);
    for (std::size_t i = 0; i < code.size(); ++i) {
      const Instruction& in = code[i];
      const auto t0 = Clock::now();
      auto& buf = data[static_cast<std::size_t>(in.buffer)];
      switch (in.kind) {
        case InstrKind::kAllocate:
          buf.assign(static_cast<std::size_t>(p.buffers[static_cast<std::size_t>(in.buffer)].elements), 0.0f);
          break;
        case InstrKind::kFree:
          if (record) record(dev, p.buffers[static_cast<std::size_t>(in.buffer)]);
          buf.clear();
          buf.shrink_to_fit();
          break;
        case InstrKind::kRun: {
          const ir::Graph& g = p.graph_of_stage(in.stage);
          const ir::Op& op = g.op(in.op);
          std::vector<TensorView> views;
          for (BufferId b : in.inputs) {
            auto& v = data[static_cast<std::size_t>(b)];
            views.push_back({v.data(), &p.buffers[static_cast<std::size_t>(b)].shape,
                             static_cast<std::int64_t>(v.size())});
          }
          const Buffer& ob = p.buffers[static_cast<std::size_t>(in.buffer)];
          KernelContext ctx;
          ctx.sample_offset = in.sample_offset;
          ctx.index_range = p.index_range[static_cast<std::size_t>(in.op)];
          if (op.kind == ir::OpKind::kEmbedding) {
            const TableRowBlock rows = embedding_table_rows(p, in);
            ctx.table_first_row = rows.first_row;
            ctx.table_rows = rows.rows;
          }
          ctx.loss_step = in.loss_step;
          if (in.loss_step == LossStep::kStatistics || in.loss_step == LossStep::kGradient) {
            ctx.first_class = first_class_of_block(p, in);
          }
          ctx.loss_part = std::max(0, in.loss_part);
          float* target = buf.data();
          std::int64_t target_size = static_cast<std::int64_t>(buf.size());
          if (in.count_elements > 0) {  // a slice of the parameter and its gradient
            for (std::size_t k = 0; k < 2 && k < views.size(); ++k) {
              views[k].data += in.offset_elements;
              views[k].size = in.count_elements;
            }
            target += in.offset_elements;
            target_size = in.count_elements;
          }
          if (in.accumulate) {
            scratch.assign(buf.size(), 0.0f);
            target = scratch.data();
          }
          if (in.drop_bias && !views.empty()) views.pop_back();
          CountedFloats whole{CountingAllocator<float>(&workspace)};
          if (op.kind == ir::OpKind::kParameter && !ob.global_shape.empty() && ob.global_shape != ob.shape) {
            // A block of a sharded parameter: the values are a function of the global index.
            std::int64_t total = 1;
            for (std::int64_t x : ob.global_shape) total *= x;
            whole.assign(static_cast<std::size_t>(total), 0.0f);
            core::Status st = run_cpu_kernel(g, op, views, {whole.data(), &ob.global_shape, total}, ctx);
            if (!st.ok()) return st.with_context(describe(p, dev, i));
            copy_box(whole.data(), std::vector<std::int64_t>(ob.shape.size(), 0), ob.global_shape, target,
                     ob.block_offset, ob.shape, 1.0f);
            break;
          }
          core::Status st = run_cpu_kernel(g, op, views, {target, &ob.shape, target_size}, ctx);
          if (!st.ok()) return st.with_context(describe(p, dev, i));
          if (in.accumulate) {
            for (std::size_t k = 0; k < buf.size(); ++k) buf[k] += scratch[k];
          }
          break;
        }
        case InstrKind::kSend:
          ALPASIM_RETURN_IF_ERROR(comm.send(iter, d, in.peer, in.tag, buf.data() + in.offset_elements,
                                            in.count_elements));
          break;
        case InstrKind::kRecv:
          ALPASIM_RETURN_IF_ERROR(comm.recv(iter, in.peer, d, in.tag, buf.data() + in.offset_elements,
                                            in.count_elements, describe(p, dev, i)));
          break;
        default: {
          const auto rank = static_cast<std::int32_t>(
              std::find(in.group.begin(), in.group.end(), d) - in.group.begin());
          if (in.kind == InstrKind::kAllGather && in.inputs.size() == 1) {
            const auto src = static_cast<std::size_t>(in.inputs[0]);
            if (in.group.size() == 1) {  // a local slice: no rendezvous
              const Buffer& sb = p.buffers[src];
              const Buffer& db = p.buffers[static_cast<std::size_t>(in.buffer)];
              copy_box(data[src].data(), offsets_of(sb), sb.shape, buf.data(), offsets_of(db), db.shape,
                       static_cast<float>(in.scale));
              break;
            }
            ALPASIM_RETURN_IF_ERROR(comm.reshard(iter, in, rank, data[src].data(), p.buffers[src], buf.data(),
                                                 p.buffers[static_cast<std::size_t>(in.buffer)], describe(p, dev, i)));
            break;
          }
          ALPASIM_RETURN_IF_ERROR(comm.collective(iter, in, rank, buf.data(),
                                                  static_cast<std::int64_t>(buf.size()), describe(p, dev, i)));
          break;
        }
      }
      if (timings) {
        timings->push_back({d, static_cast<std::int32_t>(i),
                            std::chrono::duration_cast<std::chrono::nanoseconds>(t0 - start).count(),
                            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count()});
      }
    }
    return core::ok_status();
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace alpasim::exec::cpu
