// libFuzzer target: the plan-file parser (schema::parse_plan), then, for a plan it accepts,
// what alpa-exec does next: lower it to per-device programs and verify them. A plan that
// parses must lower and verify or be rejected with a message, never crash (issue 18 #5).
#include "core/json_reader.h"
#include "exec/lower.h"
#include "exec/verify.h"
#include "fuzz/fuzz_common.h"
#include "schema/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace alpasim;
  auto doc = core::parse_json_text(fuzz::text_of(data, size), "plan.json");
  fuzz::check_error(doc.status());
  if (!doc.ok()) return 0;
  auto plan = schema::parse_plan(core::JsonValue::root(*doc), "/nonexistent-fuzz-dir");
  fuzz::check_error(plan.status());
  if (!plan.ok()) return 0;
  auto program = exec::lower_plan(*plan);
  fuzz::check_error(program.status());
  if (!program.ok()) return 0;
  fuzz::check_error(exec::verify_program(*program).status());
  return 0;
}
