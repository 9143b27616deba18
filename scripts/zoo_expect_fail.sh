#!/usr/bin/env bash
# The bug zoo's ctest runner (docs/bug_zoo.md): runs a stage's test program built with one
# injected bug and passes only if that program FAILS, printing the test cases that caught it.
#   scripts/zoo_expect_fail.sh TEST_PROGRAM [doctest flags]
# ZOO_TIME_LIMIT (seconds, set by CMake for the GPU entries): a program still running then is
# killed and counts as caught, reported as a hang (a bug that deadlocks a kernel never fails a
# check; a user would see the program never return).
set -u
if [ -n "${ZOO_TIME_LIMIT:-}" ]; then
  out=$(timeout "$ZOO_TIME_LIMIT" "$@" --abort-after=5 2>&1)
else
  out=$("$@" --abort-after=5 2>&1)
fi
rc=$?
hung=0
if [ -n "${ZOO_TIME_LIMIT:-}" ] && [ $rc -eq 124 ]; then
  hung=1
  echo "caught by the time limit: the program was still running after ${ZOO_TIME_LIMIT} s (a hang), killed"
  echo "its last lines:"
  tail -n 5 <<<"$out" | sed 's/^/  /'
fi
if [ $rc -eq 0 ]; then
  echo "NOT CAUGHT: every test passed with the bug injected"
  exit 1
fi
caught=$(grep -E "TEST CASE:" <<<"$out" | sort -u)
if [ -z "$caught" ] && [ $hung -eq 1 ]; then
  echo "(no test case had failed before it hung)"
  exit 0
fi
if [ -z "$caught" ]; then  # a crash before any test, or no program at all, is not a catch
  echo "NOT CAUGHT: the program failed (exit code $rc) without a failing test case:"
  tail -n 5 <<<"$out"
  exit 1
fi
[ $hung -eq 1 ] && echo "before it hung, these test cases had failed:" || echo "caught (exit code $rc) by:"
sed 's/^/  /' <<<"$caught"
# The first failing check, with what it saw: doctest's ERROR line, then its "values:" and
# "logged:" lines (the INFO context: dtype, case), up to the blank line that ends the report.
echo "first failure:"
awk '/ERROR:/ { n++ } n == 1 { if ($0 == "") exit; print }' <<<"$out" | sed 's/^/  /'
exit 0
