# The module dependency table of ARCHITECTURE.md, in one place.
# ALPASIM_ALLOWED_DEPS_<module> lists the alpa-sim modules that <module> may include and
# link. alpasim_add_library() rejects any other DEPS at configure time, and
# tools/check_layering.cmake (CTest "layering") rejects any other #include.
set(ALPASIM_MODULES core ir cluster schema cost_model sim planner exec dist driver)

set(ALPASIM_ALLOWED_DEPS_core "")
set(ALPASIM_ALLOWED_DEPS_ir core)
set(ALPASIM_ALLOWED_DEPS_cluster core)
set(ALPASIM_ALLOWED_DEPS_schema core ir cluster)
set(ALPASIM_ALLOWED_DEPS_cost_model core ir cluster schema)
set(ALPASIM_ALLOWED_DEPS_sim core ir cluster schema cost_model)
set(ALPASIM_ALLOWED_DEPS_planner core ir cluster schema cost_model sim)
set(ALPASIM_ALLOWED_DEPS_exec core ir cluster schema dist)
set(ALPASIM_ALLOWED_DEPS_dist core)
set(ALPASIM_ALLOWED_DEPS_driver core ir cluster schema cost_model sim planner exec dist)
# apps, tests, bench and tools sit on top and may use every module.

# Headers of external libraries that only one folder may include (path prefix relative to
# the repository root). Anything matching the regex outside the folder is a layering error.
set(ALPASIM_RESTRICTED_HEADERS
  "glpk\\.h|planner/ilp/"
  "(cuda|cuda_runtime|cuda_runtime_api|cublas|cublasLt|cudnn|nccl)[A-Za-z0-9_]*\\.h|exec/cuda/"
  "mpi[A-Za-z0-9_]*\\.h|dist/mpi_")
