#!/usr/bin/env bash
# The bug zoo's ctest runner (docs/bug_zoo.md): runs a stage's test program built with one
# injected bug and passes only if that program FAILS, printing the test cases that caught it.
#   scripts/zoo_expect_fail.sh TEST_PROGRAM [doctest flags]
set -u
out=$("$@" --abort-after=5 2>&1)
rc=$?
if [ $rc -eq 0 ]; then
  echo "NOT CAUGHT: every test passed with the bug injected"
  exit 1
fi
caught=$(grep -E "TEST CASE:" <<<"$out" | sort -u)
if [ -z "$caught" ]; then  # a crash before any test, or no program at all, is not a catch
  echo "NOT CAUGHT: the program failed (exit code $rc) without a failing test case:"
  tail -n 5 <<<"$out"
  exit 1
fi
echo "caught (exit code $rc) by:"
sed 's/^/  /' <<<"$caught"
# The first failing check, with what it saw: doctest's ERROR line, then its "values:" and
# "logged:" lines (the INFO context: dtype, case), up to the blank line that ends the report.
echo "first failure:"
awk '/ERROR:/ { n++ } n == 1 { if ($0 == "") exit; print }' <<<"$out" | sed 's/^/  /'
exit 0
