#pragma once
// Fixture for the layering test: core may not include sim, and glpk.h belongs to planner/ilp.
#include "sim/engine.h"
#include <glpk.h>
