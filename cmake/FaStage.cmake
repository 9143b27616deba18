# fa_private_tmpdir(<test>...): each test its own TMPDIR, <build>/tmp/<test> (made here). The
# program tests write fixed names under std::filesystem::temp_directory_path()
# (/tmp/fa_test_04_cli, ...), and the bug zoo and exercise mode build the same test source again:
# under ctest -j (scripts/test.sh runs one test per core) two of them would share, and delete, each
# other's files.
function(fa_private_tmpdir)
  foreach(t IN LISTS ARGN)
    set(dir ${CMAKE_BINARY_DIR}/tmp/${t})
    file(MAKE_DIRECTORY ${dir})
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "TMPDIR=${dir}")
  endforeach()
endfunction()

# fa_add_stage(<name> TEST <test.cpp> [BENCH <bench.cpp>] [GPU] [HOST_TEST <test.cpp>]
#              [LIBS <lib>...] [OPTIONS <flag>...])
# The targets every stage folder has, declared once:
#   <name>        the stage program (main.cpp, the CLI contract of common/cli.hpp)
#   test_<name>   its doctest program, registered with ctest as <name>; STAGE_BIN is the program's path
#   bench_<name>  its Google Benchmark program (if FA_BUILD_BENCHMARKS)
# LIBS are linked to all of them; OPTIONS are compile options of all of them.
# GPU stages add GPU: test_<name> then uses fa_test_gpu's main, which exits 77 without a GPU and
# ctest reports it as skipped; and HOST_TEST: a second test program, test_<name>_host (ctest:
# <name>_host), for what needs no GPU (launch arithmetic, the C ABI's argument checks, the
# program's refusal without a GPU), so CI runs it.
# TEST_PARTS <suffix>=<doctest test-case filter>...: split test_<name> into several ctest tests
# (<name>_<suffix> runs the cases matching the filter, <name> the rest), so `ctest -j` runs the
# slow parts side by side (their CPU reference work dominates; the GPU is shared).
function(fa_add_stage name)
  cmake_parse_arguments(ARG "GPU" "TEST;BENCH;HOST_TEST" "LIBS;OPTIONS;TEST_PARTS" ${ARGN})
  add_executable(${name} main.cpp)
  target_link_libraries(${name} PRIVATE fa_common ${ARG_LIBS})
  target_compile_options(${name} PRIVATE ${ARG_OPTIONS})

  add_executable(test_${name} ${ARG_TEST})
  if(ARG_GPU)
    target_link_libraries(test_${name} PRIVATE fa_test_gpu ${ARG_LIBS})
  else()
    target_link_libraries(test_${name} PRIVATE fa_test ${ARG_LIBS})
  endif()
  target_compile_options(test_${name} PRIVATE ${ARG_OPTIONS})
  target_compile_definitions(test_${name} PRIVATE STAGE_BIN="$<TARGET_FILE:${name}>")
  set(tests ${name})
  set(excluded "")
  foreach(part IN LISTS ARG_TEST_PARTS)
    string(REGEX REPLACE "=.*" "" suffix "${part}")
    string(REGEX REPLACE "^[^=]*=" "" filter "${part}")
    add_test(NAME ${name}_${suffix} COMMAND test_${name} "--test-case=${filter}")
    list(APPEND tests ${name}_${suffix})
    list(APPEND excluded "${filter}")
  endforeach()
  if(excluded)
    list(JOIN excluded "," excluded)
    add_test(NAME ${name} COMMAND test_${name} "--test-case-exclude=${excluded}")
  else()
    add_test(NAME ${name} COMMAND test_${name})
  endif()
  if(ARG_GPU)
    set_tests_properties(${tests} PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
  endif()
  fa_private_tmpdir(${tests})

  if(ARG_HOST_TEST)
    add_executable(test_${name}_host ${ARG_HOST_TEST})
    target_link_libraries(test_${name}_host PRIVATE fa_test ${ARG_LIBS})
    target_compile_options(test_${name}_host PRIVATE ${ARG_OPTIONS})
    target_compile_definitions(test_${name}_host PRIVATE STAGE_BIN="$<TARGET_FILE:${name}>")
    add_test(NAME ${name}_host COMMAND test_${name}_host)
    fa_private_tmpdir(${name}_host)
  endif()

  if(FA_BUILD_BENCHMARKS AND ARG_BENCH)
    add_executable(bench_${name} ${ARG_BENCH})
    target_link_libraries(bench_${name} PRIVATE fa_common benchmark::benchmark ${ARG_LIBS})
    target_compile_options(bench_${name} PRIVATE ${ARG_OPTIONS})
  endif()
endfunction()

# fa_add_zoo(<name> <test.cpp> BUGS <BUG>... [LIBS <lib>...] [OPTIONS <flag>...] [INCLUDES <dir>...])
# The bug zoo (docs/bug_zoo.md, common/bug_zoo.hpp): for each BUG, the stage's test program built
# again with -DFA_BUG_ID=<BUG> (zoo_<name>_<bug>), and a ctest test zoo_<bug> (label zoo) that
# passes only if that program FAILS (scripts/zoo_expect_fail.sh names the test cases that caught
# it). Off with -DFA_BUG_ZOO=OFF.
function(fa_add_zoo name test_src)
  cmake_parse_arguments(ARG "" "" "BUGS;LIBS;OPTIONS;INCLUDES" ${ARGN})
  if(NOT FA_BUG_ZOO)
    return()
  endif()
  foreach(bug IN LISTS ARG_BUGS)
    string(TOLOWER ${bug} low)
    set(t zoo_${name}_${low})
    add_executable(${t} ${test_src})
    target_link_libraries(${t} PRIVATE fa_test ${ARG_LIBS})
    target_compile_options(${t} PRIVATE ${ARG_OPTIONS})
    target_include_directories(${t} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${ARG_INCLUDES})
    target_compile_definitions(${t} PRIVATE FA_BUG_ID=${bug} STAGE_BIN="$<TARGET_FILE:${name}>")
    add_test(NAME zoo_${low} COMMAND ${CMAKE_SOURCE_DIR}/scripts/zoo_expect_fail.sh $<TARGET_FILE:${t}>)
    set_tests_properties(zoo_${low} PROPERTIES LABELS zoo)
    fa_private_tmpdir(zoo_${low})
  endforeach()
endfunction()

# fa_add_exercise(<name> <test.cpp> [INCLUDES <dir>...] [OPTIONS <flag>...] [DEFINES <def>...])
# Exercise mode (docs/exercises.md, scripts/exercise.sh): where FA_EXERCISE_DIR/<name>/ holds a
# learner's copy of the stage's headers and test, exercise_<name> is that test program built from
# the copy, with the stage's own flags; the copy's headers sit beside its test, so they are the
# ones it includes. Nothing is built when the folder does not exist (the usual case).
function(fa_add_exercise name test_src)
  cmake_parse_arguments(ARG "" "" "INCLUDES;OPTIONS;DEFINES" ${ARGN})
  set(dir ${FA_EXERCISE_DIR}/${name})
  if(NOT EXISTS ${dir}/${test_src})
    return()
  endif()
  add_executable(exercise_${name} ${dir}/${test_src})
  target_link_libraries(exercise_${name} PRIVATE fa_test)
  target_compile_options(exercise_${name} PRIVATE ${ARG_OPTIONS})
  target_include_directories(exercise_${name} PRIVATE ${dir} ${ARG_INCLUDES})
  # The test's program cases run the stage's program, built from the reference.
  target_compile_definitions(exercise_${name} PRIVATE STAGE_BIN="$<TARGET_FILE:${name}>" ${ARG_DEFINES})
  add_dependencies(exercise_${name} ${name})
endfunction()
