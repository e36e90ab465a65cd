#include "driver/report_html.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "core/check.h"
#include "core/json_reader.h"
#include "core/text.h"
#include "core/version.h"
#include "driver/report_markdown.h"
#include "sim/pipeline_sim.h"

namespace alpasim::driver {

namespace {

using core::Json;

constexpr double kBytesPerGib = 1024.0 * 1024.0 * 1024.0;
constexpr double kSecondsPerDay = 86400;
constexpr int kChartWidth = 480;
constexpr int kChartHeight = 260;

double to_gib(std::int64_t bytes) { return static_cast<double>(bytes) / kBytesPerGib; }

// A chart of the page: its container id, heading and Vega-Lite spec.
struct Chart {
  std::string id;
  std::string heading;
  Json spec;
  bool wide = false;
};

Json base_spec(const std::string& title, Json values) {
  return Json{{"title", title},
              {"width", kChartWidth},
              {"height", kChartHeight},
              {"data", {{"values", std::move(values)}}}};
}

Json quantitative(const std::string& field, const std::string& title, bool log2 = false) {
  Json j = {{"field", field}, {"type", "quantitative"}, {"title", title}};
  if (log2) j["scale"] = {{"type", "log"}, {"base", 2}};
  return j;
}

// Lines with points: y against cluster size, one line per series.
Chart line_chart(const std::string& id, const std::string& heading, const Json& values,
                 const std::string& y_field, const std::string& y_title,
                 const std::string& series_title) {
  Json spec = base_spec(heading, values);
  spec["mark"] = {{"type", "line"}, {"point", true}};
  spec["encoding"] = {{"x", quantitative("num_gpus", "GPUs (log scale)", true)},
                      {"y", quantitative(y_field, y_title)},
                      {"color", {{"field", "series"},
                                 {"type", "nominal"},
                                 {"title", series_title},
                                 // Below the plot, whole names: at its right a half-width
                                 // chart cut them to "dgx-a100-…".
                                 {"legend", {{"orient", "bottom"},
                                             {"columns", 4},
                                             {"labelLimit", 0},
                                             {"titleLimit", 0}}}}},
                      {"tooltip", Json::array({{{"field", "series"}, {"type", "nominal"}},
                                               {{"field", "num_gpus"}, {"type", "quantitative"}},
                                               {{"field", y_field}, {"type", "quantitative"}},
                                               {{"field", "plan"}, {"type", "nominal"}}})}};
  return {id, heading, spec, false};
}

std::optional<Chart> stage_memory_chart(const PointResult& p, const std::string& label) {
  if (p.stage_memory_bytes.empty()) return std::nullopt;
  const bool by_component = p.stage_memory_components_bytes.size() == p.stage_memory_bytes.size();
  Json values = Json::array();
  for (std::size_t s = 0; s < p.stage_memory_bytes.size(); ++s) {
    if (!by_component) {
      values.push_back({{"stage", static_cast<int>(s)},
                        {"component", "total"},
                        {"memory_gib", to_gib(p.stage_memory_bytes[s])},
                        {"usable_memory_gib", to_gib(p.usable_memory_bytes)}});
      continue;
    }
    const auto& parts = p.stage_memory_components_bytes[s];
    for (std::size_t c = 0; c < parts.size(); ++c) {
      std::string name = sim::memory_component_name(static_cast<sim::MemoryComponent>(c));
      std::replace(name.begin(), name.end(), '_', ' ');
      values.push_back({{"stage", static_cast<int>(s)},
                        {"component", name},
                        {"memory_gib", to_gib(parts[c])},
                        {"usable_memory_gib", to_gib(p.usable_memory_bytes)}});
    }
  }
  Json order = Json::array();  // the legend and the stack in MemoryComponent order
  for (int c = 0; c < sim::kNumMemoryComponents; ++c) {
    std::string name = sim::memory_component_name(static_cast<sim::MemoryComponent>(c));
    std::replace(name.begin(), name.end(), '_', ' ');
    order.push_back(name);
  }
  const std::string heading = "Peak memory per GPU, per pipeline stage" +
                              std::string(by_component ? ", by component" : "") + ": " + label;
  Json spec = base_spec(heading, values);
  spec["layer"] = Json::array(
      {{{"mark", "bar"},
        {"encoding", {{"x", {{"field", "stage"}, {"type", "ordinal"}, {"title", "pipeline stage"}}},
                      {"y", {{"field", "memory_gib"},
                             {"type", "quantitative"},
                             {"aggregate", "sum"},
                             {"stack", "zero"},
                             {"title", "memory per GPU at the stage's peak (GiB)"}}},
                      {"color", {{"field", "component"},
                                 {"type", "nominal"},
                                 {"title", "component"},
                                 {"scale", {{"domain", by_component ? order : Json::array({"total"})}}},
                                 {"legend", {{"labelLimit", 0}}}}},
                      {"tooltip", Json::array({{{"field", "stage"}, {"type", "ordinal"}},
                                               {{"field", "component"}, {"type", "nominal"}},
                                               {{"field", "memory_gib"},
                                                {"type", "quantitative"},
                                                {"format", ".2f"}}})}}}},
       {{"mark", {{"type", "rule"}, {"color", "#c0392b"}, {"strokeDash", {6, 4}}}},
        {"encoding", {{"y", {{"aggregate", "max"}, {"field", "usable_memory_gib"}, {"type", "quantitative"}}}}}}});
  return Chart{"chart-stage-memory", heading, spec, true};
}

// Where each stage's compute stream spends the iteration: busy time per task kind, stacked;
// readable however many microbatches the iteration has.
std::optional<Chart> stage_busy_chart(const PointResult& p, const std::string& label) {
  if (p.stage_busy.empty()) return std::nullopt;
  Json values = Json::array();
  for (const StageBusy& b : p.stage_busy) {
    values.push_back({{"stage", b.stage},
                      {"kind", b.kind},
                      {"busy_ms", b.busy_s * 1e3},
                      {"iteration_ms", p.iteration_time_s * 1e3}});
  }
  const std::string heading =
      "Compute time per pipeline stage by task (dashed: the iteration; the gap is idle): " + label;
  Json spec = base_spec(heading, values);
  spec["layer"] = Json::array(
      {{{"mark", "bar"},
        {"encoding", {{"y", {{"field", "stage"}, {"type", "ordinal"}, {"title", "pipeline stage"}}},
                      {"x", {{"field", "busy_ms"},
                             {"type", "quantitative"},
                             {"aggregate", "sum"},
                             {"stack", "zero"},
                             {"title", "time in the iteration (ms)"}}},
                      {"color", {{"field", "kind"},
                                 {"type", "nominal"},
                                 {"title", "task"},
                                 {"legend", {{"labelLimit", 0}}}}},
                      {"tooltip", Json::array({{{"field", "stage"}, {"type", "ordinal"}},
                                               {{"field", "kind"}, {"type", "nominal"}},
                                               {{"field", "busy_ms"},
                                                {"type", "quantitative"},
                                                {"format", ".3f"}}})}}}},
       {{"mark", {{"type", "rule"}, {"color", "#c0392b"}, {"strokeDash", {6, 4}}}},
        {"encoding", {{"x", {{"aggregate", "max"}, {"field", "iteration_ms"}, {"type", "quantitative"}}}}}}});
  return Chart{"chart-stage-busy", heading, spec, true};
}

std::optional<Chart> timeline_chart(const PointResult& p, const std::string& label) {
  if (p.timeline.empty()) return std::nullopt;
  Json values = Json::array();
  for (const TimelineTask& t : p.timeline) {
    values.push_back({{"stage", t.stage},
                      {"kind", t.kind},
                      {"microbatch", t.microbatch},
                      {"start_ms", t.start_s * 1e3},
                      {"end_ms", t.end_s * 1e3}});
  }
  std::string heading = "Pipeline timeline of one iteration: " + label;
  const int k = p.timeline_edge_microbatches;
  const int n = p.timeline_microbatches;
  const std::string fill = "microbatches 0-" + std::to_string(k - 1) + " (fill)";
  const std::string drain = "microbatches " + std::to_string(n - k) + "-" + std::to_string(n - 1) +
                            " (drain) and the step";
  if (k > 0) {
    heading += " (" + std::to_string(2 * k) + " of " + std::to_string(n) +
               " microbatches: the steady state between is left out)";
    // Each half on its own time axis, so neither is squeezed into the iteration's ends.
    for (Json& v : values) {
      const int mb = v["microbatch"].get<int>();
      v["part"] = mb >= 0 && mb < k ? fill : drain;
    }
  }
  Json x = quantitative("start_ms", "time in the iteration (ms)");
  x["scale"] = {{"zero", k == 0}};  // each half's axis starts where its tasks do
  const Json encoding = {
      {"x", x},
      {"x2", {{"field", "end_ms"}}},
      {"y", {{"field", "stage"}, {"type", "ordinal"}, {"title", "pipeline stage"}}},
      {"color", {{"field", "kind"}, {"type", "nominal"}, {"title", "task"},
                 {"legend", {{"labelLimit", 0}}}}},
      {"tooltip", Json::array({{{"field", "kind"}, {"type", "nominal"}},
                               {{"field", "microbatch"}, {"type", "quantitative"}},
                               {{"field", "start_ms"}, {"type", "quantitative"}, {"format", ".3f"}},
                               {{"field", "end_ms"}, {"type", "quantitative"}, {"format", ".3f"}}})}};
  const Json mark = {{"type", "bar"}, {"stroke", "white"}, {"strokeWidth", 0.3}};
  Json spec = base_spec(heading, values);
  if (k > 0) {
    spec.erase("width");
    spec.erase("height");
    spec["facet"] = {{"column", {{"field", "part"}, {"type", "nominal"}, {"title", nullptr},
                                 {"sort", Json::array({fill, drain})}}}};
    spec["spec"] = {{"width", kChartWidth}, {"height", kChartHeight}, {"mark", mark},
                    {"encoding", encoding}};
    spec["resolve"] = {{"scale", {{"x", "independent"}}}};
  } else {
    spec["width"] = 2 * kChartWidth + 120;
    spec["mark"] = mark;
    spec["encoding"] = encoding;
  }
  return Chart{"chart-timeline", heading, spec, true};
}

void render_table(std::ostringstream& os, const ReportTable& table, int highlighted) {
  os << "<table>\n<thead><tr>";
  for (const std::string& h : table.header) os << "<th>" << html_escape(h) << "</th>";
  os << "</tr></thead>\n<tbody>\n";
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    os << (static_cast<int>(r) == highlighted ? "<tr class=\"highlight\">" : "<tr>");
    for (std::size_t c = 0; c < table.rows[r].size(); ++c) {
      os << (c < table.numeric.size() && table.numeric[c] ? "<td class=\"num\">" : "<td>")
         << html_escape(table.rows[r][c]) << "</td>";
    }
    os << "</tr>\n";
  }
  os << "</tbody>\n</table>\n";
}

// Fills the template: each {{NAME}} of the template is replaced once, values are never
// scanned again (a value may contain "{{" safely).
std::string fill_template(const std::string& tpl, const std::map<std::string, std::string>& vars) {
  std::string out;
  out.reserve(tpl.size());
  std::size_t pos = 0;
  while (true) {
    std::size_t open = tpl.find("{{", pos);
    if (open == std::string::npos) break;
    std::size_t close = tpl.find("}}", open);
    ALPASIM_CHECK(close != std::string::npos) << "unterminated {{ in report/template.html";
    const std::string name = tpl.substr(open + 2, close - open - 2);
    auto it = vars.find(name);
    ALPASIM_CHECK(it != vars.end()) << "report/template.html uses unknown {{" << name << "}}";
    out.append(tpl, pos, open - pos);
    out += it->second;
    pos = close + 2;
  }
  out.append(tpl, pos, std::string::npos);
  return out;
}

std::string page(const ReportText& text, const std::vector<Chart>& charts) {
  std::ostringstream body;
  body << "<h1>" << html_escape(text.title) << "</h1>\n<h2>Answer</h2>\n<div class=\"answer\"><ul>\n";
  for (const std::string& a : text.answer) body << "<li>" << html_escape(a) << "</li>\n";
  body << "</ul></div>\n<h2>Question</h2>\n";
  for (const std::string& q : text.question) body << "<p>" << html_escape(q) << "</p>\n";
  body << "<h2>Charts</h2>\n<div class=\"charts\">\n";
  Json specs = Json::object();
  for (const Chart& c : charts) {
    body << "<div class=\"chart" << (c.wide ? " wide" : "") << "\" id=\"" << c.id
         << "\" data-chart=\"" << html_escape(c.heading) << "\"></div>\n";
    specs[c.id] = c.spec;
  }
  body << "</div>\n<h2>All results</h2>\n";
  if (text.highlighted >= 0) {
    body << "<p>The highlighted row is " << html_escape(text.highlighted_label)
         << ", whose plan the memory and timeline charts detail.</p>\n";
  }
  render_table(body, text.table, text.highlighted);

  // "</" inside a <script> would end it: JSON allows the escaped form "<\/".
  std::string specs_text = core::dump_json(specs);
  std::string safe;
  for (std::size_t i = 0; i < specs_text.size(); ++i) {
    if (specs_text[i] == '<' && i + 1 < specs_text.size() && specs_text[i + 1] == '/') {
      safe += "<\\";
    } else {
      safe += specs_text[i];
    }
  }
  return fill_template(report_asset("template.html"),
                       {{"TITLE", html_escape(text.title)},
                        {"VEGA_JS", report_asset("vega.min.js")},
                        {"VEGA_LITE_JS", report_asset("vega-lite.min.js")},
                        {"VEGA_EMBED_JS", report_asset("vega-embed.min.js")},
                        {"CHART_COUNT", std::to_string(charts.size())},
                        {"BODY", body.str()},
                        {"VERSION", html_escape(core::version())},
                        {"VEGA_LITE_VERSION", "5.23.0"},
                        {"SPECS", safe}});
}

std::string series_of(const PointRow& row) {
  std::string s;
  for (const auto& [axis, value] : row.coordinates) {
    if (axis == "num_gpus" || axis == "nodes" || axis == "gpus_per_node") continue;
    if (!s.empty()) s += " · ";
    s += value;
  }
  return s.empty() ? "all points" : s;
}

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::string sweep_report_html(const SweepResult& sweep, const Scenario& scenario) {
  ReportText text = sweep_report_text(sweep, scenario);
  Json values = Json::array();
  std::string series_title;
  for (const std::string& a : sweep.axes) {
    if (a == "num_gpus" || a == "nodes" || a == "gpus_per_node") continue;
    series_title += (series_title.empty() ? "" : " · ") + a;
  }
  if (series_title.empty()) series_title = "series";
  for (const PointRow& r : sweep.rows) {
    if (!r.ok || !r.result.fits) continue;  // the charts show plans that can run
    values.push_back({{"index", r.index},
                      {"series", series_of(r)},
                      {"num_gpus", r.num_gpus},
                      {"plan", r.result.plan_summary},
                      {"model_tflops_per_gpu", r.result.model_tflops_per_gpu},
                      {"total_pflops", r.result.model_tflops_per_gpu *
                                           static_cast<double>(r.num_gpus) / 1e3},
                      {"iteration_time_s", r.result.iteration_time_s},
                      {"memory_gib", to_gib(r.result.peak_memory_bytes)}});
  }
  std::vector<Chart> charts;
  charts.push_back(line_chart("chart-throughput", "Throughput per GPU against cluster size",
                              values, "model_tflops_per_gpu", "model TFLOP/s per GPU",
                              series_title));
  charts.push_back(line_chart("chart-aggregate", "Aggregate throughput against cluster size",
                              values, "total_pflops", "model PFLOP/s, whole cluster",
                              series_title));
  charts.push_back(line_chart("chart-iteration", "Iteration time against cluster size", values,
                              "iteration_time_s", "iteration time (s)", series_title));
  charts.push_back(line_chart("chart-memory", "Peak memory per GPU against cluster size", values,
                              "memory_gib", "peak memory per GPU (GiB)", series_title));
  if (text.highlighted >= 0) {
    const PointRow& b = sweep.rows[static_cast<std::size_t>(text.highlighted)];
    if (auto c = stage_memory_chart(b.result, text.highlighted_label)) charts.push_back(*c);
    if (auto c = stage_busy_chart(b.result, text.highlighted_label)) charts.push_back(*c);
    if (auto c = timeline_chart(b.result, text.highlighted_label)) charts.push_back(*c);
  }
  return page(text, charts);
}

std::string capacity_report_html(const CapacityResult& r, const Scenario& scenario) {
  ReportText text = capacity_report_text(r, scenario);
  Json values = Json::array();
  for (std::size_t i = 0; i < r.options.size(); ++i) {
    const CapacityOption& o = r.options[i];
    if (!o.row.ok || !o.row.result.fits || !std::isfinite(o.time_to_train_s)) continue;
    values.push_back({{"option", i},
                      {"series", r.spec.candidates[o.candidate].preset},
                      {"num_gpus", o.row.num_gpus},
                      {"plan", o.row.result.plan_summary},
                      {"days", o.time_to_train_s / kSecondsPerDay},
                      {"deadline_days", r.spec.deadline_days},
                      {"cost_kusd", o.cost_usd / 1e3},
                      {"mfu_percent", o.mfu * 100}});
  }
  std::vector<Chart> charts;
  Chart time = line_chart("chart-time", "Time to train against cluster size (dashed: deadline)",
                          values, "days", "time to train (days)", "cluster kind");
  Json line_layer = time.spec;
  line_layer.erase("data");
  line_layer.erase("title");
  line_layer.erase("width");
  line_layer.erase("height");
  Json rule = {{"mark", {{"type", "rule"}, {"color", "#c0392b"}, {"strokeDash", {6, 4}}}},
               {"encoding", {{"y", {{"aggregate", "max"}, {"field", "deadline_days"},
                                    {"type", "quantitative"}}}}}};
  Json layered = base_spec(time.heading, values);
  layered["layer"] = Json::array({line_layer, rule});
  time.spec = layered;
  charts.push_back(time);
  charts.push_back(line_chart("chart-cost", "Cost of the training run against cluster size",
                              values, "cost_kusd", "cost (thousand USD)", "cluster kind"));
  charts.push_back(line_chart("chart-mfu", "Model FLOPs utilisation against cluster size",
                              values, "mfu_percent", "MFU (% of the GPU's peak)",
                              "cluster kind"));
  if (r.cost_optimal) {
    const PointResult& p = r.options[*r.cost_optimal].row.result;
    if (auto c = stage_memory_chart(p, text.highlighted_label)) charts.push_back(*c);
    if (auto c = stage_busy_chart(p, text.highlighted_label)) charts.push_back(*c);
    if (auto c = timeline_chart(p, text.highlighted_label)) charts.push_back(*c);
  }
  return page(text, charts);
}

}  // namespace alpasim::driver
