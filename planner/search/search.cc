#include "planner/search/search.h"

#include "planner/search/searcher.h"

namespace alpasim::planner {
namespace search_detail {

core::Result<Evaluated> run_mode(Searcher& s, const std::string& mode, AlpaStats& stats,
                                 Clock::time_point start, std::string* description) {
  if (mode == "alpa") {
    ALPASIM_ASSIGN_OR_RETURN(Evaluated best, run_alpa(s, stats, start));
    // The structured partitions live in the same plan space and reuse the cached costs:
    // seeds the DP's top-K might miss (its stage model ignores cross-stage traffic, the
    // once-per-iteration gradient sync and the schedule).
    // With compare_baselines: exactly as the equal_layer / equal_operator baselines run
    // (no incumbent; microbatch sizes scanned per recompute policy until one is slower than
    // the size before, run_equal), whatever the time limit, so the searched plan is never
    // slower than those baselines in the comparison (those baselines then take the seeds'
    // answers, Searcher::equal_partition_answers). Without: at the points the DP explored, where
    // points and partitions that cannot beat `best` are skipped by their lower bounds
    // (exact). Past the time limit the seeds stay at the explored points (the deadline
    // holds).
    const bool late = std::chrono::duration<double>(Clock::now() - start).count() >
                      s.input().options.time_limit_s;
    const auto* only =
        s.input().options.compare_baselines && !late && !stats.stopped_by_budget ? nullptr
                                                                                 : &stats.explored;
    // The seeds stop at the time limit too (Searcher::deadline): what they ran is compared.
    s.deadline = Searcher::deadline_after(start, s.input().options.time_limit_s);
    for (const bool by_flops : {false, true}) {
      auto e = run_equal(s, by_flops, 0, 0, only == nullptr ? nullptr : &best, only);
      if (e.ok() && better(s, e.value(), best)) {
        stats.lines.push_back(std::string("an equal-") + (by_flops ? "operator" : "layer") +
                              " partition simulated faster than the DP's candidates");
        best = std::move(e).value();
      }
    }
    s.deadline.reset();
    if (s.interrupted) {
      s.interrupted = false;
      stats.lines.push_back("stopped by the wall clock: the equal-partition seeds were cut at the time limit (" +
                            core::format_fixed(s.input().options.time_limit_s, 3) + " s)");
    }
    return best;
  }
  if (mode == "megatron") return run_megatron(s, GridFilter{}, description);
  if (mode == "data_parallel") return run_megatron(s, GridFilter{true, true, false, 0}, description);
  if (mode == "zero2") return run_megatron(s, GridFilter{true, true, false, 2}, description);
  if (mode == "zero3") return run_megatron(s, GridFilter{true, true, false, 3}, description);
  if (mode == "inter_op_only") return run_megatron(s, GridFilter{true, false, true, 0}, description);
  if (mode == "intra_op_only") return run_equal(s, false, 1);
  if (mode == "equal_layer") return run_equal(s, false);
  if (mode == "equal_operator") return run_equal(s, true);
  if (mode == "dp_ep") {
    // Data x expert parallel (DeepSpeed-MoE / GShard style): one stage, logical mesh
    // (N/c, c) with the experts over axis 1. The expert-parallel degree c must divide both
    // the GPU count and the number of experts (48 experts on 32 GPUs: c in {1, 2, 4, 8, 16});
    // a (N, 1) mesh alone leaves no expert layout when N does not divide the experts. The
    // best c is kept (ties: the smaller c, tried first).
    const auto* transformer = std::get_if<ir::TransformerConfig>(&s.input().model.spec);
    const std::int64_t experts = transformer != nullptr ? transformer->num_experts : 0;
    Evaluated best;
    core::Status last = core::failed_precondition("no data x expert mesh matches the cluster");
    for (std::int64_t c = 1; c <= s.num_gpus(); c *= 2) {
      if (s.num_gpus() % c != 0) continue;
      if (c > 1 && (experts <= 0 || experts % c != 0)) continue;
      auto e = run_equal(s, false, 1, c);
      if (!e.ok()) {
        last = e.status();
        continue;
      }
      if (better(s, *e, best)) best = std::move(e).value();
    }
    if (!best.ok) return last;
    return best;
  }
  return core::invalid_argument("search.mode: expected one of alpa, megatron, data_parallel, zero2, "
                                "zero3, inter_op_only, intra_op_only, equal_layer, equal_operator, "
                                "dp_ep, got \"" + mode + "\"");
}

// The precision's name as a scenario spells it ("fp8", "mxfp8", "nvfp4").
std::string precision_name(const SearchInput& in) { return sim::lowering::precision_name(in.dtype, in.block_scaled); }

// "no plan fits in 75.00 GiB per GPU (80.00 GiB less the 5.00 GiB reserved ...)": how every
// no-fit error starts (sweep reports count them by it, driver/report_markdown.cc).
std::string no_plan_fits_in(const Searcher& s, const SearchInput& input) {
  std::string msg = "no plan fits in " + core::format_bytes(static_cast<std::int64_t>(s.memory_limit())) + " per GPU";
  if (!input.options.memory_limit && input.cluster.reserved_memory.value() > 0) {
    msg += " (" + core::format_bytes(input.cluster.gpu.memory.value()) + " less the " +
           core::format_bytes(input.cluster.reserved_memory.value()) +
           " reserved for the runtime, cluster.reserved_memory_gib)";
  }
  return msg;
}

core::Status check_input(const SearchInput& in, bool plan_file) {
  if (!in.cost) return core::invalid_argument("search: no cost model");
  if (!is_search_mode(in.mode)) {
    return core::invalid_argument("search.mode: expected one of alpa, megatron, data_parallel, "
                                  "zero2, zero3, inter_op_only, intra_op_only, equal_layer, "
                                  "equal_operator, dp_ep, got \"" + in.mode + "\"");
  }
  if (prices_only_by_megatron_lowering(in)) {
    if (plan_file || in.mode != "megatron") {
      return core::invalid_argument("training.dtype: " + precision_name(in) +
                                    " is priced by the Megatron lowering only: fixed Megatron plans and "
                                    "search.mode \"megatron\"; " +
                                    (plan_file ? std::string("plan files price") : "mode \"" + in.mode + "\" prices") +
                                    " fp32, fp16 or bf16");
    }
    // What the lowering would refuse on every point, said once (a what-if or capacity
    // study may move the scenario to another GPU).
    if (auto st = sim::lowering::check_precision_on_gpu(in.dtype, in.block_scaled, in.cluster.gpu); !st.ok()) {
      return core::invalid_argument("training.dtype: " + st.message());
    }
    if (!std::holds_alternative<ir::TransformerConfig>(in.model.spec)) {
      return core::invalid_argument("training.dtype: " + precision_name(in) +
                                    " is priced by the Megatron lowering, which builds transformer models only");
    }
  }
  if (in.global_batch_size <= 0) {
    return core::invalid_argument("training.global_batch_size: expected a positive integer, got " +
                                  std::to_string(in.global_batch_size));
  }
  if (in.num_microbatches && (*in.num_microbatches <= 0 ||
                              in.global_batch_size % *in.num_microbatches != 0)) {
    return core::invalid_argument("training.num_microbatches: expected a divisor of the global batch " +
                                  std::to_string(in.global_batch_size) + ", got " +
                                  std::to_string(*in.num_microbatches));
  }
  return core::Status();
}

// The plan a mode answers with, as it will be written and evaluated: the intra-op modes'
// stages get their shardings (fill_shardings) and the plan is priced as written (a
// candidate's multi-GPU stages carry per-layer memory sums, the written plan the executor's
// exact walk, fill_stage_memory), listing its communication for the trace. Times are
// unchanged (same variants), so evaluate_plan(plan) reproduces the prediction byte for
// byte; a plan whose exact memory no longer fits is reported so. The Megatron-grid modes'
// plans are already as written: priced again only to list their communication when the
// evaluator priced them (an analytic grid price stays as it is).
core::Status finish_answer(Searcher& s, const std::string& mode, Evaluated* e) {
  const bool grid = mode == "megatron" || mode == "data_parallel" || mode == "zero2" ||
                    mode == "zero3" || mode == "inter_op_only";
  if (grid && !e->by_evaluator) return core::ok_status();
  if (!grid) {
    ALPASIM_ASSIGN_OR_RETURN(Point * pt, s.point(e->plan.global_batch_size / e->plan.num_microbatches,
                                                 e->plan.recompute));
    for (std::size_t i = 0; i < e->plan.stages.size(); ++i) {
      s.fill_shardings(*pt, &e->plan.stages[i], i < e->variants.size() ? e->variants[i] : 0);
    }
  }
  s.list_collectives = true;
  auto evaluated = s.evaluate(e->plan);
  s.list_collectives = false;
  ALPASIM_ASSIGN_OR_RETURN(Evaluated exact, std::move(evaluated));
  ALPASIM_CHECK(exact.prediction.iteration_time_s == e->prediction.iteration_time_s)
      << "re-pricing the emitted " << mode << " plan changed its time: " << e->prediction.iteration_time_s
      << " s -> " << exact.prediction.iteration_time_s << " s";
  e->prediction = exact.prediction;
  e->problem = std::move(exact.problem);
  return core::ok_status();
}

void fill_explanation(Searcher& s, const Evaluated& e, SearchResult* r) {
  r->explanation.push_back("chosen: " + describe_plan(e.plan));
  r->intra_op_solves = s.solves();
  r->intra_op_queries = s.queries();
}

// The answer's Megatron point, which a plan file cannot say, and why.
void set_megatron_answer(const Evaluated& best, const std::string& why, SearchResult* result) {
  result->megatron_shape = best.megatron_shape;
  result->plan_file_unavailable = "a plan file cannot say this Megatron point (" + best.megatron_shape->to_string() +
                                  ": " + why + "): the answer is that point, priced by the Megatron lowering; a "
                                  "scenario with \"search\": {\"mode\": \"fixed\", \"megatron\": {...}} evaluates it";
}

// Mode megatron at a precision only the Megatron lowering prices (fp8, mxfp8, nvfp4): the
// grid ranked by its bounds at the storage precision (bf16: this Searcher's graphs; not
// re-scored, the evaluator pricing no such precision), then its points priced by the
// lowering at the run's precision (explore_context_and_expert_parallelism, every point,
// with cp, ep and the runtime flags where it tries them): the fastest that fits. None
// fitting: an error naming the least memory a priced point needs.
core::Result<SearchResult> search_at_lowering_precision(const SearchInput& input) {
  const auto start = Clock::now();
  SearchInput ranking = input;
  ranking.dtype = core::storage_dtype(input.dtype);
  ranking.block_scaled = sim::lowering::BlockScaled::kNone;
  ranking.options.rescore_grid = false;
  Searcher s(ranking);
  s.lowering_precision = Searcher::LoweringPrecision{input.dtype, input.block_scaled};
  AlpaStats stats;
  std::string description;
  ALPASIM_ASSIGN_OR_RETURN(Evaluated best, run_mode(s, input.mode, stats, start, &description));
  ALPASIM_CHECK(best.megatron_shape.has_value()) << "a point of the lowering without its Megatron shape";
  if (!best.prediction.fits) {
    return core::resource_exhausted(no_plan_fits_in(s, input) + "; the Megatron lowering priced the grid's points at " +
                                    precision_name(input) + ": the smallest needs " +
                                    core::format_bytes(best.prediction.peak_memory_bytes) + " (" +
                                    std::to_string(best.prediction.peak_memory_bytes) + " bytes) per GPU (" +
                                    best.megatron_shape->to_string() + ")");
  }
  SearchResult result;
  result.plan = best.plan;
  result.prediction = best.prediction;
  set_megatron_answer(best, precision_name(input) + " training", &result);
  auto resolved = sim::resolve_collectives(best.problem);
  result.problem = resolved.ok() ? std::move(resolved).value() : best.problem;
  result.explanation.push_back("mode " + input.mode + (description.empty() ? "" : ": " + description));
  result.explanation.push_back("the grid ranked at " + std::string(core::dtype_name(ranking.dtype)) +
                               " by its lower bounds; its points priced by the Megatron lowering at " +
                               precision_name(input));
  fill_explanation(s, best, &result);
  result.candidates_simulated = stats.simulated;
  result.searched_prediction = result.prediction;
  result.wall_time_s = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

}  // namespace search_detail

using namespace search_detail;

const std::vector<std::string>& search_mode_names() {
  static const std::vector<std::string> names = {
      "alpa", "megatron", "data_parallel", "zero2", "zero3", "inter_op_only",
      "intra_op_only", "equal_layer", "equal_operator", "dp_ep"};
  return names;
}

bool is_search_mode(std::string_view mode) {
  for (const auto& n : search_mode_names()) {
    if (n == mode) return true;
  }
  return false;
}

bool prices_only_by_megatron_lowering(const SearchInput& in) {
  return sim::lowering::priced_by_lowering_only(in.dtype, in.block_scaled);
}

core::Result<SearchResult> search(const SearchInput& input) {
  ALPASIM_RETURN_IF_ERROR(check_input(input, false));
  if (prices_only_by_megatron_lowering(input)) return search_at_lowering_precision(input);
  const auto start = Clock::now();
  Searcher s(input);
  AlpaStats stats;
  std::string description;
  auto chosen = run_mode(s, input.mode, stats, start, &description);
  SearchResult result;
  if (chosen.ok() && !chosen.value().prediction.fits) {
    chosen = core::Result<Evaluated>(core::resource_exhausted("no plan fits"));
  }
  if (!chosen.ok() && chosen.status().code() == core::StatusCode::kResourceExhausted) {
    // Smallest memory per device any plan of this mode needs (ranked by memory, no limit).
    // Then the Megatron grid and ZeRO-3: the first whose least-memory figure is within the
    // limit and whose search answers with a fitting plan under it is named with that plan's
    // memory, priced as its answer would be; otherwise the smaller of their least-memory
    // figures when below this mode's. (A user
    // asking for data_parallel on a model that does not fit used to read the grid's smaller
    // figure as "the smallest plan found", a figure within the limit.)
    constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::max();
    auto least_memory = [&](const std::string& m) -> std::int64_t {
      Searcher u(input);
      u.set_unlimited_memory();
      u.minimize_memory = true;
      AlpaStats unused_stats;
      std::string unused_description;
      auto e = run_mode(u, m, unused_stats, start, &unused_description);
      return e.ok() ? e.value().prediction.peak_memory_bytes : kNone;
    };
    const std::int64_t own = least_memory(input.mode);
    std::string fitting_mode, other_mode;
    std::int64_t fitting_need = kNone, other_need = kNone;
    for (const char* m : {"megatron", "zero3"}) {
      if (input.mode == m) continue;
      const std::int64_t need = least_memory(m);
      if (need < other_need) {
        other_need = need;
        other_mode = m;
      }
      // Searched under the limit only when its least-memory figure fits it (a search that
      // cannot fit is the expensive part of this path). A heuristic: the time search prices
      // more points than the least-memory ranking, so a mode whose figure is over the limit
      // may still have a fitting plan the message then does not name.
      if (need == kNone || static_cast<double>(need) > s.memory_limit()) continue;
      Searcher v(input);
      AlpaStats unused_stats;
      std::string unused_description;
      auto e = run_mode(v, m, unused_stats, start, &unused_description);
      if (e.ok() && e.value().prediction.fits) {
        fitting_mode = m;
        fitting_need = e.value().prediction.peak_memory_bytes;
        break;
      }
    }
    auto bytes_text = [](std::int64_t b) {
      return core::format_bytes(b) + " (" + std::to_string(b) + " bytes)";
    };
    std::string msg = no_plan_fits_in(s, input);
    if (own != kNone) msg += "; the smallest plan found needs " + bytes_text(own) + " per GPU";
    if (!fitting_mode.empty()) {
      msg += "; mode " + fitting_mode + " has a plan that fits, needing " + bytes_text(fitting_need) +
             " per GPU (search.mode \"" + fitting_mode + "\")";
    } else if (other_need < own) {
      msg += "; mode " + other_mode + " has one that needs " + bytes_text(other_need) + " per GPU";
    }
    return core::resource_exhausted(msg);
  }
  if (!chosen.ok()) return chosen.status();
  Evaluated best = std::move(chosen).value();
  ALPASIM_RETURN_IF_ERROR(finish_answer(s, input.mode, &best));
  result.plan = best.plan;
  result.prediction = best.prediction;
  if (best.megatron_shape) {
    set_megatron_answer(best,
                        "context or expert parallelism, the overlaps, a MoE model's layers, or an interleaving "
                        "beyond the grid's 1 and 2, which the lowering priced",
                        &result);
  }
  auto resolved = sim::resolve_collectives(best.problem);
  result.problem = resolved.ok() ? std::move(resolved).value() : best.problem;
  result.explanation.push_back("mode " + input.mode + (description.empty() ? "" : ": " + description));
  if (input.mode == "alpa") {
    result.explanation.push_back(
        std::to_string(stats.points) + " (microbatch size, recompute) points; DP: " +
        std::to_string(stats.dp_passes) + " t_max passes over " +
        std::to_string(stats.t_max_candidates) + " distinct stage latencies; " +
        std::to_string(stats.simulated) + " candidate plans simulated");
    if (s.points_pruned > 0 || s.candidates_pruned > 0) {
      result.explanation.push_back(
          "skipped by lower bounds: " + std::to_string(s.points_pruned) +
          " (microbatch size, recompute) points, " + std::to_string(s.candidates_pruned) +
          " equal-partition candidates");
    }
    for (const auto& l : stats.lines) result.explanation.push_back(l);
  }
  fill_explanation(s, best, &result);
  result.candidates_simulated = stats.simulated;
  result.searched_prediction = result.prediction;
  if (input.mode == "alpa" && input.options.compare_baselines) {
    const std::size_t num_baselines = search_mode_names().size() - 1;  // all but "alpa"
    int skipped_baselines = 0;
    // The fastest fitting baseline priced by the one evaluator and the plan it read: the
    // answer when it beats the searched plan (Evaluated::by_evaluator).
    std::optional<Evaluated> best_baseline;
    std::string best_baseline_mode, best_baseline_description;
    for (const std::string& m : search_mode_names()) {
      if (m == "alpa") continue;
      if (input.options.progress) {
        input.options.progress("baseline " + std::to_string(result.baselines.size() + 1) +
                               " of " + std::to_string(num_baselines) + ": " + m);
      }
      BaselineRow row;
      row.mode = m;
      // dp_ep is the MoE baseline; on a model without experts its only mesh, (N, 1), is a
      // data-parallel plan the other rows already cover, and on 64 GPUs it cost 18 of the
      // 39B search's 75 s (docs/validation.md). Asked for as a mode, it still runs.
      const auto* transformer = std::get_if<ir::TransformerConfig>(&input.model.spec);
      if (m == "dp_ep" && (transformer == nullptr || transformer->num_experts <= 0)) {
        row.description = "not applicable: the model has no experts";
        result.baselines.push_back(std::move(row));
        continue;
      }
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      if (elapsed > input.options.time_limit_s) {
        row.description = "skipped: the search's time limit (" +
                          core::format_fixed(input.options.time_limit_s, 3) + " s) was reached";
        ++skipped_baselines;
        result.baselines.push_back(std::move(row));
        continue;
      }
      std::string d;
      AlpaStats bs;
      // A baseline that runs into the time limit stops there and is reported as cut, not
      // with the best of its partial search.
      s.deadline = Searcher::deadline_after(start, input.options.time_limit_s);
      s.baseline_row = true;
      auto e = run_mode(s, m, bs, start, &d);
      s.baseline_row = false;
      s.deadline.reset();
      if (s.interrupted) {
        s.interrupted = false;
        row.description = "stopped: the search's time limit (" +
                          core::format_fixed(input.options.time_limit_s, 3) + " s) was reached while it ran";
        ++skipped_baselines;
        result.baselines.push_back(std::move(row));
        continue;
      }
      if (e.ok()) {
        row.ok = e.value().prediction.fits;
        row.prediction = e.value().prediction;
        row.by_evaluator = e.value().by_evaluator;
        row.by_megatron_lowering = e.value().megatron_shape.has_value();
        row.description = d.empty() ? describe_plan(e.value().plan) : d;
        if (!row.ok) row.description += " (does not fit)";
        if (row.ok && row.by_evaluator && better(s, e.value(), best_baseline ? *best_baseline : best)) {
          best_baseline = std::move(e).value();
          best_baseline_mode = m;
          best_baseline_description = row.description;
        }
      } else {
        row.description = e.status().message();
      }
      result.baselines.push_back(std::move(row));
    }
    if (skipped_baselines > 0) {
      result.explanation.push_back("stopped by the wall clock: " + std::to_string(skipped_baselines) +
                                   " baselines skipped or cut at the time limit (" +
                                   core::format_fixed(input.options.time_limit_s, 3) + " s)");
    }
    if (best_baseline && better(s, *best_baseline, best)) {
      // One evaluator priced both: answer with the faster plan, and say so, finished as the
      // searched plan would have been (same plan, same price).
      Evaluated answer = std::move(*best_baseline);
      ALPASIM_RETURN_IF_ERROR(finish_answer(s, best_baseline_mode, &answer));
      // Its exact memory (finish_answer) may no longer fit: then the searched plan stays.
      if (better(s, answer, best)) {
        for (BaselineRow& row : result.baselines) {
          if (row.mode == best_baseline_mode) row.prediction = answer.prediction;  // as finished
        }
        result.answered_by = best_baseline_mode;
        result.plan = answer.plan;
        result.prediction = answer.prediction;
        auto answer_problem = sim::resolve_collectives(answer.problem);
        result.problem = answer_problem.ok() ? std::move(answer_problem).value() : answer.problem;
        result.explanation.push_back(
            "answer: the " + best_baseline_mode + " baseline (" + best_baseline_description + ", " +
            core::format_fixed(answer.prediction.iteration_time_s, 3) + " s) is faster than the searched plan (" +
            core::format_fixed(result.searched_prediction.iteration_time_s, 3) +
            " s) under the same evaluator: its plan is the answer");
        for (std::string& line : result.explanation) {
          if (line.rfind("chosen: ", 0) == 0) line = "chosen: " + describe_plan(answer.plan);
        }
      }
    }
  }
  result.wall_time_s = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

core::Result<SearchResult> evaluate_plan(const SearchInput& input, const schema::Plan& plan) {
  ALPASIM_RETURN_IF_ERROR(check_input(input, true));
  const auto start = Clock::now();
  Searcher s(input);
  s.list_collectives = true;
  ALPASIM_ASSIGN_OR_RETURN(Evaluated e, s.evaluate(plan));
  SearchResult r;
  r.plan = plan;
  r.prediction = e.prediction;
  r.searched_prediction = e.prediction;
  auto resolved = sim::resolve_collectives(e.problem);
  r.problem = resolved.ok() ? std::move(resolved).value() : e.problem;
  fill_explanation(s, e, &r);
  r.wall_time_s = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

std::string format_comparison(const SearchResult& result) {
  std::ostringstream os;
  auto row = [&](const std::string& mode, const Prediction& p, bool ok, const std::string& d) {
    os << mode;
    for (std::size_t i = mode.size(); i < 16; ++i) os << ' ';
    if (ok) {
      os << core::format_fixed(p.iteration_time_s, 3) << " s  "
         << core::format_fixed(p.model_tflops_per_gpu, 2) << " TFLOP/s/GPU  "
         << core::format_bytes(p.peak_memory_bytes) << "  ";
    } else {
      os << "-  ";
    }
    os << d << "\n";
  };
  row("searched", result.searched_prediction, true,
      result.answered_by.empty() ? "" : "(not the answer: the " + result.answered_by + " baseline is faster)");
  for (const auto& b : result.baselines) {
    row(b.mode, b.prediction, b.ok, b.description + (b.mode == result.answered_by ? "  <- the answer" : ""));
  }
  return os.str();
}

std::string faster_baseline_note(const SearchResult& result) {
  const double searched_s = result.searched_prediction.iteration_time_s;
  auto percent_faster = [](double fast_s, double slow_s) {
    return core::format_fixed(100 * (1 - fast_s / slow_s), 1) + " % faster than";
  };
  std::string out;
  const BaselineRow* answer = nullptr;
  for (const BaselineRow& b : result.baselines) {
    if (b.mode == result.answered_by) answer = &b;
  }
  if (answer != nullptr) {
    out += "note: the " + answer->mode + " baseline (" + core::format_fixed(answer->prediction.iteration_time_s, 3) +
           " s) is " + percent_faster(answer->prediction.iteration_time_s, searched_s) + " the searched plan (" +
           core::format_fixed(searched_s, 3) +
           " s) under the same evaluator: its plan is the answer (the prediction above, plan.json)\n";
  }
  // Any other fitting row faster than the answer: pointed out with the mode that plans it.
  const double answer_s = result.prediction.iteration_time_s;
  const BaselineRow* fastest = nullptr;
  for (const BaselineRow& b : result.baselines) {
    if (!b.ok || !b.prediction.fits || &b == answer) continue;
    if (b.prediction.iteration_time_s >= answer_s) continue;
    if (fastest == nullptr || b.prediction.iteration_time_s < fastest->prediction.iteration_time_s) {
      fastest = &b;
    }
  }
  if (fastest == nullptr) return out;
  return out + "note: the " + fastest->mode + " baseline (" +
         core::format_fixed(fastest->prediction.iteration_time_s, 3) + " s) is " +
         percent_faster(fastest->prediction.iteration_time_s, answer_s) +
         (answer != nullptr ? " the answer (" : " the searched plan (") + core::format_fixed(answer_s, 3) +
         " s): the search space does not contain its plan; \"search\": {\"mode\": \"" + fastest->mode +
         "\"} plans it" +
         (fastest->by_evaluator ? ""
          : fastest->by_megatron_lowering
              ? " (its price is the Megatron lowering's, as a fixed Megatron plan's, not the evaluator's)"
              : " (its price is analytic, not the evaluator's)") +
         "\n";
}

}  // namespace alpasim::planner
