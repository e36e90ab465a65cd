# alpa-exec (docs/executor.md), included from apps/CMakeLists.txt. In a CUDA build it links
# the CUDA backend and backends.cc registers it (the one #ifdef ALPASIM_HAVE_CUDA, STYLE.md 9.6).
alpasim_add_executable(NAME alpa-exec
  SRCS alpa-exec/main.cc alpa-exec/backends.cc
  DEPS exec core schema CLI11::CLI11)
if(TARGET alpasim_exec_cuda)
  target_link_libraries(alpa-exec PRIVATE alpasim_exec_cuda)
  target_compile_definitions(alpa-exec PRIVATE ALPASIM_HAVE_CUDA=1)
endif()
