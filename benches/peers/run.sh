#!/usr/bin/env bash
# keel side by side with frameworks that store nothing, against one mock (issue 18):
# rig (Rust) and a plain OpenAI SDK tool loop (Python), each driven against `keel mock-provider`
# with the scripts `keel bench` uses, and keel itself through `keel bench --http` (memory store
# and SQLite). One command: builds what is missing, runs everything, prints the table.
#
#   benches/peers/run.sh               # REPEAT=3 passes of each measure, medians
#   REPEAT=1 benches/peers/run.sh      # a quick pass
#
# Measures (all against the mock in its own process, 0 ms latency, whole answers):
#   warm ms/iter   one 20-tool conversation (21 model calls) after a warm-up one: wall ÷ 21
#   start→answer   a fresh process to its answer of a one-call conversation (hyperfine);
#                  keel is `keel run` with its SQLite store
#   calls/s        100 concurrent conversations × 11 model calls (10 tools), after a warm-up
#   peak RSS       VmHWM of the contender's process in the 1-conversation and the C=100 runs
# Results go to benches/peers/out/ (git-ignored); the table is printed at the end.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
OUT="$HERE/out"
REPEAT="${REPEAT:-3}"
KEEL="$ROOT/target/release/keel"
RIG="$HERE/rig/target/release/peers-rig"
PY="$HERE/.venv/bin/python"

step() { printf '\n== %s\n' "$*" >&2; }

step "building keel (release) and the rig contender"
(cd "$ROOT" && cargo build --release -p keel --quiet)
# rig-core 0.46 declares rust-version 1.97.1; it builds on older stable toolchains as is.
(cd "$HERE/rig" && cargo build --release --quiet --ignore-rust-version)

step "the Python contender's venv (openai)"
if [ ! -x "$PY" ]; then
  python3 -m venv "$HERE/.venv"
fi
"$PY" -c 'import openai' 2>/dev/null || "$PY" -m pip install --quiet openai

if ! command -v hyperfine >/dev/null; then
  step "installing hyperfine"
  if command -v apt-get >/dev/null; then
    (apt-get install -y hyperfine >/dev/null 2>&1) \
      || (apt-get update >/dev/null && apt-get install -y hyperfine >/dev/null)
  else
    cargo install --locked hyperfine
  fi
fi

rm -rf "$OUT"
mkdir -p "$OUT"
python3 "$HERE/peers.py" scripts "$OUT"

MOCKS=()
cleanup() {
  for pid in "${MOCKS[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

# Starts `keel mock-provider` on a script; prints its root URL.
start_mock() {
  local script="$1" log="$OUT/mock-$(basename "$1" .json).addr"
  "$KEEL" mock-provider --no-record --script "$script" >"$log" 2>/dev/null &
  MOCKS+=("$!")
  for _ in $(seq 100); do
    if [ -s "$log" ]; then head -n1 "$log"; return; fi
    sleep 0.05
  done
  echo "keel mock-provider did not start" >&2
  exit 1
}

MOCK21="$(start_mock "$OUT/loop-21.json")"
MOCK11="$(start_mock "$OUT/loop-11.json")"
MOCKA="$(start_mock "$OUT/answer.json")"

for pass in $(seq "$REPEAT"); do
  step "pass $pass of $REPEAT: one 20-tool conversation, then 100 at once"
  "$RIG" --url "$MOCK21/v1" --conversations 1 --expect-calls 21 >"$OUT/rig.one.$pass.json"
  "$RIG" --url "$MOCK11/v1" --conversations 100 --expect-calls 11 >"$OUT/rig.many.$pass.json"
  "$PY" "$HERE/python/loop.py" --url "$MOCK21/v1" --conversations 1 --expect-calls 21 \
    >"$OUT/python.one.$pass.json"
  "$PY" "$HERE/python/loop.py" --url "$MOCK11/v1" --conversations 100 --expect-calls 11 \
    >"$OUT/python.many.$pass.json"
  for store in memory sqlite; do
    "$KEEL" bench --http --store "$store" --latency-ms 0 --conversations 1 --iterations 21 \
      --json >"$OUT/keel-$store.one.$pass.json"
    "$KEEL" bench --http --store "$store" --latency-ms 0 --conversations 100 --iterations 11 \
      --json >"$OUT/keel-$store.many.$pass.json"
  done
done

step "start→answer (hyperfine)"
HOME_DIR="$OUT/keel-home"
mkdir -p "$HOME_DIR"
HF=(hyperfine --style none --warmup 3 --runs "$((10 * REPEAT))")
"${HF[@]}" --export-json "$OUT/rig.start.json" "'$RIG' --once --url '$MOCKA/v1'" >&2
"${HF[@]}" --export-json "$OUT/python.start.json" \
  "'$PY' '$HERE/python/loop.py' --once --url '$MOCKA/v1'" >&2
"${HF[@]}" --export-json "$OUT/keel-sqlite.start.json" \
  "KEEL_HOME='$HOME_DIR' '$KEEL' run --provider mock --base-url '$MOCKA' --no-stream 'Say hello.'" >&2

step "the machine"
{
  echo "$(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  echo "$(free -g | awk '/Mem:/ {print $2}') GiB, $(uname -sr), $(rustc --version), $("$PY" --version), openai $("$PY" -c 'import openai; print(openai.__version__)')"
} | tee "$OUT/machine.txt"
echo
python3 "$HERE/peers.py" table "$OUT" | tee "$OUT/table.md"
