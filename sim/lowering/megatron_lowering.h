#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/units.h"
#include "cluster/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "ir/autodiff.h"
#include "ir/graph.h"
#include "ir/model_config.h"
#include "schema/plan.h"
#include "sim/layered_problem.h"
#include "sim/pipeline_problem.h"
#include "sim/lowering/tp_overlap.h"

namespace alpasim::sim::lowering {

/// A Megatron-LM 3D-parallel plan (Narayanan et al. 2021; Korthikanti et al. 2022).
/// Device order is Megatron's: rank = stage·(tp·dp) + replica·tp + tp_rank, so a
/// tensor-parallel group is tp consecutive GPUs (inside a node when tp <= GPUs per node).
struct MegatronPlan {
  std::int64_t tp = 1;  ///< tensor-parallel size
  std::int64_t pp = 1;  ///< pipeline stages
  std::int64_t dp = 1;  ///< data-parallel replicas
  /// Context parallel (Megatron-Core --context-parallel-size): each sequence split over cp
  /// GPUs (2·cp load-balanced chunks), ring attention passing K/V chunks between them.
  /// Rank order tp, cp, dp, pp; gradients and the distributed optimizer span dp·cp.
  std::int64_t cp = 1;
  /// Expert parallelism (Megatron-Core --expert-model-parallel-size, MoE models): each GPU
  /// holds num_experts / ep experts; tokens reach them by an all-to-all over the ep group.
  /// Expert tensor parallelism (--expert-tensor-parallel-size) splits each expert's FFN
  /// width over etp GPUs; 0 = tp (Megatron-Core's default). Megatron-Core's "parallel
  /// folding": ep·etp divides tp·cp·dp, expert ranks ordered etp, ep, expert-data-parallel.
  std::int64_t ep = 1;
  std::int64_t etp = 0;
  std::int64_t microbatch_size = 1;  ///< sequences per microbatch
  std::int64_t interleave = 1;       ///< model chunks per stage (1 = plain 1F1B)
  ir::RecomputePolicy recompute = ir::RecomputePolicy::kNone;
  bool sequence_parallel = false;
  std::int64_t zero_stage = 0;  ///< 0 none; 1 optimizer states; 2 + gradients; 3 + parameters
  /// Megatron's --gradient-accumulation-fusion (2022+, APEX fused wgrad): the linear
  /// layers' weight gradients accumulate into main_grad inside the wgrad GEMM. false = the
  /// SC'21 code: a DDP hook runs main_grad.add_(grad) per parameter tensor per microbatch.
  bool gradient_accumulation_fusion = false;
  /// Megatron-Core's communication overlaps, named after its flags. The struct's defaults
  /// are the SC'21 / Korthikanti-era code this lowering was validated on (nothing
  /// overlapped); a scenario's "search.megatron" block defaults to Megatron-Core's own
  /// (docs/scenario.md).
  /// --tp-comm-overlap (Transformer Engine userbuffers; needs sequence_parallel): in each
  /// transformer block every tensor-parallel all-gather / reduce-scatter runs beside the
  /// GEMM it feeds or drains, as tp_comm_overlap_cfg says (chunked GEMMs, SMs taken by the
  /// communication; tp_overlap.h). MoE blocks: the attention's linears so, the collectives
  /// around the experts blocking. The embedding and the head (not userbuffers layers) stay
  /// blocking.
  bool tp_comm_overlap = false;
  /// --tp-comm-overlap-cfg: the userbuffers setting per GEMM; Transformer Engine's defaults
  /// unless given.
  TpOverlapConfig tp_comm_overlap_cfg;
  /// --overlap-grad-reduce: gradients are synchronised bucket by bucket during the last
  /// microbatch's backward of each model chunk instead of after it.
  bool overlap_grad_reduce = false;
  /// --overlap-param-gather (distributed optimizer, with overlap_grad_reduce): the updated
  /// parameters are all-gathered bucket by bucket behind the next iteration's forward;
  /// the first bucket and what one microbatch's forward cannot cover stay exposed.
  bool overlap_param_gather = false;
  /// --overlap-p2p-communication (interleaved schedule only, as in Megatron-Core): pipeline
  /// sends and receives run asynchronously instead of as blocking batched calls.
  bool overlap_p2p_comm = false;
  /// --ddp-bucket-size in parameters; 0: Megatron-Core's default max(4·10^7, 10^6·dp).
  std::int64_t ddp_bucket_size_params = 0;
  /// --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers: transformer
  /// blocks on the first / last pipeline stage (0: the even split); the other stages split
  /// the rest evenly. Plain 1F1B only. Llama 3 405B: 126 blocks on 16 stages as 7, 14 x 8, 7.
  std::int64_t first_stage_layers = 0;
  std::int64_t last_stage_layers = 0;
  /// --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split: the
  /// embedding (the loss) counts as one block of the first (last) model chunk, and blocks
  /// plus those split evenly into the p·v chunks (interleaving allowed). Llama 3.1 405B on
  /// p·v = 64 chunks: 126 + 2 = 64 x 2, so the first and last chunks hold one block.
  bool account_for_embedding = false;
  bool account_for_loss = false;
  /// --pipeline-model-parallel-layout (Megatron-Core): the layers of each of the p·v model
  /// chunks in virtual-pipeline order, stages separated by '|': 'E' the embedding (first
  /// chunk), 't' a transformer block, 'L' the loss and head (last chunk); "x*n" repeats a
  /// token, "(...)*n" a group. DeepSeek-V3 on 16 stages: "Et*3|(t*4|)*14t*2L" (3 + 56 + 2
  /// blocks). Empty: the even split or the flags above (which it excludes). MTP layers
  /// ('m') are refused (not modelled). parse_pipeline_layout.
  std::string pipeline_layout;
};

/// Layers per model chunk (transformer blocks, plus 1 for the embedding on the first and 1
/// for the head on the last) of a --pipeline-model-parallel-layout string for `chunks`
/// model chunks and `blocks` transformer blocks; errors name the key and what is wrong.
core::Result<std::vector<int>> parse_pipeline_layout(std::string_view layout, std::int64_t chunks,
                                                     std::int64_t blocks);

/// Blackwell's block-scaled GEMM formats (Transformer Engine's MXFP8BlockScaling and
/// NVFP4BlockScaling recipes) for the transformer blocks' linear layers of a bf16 run.
/// fp8 with one scale per tensor is TrainingSetup::dtype == kFp8.
enum class BlockScaled : std::int8_t {
  kNone,
  kMxfp8,  ///< E4M3 elements, one power-of-two (E8M0) scale per 32: the fp8 tensor-core rate
  kNvfp4,  ///< E2M1 elements, one E4M3 scale per 16 and an fp32 tensor scale: the fp4 rate
};
/// "mxfp8" / "nvfp4" -> the format; nullopt otherwise ("" and "none" are kNone).
std::optional<BlockScaled> parse_block_scaled(std::string_view name);
/// The scenario's spelling of a run's precision: the block-scaled format's name ("mxfp8",
/// "nvfp4"), else the dtype's ("fp8", "bf16", ...).
std::string precision_name(core::DType dtype, BlockScaled format);
/// fp8 and the block-scaled formats: priced by this lowering only (the evaluator of plan
/// files has no fp8 GEMM rate, casts or copies; planner/search/search.h).
bool priced_by_lowering_only(core::DType dtype, BlockScaled format);
/// Whether `gpu` has tensor cores for the precision: fp8 needs Hopper or later, the
/// block-scaled formats Blackwell. The error's message names the precision and the GPU
/// (callers prefix where the setting was read).
core::Status check_precision_on_gpu(core::DType dtype, BlockScaled format, const cluster::GpuSpec& gpu);

/// Training settings the lowering needs besides the plan.
struct TrainingSetup {
  std::int64_t global_batch_size = 0;  ///< sequences per iteration, all replicas
  core::DType dtype = core::DType::kFp16;
  ir::OptimizerKind optimizer = ir::OptimizerKind::kAdam;
  /// mxfp8 / nvfp4 GEMMs for the block linears; needs dtype kBf16 (the tensors' format).
  BlockScaled block_scaled = BlockScaled::kNone;
};

/// Counts and sizes of the tensor-parallel collectives of one layer per microbatch
/// (per GPU), as the lowering priced them. A layer without tensor parallelism has none.
struct TpCollectives {
  int forward_all_reduce = 0;      ///< forward all-reduces (row-parallel outputs)
  int backward_all_reduce = 0;     ///< backward all-reduces (column-parallel input grads)
  int forward_all_gather = 0;      ///< with sequence parallelism, instead of all-reduces
  int forward_reduce_scatter = 0;  ///< with sequence parallelism
  int backward_all_gather = 0;     ///< with sequence parallelism
  int backward_reduce_scatter = 0;  ///< with sequence parallelism
  core::Bytes bytes_each{0};  ///< full (gathered / reduced) tensor per collective
};

/// The per-layer costs (one GPU of the layer's stage, one microbatch) and how they split.
struct LoweredLayer {
  LayerCosts costs;   ///< what make_layered_problem consumes
  std::string kind;   ///< "prologue", "transformer", "epilogue", ...
  core::Seconds gemm_forward_s{0};    ///< matmul kernels of the forward
  core::Seconds gemm_backward_s{0};   ///< matmul kernels of the backward
  core::Seconds memory_bound_forward_s{0};   ///< norms, softmax, pointwise, embedding
  core::Seconds memory_bound_backward_s{0};  ///< their backward, grad_accumulation_s included
  /// Megatron's per-microbatch main_grad.add_(grad) kernels of this layer's parameters
  /// (one memory-bound kernel per tensor; see MegatronPlan::gradient_accumulation_fusion).
  core::Seconds grad_accumulation_s{0};
  core::Seconds recompute_s{0};  ///< recomputed ops (selective or full), incl. collectives
  core::Flops recompute_flops{0};  ///< matmul FLOPs of the recomputation, per GPU
  TpCollectives tp_collectives;
  /// Tensor-parallel communication hidden behind GEMMs (tp_comm_overlap), per microbatch;
  /// LayerCosts::forward_tp_comm_s / backward_tp_comm_s hold the exposed rest.
  core::Seconds tp_comm_hidden_forward_s{0};
  core::Seconds tp_comm_hidden_backward_s{0};
  /// Context parallelism: bytes one GPU sends per ring step (K and V of its chunk), and the
  /// exposed part of the exchange per microbatch (in forward_s / backward_s).
  core::Bytes cp_kv_bytes_per_step{0};
  core::Seconds cp_comm_forward_s{0};
  core::Seconds cp_comm_backward_s{0};
  /// Expert parallelism (MoE layers with ep > 1): bytes one GPU sends in one token
  /// all-to-all (dispatch or combine), and the blocking all-to-all time per microbatch:
  /// dispatch and combine in the forward, their mirrors in the backward (in forward_s /
  /// backward_s).
  core::Bytes ep_all_to_all_bytes{0};
  core::Seconds ep_comm_forward_s{0};
  core::Seconds ep_comm_backward_s{0};
};

/// A lowered plan: the simulator problem plus what the report needs to explain it.
struct LoweredPlan {
  PipelineProblem problem;  ///< collectives resolved to explicit durations; no hook
  std::vector<LoweredLayer> layers;  ///< model order: prologue, blocks, epilogue
  std::vector<int> layers_per_chunk;  ///< p·v entries
  std::int64_t num_microbatches = 0;  ///< per replica per iteration
  std::int64_t num_gpus = 0;          ///< tp·pp·cp·dp
  int grad_sync_buckets = 1;  ///< per model chunk; > 1 only with overlap_grad_reduce
  /// Seconds of one p2p send of a stage boundary (per GPU, over the network part), and
  /// the bytes each GPU puts on the wire.
  core::Seconds p2p_send_s{0};
  core::Bytes p2p_bytes{0};
  /// Human-readable modelling notes (assumptions that apply to this plan).
  std::vector<std::string> notes;
};

/// Lowers a Megatron plan of `model` on the cost model's cluster to a PipelineProblem.
/// Per layer: every matmul of the training graph priced by cost_model.gemm() with the
/// tensor-parallel shard (heads 'k', FFN 'f' and vocabulary 'v' einsum letters divided by
/// tp: column-parallel QKV/fc1 split N, row-parallel out/fc2 split K); memory-bound ops
/// by bytes/HBM (divided by tp when their tensor is sharded, and the replicated ones too
/// with sequence parallelism); tensor-parallel all-reduces (all-gather/reduce-scatter
/// with sequence parallelism) over the first stage's tp group; recomputation as the ir
/// training graph's recompute ops. Pipeline p2p over the topology's path between stages
/// (Megatron's scatter/gather: 1/tp on the wire then an NVLink all-gather), gradient sync
/// over the data-parallel group with the tp·pp groups syncing concurrently, optimizer as
/// memory-bound. Errors: INVALID_ARGUMENT naming the field when sizes do not divide or
/// do not match the cluster; UNIMPLEMENTED for models it cannot shard (wide_resnet with
/// tp > 1).
core::Result<LoweredPlan> lower_megatron_plan(const ir::ModelConfig& model,
                                              const TrainingSetup& training,
                                              const MegatronPlan& plan,
                                              const cost_model::CostModel& cost_model);

/// Lowers a plan file (schema::Plan) when it is Megatron-like: every stage has the same
/// logical mesh, no explicit operator shardings (the stage default), the same
/// weight_update_sharding (= ZeRO-1), device ids in Megatron's order and the equal
/// Megatron layer split. The mesh's columns are the tensor-parallel axis and its rows data
/// parallel; p·v stages with plan.interleave = v; schedule gpipe or 1F1B as the plan says.
/// Anything else is UNIMPLEMENTED naming the stage and field ("plan: /stages/1/...").
core::Result<LoweredPlan> lower_plan_file(const schema::Plan& plan,
                                          const cost_model::CostModel& cost_model);

/// A Megatron plan as a plan file (docs/plan.md), for every evaluator and executor of plan
/// files: p·v stages with lower_megatron_plan's layer split, logical meshes of dp rows and
/// tp columns in Megatron's device order (rank = stage·dp·tp + replica·tp + t; stage c of
/// an interleaved plan on the devices of stage c mod p), Megatron's per-operator layouts
/// (schema::megatron_operator_shardings, with sequence parallelism when the plan has it)
/// and ZeRO-1 as weight_update_sharding. The file carries the parallelism and the layouts;
/// runtime choices it has no words for (the overlaps, gradient-accumulation fusion, the
/// bucket size) are not in it. UNIMPLEMENTED for cp > 1 and zero_stage >= 2, which the
/// format cannot express yet, and for models the layouts do not cover.
core::Result<schema::Plan> megatron_plan_file(const ir::ModelConfig& model,
                                              const TrainingSetup& training,
                                              const MegatronPlan& plan,
                                              const cluster::ClusterSpec& cluster);

/// megatron_plan_file's stages without their per-operator layouts and without its checks:
/// the model chunks `layers_per_chunk` (lower_megatron_plan's LoweredPlan::layers_per_chunk),
/// Megatron's device order, sends and recomputation; each stage's mesh holds its tp·cp·dp
/// GPUs as (cp·dp) rows x tp columns. What the search reports for a Megatron point with
/// context or expert parallelism, which a plan file cannot say.
schema::Plan megatron_plan_stages(const ir::ModelConfig& model, const TrainingSetup& training,
                                  const MegatronPlan& plan, const cluster::ClusterSpec& cluster,
                                  const std::vector<int>& layers_per_chunk);

}  // namespace alpasim::sim::lowering
