#pragma once

#include <string>
#include <vector>

#include "driver/capacity.h"
#include "driver/scenario.h"
#include "driver/sweep.h"

namespace alpasim::driver {

/// A table as plain strings: what both report formats print.
struct ReportTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<bool> numeric;  ///< per column: right-aligned
};

/// The words of a report, shared by the HTML and Markdown writers so they say the same.
struct ReportText {
  std::string title;
  std::vector<std::string> question;  ///< paragraphs: what was asked, of which scenario
  std::vector<std::string> answer;    ///< sentences, most important first
  ReportTable table;                  ///< every point / option
  int highlighted = -1;  ///< index into table.rows of the plan the charts detail, or -1
  std::string highlighted_label;  ///< e.g. "point 12 (model GPT-3 6.7B · num_gpus 16)"
  std::string footer;  ///< the last paragraph: what the HTML report adds (only what it has)
};

/// The words of a sweep report.
ReportText sweep_report_text(const SweepResult& sweep, const Scenario& scenario);
/// The words of a capacity report.
ReportText capacity_report_text(const CapacityResult& result, const Scenario& scenario);

/// A Markdown document (GitHub flavour: pipe tables) of the report text.
std::string report_markdown(const ReportText& text);

/// Shorthands: the Markdown report of a sweep / of a capacity study.
std::string sweep_report_markdown(const SweepResult& sweep, const Scenario& scenario);
std::string capacity_report_markdown(const CapacityResult& result, const Scenario& scenario);

/// "1 × dgx-a100-80gb node (8 × A100-SXM4-80GB)"-style description of the base cluster.
std::string describe_cluster(const Scenario& scenario);

}  // namespace alpasim::driver
