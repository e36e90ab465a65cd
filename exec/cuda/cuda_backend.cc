#include "exec/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "exec/cpu/cpu_kernels.h"
#include "exec/cuda/cuda_devices.h"
#include "exec/cuda/exec_kernels.h"

namespace alpasim::exec::cuda {
namespace {

using i64 = long long;

std::string describe(const Program& p, std::size_t dev, std::size_t i) {
  const Instruction& in = p.code[dev][i];
  std::string s = "device " + std::to_string(p.devices[dev]) + " instruction #" + std::to_string(i) + " (" +
                  std::string(instr_kind_name(in.kind));
  if (in.op != ir::kNoOp && in.stage >= 0) s += " " + p.graph_of_stage(in.stage).op(in.op).name;
  if (in.microbatch >= 0) s += " mb" + std::to_string(in.microbatch);
  return s + ")";
}

core::Status check(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return core::ok_status();
  (void)cudaGetLastError();
  return core::internal_error(what + ": " + cudaGetErrorString(e));
}

core::Status check(cublasStatus_t e, const std::string& what) {
  if (e == CUBLAS_STATUS_SUCCESS) return core::ok_status();
  return core::internal_error(what + ": cuBLAS status " + std::to_string(static_cast<int>(e)));
}

core::Status no_gpu_path(const ir::Op& op) {
  return core::unimplemented("op " + op.name + " (" + std::string(ir::op_kind_name(op.kind)) + ", function \"" +
                             op.function + "\"): the CUDA backend has no GPU path for it yet");
}

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
  Iteration(const Program& p, cublasHandle_t blas, const std::vector<cudaStream_t>& streams,
            std::map<std::pair<const ir::Graph*, std::int64_t>, i64*>& index_cache, bool timed)
      : p_(p), blas_(blas), streams_(streams), cache_(index_cache), timed_(timed) {}

