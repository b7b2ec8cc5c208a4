#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# model/check.sh: the exhaustive SPIN check of chime's timer slot protocol
# (model/chime.pml) and of its shard routing (model/shards.pml; configurations
# and mutations named s1, s2, ...; docs/model-check.md says what each models
# and checks).
#
# For every configuration it generates the verifier (spin -a), compiles it
# and explores every state (safety: assertions, invalid end states); for
# the LTL runs it does the same with the never claim; for every seeded
# mutation it builds the mutated model and expects the verifier to report
# an error. Fails (exit 1) if a configuration or an LTL run reports an
# error or does not complete (depth or memory limit), or if a mutation is
# not caught. Prints a summary table.
#
# Usage: model/check.sh [what ...]
#   what: all (default) | configs | ltl | mutations | config N | mutation N
#         (N: a number for chime.pml's, sN for shards.pml's)
# Environment:
#   SPIN        the spin binary (default: spin; Debian package `spin`)
#   CC          the C compiler for pan.c (default: cc)
#   PAN_CFLAGS  default -O0: pan.c is ~400 KB and compiles in 2 s at -O0
#               against 15 s at -O2, which only runs ~1.7x faster here
#   PAN_MEMLIM  pan's memory limit in MB (default 2048); a search that hits
#               it is incomplete, and fails
#   CHIME_MODEL_WORK  a folder for the generated files (default: a temporary
#               folder, removed at exit)
# Exit status: 0 all good; 1 a failure; 2 bad usage; 77 spin or the C
# compiler is missing (ctest reports the test as skipped).
#
# Every run is exhaustive: -DCOLLAPSE only compresses the stored states
# (lossless); no bitstate or hash-compact search is used.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODEL="$HERE/chime.pml"
SHARDS_MODEL="$HERE/shards.pml"
SPIN="${SPIN:-spin}"
CC="${CC:-cc}"
PAN_CFLAGS="${PAN_CFLAGS:--O0}"
PAN_MEMLIM="${PAN_MEMLIM:-2048}"
PAN_RUN=(-m10000 -w22)   # depth bound (the deepest configuration needs ~650), 2^22 hash slots

# The configurations (model/chime.pml, "Configurations").
CONFIGS=(
  "1 cancel"
  "2 reschedule"
  "3 shutdown"
  "4 periodic"
  "5 inline"
  "6 timer_every"
  "7 timer_rearm"
  "8 lane"
  "9 lane_shutdown"
  "10 wakeup"
  "11 lane_resched"
  "12 lane_resched_shutdown"
  "s1 shards_reuse"
  "s2 shards_two_live"
  "s3 shards_rearm"
)
# LTL runs: configuration, claim. Every safety run also checks both
# properties as assertions (the Watch monitor; the B1 assertion); these
# check the LTL formulations, where each matters most.
LTL_RUNS=(
  "1 cancel_sticks"
  "4 cancel_sticks"
  "2 no_lost_wakeup"
  "10 no_lost_wakeup"
)
# Seeded mutations: number, configuration, claim ("-": safety run), what.
MUTATIONS=(
  "1 1 - C1/C2/C4 a plain store, not a CAS (decide_cancel)"
  "2 1 - K1: the canceller frees the slot without looking at the filed bit"
  "3 1 - decide_cancel skips the generation check (a stale id)"
  "4 1 - W1 a store whatever the word is (no state check)"
  "5 2 - W1 does not compare the version (reschedule-later ABA)"
  "6 10 no_lost_wakeup P1 fence missing: the bound read before the post"
  "7 10 no_lost_wakeup P2 fence missing: the queue read before the bound is published"
  "8 1 - F1 a store, not an exchange (misses a waiter bit)"
  "9 4 - F4 a store, not an exchange (misses a waiter bit)"
  "10 1 - A1 a store, not a CAS"
  "11 2 - R3 leaves an unfiled slot unfreed"
  "12 3 - schedule does not read stopped_ again after posting its ADD"
  "13 1 - B1 a store, not a CAS"
  "14 9 - run_lane does not read stopped_ after bumping runs_active"
  "15 1 - K1: the unfiled slot freed before Cancelled is published"
  "16 4 - F2 a store, not a CAS"
  "17 3 - the shutdown sweep leaves a zombie unfreed"
  "18 4 - cancel_and_wait sleeps without setting the waiter bit (no WB)"
  "19 6 - ~Timer: cancel, not cancel_and_wait, on the current timer"
  "20 11 - run() ignores the version of a lane's record (holds_claim by generation only)"
  "21 11 - close_lane's L3 ignores the version of a record (holds_claim by generation only)"
  "22 11 - R4 does not bump the version (Handed -> Writing, same version)"
  "23 11 - R4 a plain store, not a CAS"
  "24 12 - LaneRunsHold::enter does not read stopped_ (R4 after shutdown began)"
  "25 11 - no ADD after R4 (as after a later reschedule: left to the wheel)"
  "26 1 - reclaim leaves the filed bit (the shutdown sweep frees the slot again)"
  "27 8 - L1/L2 keep the filed bit (the shutdown sweep frees the slot again)"
  "s1 s1 - schedule does not record its shard in the slot (the previous timer's stays)"
  "s2 s1 - a reschedule posts to the caller's shard, not the timer's"
  "s3 s1 - A1 skips the generation check (a stale ADD filed by the old shard)"
  "s4 s1 - a RESCHEDULE re-files any filed timer, not the generation this shard filed"
  "s5 s1 - the zombie sweep walks the slab, not its own wheel (another shard's zombie)"
  "s6 s3 - a worker posts a periodic timer's REARM to its own thread's shard, not Dispatch::shard"
  "s7 s1 - reclaim leaves the filed bit (a stale RESCHEDULE takes the freed slot for filed)"
)

