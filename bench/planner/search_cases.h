#pragma once

// The Alpa paper's evaluation cases (validation/data/alpa_models.json, tables 6-8) as
// planner::SearchInput, for the search benchmark and the validation tables.

#include <cstdint>
#include <map>
#include <string>

#include "cluster/cluster_spec.h"
#include "core/check.h"
#include "cost_model/calibration.h"
#include "cost_model/cost_model.h"
#include "ir/model_config.h"
#include "planner/search/search.h"

namespace alpasim::bench {

/// Calibrated parameters of the shipped profiles (once per process).
inline const std::map<std::string, cost_model::Calibration>& shipped() {
  static const auto s = cost_model::calibrate_shipped_profiles(ALPASIM_SOURCE_DIR "/profiles").value();
  return s;
}

/// A cluster of `gpus` GPUs of `preset`: whole nodes, or one partial node below a node.
inline cluster::ClusterSpec cluster_of(const std::string& preset, std::int64_t gpus) {
  cluster::ClusterSpec one = cluster::make_preset_cluster(preset, 1).value();
  if (gpus < one.gpus_per_node) {
    one.gpus_per_node = gpus;
    return one;
  }
  return cluster::make_preset_cluster(preset, gpus / one.gpus_per_node).value();
}

inline planner::SearchInput input_for(ir::ModelConfig model, const std::string& preset,
                                      std::int64_t gpus, std::int64_t batch, core::DType dtype,
                                      const std::string& optimizer) {
  planner::SearchInput in;
  in.model = std::move(model);
  in.cluster = cluster_of(preset, gpus);
  auto params = cost_model::params_for_preset(shipped(), preset).value();
  in.cost = cost_model::CostModel::create(in.cluster, params).value();
  in.global_batch_size = batch;
  in.dtype = dtype;
  in.optimizer = optimizer;
  return in;
}

/// GPT-3 of Alpa table 6 (vocab 51200, seq 1024).
inline ir::ModelConfig gpt(const std::string& name, std::int64_t layers, std::int64_t hidden,
                           std::int64_t heads, std::int64_t seq = 1024, std::int64_t vocab = 51200) {
  return ir::gpt_model_config(name, layers, hidden, heads, seq, vocab);
}

/// GShard MoE of Alpa table 7 (experts every other layer, top-2, group 2048).
inline ir::ModelConfig moe(const std::string& name, std::int64_t layers, std::int64_t hidden,
                           std::int64_t heads, std::int64_t experts, std::int64_t ffn) {
  ir::TransformerConfig t;
  t.builtin = "moe";
  t.num_layers = layers;
  t.hidden_size = hidden;
  t.num_heads = heads;
  t.num_kv_heads = heads;
  t.seq_len = 1024;
  t.vocab_size = 32000;
  t.ffn_hidden_size = ffn;
  t.num_experts = experts;
  t.top_k = 2;
  t.moe_layer_interval = 2;
  t.expert_group_size = 2048;
  t.capacity_factor = 1.0;
  ir::set_architecture_defaults(t);
  return ir::ModelConfig{name, t};
}

/// Wide-ResNet of Alpa table 8 (224x224 images, 1000 classes).
inline ir::ModelConfig wide_resnet(const std::string& name, std::int64_t layers,
                                   std::int64_t base, std::int64_t width) {
  ir::WideResNetConfig w;
  w.num_layers = layers;
  w.base_channels = base;
  w.width_factor = width;
  w.image_size = 224;
  w.num_classes = 1000;
  return ir::ModelConfig{name, w};
}

}  // namespace alpasim::bench
