#!/usr/bin/env bash
# Exercise mode (docs/exercises.md): write a stage's core yourself; the stage's own tests judge it.
#   scripts/exercise.sh NN            make exercises/NN_<stage>/ (your copy of the stage's headers
#                                     and test, each part between "// exercise NAME begins" and
#                                     "// exercise NAME ends" replaced by a TODO that states what
#                                     to write) if it is not there yet, then build and test it
#   scripts/exercise.sh NN --check    build and test your copy again after an edit
#   scripts/exercise.sh NN --reset    start over (your copy is kept as exercises/NN_<stage>.old/)
#   scripts/exercise.sh NN --selftest for CI: the TODO copy must FAIL the tests and the copy with
#                                     the reference bodies back must PASS (in a temporary folder)
# Stages with an exercise: 01 (the textbook softmax of a row, and O = P V), 02 (the safe softmax
# of a row), 03 (add_key and merge of the online state), 04 (the online update of a block row), 06
# (D, dS^T in pass 1, dS in pass 2). The reference files are never changed; exercises/ is ignored
# by git. Exit 0 when the tests pass, 1 when they fail, 2 for a usage error.
set -uo pipefail
cd "$(dirname "$0")/.."
NN=${1:-}
MODE=${2:-}
usage() { echo "usage: scripts/exercise.sh NN [--check|--reset|--selftest]  (NN: 01, 02, 03, 04 or 06)" >&2; exit 2; }
case "$NN" in
  01) stage=01_naive test=test_naive.cpp ;;
  02) stage=02_safe_softmax test=test_safe_softmax.cpp ;;
  03) stage=03_online_softmax test=test_online_softmax.cpp ;;
  04) stage=04_tiled_cpu test=test_tiled.cpp ;;
  06) stage=06_backward_recompute test=test_backward.cpp ;;
  *) echo "exercise: NN: expected 01, 02, 03, 04 or 06 (the stages with an exercise), found '$NN'" >&2; usage ;;
esac
case "$MODE" in ""|--check|--reset|--selftest) ;; *) echo "exercise: expected --check, --reset or --selftest, found '$MODE'" >&2; usage ;; esac

# The contract of each exercise: what the learner's code must do, in the variables the reference
# uses. It becomes the comment line above the TODO in the learner's copy. (The reference files
# hold only the two markers, "// exercise NAME begins" and "// exercise NAME ends".)
contracts() {
  cat <<'END'
softmax_row	pr[j] = exp(s[j]) / l, l = sum over j of exp(s[j]) (no max subtracted: Vaswani et al. 2017, eq. 1); LSE[p.lse_offset(b, h, i)] = log(l); a row with p.keys_seen(i) == 0 gets pr = 0 and LSE = -inf, never 0 / 0
pv	o[c] = sum over keys j of pr[j] * V[j][c], c < d, with V's row j of head h at V + p.kv_offset(b, h, j) (the GQA mapping is inside kv_offset)
safe_row	from row s (N_k scores, -inf where hidden) write P_ij = exp(S_ij - m_i) / l_i with m_i the row max, l_i = sum_j exp(S_ij - m_i), LSE_i = m_i + log(l_i); a row that sees no key: P = 0, LSE = -inf
add_key	fold key (s, v) into st: m_new = max(m, s); l, o *= exp(m - m_new); l += exp(s - m_new); o += exp(s - m_new) v; m = m_new (use exp_minus)
merge	the state over both key sets: r.m = max(a.m, b.m); r.l and r.o = a's and b's, each rescaled by exp(its m - r.m), summed
block_update	row r of S (bcp scores in s) into m[r], l[r] and row r of O_i: m_new = max(m, row_max), s = exp(s - m_new) (exp_sub_sum), l and O_i row rescaled by exp(m - m_new); no -inf - -inf
row_dots	D[r] = sum over the d columns of dO * O, row r (both [rows, d], row-major)
ds_t	dSt (bc rows of Brp, now dP^T) becomes dS^T = P^T * (dP^T - D_i): St holds P^T, Di holds D_i (VW floats at a time with load/store, or one by one)
ds	row r of dS (bcp values in ds, now dP) becomes P * (dP - D_r), P = exp(s - LSE_r) (exp_neg; a -inf LSE must give P = 0, never NaN)
END
}

