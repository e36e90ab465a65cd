# Warning set and sanitizers, applied to every alpa-sim target by the helpers.
set(ALPASIM_CXX_WARNINGS
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
  -Wcast-align -Woverloaded-virtual -Wimplicit-fallthrough)
# GCC 12 reports a false -Wrestrict inside libstdc++'s std::string operator+ at -O3
# (GCC bug 105651, fixed in GCC 13); with -Werror it breaks Release builds of correct code.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  list(APPEND ALPASIM_CXX_WARNINGS -Wno-restrict)
endif()

function(alpasim_apply_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${ALPASIM_CXX_WARNINGS}>)
  if(ALPASIM_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
  if(ALPASIM_SANITIZE)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${ALPASIM_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all>)
    target_link_options(${target} PRIVATE -fsanitize=${ALPASIM_SANITIZE})
  endif()
endfunction()
