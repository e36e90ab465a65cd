#include "exec/instruction.h"

#include <sstream>

#include "core/check.h"

namespace alpasim::exec {

std::string_view instr_kind_name(InstrKind kind) {
  switch (kind) {
    case InstrKind::kAllocate: return "allocate";
    case InstrKind::kFree: return "free";
    case InstrKind::kRun: return "run";
    case InstrKind::kAllReduce: return "all_reduce";
    case InstrKind::kAllGather: return "all_gather";
    case InstrKind::kReduceScatter: return "reduce_scatter";
    case InstrKind::kAllToAll: return "all_to_all";
    case InstrKind::kSend: return "send";
    case InstrKind::kRecv: return "recv";
  }
  return "?";
}

const std::vector<InstrKind>& all_instr_kinds() {
  static const std::vector<InstrKind> kinds = {
      InstrKind::kAllocate,      InstrKind::kFree,     InstrKind::kRun,
      InstrKind::kAllReduce,     InstrKind::kAllGather, InstrKind::kReduceScatter,
      InstrKind::kAllToAll,      InstrKind::kSend,     InstrKind::kRecv};
  return kinds;
}

std::string_view task_kind_name(TaskKind kind) {
  switch (kind) {
    case TaskKind::kInit: return "init";
    case TaskKind::kForward: return "forward";
    case TaskKind::kBackward: return "backward";
    case TaskKind::kOptimizer: return "optimizer";
  }
  return "?";
}

TableRowBlock embedding_table_rows(const Program& program, const Instruction& in) {
  const ir::Op& op = program.graph_of_stage(in.stage).op(in.op);
  ALPASIM_CHECK(in.kind == InstrKind::kRun && op.kind == ir::OpKind::kEmbedding)
      << "embedding_table_rows of an instruction that runs no embedding op";
  const BufferId table = op.function == "scatter_add" ? in.buffer : in.inputs.at(0);
  const Buffer& b = program.buffers.at(static_cast<std::size_t>(table));
  ALPASIM_CHECK(!b.shape.empty()) << "embedding table " << op.name << " without rows";
  return {b.block_offset.empty() ? 0 : b.block_offset[0], b.shape[0]};
}

std::int64_t first_class_of_block(const Program& program, const Instruction& in) {
  ALPASIM_CHECK(in.kind == InstrKind::kRun &&
                (in.loss_step == LossStep::kStatistics || in.loss_step == LossStep::kGradient))
      << "first_class_of_block of an instruction that runs no cross entropy on a class block";
  const BufferId logits = in.inputs.at(in.loss_step == LossStep::kStatistics ? 0 : 1);
  const Buffer& b = program.buffers.at(static_cast<std::size_t>(logits));
  return b.block_offset.empty() ? 0 : b.block_offset.back();
}

std::string_view buffer_role_name(BufferRole role) {
  switch (role) {
    case BufferRole::kParameter: return "parameters";
    case BufferRole::kGradient: return "gradients";
    case BufferRole::kOptimizerState: return "optimizer_states";
    case BufferRole::kActivation: return "activations";
    case BufferRole::kLoss: return "loss";
  }
  return "?";
}

std::string program_to_text(const Program& program) {
  std::ostringstream os;
  for (std::size_t d = 0; d < program.code.size(); ++d) {
    const auto& code = program.code[d];
    for (std::size_t i = 0; i < code.size(); ++i) {
      const Instruction& in = code[i];
      os << "dev" << program.devices[d] << " #" << i << ' ' << instr_kind_name(in.kind);
      if (in.op != ir::kNoOp && in.stage >= 0) os << ' ' << program.graph_of_stage(in.stage).op(in.op).name;
      if (in.microbatch >= 0) os << " mb" << in.microbatch;
      if (in.stage >= 0) os << " stage" << in.stage;
      if (in.buffer != kNoBuffer) os << " b" << in.buffer;
      if (!in.inputs.empty()) {
        os << " (";
        for (std::size_t k = 0; k < in.inputs.size(); ++k) os << (k ? ", b" : "b") << in.inputs[k];
        os << ')';
      }
      if (in.loss_step == LossStep::kStatistics) os << " statistics part" << in.loss_part;
      if (in.loss_step == LossStep::kCombine) os << " from statistics";
      if (in.loss_step == LossStep::kGradient) os << " with statistics";
      if (in.kind == InstrKind::kSend || in.kind == InstrKind::kRecv) {
        os << (in.kind == InstrKind::kSend ? " to dev" : " from dev")
           << program.devices[static_cast<std::size_t>(in.peer)] << " tag" << in.tag << " ["
           << in.offset_elements << "+" << in.count_elements << ']';
      }
      if (!in.group.empty()) {
        os << " group{";
        for (std::size_t k = 0; k < in.group.size(); ++k) {
          os << (k ? "," : "") << program.devices[static_cast<std::size_t>(in.group[k])];
        }
        os << "} id" << in.collective_id;
      }
      os << '\n';
    }
  }
  return os.str();
}

}  // namespace alpasim::exec