usage() {
  sed -n '3,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
  exit 2
}

# ---- what to run
want_configs=() want_ltl=0 want_muts=()
if (($# == 0)); then set -- all; fi
while (($#)); do
  case "$1" in
    all) for c in "${CONFIGS[@]}"; do want_configs+=("${c%% *}"); done
         want_ltl=1
         for m in "${MUTATIONS[@]}"; do want_muts+=("${m%% *}"); done ;;
    configs) for c in "${CONFIGS[@]}"; do want_configs+=("${c%% *}"); done ;;
    ltl) want_ltl=1 ;;
    mutations) for m in "${MUTATIONS[@]}"; do want_muts+=("${m%% *}"); done ;;
    config) shift; (($#)) || usage; want_configs+=("$1") ;;
    mutation) shift; (($#)) || usage; want_muts+=("$1") ;;
    -h|--help) usage ;;
    *) echo "check.sh: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done

# ---- tools
if ! command -v "$SPIN" >/dev/null 2>&1; then
  echo "check.sh: SKIPPED: '$SPIN' not found. Install SPIN (Debian: apt-get install spin; scripts/lib/deps.sh lists it)." >&2
  exit 77
fi
if ! command -v "$CC" >/dev/null 2>&1; then
  echo "check.sh: SKIPPED: C compiler '$CC' not found (set CC)." >&2
  exit 77
fi
if [[ -n "${CHIME_MODEL_WORK:-}" ]]; then
  WORK="$CHIME_MODEL_WORK"
  mkdir -p "$WORK"
else
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/chime-model.XXXXXX")"
  trap 'rm -rf "$WORK"' EXIT
fi
echo "model: $MODEL"
echo "spin:  $("$SPIN" -V 2>&1 | head -1); cc: $CC $PAN_CFLAGS; work: $WORK"

failures=0
summary=()
start_all=$SECONDS

name_of_config() {
  local c
  for c in "${CONFIGS[@]}"; do [[ "${c%% *}" == "$1" ]] && { echo "${c#* }"; return; }; done
  echo "?"
}

# model_of ID: the model file of configuration or mutation ID (sN: shards.pml's N; else chime.pml's)
model_of() { if [[ "$1" == s* ]]; then echo "$SHARDS_MODEL"; else echo "$MODEL"; fi; }

# build DIR DEFINES CLAIMS(0|1) [MODEL]: spin -a, then compile pan
build() {
  local dir="$1" defs="$2" claims="$3" model="${4:-$MODEL}"
  rm -rf "$dir"; mkdir -p "$dir"
  # shellcheck disable=SC2086  # defs is a list of -D flags
  if ! (cd "$dir" && "$SPIN" $defs -a "$model" >spin.log 2>&1); then
    echo "spin -a failed ($defs):"; cat "$dir/spin.log"; return 1
  fi
  local extra=()
  ((claims)) || extra+=(-DNOCLAIM)
  # shellcheck disable=SC2086  # PAN_CFLAGS is a list of flags
  if ! (cd "$dir" && "$CC" $PAN_CFLAGS -DSAFETY -DCOLLAPSE -DMEMLIM="$PAN_MEMLIM" "${extra[@]}" -w -o pan pan.c \
        >cc.log 2>&1); then
    echo "cc failed ($defs):"; cat "$dir/cc.log"; return 1
  fi
}

# facts from a pan output: field 'regex with one (group)' file
field() { sed -nE "s/.*$1.*/\1/p" "$2" | head -1; }
incomplete() {
  grep -qE 'max search depth too small|reached -DMEMLIM bound|out of memory|search not completed' "$1"
}
reason() {
  local out="$1" r
  r="$(grep -m1 -E '^pan:1: ' "$out" | sed -e 's/^pan:1: //' -e 's/ (at depth [0-9]*)//' || true)"
  if [[ "$r" == *"invalid end state"* ]]; then r="invalid end state (a thread blocked forever)"
  elif grep -q "never claim" "$out" && grep -qE 'claim .* violated|assertion violated +!\( *!\(' "$out"; then r="ltl claim violated"
  fi
  echo "${r:0:90}"
}

run_config() {
  local c="$1" name dir t0 out
  name="$(name_of_config "$c")"
  dir="$WORK/config$c"; t0=$SECONDS
  if ! build "$dir" "-DCONFIG=${c#s}" 0 "$(model_of "$c")"; then
    failures=$((failures + 1)); summary+=("FAIL  config $c $name: build"); return
  fi
  out="$dir/pan.out"
  (cd "$dir" && ./pan "${PAN_RUN[@]}" >"$out" 2>&1) || true
  local errs states depth mem secs
  errs="$(field 'errors: ([0-9]+)' "$out")"; states="$(field '^ *([0-9.e+]+) states, stored' "$out")"
  depth="$(field 'depth reached ([0-9]+)' "$out")"; mem="$(field '^ *([0-9.]+)[[:space:]]+total actual memory usage' "$out")"
  secs="$(field 'elapsed time ([0-9.]+)' "$out")"
  if [[ "$errs" == "0" ]] && ! incomplete "$out"; then
    summary+=("$(printf 'ok    config %-2s %-14s %10s states  depth %4s  %7s MB  %6ss (total %ss with the build)' \
      "$c" "$name" "$states" "$depth" "$mem" "$secs" "$((SECONDS - t0))")")
  else
    failures=$((failures + 1))
    summary+=("$(printf 'FAIL  config %-2s %-14s errors %s %s; see %s' "$c" "$name" "${errs:-?}" "$(reason "$out")" "$out")")
    echo "---- the end of $out:"; tail -25 "$out"
  fi
  echo "${summary[-1]}"
}

run_ltl() {
  local c="$1" claim="$2" name dir t0 out
  name="$(name_of_config "$c")"
  dir="$WORK/ltl$c"; t0=$SECONDS
  if [[ ! -x "$dir/pan" ]]; then
    if ! build "$dir" "-DCONFIG=$c" 1; then failures=$((failures + 1)); summary+=("FAIL  ltl $claim config $c: build"); return; fi
  fi
  out="$dir/pan.$claim.out"
  (cd "$dir" && ./pan "${PAN_RUN[@]}" -N "$claim" >"$out" 2>&1) || true
  local errs states secs
  errs="$(field 'errors: ([0-9]+)' "$out")"; states="$(field '^ *([0-9.e+]+) states, stored' "$out")"
  secs="$(field 'elapsed time ([0-9.]+)' "$out")"
  if [[ "$errs" == "0" ]] && ! incomplete "$out"; then
    summary+=("$(printf 'ok    ltl %-16s config %-2s %-14s %10s states  %6ss (total %ss)' \
      "$claim" "$c" "$name" "$states" "$secs" "$((SECONDS - t0))")")
  else
    failures=$((failures + 1))
    summary+=("$(printf 'FAIL  ltl %-16s config %-2s errors %s; see %s' "$claim" "$c" "${errs:-?}" "$out")")
  fi
  echo "${summary[-1]}"
}

run_mutation() {
  local m="$1" spec="" line
  for line in "${MUTATIONS[@]}"; do [[ "${line%% *}" == "$m" ]] && spec="$line"; done
  if [[ -z "$spec" ]]; then echo "check.sh: no mutation $m" >&2; failures=$((failures + 1)); return; fi
  local c claim what dir t0 out
  read -r _ c claim what <<<"$spec"
  dir="$WORK/mut$m"; t0=$SECONDS
  local claims=0 runargs=("${PAN_RUN[@]}")
  if [[ "$claim" != "-" ]]; then claims=1; runargs+=(-N "$claim"); fi
  if ! build "$dir" "-DCONFIG=${c#s} -DMUT=${m#s}" "$claims" "$(model_of "$m")"; then
    failures=$((failures + 1)); summary+=("FAIL  mutation $m: build"); return
  fi
  out="$dir/pan.out"
  (cd "$dir" && ./pan "${runargs[@]}" >"$out" 2>&1) || true
  local errs
  errs="$(field 'errors: ([0-9]+)' "$out")"
  if [[ -n "$errs" && "$errs" != "0" ]]; then
    local why
    why="$(reason "$out")"
    [[ "$claim" != "-" ]] && why="ltl $claim violated"
    summary+=("$(printf 'ok    mutation %-2s caught (config %-2s, %3ss): %s -- %s' "$m" "$c" "$((SECONDS - t0))" "$what" "$why")")
  else
    failures=$((failures + 1))
    summary+=("$(printf 'FAIL  mutation %-2s NOT caught (config %s): %s' "$m" "$c" "$what")")
  fi
  echo "${summary[-1]}"
}

for c in "${want_configs[@]}"; do run_config "$c"; done
if ((want_ltl)); then
  for l in "${LTL_RUNS[@]}"; do run_ltl "${l%% *}" "${l#* }"; done
fi
for m in "${want_muts[@]}"; do run_mutation "$m"; done

echo
echo "==== summary ($((SECONDS - start_all)) s)"
printf '%s\n' "${summary[@]}"
if ((failures)); then
  echo "model check: $failures FAILED"
  exit 1
fi
echo "model check: all passed"