  core::Status run(ExecutionResult* record, double timeout_s, std::vector<InstrTiming>* timings) {
    const std::size_t n = p_.code.size();
    ptr_.assign(p_.buffers.size(), nullptr);
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
          core::Status st = issue(d, i, record, &issued);
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

 private:
  float* ptr(BufferId b) { return ptr_[static_cast<std::size_t>(b)]; }
  const Buffer& buf(BufferId b) { return p_.buffers[static_cast<std::size_t>(b)]; }

  core::Status alloc(float** out, i64 elements, cudaStream_t s) {
    void* raw = nullptr;
    ALPASIM_RETURN_IF_ERROR(check(cudaMallocAsync(&raw, static_cast<std::size_t>(std::max<i64>(1, elements)) * 4, s),
                                  "cudaMallocAsync"));
    *out = static_cast<float*>(raw);
    return core::ok_status();
  }

  core::Status issue(std::size_t d, std::size_t i, ExecutionResult* record, bool* issued) {
    const Instruction& in = p_.code[d][i];
    cudaStream_t s = streams_[d];
    *issued = true;
    switch (in.kind) {
      case InstrKind::kAllocate: {
        const Buffer& b = buf(in.buffer);
        ALPASIM_RETURN_IF_ERROR(alloc(&ptr_[static_cast<std::size_t>(in.buffer)], b.elements, s));
        return check(cudaMemsetAsync(ptr(in.buffer), 0, static_cast<std::size_t>(b.elements) * 4, s), "cudaMemsetAsync");
      }
      case InstrKind::kFree: {
        if (record) ALPASIM_RETURN_IF_ERROR(save(d, buf(in.buffer), record, s));
        return check(cudaFreeAsync(ptr(in.buffer), s), "cudaFreeAsync");
      }
      case InstrKind::kRun: return run_op(in, s);
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
      default: return collective(d, in, issued);
    }
  }

  core::Status collective(std::size_t d, const Instruction& in, bool* issued) {
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

  core::Status save(std::size_t d, const Buffer& b, ExecutionResult* r, cudaStream_t s) {
    const auto& owners = p_.stage_devices[static_cast<std::size_t>(b.stage)];
    std::vector<float>* dst = nullptr;
    if (b.role == BufferRole::kLoss) {
      dst = &losses_[b.id];
    } else if (!b.received && !owners.empty() && static_cast<std::size_t>(owners[0]) == d) {
      const ir::Graph& g = p_.graph_of_stage(b.stage);
      if (b.role == BufferRole::kGradient && !b.reduce_scattered) dst = &r->gradients[g.op(p_.gradient_of[static_cast<std::size_t>(b.tensor)]).name];
      if (b.role == BufferRole::kParameter) dst = &r->parameters[g.op(b.tensor).name];
    }
    if (!dst) return core::ok_status();
    dst->resize(static_cast<std::size_t>(b.elements));
    ALPASIM_RETURN_IF_ERROR(check(cudaMemcpyAsync(dst->data(), ptr(b.id), static_cast<std::size_t>(b.elements) * 4,
                                                  cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync"));
    return check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }

  /// Device copy of an index table computed on the host, cached per (graph, key).
  core::Status index_table(const ir::Graph& g, std::int64_t key, const std::vector<std::int64_t>& host, const i64** out) {
    auto it = cache_.find({&g, key});
    if (it == cache_.end()) {
      void* raw = nullptr;
      ALPASIM_RETURN_IF_ERROR(check(cudaMalloc(&raw, std::max<std::size_t>(1, host.size()) * sizeof(i64)), "cudaMalloc"));
      ALPASIM_RETURN_IF_ERROR(check(cudaMemcpy(raw, host.data(), host.size() * sizeof(i64), cudaMemcpyHostToDevice), "cudaMemcpy"));
      it = cache_.emplace(std::make_pair(&g, key), static_cast<i64*>(raw)).first;
    }
    *out = it->second;
    return core::ok_status();
  }

  core::Status einsum(const ir::Graph& g, const ir::Op& op, const std::vector<float*>& in, const std::vector<const Buffer*>& ib,
                      float* out, const Buffer& ob, cudaStream_t s) {
    const ir::DotSpec& sp = op.dot;
    auto strides = [](const std::vector<std::int64_t>& sh) {
      std::vector<std::int64_t> st(sh.size(), 1);
      for (std::size_t i = sh.size(); i-- > 1;) st[i - 1] = st[i] * sh[i];
      return st;
    };
    const auto sa = strides(ib[0]->shape), sb = strides(ib[1]->shape), so = strides(ob.shape);
    struct L { std::int64_t size = 1, a = 0, b = 0, o = 0; };
    std::vector<L> cls[4];
    std::string seen;
    for (char c : sp.lhs + sp.rhs + sp.out) {
      if (seen.find(c) != std::string::npos) continue;
      seen += c;
      L l;
      const auto pa = sp.lhs.find(c), pb = sp.rhs.find(c), po = sp.out.find(c);
      if (pa != std::string::npos) { l.size = ib[0]->shape[pa]; l.a = sa[pa]; }
      if (pb != std::string::npos) { l.size = ib[1]->shape[pb]; l.b = sb[pb]; }
      if (po != std::string::npos) { l.size = ob.shape[po]; l.o = so[po]; }
      cls[static_cast<int>(ir::dot_dim_class(sp, c))].push_back(l);
    }
    auto offs = [](const std::vector<L>& ls, std::int64_t L::*m) {
      std::vector<std::int64_t> o{0};
      for (const L& l : ls) {
        std::vector<std::int64_t> nx;
        for (std::int64_t x : o) for (std::int64_t i = 0; i < l.size; ++i) nx.push_back(x + i * (l.*m));
        o = std::move(nx);
      }
      return o;
    };
    const auto& B = cls[0]; const auto& M = cls[1]; const auto& N = cls[2]; const auto& K = cls[3];
    const auto ba = offs(B, &L::a), bb = offs(B, &L::b), bo = offs(B, &L::o);
    const auto ma = offs(M, &L::a), mo = offs(M, &L::o), nb = offs(N, &L::b), no = offs(N, &L::o);
    const auto ka = offs(K, &L::a), kb = offs(K, &L::b);
    const i64 nB = static_cast<i64>(ba.size()), nM = static_cast<i64>(ma.size()), nN = static_cast<i64>(nb.size()),
              nK = static_cast<i64>(ka.size());
    const i64* ia = nullptr; const i64* ibx = nullptr; const i64* io = nullptr;
    if (!cache_.count({&g, op.id * 3})) {
      std::vector<std::int64_t> A, Bv, O;
      for (i64 b = 0; b < nB; ++b) {
        for (i64 m = 0; m < nM; ++m) for (i64 k = 0; k < nK; ++k) A.push_back(ba[static_cast<std::size_t>(b)] + ma[static_cast<std::size_t>(m)] + ka[static_cast<std::size_t>(k)]);
        for (i64 k = 0; k < nK; ++k) for (i64 n = 0; n < nN; ++n) Bv.push_back(bb[static_cast<std::size_t>(b)] + kb[static_cast<std::size_t>(k)] + nb[static_cast<std::size_t>(n)]);
        for (i64 m = 0; m < nM; ++m) for (i64 n = 0; n < nN; ++n) O.push_back(bo[static_cast<std::size_t>(b)] + mo[static_cast<std::size_t>(m)] + no[static_cast<std::size_t>(n)]);
      }
      ALPASIM_RETURN_IF_ERROR(index_table(g, op.id * 3, A, &ia));
      ALPASIM_RETURN_IF_ERROR(index_table(g, op.id * 3 + 1, Bv, &ibx));
      ALPASIM_RETURN_IF_ERROR(index_table(g, op.id * 3 + 2, O, &io));
    } else {
      ia = cache_.at({&g, op.id * 3});
      ibx = cache_.at({&g, op.id * 3 + 1});
      io = cache_.at({&g, op.id * 3 + 2});
    }
    float *pa = nullptr, *pb = nullptr, *pc = nullptr;
    ALPASIM_RETURN_IF_ERROR(alloc(&pa, nB * nM * nK, s));
    ALPASIM_RETURN_IF_ERROR(alloc(&pb, nB * nK * nN, s));
    ALPASIM_RETURN_IF_ERROR(alloc(&pc, nB * nM * nN, s));
    ALPASIM_RETURN_IF_ERROR(check(kernels::gather(pa, in[0], ia, nB * nM * nK, s), "gather"));
    ALPASIM_RETURN_IF_ERROR(check(kernels::gather(pb, in[1], ibx, nB * nK * nN, s), "gather"));
    ALPASIM_RETURN_IF_ERROR(check(cublasSetStream(blas_, s), "cublasSetStream"));
    const float one = 1.0f, zero = 0.0f;
    // Row-major C[M,N] = A[M,K]·B[K,N] is column-major C^T = B^T·A^T.
    ALPASIM_RETURN_IF_ERROR(check(cublasSgemmStridedBatched(blas_, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(nN), static_cast<int>(nM),
                                                            static_cast<int>(nK), &one, pb, static_cast<int>(nN), nK * nN, pa,
                                                            static_cast<int>(nK), nM * nK, &zero, pc, static_cast<int>(nN), nM * nN,
                                                            static_cast<int>(nB)), "cublasSgemmStridedBatched"));
    ALPASIM_RETURN_IF_ERROR(check(kernels::scatter(out, pc, io, nB * nM * nN, s), "scatter"));
    if (in.size() > 2) {
      ALPASIM_RETURN_IF_ERROR(check(kernels::axpby(out, 1.0f, in[2], 1.0f, ob.elements, ib[2]->elements, s), "bias"));
    }
    ALPASIM_RETURN_IF_ERROR(check(cudaFreeAsync(pa, s), "cudaFreeAsync"));
    ALPASIM_RETURN_IF_ERROR(check(cudaFreeAsync(pb, s), "cudaFreeAsync"));
    return check(cudaFreeAsync(pc, s), "cudaFreeAsync");
  }

  core::Status run_op(const Instruction& x, cudaStream_t s) {
    const ir::Graph& g = p_.graph_of_stage(x.stage);
    const ir::Op& op = g.op(x.op);
    const Buffer& ob = buf(x.buffer);
    std::vector<float*> in;
    std::vector<const Buffer*> ib;
    for (BufferId b : x.inputs) {
      in.push_back(ptr(b));
      ib.push_back(&buf(b));
    }
    float* out = ptr(x.buffer);
    if (x.count_elements > 0) {  // weight-update sharding: a slice of parameter and gradient
      in[0] += x.offset_elements;
      in[1] += x.offset_elements;
      out += x.offset_elements;
    }
    float* tmp = nullptr;
    if (x.accumulate) {
      ALPASIM_RETURN_IF_ERROR(alloc(&tmp, ob.elements, s));
      out = tmp;
    }
    const i64 n = x.count_elements > 0 ? x.count_elements : ob.elements;
    const std::string& fn = op.function;
    core::Status st = core::ok_status();
    auto launch = [&](cudaError_t e) { if (st.ok()) st = check(e, "kernel"); };
    switch (op.kind) {
      case ir::OpKind::kParameter:
      case ir::OpKind::kInput: {
        // Same values as the CPU backend: computed on the host, copied up.
        host_.emplace_back(static_cast<std::size_t>(n));
        cpu::KernelContext ctx;
        ctx.sample_offset = x.sample_offset;
        ctx.index_range = p_.index_range[static_cast<std::size_t>(x.op)];
        ALPASIM_RETURN_IF_ERROR(cpu::run_cpu_kernel(g, op, {}, {host_.back().data(), &ob.shape, n}, ctx));
        launch(cudaMemcpyAsync(out, host_.back().data(), static_cast<std::size_t>(n) * 4, cudaMemcpyHostToDevice, s));
        break;
      }
      case ir::OpKind::kDot: st = einsum(g, op, in, ib, out, ob, s); break;
      case ir::OpKind::kElementwise: {
        const auto an = in.empty() ? 0 : ib[0]->elements;
        const auto bn = in.size() > 1 ? ib[1]->elements : 0;
        if (fn == "add") launch(kernels::pointwise(0, out, in[0], an, in[1], bn, n, s));
        else if (fn == "mul") launch(kernels::pointwise(1, out, in[0], an, in[1], bn, n, s));
        else if (fn == "gelu") launch(kernels::pointwise(2, out, in[0], an, nullptr, 1, n, s));
        else if (fn == "gelu_grad") launch(kernels::pointwise(3, out, in[0], an, in[1], bn, n, s));
        else if (fn == "relu") launch(kernels::pointwise(4, out, in[0], an, nullptr, 1, n, s));
        else if (fn == "relu_grad") launch(kernels::pointwise(5, out, in[0], an, in[1], bn, n, s));
        else if (fn == "reshape" || fn == "identity" || fn == "cast") {
          launch(cudaMemcpyAsync(out, in[0], static_cast<std::size_t>(n) * 4, cudaMemcpyDeviceToDevice, s));
        } else if (fn == "ones" || fn == "dropout_mask") launch(kernels::fill(out, 1.0f, n, s));
        else if (fn == "softmax_grad") launch(kernels::softmax_grad(out, in[0], in[1], n / ob.shape.back(), ob.shape.back(), s));
        else if (fn == "softmax_cross_entropy_grad") {
          launch(kernels::cross_entropy_grad(out, in[0], in[1], in[2], n / ob.shape.back(), ob.shape.back(), s));
        } else if (fn == "broadcast") {
          std::vector<std::int64_t> map;
          if (!cpu::reduction_index_map(ob.shape, ib[0]->shape, map)) return no_gpu_path(op);
          const i64* dm = nullptr;
          ALPASIM_RETURN_IF_ERROR(index_table(g, -1 - op.id, map, &dm));
          const float f = op.source != ir::kNoOp && g.op(op.source).function == "mean"
                              ? static_cast<float>(ib[0]->elements) / static_cast<float>(n) : 1.0f;
          launch(kernels::broadcast_map(out, in[0], dm, f, n, s));
        } else {
          return no_gpu_path(op);
        }
        break;
      }
      case ir::OpKind::kReduce: {
        if (fn == "softmax_cross_entropy") {
          launch(kernels::cross_entropy(out, in[0], in[1], ib[0]->elements / ib[0]->shape.back(), ib[0]->shape.back(), s));
        } else if (fn == "norm_scale_grad" && g.op(op.source).norm != ir::NormType::kBatchNorm) {
          launch(kernels::layer_norm_scale_grad(out, in[0], in[1], ib[1]->elements / n, n,
                                                g.op(op.source).norm == ir::NormType::kRmsNorm, s));
        } else if (fn == "sum" || fn == "mean") {
          std::vector<std::int64_t> map;
          if (!cpu::reduction_index_map(ib[0]->shape, ob.shape, map)) return no_gpu_path(op);
          const i64* dm = nullptr;
          ALPASIM_RETURN_IF_ERROR(index_table(g, -1 - op.id, map, &dm));
          launch(kernels::fill(out, 0.0f, n, s));
          const float f = fn == "mean" ? static_cast<float>(n) / static_cast<float>(ib[0]->elements) : 1.0f;
          launch(kernels::reduce_map(out, in[0], dm, f, ib[0]->elements, s));
        } else {
          return no_gpu_path(op);
        }
        break;
      }
      case ir::OpKind::kSoftmax: {
        const i64 w = ob.shape.back();
        const ir::Op& f = op.source != ir::kNoOp ? g.op(op.source) : op;
        const bool causal = f.name.find("attn/softmax") != std::string::npos && ob.shape.size() >= 2 &&
                            ob.shape[ob.shape.size() - 2] == w;
        launch(kernels::softmax(out, in[0], n / w, w, causal ? w : 0, s));
        break;
      }
      case ir::OpKind::kNorm: {
        const ir::NormType t = op.source != ir::kNoOp ? g.op(op.source).norm : op.norm;
        if (t == ir::NormType::kBatchNorm) return no_gpu_path(op);
        const i64 w = ob.shape.back();
        const int rms = t == ir::NormType::kRmsNorm;
        if (fn.ends_with("_grad")) launch(kernels::layer_norm_grad(out, in[0], in[1], in[2], n / w, w, rms, s));
        else launch(kernels::layer_norm(out, in[0], in[1], in.size() > 2 ? in[2] : nullptr, n / w, w, rms, s));
        break;
      }
      case ir::OpKind::kEmbedding: {
        const i64 w = ob.shape.back();
        if (fn == "gather") {
          launch(kernels::embedding(out, in[0], in[1], ib[1]->elements, w, s));
        } else if (fn == "scatter_add") {
          launch(kernels::fill(out, 0.0f, n, s));
          launch(kernels::embedding_grad(out, in[0], in[1], ib[1]->elements, w, s));
        } else {
          return no_gpu_path(op);
        }
        break;
      }
      case ir::OpKind::kOptimizer:
        if (fn == "adam") launch(kernels::adam(out, in[1], in[2], n, s));
        else if (fn == "sgd_momentum") launch(kernels::sgd_momentum(out, in[1], in[2], n, s));
        else return no_gpu_path(op);
        break;
      default: return no_gpu_path(op);
    }
    ALPASIM_RETURN_IF_ERROR(st);
    if (x.accumulate) {
      ALPASIM_RETURN_IF_ERROR(check(kernels::axpby(ptr(x.buffer), 1.0f, tmp, 1.0f, n, n, s), "accumulate"));
      ALPASIM_RETURN_IF_ERROR(check(cudaFreeAsync(tmp, s), "cudaFreeAsync"));
    }
    return core::ok_status();
  }

 public:
  std::map<BufferId, std::vector<float>> losses_;

 private:
  const Program& p_;
  cublasHandle_t blas_;
  const std::vector<cudaStream_t>& streams_;
  std::map<std::pair<const ir::Graph*, std::int64_t>, i64*>& cache_;
  bool timed_;
  cudaEvent_t start_ = nullptr;
  std::vector<float*> ptr_;
  std::map<std::int64_t, Mail> mail_;
  std::map<std::int64_t, Collective> colls_;
  std::map<std::pair<std::int32_t, std::int64_t>, BufferId> member_;
  std::vector<std::vector<float>> host_;
};

class CudaBackend final : public Backend {
 public:
  std::string name() const override { return "cuda"; }

  core::Result<ExecutionResult> run(const Program& p, const RunOptions& options) override {
    ALPASIM_RETURN_IF_ERROR(check(cudaSetDevice(0), "cudaSetDevice(0)"));
    cublasHandle_t blas = nullptr;
    ALPASIM_RETURN_IF_ERROR(check(cublasCreate(&blas), "cublasCreate"));
    std::vector<cudaStream_t> streams(p.code.size(), nullptr);
    for (auto& s : streams) ALPASIM_RETURN_IF_ERROR(check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"));
    std::map<std::pair<const ir::Graph*, std::int64_t>, i64*> cache;
    ExecutionResult result;
    result.backend = name();
    core::Status status = core::ok_status();
    const int total = options.warmup_iterations + options.iterations;
    for (int it = 0; it < total && status.ok(); ++it) {
      const bool last = it == total - 1;
      Iteration iter(p, blas, streams, cache, last);
      const auto t0 = std::chrono::steady_clock::now();
      status = iter.run(it == 0 ? &result : nullptr, options.timeout_s, last ? &result.timings : nullptr);
      const auto t1 = std::chrono::steady_clock::now();
      if (status.ok() && it >= options.warmup_iterations) {
        result.iteration_s.push_back(std::chrono::duration<double>(t1 - t0).count());
      }
      if (status.ok() && it == 0) {
        double sum = 0;
        for (const auto& [id, v] : iter.losses_) sum += v.empty() ? 0.0 : v[0];
        result.loss = iter.losses_.empty() ? 0.0 : sum / static_cast<double>(iter.losses_.size());
      }
    }
    for (auto& [k, ptr] : cache) cudaFree(ptr);
    for (auto& s : streams) cudaStreamDestroy(s);
    cublasDestroy(blas);
    if (!status.ok()) return status;
    return result;
  }
};

}  // namespace

core::Result<std::unique_ptr<Backend>> make_cuda_backend() {
  auto devices = list_cuda_devices();
  if (!devices.ok()) return devices.status();
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>());
}

}  // namespace alpasim::exec::cuda
