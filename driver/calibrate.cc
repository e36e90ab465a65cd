#include "driver/calibrate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "cluster/cluster_spec.h"
#include "core/text.h"
#include "cost_model/compute_cost.h"
#include "schema/profile.h"

namespace alpasim::driver {
namespace {

using cost_model::FitRow;
using schema::ProfileRole;

// "set=<name>" from a citation (alpa-profile writes it for GEMM rows); "" when absent.
std::string set_of(const std::string& citation) {
  const auto at = citation.find("set=");
  if (at == std::string::npos) return "";
  const auto from = at + 4;
  const auto to = citation.find_first_of(",; )", from);
  return citation.substr(from, to == std::string::npos ? std::string::npos : to - from);
}

std::string group_of(const FitRow& r) {
  const std::string set = r.op_class.rfind("gemm/", 0) == 0 ? set_of(r.citation) : "";
  return set.empty() ? r.op_class : r.op_class + " set=" + set;
}

std::string pct(double v) { return core::format_fixed(100 * v, 1) + "%"; }

std::string pad(std::string s, std::size_t width) {
  if (s.size() < width) s.resize(width, ' ');
  return s;
}
std::string lpad(const std::string& s, std::size_t width) {
  return s.size() < width ? std::string(width - s.size(), ' ') + s : s;
}

void stats_table(std::ostringstream& os, const std::vector<ErrorStats>& v) {
  os << "  " << pad("class", 34) << lpad("rows", 6) << lpad("median", 10) << lpad("worst", 10) << "\n";
  for (const auto& s : v) {
    os << "  " << pad(s.group, 34) << lpad(std::to_string(s.rows), 6)
       << lpad(pct(s.median_abs_rel_error), 10) << lpad(pct(s.max_abs_rel_error), 10) << "\n";
  }
}

core::Json stats_json(const ErrorStats& s) {
  return {{"group", s.group},
          {"rows", s.rows},
          {"median_abs_rel_error", s.median_abs_rel_error},
          {"max_abs_rel_error", s.max_abs_rel_error}};
}

bool meets_gemm_target(const ErrorStats& s) {
  return s.rows > 0 && s.median_abs_rel_error <= 0.05 && s.max_abs_rel_error <= 0.15;
}

}  // namespace

ErrorStats error_stats(const std::vector<const FitRow*>& rows) {
  ErrorStats s;
  std::vector<double> e;
  for (const FitRow* r : rows) e.push_back(std::abs(r->rel_error));
  std::sort(e.begin(), e.end());
  s.rows = static_cast<int>(e.size());
  if (!e.empty()) {
    const std::size_t n = e.size();
    s.median_abs_rel_error = n % 2 == 1 ? e[n / 2] : 0.5 * (e[n / 2 - 1] + e[n / 2]);
    s.max_abs_rel_error = e.back();
  }
  return s;
}

core::Result<CalibrateReport> calibrate_profile(const std::filesystem::path& profile_path,
                                                const CalibrateOptions& options) {
  ALPASIM_ASSIGN_OR_RETURN(schema::Profile profile, schema::read_profile_file(profile_path));
  const std::string preset = options.machine.empty() ? profile.provenance.machine : options.machine;
  auto machine = cluster::make_preset_cluster(preset, 1);
  if (!machine.ok()) {
    return core::invalid_argument(profile_path.string() + ": /provenance/machine: " +
                                  machine.status().message() +
                                  " (pass --machine with a preset that has this GPU)");
  }
  cost_model::CalibratedParams prior = cost_model::default_params();
  std::string prior_text = "default_params() (docs/cost_model.md)";
  if (!options.prior.empty()) {
    ALPASIM_ASSIGN_OR_RETURN(schema::Profile pp, schema::read_profile_file(options.prior));
    auto pm = cluster::make_preset_cluster(pp.provenance.machine, 1);
    if (!pm.ok()) {
      return core::invalid_argument(options.prior.string() + ": /provenance/machine: " + pm.status().message());
    }
    auto pc = cost_model::calibrate(pp, *pm, prior);
    if (!pc.ok()) return core::invalid_argument(options.prior.string() + ": " + pc.status().message());
    prior = pc->params;
    prior_text = "the calibration of " + options.prior.string();
  }
  auto cal = cost_model::calibrate(profile, *machine, prior);
  if (!cal.ok()) return core::invalid_argument(profile_path.string() + ": " + cal.status().message());

  CalibrateReport rep;
  rep.calibration = std::move(*cal);
  const auto& rows = rep.calibration.report.rows;
  std::map<std::string, std::vector<const FitRow*>> fit, check;
  std::vector<const FitRow*> gemm_check;
  for (const FitRow& r : rows) {
    if (r.role == ProfileRole::kFit) {
      fit[r.op_class].push_back(&r);
    } else {
      check[group_of(r)].push_back(&r);
      if (r.op_class.rfind("gemm/", 0) == 0) gemm_check.push_back(&r);
    }
  }
  for (const auto& [g, v] : fit) {
    ErrorStats s = error_stats(v);
    s.group = g;
    rep.fit.push_back(s);
  }
  for (const auto& [g, v] : check) {
    ErrorStats s = error_stats(v);
    s.group = g;
    rep.held_out.push_back(s);
  }
  rep.held_out_gemm = error_stats(gemm_check);
  rep.held_out_gemm.group = "gemm (efficiency curve)";
  {
    // The full compute model with the fit rows as its table (check rows never enter it).
    std::vector<schema::GemmEntry> table;
    for (const auto& e : profile.gemm) {
      if (e.meta.role == ProfileRole::kFit) table.push_back(e);
    }
    const cost_model::ComputeCostModel model(machine->gpu, rep.calibration.params.compute, table, {});
    std::vector<FitRow> interp;
    for (const auto& e : profile.gemm) {
      if (e.meta.role != ProfileRole::kCheck) continue;
      const double pred = core::to_tflops_per_s(model.gemm({e.m, e.n, e.k, e.batch, e.dtype}).achieved);
      FitRow r;
      r.op_class = std::string("gemm/") + std::string(core::dtype_name(e.dtype));
      r.citation = e.meta.citation;
      r.published = e.tflops_per_s;
      r.predicted = pred;
      r.rel_error = (pred - e.tflops_per_s) / e.tflops_per_s;
      interp.push_back(r);
    }
    std::vector<const FitRow*> ptrs;
    std::map<std::string, std::vector<const FitRow*>> by_group;
    for (const auto& r : interp) {
      ptrs.push_back(&r);
      by_group[group_of(r)].push_back(&r);
    }
    rep.held_out_gemm_interpolated = error_stats(ptrs);
    rep.held_out_gemm_interpolated.group = "gemm (grid interpolation)";
    for (const auto& [g, v] : by_group) {
      ErrorStats st = error_stats(v);
      st.group = g;
      rep.held_out_interpolated.push_back(st);
    }
  }

  const auto& prov = profile.provenance;
  std::ostringstream os;
  os << "calibration of " << profile_path.string() << "\n"
     << "  machine " << preset << ", GPU " << prov.gpu << ", " << schema::profile_source_name(prov.source)
     << " " << prov.date << ", " << rows.size() << " rows (" << profile.gemm.size() << " GEMM, "
     << profile.conv.size() << " conv, " << profile.collectives.size() << " collective, "
     << profile.links.size() << " link"
     << (profile.attention.empty() ? std::string()
                                   : ", " + std::to_string(profile.attention.size()) +
                                         " attention kernel" + (profile.attention.size() == 1 ? "" : "s") +
                                         " (forward and backward: 2 rows each)")
     << ")\n"
     << "  prior: " << prior_text << "; fitted on the \"fit\" rows only\n"
     << (profile.attention.empty()
             ? "  attention: no rows; a scenario naming this profile prices flash attention with "
               "hgx-h200's measured curve, as fractions of this GPU's peak\n"
             : "")
     << "\n";
  os << "fit error per operator class (|predicted - measured| / measured, fit rows):\n";
  stats_table(os, rep.fit);
  os << "\nheld-out error per operator class (check rows, never fitted):\n";
  if (rep.held_out.empty()) {
    os << "  (the profile has no check rows)\n";
  } else {
    stats_table(os, rep.held_out);
  }
  if (rep.held_out_gemm.rows > 0) {
    os << "\n";
    for (const ErrorStats* s : {&rep.held_out_gemm, &rep.held_out_gemm_interpolated}) {
      os << "held-out GEMM, " << s->group << ": " << s->rows << " shapes, median "
         << pct(s->median_abs_rel_error) << ", worst " << pct(s->max_abs_rel_error)
         << " (target: median <= 5.0%, worst <= 15.0%: " << (meets_gemm_target(*s) ? "met" : "NOT met")
         << ")\n";
    }
  }
  // The per-row table (check rows, or every row) and the fitted parameters with origins.
  const std::string full = rep.calibration.report.to_text(rep.calibration.params);
  std::istringstream lines(full);
  std::string line;
  os << "\n" << (options.all_rows ? "every row" : "check rows") << ":\n";
  bool in_params = false, in_rows = false;
  std::string params;
  while (std::getline(lines, line)) {
    if (line.rfind("role ", 0) == 0) {
      in_rows = true;
      os << line << "\n";
      continue;
    }
    if (line.rfind("summary ", 0) == 0) in_rows = false;
    if (line == "parameters:") in_params = true;
    if (in_params) params += line + "\n";
    if (in_rows && (options.all_rows || line.rfind("check", 0) == 0)) os << line << "\n";
  }
  os << "\n" << params;
  rep.text = os.str();

  core::Json j;
  j["profile"] = profile_path.string();
  j["machine"] = preset;
  j["gpu"] = prov.gpu;
  j["source"] = schema::profile_source_name(prov.source);
  j["prior"] = prior_text;
  core::Json jf = core::Json::array(), jc = core::Json::array(), jr = core::Json::array();
  for (const auto& s : rep.fit) jf.push_back(stats_json(s));
  for (const auto& s : rep.held_out) jc.push_back(stats_json(s));
  j["fit"] = jf;
  j["held_out"] = jc;
  j["held_out_gemm"] = stats_json(rep.held_out_gemm);
  j["held_out_gemm"]["meets_target"] = meets_gemm_target(rep.held_out_gemm);
  j["held_out_gemm_interpolated"] = stats_json(rep.held_out_gemm_interpolated);
  core::Json ji = core::Json::array();
  for (const auto& s : rep.held_out_interpolated) ji.push_back(stats_json(s));
  j["held_out_interpolated"] = ji;
  j["held_out_gemm_interpolated"]["meets_target"] = meets_gemm_target(rep.held_out_gemm_interpolated);
  for (const FitRow& r : rows) {
    jr.push_back({{"op_class", r.op_class},
                  {"what", r.what},
                  {"role", schema::profile_role_name(r.role)},
                  {"quantity", r.quantity},
                  {"measured", r.published},
                  {"predicted", r.predicted},
                  {"rel_error", r.rel_error}});
  }
  j["rows"] = jr;
  core::Json origin = core::Json::object();
  for (const auto& [name, o] : rep.calibration.params.origin) origin[name] = o;
  j["parameter_origin"] = origin;
  rep.json = j;
  return rep;
}

std::string held_out_gemm_markdown(const CalibrateReport& report) {
  std::ostringstream os;
  os << "| GEMM class and held-out set | shapes | curve: median | curve: worst | "
        "interpolation: median | interpolation: worst |\n"
     << "|---|---:|---:|---:|---:|---:|\n";
  auto line = [&](const std::string& name, const ErrorStats& c, const ErrorStats& i) {
    os << "| " << name << " | " << c.rows << " | " << pct(c.median_abs_rel_error) << " | "
       << pct(c.max_abs_rel_error) << " | " << pct(i.median_abs_rel_error) << " | "
       << pct(i.max_abs_rel_error) << " |\n";
  };
  for (const auto& s : report.held_out) {
    if (s.group.rfind("gemm/", 0) != 0) continue;
    ErrorStats interp;
    for (const auto& i : report.held_out_interpolated) {
      if (i.group == s.group) interp = i;
    }
    line(s.group, s, interp);
  }
  line("**all held-out GEMMs**", report.held_out_gemm, report.held_out_gemm_interpolated);
  os << "\nTarget (issue 9): median <= 5 %, worst <= 15 %: efficiency curve **"
     << (meets_gemm_target(report.held_out_gemm) ? "met" : "not met") << "**, grid interpolation **"
     << (meets_gemm_target(report.held_out_gemm_interpolated) ? "met" : "not met") << "**.\n";
  return os.str();
}

core::Status use_profile_file(Scenario& scenario, const std::string& path_as_written) {
  const std::filesystem::path path(path_as_written);
  if (!std::filesystem::exists(path)) {
    return core::invalid_argument("--profile: file not found: " + path_as_written);
  }
  scenario.profile.preset.clear();
  scenario.profile.file = path;
  scenario.profile.file_as_written = path_as_written;
  return core::Status();
}

}  // namespace alpasim::driver
