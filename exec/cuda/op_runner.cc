#include "exec/cuda/op_runner.h"

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#ifdef ALPASIM_EXEC_WITH_CUDNN
#include <cudnn.h>
#endif

#include "exec/cpu/cpu_kernels.h"
#include "exec/gemm_layout.h"
#include "exec/cuda/exec_kernels.h"
#include "exec/cuda/modes.h"

namespace alpasim::exec::cuda {
namespace {

// Fields the executor is adding to exec/instruction.h for per-operator shardings, read only
// where they exist so this file builds against both versions of the header.
template <typename I>
bool drop_bias_of(const I& x) {
  if constexpr (requires { x.drop_bias; }) return x.drop_bias;
  return false;
}
template <typename B>
bool partial_or_superseded(const B& b) {
  bool out = false;
  if constexpr (requires { b.partial; }) out = out || b.partial;
  if constexpr (requires { b.superseded; }) out = out || b.superseded;
  return out;
}

core::Status no_gpu_path(const ir::Op& op) {
  return core::unimplemented("op " + op.name + " (" + std::string(ir::op_kind_name(op.kind)) + ", function \"" +
                             op.function + "\"): the CUDA backend has no GPU path for it yet");
}

}  // namespace

core::Status check(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return core::ok_status();
  (void)cudaGetLastError();
  return core::internal_error(what + ": " + cudaGetErrorString(e));
}

core::Status check(cublasStatus_t e, const std::string& what) {
  if (e == CUBLAS_STATUS_SUCCESS) return core::ok_status();
  return core::internal_error(what + ": cuBLAS status " + std::to_string(static_cast<int>(e)));
}

std::string describe(const Program& p, std::size_t dev, std::size_t i) {
  const Instruction& in = p.code[dev][i];
  std::string s = "device " + std::to_string(p.devices[dev]) + " instruction #" + std::to_string(i) + " (" +
                  std::string(instr_kind_name(in.kind));
  if (in.op != ir::kNoOp && in.stage >= 0) s += " " + p.graph_of_stage(in.stage).op(in.op).name;
  if (in.microbatch >= 0) s += " mb" + std::to_string(in.microbatch);
  return s + ")";
}

core::Status launch_box_copy(const launch::BoxCopy& c, const float* src, float* dst, float scale, cudaStream_t s) {
  if (c.extent.size() > static_cast<std::size_t>(kernels::kMaxBoxAxes)) {
    return core::internal_error("a resharding copy with " + std::to_string(c.extent.size()) + " axes (at most " +
                                std::to_string(kernels::kMaxBoxAxes) + ")");
  }
  kernels::StridedBox box;
  box.axes = static_cast<int>(c.extent.size());
  for (std::size_t a = 0; a < c.extent.size(); ++a) {
    box.extent[a] = c.extent[a];
    box.src_stride[a] = c.src_stride[a];
    box.dst_stride[a] = c.dst_stride[a];
  }
  return check(kernels::strided_copy(dst + c.dst_offset, src + c.src_offset, box, scale, s), "strided_copy");
}

void free_index_cache(IndexCache& cache) {
  for (auto& [key, ptr] : cache) cudaFree(ptr);
  cache.clear();
}

bool have_cudnn() {
#ifdef ALPASIM_EXEC_WITH_CUDNN
  return true;
#else
  return false;
#endif
}

DnnHandle::DnnHandle() {
#ifdef ALPASIM_EXEC_WITH_CUDNN
  cudnnHandle_t h = nullptr;
  if (cudnnCreate(&h) == CUDNN_STATUS_SUCCESS) handle_ = h;
#endif
}

DnnHandle::~DnnHandle() {
#ifdef ALPASIM_EXEC_WITH_CUDNN
  if (handle_) cudnnDestroy(static_cast<cudnnHandle_t>(handle_));
#endif
}

OpRunner::OpRunner(const Program& p, cublasHandle_t blas, void* dnn, IndexCache& cache)
    : p_(p), blas_(blas), dnn_(dnn), cache_(cache), ptr_(p.buffers.size(), nullptr) {}

OpRunner::~OpRunner() = default;

core::Status OpRunner::alloc(float** out, i64 elements, cudaStream_t s) {
  void* raw = nullptr;
  ALPASIM_RETURN_IF_ERROR(check(cudaMallocAsync(&raw, static_cast<std::size_t>(std::max<i64>(1, elements)) * 4, s),
                                "cudaMallocAsync"));
  *out = static_cast<float*>(raw);
  return core::ok_status();
}

core::Status OpRunner::allocate(BufferId b, cudaStream_t s) {
  const Buffer& bb = buf(b);
  ALPASIM_RETURN_IF_ERROR(alloc(&ptr_[static_cast<std::size_t>(b)], bb.elements, s));
  return check(cudaMemsetAsync(ptr(b), 0, static_cast<std::size_t>(bb.elements) * 4, s), "cudaMemsetAsync");
}

core::Status OpRunner::release(BufferId b, cudaStream_t s) {
  ALPASIM_RETURN_IF_ERROR(check(cudaFreeAsync(ptr(b), s), "cudaFreeAsync"));
  ptr_[static_cast<std::size_t>(b)] = nullptr;
  return core::ok_status();
}

bool OpRunner::reported(std::size_t d, const Buffer& b, bool values) const {
  if (b.role == BufferRole::kLoss) return true;
  if (!values) return false;
  if (!b.global_shape.empty()) {  // a block of a sharded stage: every device's (CPU backend's rule)
    if (b.received || partial_or_superseded(b)) return false;
    return b.role == BufferRole::kParameter || b.role == BufferRole::kGradient;
  }
  if (b.stage < 0 || static_cast<std::size_t>(b.stage) >= p_.stage_devices.size()) return false;
  if (partial_or_superseded(b)) return false;  // not the optimizer's input (instruction.h)
  const auto& owners = p_.stage_devices[static_cast<std::size_t>(b.stage)];
  if (b.received || owners.empty() || static_cast<std::size_t>(owners[0]) != d) return false;
  return (b.role == BufferRole::kGradient && !b.reduce_scattered) || b.role == BufferRole::kParameter;
}

core::Status OpRunner::save(const Buffer& b, ExecutionResult* r, std::map<BufferId, std::vector<float>>* losses,
                            std::vector<launch::TensorBlock>* blocks, cudaStream_t s) {
  std::vector<float>* dst = nullptr;
  const ir::Graph& g = p_.graph_of_stage(b.stage);
  if (!b.global_shape.empty() && b.role != BufferRole::kLoss) {
    // A block: copied now (synchronously: results are read once, after the first iteration)
    // and placed into the whole tensor by the caller (launch::place_block).
    launch::TensorBlock t;
    t.gradient = b.role == BufferRole::kGradient;
    t.name = t.gradient ? g.op(p_.gradient_of[static_cast<std::size_t>(b.tensor)]).name : g.op(b.tensor).name;
    t.global_shape = b.global_shape;
    t.offset = b.block_offset.empty() ? std::vector<std::int64_t>(b.shape.size(), 0) : b.block_offset;
    t.shape = b.shape;
    t.data.resize(static_cast<std::size_t>(b.elements));
    ALPASIM_RETURN_IF_ERROR(check(cudaMemcpyAsync(t.data.data(), ptr(b.id), static_cast<std::size_t>(b.elements) * 4,
                                                  cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync"));
    ALPASIM_RETURN_IF_ERROR(check(cudaStreamSynchronize(s), "cudaStreamSynchronize"));
    blocks->push_back(std::move(t));
    return core::ok_status();
  }
  if (b.role == BufferRole::kLoss) {
    dst = &(*losses)[b.id];
  } else if (b.role == BufferRole::kGradient) {
    dst = &r->gradients[g.op(p_.gradient_of[static_cast<std::size_t>(b.tensor)]).name];
  } else if (b.role == BufferRole::kParameter) {
    dst = &r->parameters[g.op(b.tensor).name];
  }
  if (!dst) return core::ok_status();
  dst->resize(static_cast<std::size_t>(b.elements));
  return check(cudaMemcpyAsync(dst->data(), ptr(b.id), static_cast<std::size_t>(b.elements) * 4,
                               cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
}

core::Status OpRunner::index_table(const ir::Graph& g, std::int64_t key, const std::vector<std::int64_t>& host,
                                   const i64** out) {
  auto it = cache_.find({&g, key, shapes_});
  if (it == cache_.end()) {
    void* raw = nullptr;
    ALPASIM_RETURN_IF_ERROR(check(cudaMalloc(&raw, std::max<std::size_t>(1, host.size()) * sizeof(i64)), "cudaMalloc"));
    // cudaMemcpy from pageable memory may return before its DMA reaches the device, and the
    // kernels that read the table run on non-blocking streams, which do not wait for the
    // legacy stream: without the wait a kernel could read a partly copied table (the most
    // likely cause of the wide-row GPT's gradients summed into element 0 in 6 of 8 runs on an
    // H200, validation/gpu/README.md; this wait has not run on a GPU yet).
    core::Status copied = check(cudaMemcpy(raw, host.data(), host.size() * sizeof(i64), cudaMemcpyHostToDevice), "cudaMemcpy");
    if (copied.ok()) copied = check(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize");
    if (!copied.ok()) {
      cudaFree(raw);
      return copied;
    }
    it = cache_.emplace(std::make_tuple(&g, key, shapes_), static_cast<i64*>(raw)).first;
  }
  *out = it->second;
  return core::ok_status();
}

const i64* OpRunner::cached_index_table(const ir::Graph& g, std::int64_t key) const {
  const auto it = cache_.find({&g, key, shapes_});
  return it == cache_.end() ? nullptr : it->second;
}

core::Status OpRunner::einsum(const ir::Graph& g, const ir::Op& op, const std::vector<float*>& in, const std::vector<const Buffer*>& ib,
                    float* out, const Buffer& ob, cudaStream_t s) {
  const ir::DotSpec& sp = op.dot;
  if (const auto gemm = plan_strided_gemm(sp, ib[0]->shape, ib[1]->shape, ob.shape)) {
    // The operands' layouts are one strided-batched GEMM: no packing copies, no index tables.
    ALPASIM_RETURN_IF_ERROR(check(cublasSetStream(blas_, s), "cublasSetStream"));
    const float one = 1.0f, zero = 0.0f;
    const float* p = gemm->p_is_lhs ? in[0] : in[1];
    const float* q = gemm->p_is_lhs ? in[1] : in[0];
    ALPASIM_RETURN_IF_ERROR(check(
        cublasSgemmStridedBatched(blas_, gemm->trans_p ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  gemm->trans_q ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(gemm->p),
                                  static_cast<int>(gemm->q), static_cast<int>(gemm->k), &one, p,
                                  static_cast<int>(gemm->ld_p), gemm->stride_p, q, static_cast<int>(gemm->ld_q),
                                  gemm->stride_q, &zero, out, static_cast<int>(gemm->ld_x), gemm->stride_x,
                                  static_cast<int>(gemm->batch)),
        "cublasSgemmStridedBatched"));
    if (in.size() > 2) {
      ALPASIM_RETURN_IF_ERROR(check(kernels::axpby(out, 1.0f, in[2], 1.0f, ob.elements, ib[2]->elements, s), "bias"));
    }
    return core::ok_status();
  }
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
  // The three tables are made together, so the first one's presence stands for all three.
  const i64* ia = cached_index_table(g, op.id * 3);
  const i64* ibx = cached_index_table(g, op.id * 3 + 1);
  const i64* io = cached_index_table(g, op.id * 3 + 2);
  if (!ia) {
    std::vector<std::int64_t> A, Bv, O;
    for (i64 b = 0; b < nB; ++b) {
      for (i64 m = 0; m < nM; ++m) for (i64 k = 0; k < nK; ++k) A.push_back(ba[static_cast<std::size_t>(b)] + ma[static_cast<std::size_t>(m)] + ka[static_cast<std::size_t>(k)]);
      for (i64 k = 0; k < nK; ++k) for (i64 n = 0; n < nN; ++n) Bv.push_back(bb[static_cast<std::size_t>(b)] + kb[static_cast<std::size_t>(k)] + nb[static_cast<std::size_t>(n)]);
      for (i64 m = 0; m < nM; ++m) for (i64 n = 0; n < nN; ++n) O.push_back(bo[static_cast<std::size_t>(b)] + mo[static_cast<std::size_t>(m)] + no[static_cast<std::size_t>(n)]);
    }
    ALPASIM_RETURN_IF_ERROR(index_table(g, op.id * 3, A, &ia));
    ALPASIM_RETURN_IF_ERROR(index_table(g, op.id * 3 + 1, Bv, &ibx));
    ALPASIM_RETURN_IF_ERROR(index_table(g, op.id * 3 + 2, O, &io));
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

core::Status OpRunner::run_op(const Instruction& x, cudaStream_t s) {
  const ir::Graph& g = p_.graph_of_stage(x.stage);
  const ir::Op& op = g.op(x.op);
  const Buffer& ob = buf(x.buffer);
  std::vector<float*> in;
  std::vector<const Buffer*> ib;
  for (BufferId b : x.inputs) {
    in.push_back(ptr(b));
    ib.push_back(&buf(b));
  }
  if (op.kind == ir::OpKind::kDot && drop_bias_of(x) && in.size() > 2) {
    // A partial sum over a split contracted dimension: the bias is added by one device only.
    in.pop_back();
    ib.pop_back();
  }
  shapes_.clear();
  for (const Buffer* b : ib) {
    shapes_.insert(shapes_.end(), b->shape.begin(), b->shape.end());
    shapes_.push_back(-1);
  }
  shapes_.insert(shapes_.end(), ob.shape.begin(), ob.shape.end());
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
  switch (x.loss_step) {  // a cross entropy on a block of classes (exec::LossStep)
    case LossStep::kStatistics: {
      const i64 w = ib[0]->shape.back(), rows = ib[0]->elements / w;
      if (ob.shape.size() != 3 || ob.shape[1] != rows || x.loss_part < 0 || x.loss_part >= ob.shape[0]) return no_gpu_path(op);
      launch(kernels::cross_entropy_block_statistics(out + x.loss_part * rows * 2, in[0], in[1], rows, w,
                                                     first_class_of_block(p_, x), s));
      return st;
    }
    case LossStep::kCombine:
      if (ib[0]->shape.size() != 3 || ib[0]->shape[1] != ob.elements) return no_gpu_path(op);
      launch(kernels::cross_entropy_combine(out, in[0], ib[0]->shape[0], ob.elements, s));
      return st;
    case LossStep::kGradient: {
      const i64 w = ob.shape.back(), rows = ob.elements / w;
      if (in.size() != 4 || ib[3]->shape.size() != 3 || ib[3]->shape[1] != rows) return no_gpu_path(op);
      launch(kernels::cross_entropy_block_grad(out, in[0], in[1], in[2], in[3], ib[3]->shape[0], rows, w,
                                               first_class_of_block(p_, x), s));
      return st;
    }
    case LossStep::kWhole: break;
  }
  switch (op.kind) {
    case ir::OpKind::kParameter: {
      // The CPU backend's values (exec/cpu/init_values.h), drawn on the GPU: computing them on
      // the host and copying them up took seconds per iteration on billion-parameter plans,
      // time the GPU spent waiting. A block of a sharded parameter holds the whole tensor's
      // values at its indices.
      const bool block = !ob.global_shape.empty() && ob.global_shape != ob.shape;
      const init::ParameterInit pi = cpu::parameter_init(op, block ? ob.global_shape : ob.shape);
      kernels::InitBlock where;
      if (block) {
        // An empty block_offset is the origin (as OpRunner::save reads it).
        if (ob.shape.size() > static_cast<std::size_t>(kernels::kMaxBoxAxes) || ob.global_shape.size() != ob.shape.size() ||
            (!ob.block_offset.empty() && ob.block_offset.size() != ob.shape.size())) {
          return core::internal_error("op " + op.name + ": a parameter block of " + std::to_string(ob.shape.size()) +
                                      " axes with " + std::to_string(ob.block_offset.size()) + " offsets");
        }
        where.axes = static_cast<int>(ob.shape.size());
        i64 stride = 1;
        for (std::size_t a = ob.shape.size(); a-- > 0;) {
          where.shape[a] = ob.shape[a];
          where.offset[a] = ob.block_offset.empty() ? 0 : ob.block_offset[a];
          where.whole_stride[a] = stride;
          stride *= ob.global_shape[a];
        }
      }
      launch(kernels::init_parameter(out, n, pi.seed, pi.base, pi.scale, where, s));
      break;
    }
    case ir::OpKind::kInput: {
      // As the CPU backend: element i of this shard is the batch's element
      // sample_offset·(elements per sample) + i.
      const i64 per_sample = n / std::max<i64>(1, ob.shape.empty() ? 1 : ob.shape[0]);
      launch(kernels::init_input(out, n, cpu::name_hash(op.name), x.sample_offset * per_sample, op.out.is_index ? 1 : 0,
                                 p_.index_range[static_cast<std::size_t>(x.op)], s));
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
      else if (fn == "squared_relu") launch(kernels::pointwise(6, out, in[0], an, nullptr, 1, n, s));
      else if (fn == "squared_relu_grad") launch(kernels::pointwise(7, out, in[0], an, in[1], bn, n, s));
      else if (fn == "reshape" || fn == "identity" || fn == "cast") {
        launch(cudaMemcpyAsync(out, in[0], static_cast<std::size_t>(n) * 4, cudaMemcpyDeviceToDevice, s));
      } else if (fn == "ones" || fn == "dropout_mask") launch(kernels::fill(out, 1.0f, n, s));
      else if (fn == "softmax_grad") launch(kernels::softmax_grad(out, in[0], in[1], n / ob.shape.back(), ob.shape.back(), s));
      else if (fn == "softmax_cross_entropy_grad") {
        launch(kernels::cross_entropy_grad(out, in[0], in[1], in[2], n / ob.shape.back(), ob.shape.back(), s));
      } else if (fn == "broadcast") {
        const i64* dm = cached_index_table(g, -1 - op.id);
        if (!dm) {
          std::vector<std::int64_t> map;
          if (!cpu::reduction_index_map(ob.shape, ib[0]->shape, map)) return no_gpu_path(op);
          ALPASIM_RETURN_IF_ERROR(index_table(g, -1 - op.id, map, &dm));
        }
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
      } else if (fn == "norm_scale_grad" && g.op(op.source).norm == ir::NormType::kBatchNorm) {
        launch(kernels::batch_norm_scale_grad(out, in[0], in[1], ib[1]->elements / n, n, s));
      } else if (fn == "norm_scale_grad") {
        launch(kernels::layer_norm_scale_grad(out, in[0], in[1], ib[1]->elements / n, n,
                                              g.op(op.source).norm == ir::NormType::kRmsNorm, s));
      } else if (fn == "sum" || fn == "mean") {
        const i64* dm = cached_index_table(g, -1 - op.id);
        if (!dm) {
          std::vector<std::int64_t> map;
          if (!cpu::reduction_index_map(ib[0]->shape, ob.shape, map)) return no_gpu_path(op);
          ALPASIM_RETURN_IF_ERROR(index_table(g, -1 - op.id, map, &dm));
        }
        const double f = fn == "mean" ? static_cast<double>(n) / static_cast<double>(ib[0]->elements) : 1.0;
        launch(kernels::reduce_map(out, in[0], dm, f, ib[0]->elements, n, s));
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
      launch(kernels::softmax(out, in[0], n / w, w, causal ? w : 0, f.attention_window, s));
      break;
    }
    case ir::OpKind::kNorm: {
      const ir::NormType t = op.source != ir::kNoOp ? g.op(op.source).norm : op.norm;
      const i64 w = ob.shape.back();
      if (t == ir::NormType::kBatchNorm) {
        if (fn.ends_with("_grad")) launch(kernels::batch_norm_grad(out, in[0], in[1], in[2], n / w, w, s));
        else launch(kernels::batch_norm(out, in[0], in[1], in.size() > 2 ? in[2] : nullptr, n / w, w, s));
        break;
      }
      const int rms = t == ir::NormType::kRmsNorm;
      if (fn.ends_with("_grad")) launch(kernels::layer_norm_grad(out, in[0], in[1], in[2], n / w, w, rms, s));
      else launch(kernels::layer_norm(out, in[0], in[1], in.size() > 2 ? in[2] : nullptr, n / w, w, rms, s));
      break;
    }
    case ir::OpKind::kEmbedding: {
      const i64 w = ob.shape.back();
      const TableRowBlock rows = embedding_table_rows(p_, x);
      if (fn == "gather") {
        launch(kernels::embedding(out, in[0], in[1], ib[1]->elements, w, rows.first_row, rows.rows, s));
      } else if (fn == "scatter_add") {
        launch(kernels::fill(out, 0.0f, n, s));
        launch(kernels::embedding_grad(out, in[0], in[1], ib[1]->elements, w, rows.first_row, rows.rows, s));
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
    case ir::OpKind::kConv2d: st = conv(g, op, in, out, s); break;
    case ir::OpKind::kPool: {
      // The CPU backend's max pooling (exec/cpu/cpu_kernels.cc): NHWC, SAME padding.
      const bool grad = fn == "max_pool_grad";
      const ir::Op& f = grad ? g.op(op.source) : op;
      const auto& xs = grad ? ib[1]->shape : ib[0]->shape;
      if (xs.size() != 4) return no_gpu_path(op);
      const i64 H = xs[1], W = xs[2], k = f.pool_window, stride = f.pool_stride;
      const i64 ho = (H + stride - 1) / stride, wo = (W + stride - 1) / stride;
      const i64 pt = std::max<i64>((ho - 1) * stride + k - H, 0) / 2, pl = std::max<i64>((wo - 1) * stride + k - W, 0) / 2;
      if (grad) {
        launch(kernels::fill(out, 0.0f, n, s));
        launch(kernels::max_pool_grad(out, in[0], in[1], xs[0], H, W, xs[3], k, stride, pt, pl, ho, wo, s));
      } else {
        launch(kernels::max_pool(out, in[0], xs[0], H, W, xs[3], k, stride, pt, pl, ho, wo, s));
      }
      break;
    }
    default: return no_gpu_path(op);
  }
  ALPASIM_RETURN_IF_ERROR(st);
  if (x.accumulate) {
    ALPASIM_RETURN_IF_ERROR(check(kernels::axpby(ptr(x.buffer), 1.0f, tmp, 1.0f, n, n, s), "accumulate"));
    ALPASIM_RETURN_IF_ERROR(check(cudaFreeAsync(tmp, s), "cudaFreeAsync"));
  }
  return core::ok_status();
}

#ifdef ALPASIM_EXEC_WITH_CUDNN
namespace {

core::Status dnn_check(cudnnStatus_t s, const std::string& what) {
  if (s == CUDNN_STATUS_SUCCESS) return core::ok_status();
  return core::internal_error(what + ": " + cudnnGetErrorString(s));
}

/// Descriptors of one convolution, destroyed together.
struct ConvDescs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ~ConvDescs() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

/// Moves the first heuristic result whose status is success to perf[0] (the _v7 queries
/// list unusable algorithms too, with an error status).
template <typename Perf>
core::Status first_usable(Perf* perf, int found, const std::string& what) {
  for (int i = 0; i < found; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS) {
      perf[0] = perf[i];
      return core::ok_status();
    }
  }
  return core::internal_error(what + ": cuDNN offers no usable algorithm (" + std::to_string(found) + " listed)");
}

/// The algorithm and workspace cuDNN's heuristics chose for one convolution geometry and
/// direction, asked once per process: the _v7 queries and descriptor checks cost the host
/// milliseconds per call, which the GPU waited for on every convolution of every microbatch
/// (validation/gpu/README.md, run 3). The choice depends only on the geometry and the device.
struct ConvChoice {
  int algo = 0;
  std::size_t workspace_bytes = 0;
};
using ConvKey = std::array<i64, 11>;

/// cuDNN's first usable heuristic choice for one direction of a convolution: `query(perf,
/// &found)` is that direction's _v7 heuristics call (at most 8 results), `workspace(algo,
/// &bytes)` its workspace-size call.
template <typename Perf, typename Query, typename Workspace>
core::Result<ConvChoice> heuristic_choice(Query query, Workspace workspace, const std::string& what) {
  Perf perf[8];
  int found = 0;
  ALPASIM_RETURN_IF_ERROR(dnn_check(query(perf, &found), what));
  ALPASIM_RETURN_IF_ERROR(first_usable(perf, found, what));
  std::size_t bytes = 0;
  ALPASIM_RETURN_IF_ERROR(dnn_check(workspace(perf[0].algo, &bytes), what));
  return ConvChoice{static_cast<int>(perf[0].algo), bytes};
}

/// The process's choices (one per geometry and direction; a few dozen on real models).
class ConvChoices {
 public:
  static std::optional<ConvChoice> find(const ConvKey& key) {
    std::lock_guard<std::mutex> lock(mutex());
    const auto it = map().find(key);
    if (it == map().end()) return std::nullopt;
    return it->second;
  }
  static void remember(const ConvKey& key, ConvChoice c) {
    std::lock_guard<std::mutex> lock(mutex());
    map()[key] = c;
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::map<ConvKey, ConvChoice>& map() {
    static std::map<ConvKey, ConvChoice> m;
    return m;
  }
};

}  // namespace
#endif

// The CPU backend's convolution (exec/cpu/cpu_kernels.cc): NHWC activations, HWIO filter,
// SAME padding with pt = floor(total / 2) before and the rest after. cuDNN pads
// symmetrically, so when the total padding is odd (a stride-2 3x3 on an even input) the
// input is copied into an NHWC buffer one row and one column larger (zeros at the bottom and
// right) and the data gradient is cropped back: out = (H + 1 + 2·pt − k)/s + 1 = ho. The
// filter is transposed HWIO -> KRSC (cuDNN's NHWC filter layout) by an index gather.
core::Status OpRunner::conv(const ir::Graph& g, const ir::Op& op, const std::vector<float*>& in, float* out,
                            cudaStream_t s) {
#ifndef ALPASIM_EXEC_WITH_CUDNN
  (void)g; (void)in; (void)out; (void)s;
  return core::unimplemented("op " + op.name + " (conv2d): this build of the CUDA backend has no cuDNN "
                             "(cmake/FindCUDNN.cmake found none); convolution plans need it");
#else
  const ir::ConvSpec& c = op.conv;
  const i64 ho = c.out_h(), wo = c.out_w();
  const i64 tot_h = std::max<i64>((ho - 1) * c.stride + c.kh - c.h, 0), tot_w = std::max<i64>((wo - 1) * c.stride + c.kw - c.w, 0);
  const i64 pt = tot_h / 2, pl = tot_w / 2;
  const i64 hp = c.h + (tot_h - 2 * pt), wp = c.w + (tot_w - 2 * pl);  // one more when the padding is odd
  const bool padded = hp != c.h || wp != c.w;
  if (!dnn_) return core::unavailable("op " + op.name + " (conv2d): no cuDNN handle (cudnnCreate failed)");
  auto dnn = static_cast<cudnnHandle_t>(dnn_);
  ALPASIM_RETURN_IF_ERROR(dnn_check(cudnnSetStream(dnn, s), "cudnnSetStream"));
  ConvDescs d;
  const std::string what = "cuDNN convolution " + op.name;
  ALPASIM_RETURN_IF_ERROR(dnn_check(cudnnCreateTensorDescriptor(&d.x), what));
  ALPASIM_RETURN_IF_ERROR(dnn_check(cudnnCreateTensorDescriptor(&d.y), what));
  ALPASIM_RETURN_IF_ERROR(dnn_check(cudnnCreateFilterDescriptor(&d.w), what));
  ALPASIM_RETURN_IF_ERROR(dnn_check(cudnnCreateConvolutionDescriptor(&d.conv), what));
  auto I = [](i64 v) { return static_cast<int>(v); };
  ALPASIM_RETURN_IF_ERROR(dnn_check(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, I(c.n), I(c.ci), I(hp), I(wp)), what));
  ALPASIM_RETURN_IF_ERROR(dnn_check(cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, I(c.n), I(c.co), I(ho), I(wo)), what));
  ALPASIM_RETURN_IF_ERROR(dnn_check(cudnnSetFilter4dDescriptor(d.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, I(c.co), I(c.ci), I(c.kh), I(c.kw)), what));
  ALPASIM_RETURN_IF_ERROR(dnn_check(cudnnSetConvolution2dDescriptor(d.conv, I(pt), I(pl), I(c.stride), I(c.stride), 1, 1,
                                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT), what));
  // fp32 FMA, no TF32: the CPU backend's arithmetic within the GPU tests' tolerance.
  ALPASIM_RETURN_IF_ERROR(dnn_check(cudnnSetConvolutionMathType(d.conv, CUDNN_FMA_MATH), what));

  // HWIO (kh, kw, ci, co) -> KRSC (co, kh, kw, ci): krsc[i] = hwio[index[i]].
  const i64 wn = c.kh * c.kw * c.ci * c.co;
  const i64* wmap = cached_index_table(g, -(1LL << 40) - op.id);
  if (!wmap) {
    std::vector<std::int64_t> host;
    host.reserve(static_cast<std::size_t>(wn));
    for (i64 o = 0; o < c.co; ++o)
      for (i64 y = 0; y < c.kh; ++y)
        for (i64 x = 0; x < c.kw; ++x)
          for (i64 i = 0; i < c.ci; ++i) host.push_back(((y * c.kw + x) * c.ci + i) * c.co + o);
    ALPASIM_RETURN_IF_ERROR(index_table(g, -(1LL << 40) - op.id, host, &wmap));
  }
  const i64 xpn = c.n * hp * wp * c.ci;
  float* wk = nullptr;
  float* xp = nullptr;
  std::vector<float*> temps;
  auto cleanup = [&]() {
    core::Status st = core::ok_status();
    for (float* t : temps) {
      core::Status f = check(cudaFreeAsync(t, s), "cudaFreeAsync");
      if (st.ok()) st = f;
    }
    return st;
  };
  ALPASIM_RETURN_IF_ERROR(alloc(&wk, wn, s));
  temps.push_back(wk);
  const auto v = c.variant;
  const float* x_in = v == ir::ConvSpec::Variant::kGradInput ? nullptr : in[0];
  const float* w_in = v == ir::ConvSpec::Variant::kGradFilter ? nullptr : in[1];
  const float* dy = v == ir::ConvSpec::Variant::kGradInput ? in[0] : v == ir::ConvSpec::Variant::kGradFilter ? in[1] : nullptr;
  if (w_in) ALPASIM_RETURN_IF_ERROR(check(kernels::gather(wk, w_in, wmap, wn, s), "filter transpose"));
  // The (possibly padded) input, or the padded data gradient.
  const std::size_t row_b = static_cast<std::size_t>(c.w * c.ci) * 4, prow_b = static_cast<std::size_t>(wp * c.ci) * 4;
  if (padded) {
    ALPASIM_RETURN_IF_ERROR(alloc(&xp, xpn, s));
    temps.push_back(xp);
    ALPASIM_RETURN_IF_ERROR(check(cudaMemsetAsync(xp, 0, static_cast<std::size_t>(xpn) * 4, s), "cudaMemsetAsync"));
    if (x_in) {
      for (i64 n = 0; n < c.n; ++n) {
        ALPASIM_RETURN_IF_ERROR(check(cudaMemcpy2DAsync(xp + n * hp * wp * c.ci, prow_b, x_in + n * c.h * c.w * c.ci, row_b,
                                                        row_b, static_cast<std::size_t>(c.h), cudaMemcpyDeviceToDevice, s),
                                      "pad input"));
      }
    }
  }
  float* xbuf = padded ? xp : (v == ir::ConvSpec::Variant::kGradInput ? out : const_cast<float*>(x_in));
  const float one = 1.0f, zero = 0.0f;
  void* ws = nullptr;
  core::Status st = core::ok_status();
  const ConvKey key{c.n, c.ci, c.co, hp, wp, c.kh, c.kw, c.stride, pt, pl, static_cast<i64>(v)};
  std::optional<ConvChoice> choice = ConvChoices::find(key);
  if (!choice) {
    core::Result<ConvChoice> chosen = [&]() -> core::Result<ConvChoice> {
      if (v == ir::ConvSpec::Variant::kForward) {
        return heuristic_choice<cudnnConvolutionFwdAlgoPerf_t>(
            [&](auto* perf, int* found) { return cudnnGetConvolutionForwardAlgorithm_v7(dnn, d.x, d.w, d.conv, d.y, 8, found, perf); },
            [&](auto algo, std::size_t* bytes) { return cudnnGetConvolutionForwardWorkspaceSize(dnn, d.x, d.w, d.conv, d.y, algo, bytes); },
            what);
      }
      if (v == ir::ConvSpec::Variant::kGradInput) {
        return heuristic_choice<cudnnConvolutionBwdDataAlgoPerf_t>(
            [&](auto* perf, int* found) { return cudnnGetConvolutionBackwardDataAlgorithm_v7(dnn, d.w, d.y, d.conv, d.x, 8, found, perf); },
            [&](auto algo, std::size_t* bytes) { return cudnnGetConvolutionBackwardDataWorkspaceSize(dnn, d.w, d.y, d.conv, d.x, algo, bytes); },
            what);
      }
      return heuristic_choice<cudnnConvolutionBwdFilterAlgoPerf_t>(
            [&](auto* perf, int* found) { return cudnnGetConvolutionBackwardFilterAlgorithm_v7(dnn, d.x, d.y, d.conv, d.w, 8, found, perf); },
            [&](auto algo, std::size_t* bytes) { return cudnnGetConvolutionBackwardFilterWorkspaceSize(dnn, d.x, d.y, d.conv, d.w, algo, bytes); },
            what);
    }();
    if (chosen.ok()) {
      choice = *chosen;
      ConvChoices::remember(key, *choice);
    } else {
      st = chosen.status();
    }
  }
  if (st.ok() && choice->workspace_bytes > 0) st = check(cudaMallocAsync(&ws, choice->workspace_bytes, s), "cudaMallocAsync");
  if (st.ok() && v == ir::ConvSpec::Variant::kForward) {
    st = dnn_check(cudnnConvolutionForward(dnn, &one, d.x, xbuf, d.w, wk, d.conv,
                                           static_cast<cudnnConvolutionFwdAlgo_t>(choice->algo), ws,
                                           choice->workspace_bytes, &zero, d.y, out), what);
  } else if (st.ok() && v == ir::ConvSpec::Variant::kGradInput) {
    st = dnn_check(cudnnConvolutionBackwardData(dnn, &one, d.w, wk, d.y, dy, d.conv,
                                                static_cast<cudnnConvolutionBwdDataAlgo_t>(choice->algo), ws,
                                                choice->workspace_bytes, &zero, d.x, xbuf), what);
    if (st.ok() && padded) {  // crop the padded data gradient back to H x W
      for (i64 n = 0; n < c.n && st.ok(); ++n) {
        st = check(cudaMemcpy2DAsync(out + n * c.h * c.w * c.ci, row_b, xp + n * hp * wp * c.ci, prow_b, row_b,
                                     static_cast<std::size_t>(c.h), cudaMemcpyDeviceToDevice, s), "crop data gradient");
      }
    }
  } else if (st.ok()) {
    st = dnn_check(cudnnConvolutionBackwardFilter(dnn, &one, d.x, xbuf, d.y, dy, d.conv,
                                                  static_cast<cudnnConvolutionBwdFilterAlgo_t>(choice->algo), ws,
                                                  choice->workspace_bytes, &zero, d.w, wk), what);
    // KRSC -> HWIO: hwio[index[i]] = krsc[i].
    if (st.ok()) st = check(kernels::scatter(out, wk, wmap, wn, s), "filter transpose");
  }
  if (ws) {
    core::Status f = check(cudaFreeAsync(ws, s), "cudaFreeAsync");
    if (st.ok()) st = f;
  }
  core::Status f = cleanup();
  ALPASIM_RETURN_IF_ERROR(st);
  return f;
#endif
}

}  // namespace alpasim::exec::cuda
