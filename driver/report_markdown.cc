#include "driver/report_markdown.h"

#include <cmath>
#include <sstream>

#include "core/text.h"

namespace alpasim::driver {

namespace {

constexpr double kBytesPerGib = 1024.0 * 1024.0 * 1024.0;
constexpr double kSecondsPerDay = 86400;

std::string gib(std::int64_t bytes) {
  return core::format_fixed(static_cast<double>(bytes) / kBytesPerGib, 1) + " GiB";
}

std::string coords_text(const std::vector<std::pair<std::string, std::string>>& coords) {
  std::string s;
  for (const auto& [axis, value] : coords) {
    if (!s.empty()) s += " · ";
    s += axis + " " + value;
  }
  return s.empty() ? "the base scenario" : s;
}

std::string money(double usd) {
  // Whole dollars above $1000: cents are noise in a training budget.
  return "$" + core::format_fixed(usd, usd >= 1000 ? 0 : 2);
}

std::string md_cell(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '|') out += "\\|";
    else if (ch == '\n') out += ' ';
    else out += ch;
  }
  return out;
}

}  // namespace

std::string describe_cluster(const Scenario& s) {
  const auto& c = s.cluster;
  std::string kind = c.preset.empty() ? "" : c.preset + " ";
  return std::to_string(c.nodes) + " × " + kind + (c.nodes == 1 ? "node" : "nodes") + " of " +
         std::to_string(c.gpus_per_node) + " × " + c.gpu.display_name + " (" +
         std::to_string(c.num_gpus()) + " GPUs)";
}

ReportText sweep_report_text(const SweepResult& sweep, const Scenario& scenario) {
  ReportText t;
  t.title = "What-if study: " + sweep.scenario_name;
  std::string axes;
  for (const std::string& a : sweep.axes) axes += (axes.empty() ? "" : ", ") + a;
  t.question.push_back("How do iteration time, throughput per GPU and memory per GPU change when " +
                       (axes.empty() ? std::string("nothing varies (a single point)")
                                     : "the " + axes + " vary") +
                       "? " + std::to_string(sweep.total_points) +
                       " combinations, each planned with the best plan alpa-sim finds.");
  t.question.push_back("Base scenario " + sweep.scenario_file + ": model " + scenario.model.name +
                       ", cluster " + describe_cluster(scenario) + ", global batch " +
                       std::to_string(scenario.training.global_batch_size) + ", planned by " +
                       (sweep.planner == "fixed plan" ? sweep.planner
                                                      : "the " + sweep.planner + " planner") +
                       ".");
  if (!scenario.description.empty()) t.question.push_back(scenario.description);

  std::size_t fit = 0, planned = 0, no_plan_fits = 0;
  for (const PointRow& r : sweep.rows) {
    planned += r.ok ? 1 : 0;
    fit += (r.ok && r.result.fits) ? 1 : 0;
    // The planner's RESOURCE_EXHAUSTED text (planner/search/search.h).
    no_plan_fits += (!r.ok && r.error.find("no plan fits") != std::string::npos) ? 1 : 0;
  }
  int best = best_point(sweep);
  if (best >= 0) {
    const PointRow& b = sweep.rows[static_cast<std::size_t>(best)];
    t.answer.push_back("Highest throughput: " + core::format_fixed(b.result.model_tflops_per_gpu, 1) +
                       " TFLOP/s per GPU at " + coords_text(b.coordinates) + " (" +
                       std::to_string(b.num_gpus) + " GPUs), iteration " +
                       core::format_fixed(b.result.iteration_time_s, 3) + " s, " +
                       gib(b.result.peak_memory_bytes) + " of " + gib(b.result.usable_memory_bytes) +
                       " usable per GPU, plan " + b.result.plan_summary + ".");
    t.highlighted = best;
    t.highlighted_label = "point " + std::to_string(b.index) + " (" + coords_text(b.coordinates) + ")";
  } else {
    t.answer.push_back("No point has a plan that fits in GPU memory.");
  }
  t.answer.push_back(std::to_string(fit) + " of " + std::to_string(sweep.rows.size()) +
                     " points have a plan that fits in memory; " +
                     std::to_string(planned - fit + no_plan_fits) +
                     " do not fit (the table names the memory the smallest plan needs); " +
                     std::to_string(sweep.rows.size() - planned - no_plan_fits) +
                     " could not be planned for another reason (see the table).");

  t.table.header = {"#"};
  for (const std::string& a : sweep.axes) t.table.header.push_back(a);
  for (const char* h : {"GPUs", "plan", "iteration (s)", "TFLOP/s per GPU", "memory per GPU",
                        "fits"}) {
    t.table.header.push_back(h);
  }
  t.table.numeric.assign(t.table.header.size(), false);
  t.table.numeric[0] = true;
  for (std::size_t k = 1 + sweep.axes.size(); k < t.table.header.size(); ++k) {
    t.table.numeric[k] = (k != 2 + sweep.axes.size() && k + 1 != t.table.header.size());
  }
  for (const PointRow& r : sweep.rows) {
    std::vector<std::string> row = {std::to_string(r.index)};
    for (const auto& [axis, value] : r.coordinates) row.push_back(value);
    row.push_back(std::to_string(r.num_gpus));
    if (r.ok) {
      row.push_back(r.result.plan_summary);
      row.push_back(core::format_fixed(r.result.iteration_time_s, 3));
      row.push_back(core::format_fixed(r.result.model_tflops_per_gpu, 1));
      row.push_back(gib(r.result.peak_memory_bytes));
      row.push_back(r.result.fits ? "yes" : "no");
    } else {
      row.insert(row.end(), {"error: " + r.error, "", "", "", "no"});
    }
    t.table.rows.push_back(std::move(row));
  }
  return t;
}

