# fa_add_stage(<name> TEST <test.cpp> [BENCH <bench.cpp>] [LIBS <lib>...] [OPTIONS <flag>...])
# The targets every stage folder has, declared once:
#   <name>        the stage program (main.cpp, the CLI contract of common/cli.hpp)
#   test_<name>   its doctest program, registered with ctest as <name>; STAGE_BIN is the program's path
#   bench_<name>  its Google Benchmark program (if FA_BUILD_BENCHMARKS)
# LIBS are linked to all three; OPTIONS are compile options of all three.
function(fa_add_stage name)
  cmake_parse_arguments(ARG "" "TEST;BENCH" "LIBS;OPTIONS" ${ARGN})
  add_executable(${name} main.cpp)
  target_link_libraries(${name} PRIVATE fa_common ${ARG_LIBS})
  target_compile_options(${name} PRIVATE ${ARG_OPTIONS})

  add_executable(test_${name} ${ARG_TEST})
  target_link_libraries(test_${name} PRIVATE fa_test ${ARG_LIBS})
  target_compile_options(test_${name} PRIVATE ${ARG_OPTIONS})
  target_compile_definitions(test_${name} PRIVATE STAGE_BIN="$<TARGET_FILE:${name}>")
  add_test(NAME ${name} COMMAND test_${name})

  if(FA_BUILD_BENCHMARKS AND ARG_BENCH)
    add_executable(bench_${name} ${ARG_BENCH})
    target_link_libraries(bench_${name} PRIVATE fa_common benchmark::benchmark ${ARG_LIBS})
    target_compile_options(bench_${name} PRIVATE ${ARG_OPTIONS})
  endif()
endfunction()