# make_copy DIR [reference]: the stage's headers and test into DIR; the lines between
# "// exercise NAME begins" and "// exercise NAME ends" become the contract and one TODO line
# (with "reference", they are kept: the copy is then the reference itself). A marker without its
# partner, or an exercise without a contract, stops the script: the copy would not be the exercise.
make_copy() {
  local dir=$1 keep=${2:-} f
  mkdir -p "$dir"
  for f in "$stage"/*.hpp "$stage/$test"; do
    contracts | awk -F'\t' -v keep="$keep" -v file="$f" '
      FNR == NR { contract[$1] = $2; next }
      match($0, /\/\/ exercise [a-z_]+ begins$/) {
        if (open != "") { print file ": exercise " open " has no end marker" > "/dev/stderr"; exit 3 }
        open = $0; sub(/.*\/\/ exercise /, "", open); sub(/ begins$/, "", open)
        if (!(open in contract)) { print file ": exercise " open " has no contract in scripts/exercise.sh" > "/dev/stderr"; exit 3 }
        if (keep == "") {
          indent = substr($0, 1, RSTART - 1)
          print indent "// exercise " open ": " contract[open]
          print indent "// TODO: your code here. Then: scripts/exercise.sh " ENVIRON["NN"] " --check"
          skip = 1
          next
        }
      }
      match($0, /\/\/ exercise [a-z_]+ ends$/) {
        name = $0; sub(/.*\/\/ exercise /, "", name); sub(/ ends$/, "", name)
        if (name != open) { print file ": \"exercise " name " ends\" without its begin marker" > "/dev/stderr"; exit 3 }
        open = ""; skip = 0
      }
      !skip { print }
      END { if (open != "") { print file ": exercise " open " has no end marker" > "/dev/stderr"; exit 3 } }' - "$f" >"$dir/$(basename "$f")" || exit 2
  done
}
export NN

# hint OUTPUT: the classic bug (docs/bug_zoo.md) a failure looks like, where the failing checks
# tell: which quantities fail the rule (the "X: stage err" lines the battery logs), and whether
# the output holds NaN or breaks the masked-row checks.
hint() {
  local out=$1 failed
  failed=$(grep -oE "(O vs float64|LSE vs float64|dQ|dK|dV): stage err" <<<"$out" | sed 's/ vs float64//; s/: stage err//' | sort -u | tr '\n' ' ')
  if grep -qE "stage\.nonfinite == 0|infinity\(\) \)|== 0\.f \)" <<<"$out"; then
    echo "hint: NaN or inf where a number belongs, or a row that sees no key got something other than"
    echo "      O = 0 and LSE = -inf: such a row must not compute exp(-inf - (-inf)) or 0 / 0"
    echo "      (docs/bug_zoo.md, NAN_ON_MASKED_ROW)."
  elif [ "$failed" = "LSE " ]; then
    echo "hint: O is right and LSE is not: LSE = m + log(l), in natural log (docs/bug_zoo.md, LSE_LOG2)."
  elif [[ "$failed" != *dV* && ( "$failed" == *dQ* || "$failed" == *dK* ) ]]; then
    echo "hint: dV is right and dQ or dK is not: the error is in dS = P * (dP - D); check D = rowsum(dO * O)"
    echo "      (docs/bug_zoo.md, D_FROM_DO_ONLY)."
  elif [[ "$failed" == *O* && "$failed" == *LSE* ]]; then
    echo "hint: O and LSE are both off: if your code keeps a running max, every rescale is by"
    echo "      exp(m_old - m_new) with m_new the new running max (docs/bug_zoo.md, RESCALE_BY_NEW_KEY)."
  fi
}

# build_and_test BUILD_DIR EXERCISE_ROOT: builds exercise_<stage> (in its own build folder, so the
# main build/ keeps its settings) and runs it; returns 0 (pass), 1 (fail) or 2 (no build).
build_and_test() {
  local build=$1 root=$2
  scripts/setup.sh >/dev/null || return 2
  mkdir -p "$build"  # its logs go inside it (ignored by git)
  # Without CUDA (-DCMAKE_CUDA_COMPILER=): the exercises are CPU code, and with nvcc present the
  # stage 06 target would pull in and compile every GPU kernel first (about 2.5 minutes on 2 cores).
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFA_BUILD_BENCHMARKS=OFF -DFA_BUG_ZOO=OFF \
    -DCMAKE_CUDA_COMPILER= -DFA_EXERCISE_DIR="$root" >"$build/exercise.configure.log" 2>&1 || { tail -n 20 "$build/exercise.configure.log"; return 2; }
  if ! cmake --build "$build" --target "exercise_$stage" >"$build/exercise.build.log" 2>&1; then
    echo "exercise $NN: your code does not compile:"
    grep -E "error|note: " "$build/exercise.build.log" | head -n 20
    return 1
  fi
  local out rc
  out=$("$build/$stage/exercise_$stage" 2>&1)
  rc=$?
  if [ $rc -eq 0 ]; then
    echo "exercise $NN: every test of stage $stage passes with your code."
    grep -E "^\[doctest\] (test cases|assertions)" <<<"$out"
    return 0
  fi
  echo "exercise $NN: the tests fail with your code. The first failing test case and what it logged:"
  awk '/^TEST CASE:/ {n++} n == 1' <<<"$out" | grep -vE "^=+$" | head -n 25
  grep -E "^\[doctest\] (test cases|assertions)" <<<"$out"
  hint "$out"
  echo "(all of it: $build/$stage/exercise_$stage; the classic bugs and their symptoms: docs/bug_zoo.md)"
  return 1
}

if [ "$MODE" = --selftest ]; then
  tmp=$(mktemp -d /tmp/fa-exercise-XXXXXX)
  make_copy "$tmp/todo/$stage"
  make_copy "$tmp/ref/$stage" reference
  build_and_test "build-exercise-selftest-$NN" "$tmp/todo" >"$tmp/todo.log" 2>&1
  todo_rc=$?
  build_and_test "build-exercise-selftest-$NN" "$tmp/ref" >"$tmp/ref.log" 2>&1
  ref_rc=$?
  ok=1
  if [ $todo_rc -ne 1 ]; then echo "selftest $NN: the TODO copy should fail the tests (exit 1), got exit $todo_rc:"; tail -n 15 "$tmp/todo.log"; ok=0; fi
  if [ $ref_rc -ne 0 ]; then echo "selftest $NN: the copy with the reference bodies should pass, got exit $ref_rc:"; tail -n 15 "$tmp/ref.log"; ok=0; fi
  if [ $ok -eq 1 ]; then
    echo "selftest $NN: the TODO copy fails ($(grep -m1 -oE 'test cases: *[0-9]+ \| *[0-9]+ passed \| *[0-9]+ failed' "$tmp/todo.log")), the reference copy passes"
    rm -rf "$tmp"
    exit 0
  fi
  exit 1
fi

dir=exercises/$stage
if [ "$MODE" = --reset ] && [ -d "$dir" ]; then
  rm -rf "$dir.old" && mv "$dir" "$dir.old" && echo "exercise $NN: your copy is now $dir.old"
fi
if [ ! -d "$dir" ]; then
  make_copy "$dir"
  echo "exercise $NN: your copy is $dir/; write the parts marked TODO (docs/exercises.md says what each teaches):"
  grep -n "// exercise [a-z_]*:" "$dir"/*.hpp | sed -E 's|^([^:]+):([0-9]+): *// exercise ([a-z_]+): |  \1, line \2, \3: |'
elif [ -z "$MODE" ]; then
  echo "exercise $NN: $dir/ exists (your work is kept; --reset starts over)"
fi
build_and_test build-exercise "$PWD/exercises"