ReportText capacity_report_text(const CapacityResult& r, const Scenario& scenario) {
  ReportText t;
  t.title = "Capacity plan: " + r.scenario_name;
  std::string work = r.spec.tokens_to_train
                         ? core::format_count(*r.spec.tokens_to_train) + " tokens (" +
                               std::to_string(r.iterations) + " iterations of " +
                               core::format_count(r.tokens_per_iteration) + " tokens)"
                         : std::to_string(r.iterations) + " iterations";
  std::string kinds;
  for (const CapacityCandidate& c : r.spec.candidates) {
    kinds += (kinds.empty() ? "" : ", ") + c.preset + " at " + money(c.price_usd_per_gpu_hour) +
             " per GPU-hour";
  }
  t.question.push_back("Which cluster trains " + scenario.model.name + " on " + work + " within " +
                       core::format_fixed(r.spec.deadline_days, 1) +
                       " days, and which choice costs least? Candidates: " + kinds + ".");
  t.question.push_back("Scenario " + r.scenario_file + ": global batch " +
                       std::to_string(scenario.training.global_batch_size) + ", planned by " +
                       (!r.spec.planner.empty()          ? "the " + r.spec.planner + " planner"
                        : scenario.search.mode == "fixed" ? std::string("the fixed plan")
                                                          : std::string("the alpa planner")) +
                       "; every cluster size is planned on its own.");
  if (!scenario.description.empty()) t.question.push_back(scenario.description);

  auto option_text = [&](const CapacityOption& o) {
    return r.spec.candidates[o.candidate].preset + " × " + o.row.coordinates.at(1).second +
           " nodes (" + std::to_string(o.row.num_gpus) + " GPUs): " +
           core::format_fixed(o.time_to_train_s / kSecondsPerDay, 1) + " days, " +
           money(o.cost_usd) + ", plan " + o.row.result.plan_summary;
  };
  if (r.cost_optimal) {
    const CapacityOption& o = r.options[*r.cost_optimal];
    t.answer.push_back("Cost-optimal: " + option_text(o) + ".");
    t.highlighted = static_cast<int>(*r.cost_optimal);
    t.highlighted_label = "the cost-optimal option (" + r.spec.candidates[o.candidate].preset +
                          " × " + o.row.coordinates.at(1).second + " nodes)";
  } else {
    t.answer.push_back("No candidate cluster meets the " +
                       core::format_fixed(r.spec.deadline_days, 1) +
                       "-day deadline; see the table for the fastest ones.");
  }
  for (std::size_t c = 0; c < r.spec.candidates.size(); ++c) {
    if (r.smallest[c]) {
      t.answer.push_back("Smallest " + r.spec.candidates[c].preset + " cluster meeting the deadline: " +
                         option_text(r.options[*r.smallest[c]]) + ".");
    } else {
      t.answer.push_back("No " + r.spec.candidates[c].preset +
                         " cluster among those tried meets the deadline.");
    }
  }

  t.table.header = {"#", "preset", "nodes", "GPUs", "plan", "iteration (s)", "TFLOP/s per GPU",
                    "memory per GPU", "fits", "days", "cost", "meets deadline"};
  t.table.numeric = {true, false, true, true, false, true, true, true, false, true, true, false};
  for (std::size_t i = 0; i < r.options.size(); ++i) {
    const CapacityOption& o = r.options[i];
    std::vector<std::string> row = {std::to_string(i), r.spec.candidates[o.candidate].preset,
                                    o.row.coordinates.at(1).second,
                                    std::to_string(o.row.num_gpus)};
    if (o.row.ok) {
      const PointResult& p = o.row.result;
      row.insert(row.end(), {p.plan_summary, core::format_fixed(p.iteration_time_s, 3),
                             core::format_fixed(p.model_tflops_per_gpu, 1),
                             gib(p.peak_memory_bytes), p.fits ? "yes" : "no",
                             core::format_fixed(o.time_to_train_s / kSecondsPerDay, 1),
                             money(o.cost_usd)});
    } else {
      row.insert(row.end(), {"error: " + o.row.error, "", "", "", "no", "", ""});
    }
    std::string verdict = o.meets_deadline ? "yes" : "no";
    if (r.cost_optimal == i) verdict += " (cost-optimal)";
    else if (r.smallest[o.candidate] == i) verdict += " (smallest of its kind)";
    row.push_back(verdict);
    t.table.rows.push_back(std::move(row));
  }
  return t;
}

std::string report_markdown(const ReportText& t) {
  std::ostringstream os;
  os << "# " << t.title << "\n\n## Question\n\n";
  for (const std::string& p : t.question) os << p << "\n\n";
  os << "## Answer\n\n";
  for (const std::string& a : t.answer) os << "- " << a << "\n";
  os << "\n## All results\n\n|";
  for (const std::string& h : t.table.header) os << ' ' << md_cell(h) << " |";
  os << "\n|";
  for (bool numeric : t.table.numeric) os << (numeric ? " ---: |" : " --- |");
  os << "\n";
  for (const auto& row : t.table.rows) {
    os << '|';
    for (const std::string& cell : row) os << ' ' << md_cell(cell) << " |";
    os << "\n";
  }
  os << "\nGenerated by alpa-sim. The HTML report (`--report`) adds the charts: throughput and "
        "cost against cluster size, memory per stage and the pipeline timeline of the chosen "
        "plan.\n";
  return os.str();
}

std::string sweep_report_markdown(const SweepResult& sweep, const Scenario& scenario) {
  return report_markdown(sweep_report_text(sweep, scenario));
}

std::string capacity_report_markdown(const CapacityResult& result, const Scenario& scenario) {
  return report_markdown(capacity_report_text(result, scenario));
}

}  // namespace alpasim::driver
