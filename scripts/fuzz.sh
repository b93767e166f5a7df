#!/usr/bin/env bash
# Fuzz rmq-wire's stored-message decoder for SECONDS per run (default 60).
#   - always: the stable `replay` driver (seeds + deterministic mutants), crates/rmq-wire/fuzz
#   - if a nightly toolchain is installed: cargo-fuzz (libFuzzer + ASan) on decode_record and
#     decode_stream, installing cargo-fuzz from crates.io if it is missing.
# FUZZ_FEATURES adds features to every run (e.g. FUZZ_FEATURES=strict). Exits non-zero on a crash.
set -euo pipefail
secs="${1:-60}"
extra="${FUZZ_FEATURES:-}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fuzz="$root/crates/rmq-wire/fuzz"

echo "== stable replay (${secs}s)"
(cd "$fuzz" && cargo run --release --bin replay ${extra:+--features "$extra"} -- "$secs")

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "== no nightly toolchain: skipping cargo fuzz (rustup toolchain install nightly --profile minimal)"
    exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
for t in decode_record decode_stream decode_frames decode_batch; do
    corpus="$fuzz/corpus/$t"
    if [ ! -d "$corpus" ]; then
        (cd "$fuzz" && cargo run -q --release --bin replay -- --write-corpus "corpus/$t")
    fi
    echo "== cargo fuzz $t (${secs}s)"
    log="$fuzz/target/fuzz-$t.log"
    mkdir -p "$fuzz/target"
    status=0
    (cd "$root/crates/rmq-wire" &&
        cargo +nightly fuzz run "$t" --features "fuzz${extra:+,$extra}" -- \
            -max_total_time="$secs" -print_final_stats=1) >"$log" 2>&1 || status=$?
    grep -E '^(Done|stat::average_exec_per_sec)' "$log" || true
    if [ "$status" -ne 0 ]; then
        grep -E -A3 'panicked|Test unit written|^error' "$log" | head -20 || true
        echo "== cargo fuzz $t failed (exit $status); full log: $log"
        exit 1
    fi
done
