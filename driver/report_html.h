#pragma once

#include <string>
#include <string_view>

#include "driver/capacity.h"
#include "driver/scenario.h"
#include "driver/sweep.h"

namespace alpasim::driver {

/// One self-contained HTML page (no network at view time: Vega, Vega-Lite and vega-embed
/// are inlined) with the question, the answer up front, charts and the full table of a
/// sweep: throughput, aggregate throughput, iteration time and memory against cluster
/// size, plus memory per stage and the pipeline timeline of the best point's plan.
/// When every chart has rendered the page sets data-report-ready="true" and
/// data-charts-rendered="N" (= data-charts-expected) on <body>, and data-console-errors.
std::string sweep_report_html(const SweepResult& sweep, const Scenario& scenario);

/// The same for a capacity study: time to train, cost and throughput against cluster
/// size per candidate kind (the deadline drawn as a rule), then memory per stage and the
/// pipeline timeline of the cost-optimal plan.
std::string capacity_report_html(const CapacityResult& result, const Scenario& scenario);

/// A file embedded at build time from report/: "template.html", "vega.min.js",
/// "vega-lite.min.js", "vega-embed.min.js" (report/vendor/, licences next to them).
/// Empty for an unknown name.
std::string report_asset(std::string_view name);

/// Text safe inside HTML element content and attribute values.
std::string html_escape(std::string_view text);

}  // namespace alpasim::driver
