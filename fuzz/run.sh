#!/usr/bin/env bash
# One AFL++ campaign on one target, then its queue minimised into fuzz/corpus/TARGET.
#   fuzz/run.sh TARGET [MINUTES=20]
# Needs `cargo install cargo-afl`, `cargo afl config --build` and `cargo afl build --release`
# (in fuzz/). Starts from fuzz/seeds/TARGET plus the kept corpus; writes fuzz/out/TARGET
# (ignored by git) and prints the campaign's figures as one line:
#   target minutes execs corpus_before corpus_after crashes hangs
set -euo pipefail
cd "$(dirname "$0")"
t=$1
minutes=${2:-20}
bin=target/release/$t
[ -x "$bin" ] || { echo "no $bin: run 'cargo afl build --release' in fuzz/" >&2; exit 2; }
in=$(mktemp -d)
trap 'rm -rf "$in"' EXIT
cp seeds/"$t"/* "$in"/ 2>/dev/null || true
cp corpus/"$t"/* "$in"/ 2>/dev/null || true
before=$(ls "$in" | wc -l)
dict=()
[ -f dict/"$t".dict ] && dict=(-x dict/"$t".dict)
rm -rf out/"$t"
mkdir -p out
export AFL_NO_AFFINITY=1 AFL_SKIP_CPUFREQ=1 AFL_NO_UI=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1
cargo afl fuzz -i "$in" -o out/"$t" -V $((minutes * 60)) -t 2000 "${dict[@]}" -- "$bin" > out-"$t".log 2>&1 || true
stats=out/$t/default/fuzzer_stats
[ -f "$stats" ] || { echo "afl-fuzz did not start: see fuzz/out-$t.log" >&2; exit 1; }
execs=$(awk -F' *: *' '$1=="execs_done"{print $2}' "$stats")
crashes=$(awk -F' *: *' '$1=="saved_crashes"{print $2}' "$stats")
hangs=$(awk -F' *: *' '$1=="saved_hangs"{print $2}' "$stats")
rm -rf corpus/"$t".new
# afl-cmin.bash: the Python afl-cmin of AFL++ 4.40c recorded no tuples for most targets here.
PATH="$HOME/.local/share/afl.rs/AFLplusplus:$PATH" afl-cmin.bash -i out/"$t"/default/queue -o corpus/"$t".new -- "$bin" > cmin-"$t".log 2>&1
rm -rf corpus/"$t" && mv corpus/"$t".new corpus/"$t"
after=$(ls corpus/"$t" | wc -l)
echo "$t $minutes $execs $before $after $crashes $hangs"
