#include "schema/megatron_layouts.h"

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <variant>

namespace alpasim::schema {
namespace {

bool contains(std::string_view name, std::string_view part) {
  return name.find(part) != std::string_view::npos;
}

// The dimension of `dims` that Megatron splits over the tensor-parallel axis, from `first`
// on: the first equal to `size`, or -1.
int first_dim_of_size(const std::vector<std::int64_t>& dims, std::size_t first, std::int64_t size) {
  for (std::size_t d = first; d < dims.size(); ++d) {
    if (dims[d] == size) return static_cast<int>(d);
  }
  return -1;
}

}  // namespace

core::Result<std::vector<OperatorSharding>> megatron_operator_shardings(
    const ir::Graph& graph, const ir::ModelConfig& model, std::int64_t batch,
    std::int64_t layer_begin, std::int64_t layer_end, std::int64_t data_parallel,
    std::int64_t tensor_parallel, bool sequence_parallel) {
  const auto* t = std::get_if<ir::TransformerConfig>(&model.spec);
  if (t == nullptr || (t->builtin != "gpt" && t->builtin != "llama" && t->builtin != "nemotron") ||
      t->num_experts > 0 || t->kv_lora_rank > 0) {
    return core::unimplemented("Megatron layouts are written for the builtin \"gpt\", \"llama\" "
                               "(without multi-head latent attention) and \"nemotron\" only; " + model.name +
                               " is not one");
  }
  // Megatron splits the attention by query group (a key/value head and its queries): with
  // grouped-query attention the split dimension is the key/value heads', which tp must
  // divide (Megatron-Core asserts num_query_groups % tp == 0).
  const std::int64_t head_groups = t->num_kv_heads > 0 ? t->num_kv_heads : t->num_heads;
  if (tensor_parallel > 1 && head_groups % tensor_parallel != 0) {
    return core::unimplemented("Megatron layouts: " + std::to_string(head_groups) +
                               " key/value heads do not split over tp = " + std::to_string(tensor_parallel));
  }
  if (layer_begin < 0 || layer_end > graph.num_layers() || layer_begin >= layer_end) {
    return core::invalid_argument("Megatron layouts: layers [" + std::to_string(layer_begin) + ", " +
                                  std::to_string(layer_end) + ") are not a range of the " +
                                  std::to_string(graph.num_layers()) + " layers");
  }
  const std::int32_t head_layer = graph.num_layers() - 1;  // num_layers() scans every op
  std::vector<OperatorSharding> out;
  std::set<ir::OpId> written;
  auto in_range = [&](const ir::Op& op) { return op.layer >= layer_begin && op.layer < layer_end; };
  std::vector<const ir::Op*> ops;
  for (const ir::Op& op : graph.ops()) {
    if (!in_range(op) || op.kind == ir::OpKind::kInput) continue;
    if (op.phase == ir::Phase::kOptimizer || op.grad_role == ir::GradRole::kWeightGrad) continue;
    ops.push_back(&op);
  }
  // Weights of other layers the range reads (GPT's tied word embedding, read by the head):
  // the stage holds a copy in the owner's layout.
  const std::size_t own = ops.size();
  for (std::size_t i = 0; i < own; ++i) {
    for (ir::OpId in : ops[i]->inputs) {
      const ir::Op& w = graph.op(in);
      if (w.kind == ir::OpKind::kParameter && !in_range(w) && written.insert(w.id).second) ops.push_back(&w);
    }
  }
  std::map<ir::OpId, ShardingSpec> spec_of;  // what is written for each operator so far
  for (const ir::Op* op_ptr : ops) {
    const ir::Op& op = *op_ptr;
    const auto& dims = op.out.shape;
    const bool weight = op.kind == ir::OpKind::kParameter;
    const bool batched = !weight && dims.size() >= 2 && dims[0] == batch;
    // Activations without a batch dimension (the position lookup): Megatron replicates that
    // small work, which the intra-op pass's strategies do not price; left to it.
    if (!weight && !batched) continue;
    std::vector<std::vector<int>> axes(dims.size());
    if (batched && data_parallel > 1) axes[0].push_back(0);
    const std::size_t first = batched ? 1 : 0;
    int tp_dim = -1;
    if (contains(op.name, "/attn/")) {
      tp_dim = first_dim_of_size(dims, first, head_groups);
    } else if (contains(op.name, "/mlp/")) {
      tp_dim = first_dim_of_size(dims, first, t->ffn_hidden_size);
    } else if (op.layer == 0 ? weight : op.layer == head_layer) {
      // The word embedding's table (its position table has no vocabulary dimension) and
      // the head's logits and their cross entropy.
      tp_dim = first_dim_of_size(dims, first, t->vocab_size);
    }
    bool sequence_split = false;
    if (tp_dim < 0 && sequence_parallel && batched && dims.size() == 3 && dims[2] == t->hidden_size) {
      tp_dim = 1;  // [batch, sequence, hidden]: the sequence
      sequence_split = true;
    }
    if (tp_dim >= 0 && tensor_parallel > 1) axes[static_cast<std::size_t>(tp_dim)].push_back(1);
    OperatorSharding sh;
    sh.op = op.name;
    sh.output = ShardingSpec(std::move(axes));
    // Sequence parallelism: a column-parallel linear's input gradient (a backward GEMM from
    // the split heads or FFN columns to the sequence-split hidden state) reads its operands
    // as they were written and reduce-scatters its partial sums onto the sequence, as
    // Megatron does; left open, the pass may instead gather the weight and move the
    // gradient, which prices the same but is not what runs (and Q, K and V's three
    // reduce-scatters could not be seen as the one Megatron runs).
    if (sequence_split && tensor_parallel > 1 && op.phase == ir::Phase::kBackward && op.is_einsum() &&
        op.grad_role == ir::GradRole::kInputGrad) {
      std::vector<ShardingSpec> inputs;
      for (ir::OpId in : op.inputs) {
        auto it = spec_of.find(in);
        if (it == spec_of.end()) break;
        inputs.push_back(it->second);
      }
      if (inputs.size() == op.inputs.size()) sh.inputs = std::move(inputs);
    }
    spec_of.emplace(op.id, sh.output);
    out.push_back(std::move(sh));
  }
  return out;
}

}  // namespace alpasim::schema
