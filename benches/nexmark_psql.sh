#!/bin/bash
# The issue-18 Nexmark table by hand: one query on a fresh release server, through psql.
#   benches/nexmark_psql.sh BIN QUERY [WORKERS]     (N=10000000 events by default)
# Prints wall seconds (CREATE MATERIALIZED VIEW to FLUSH's return), CPU seconds of the
# dataflow threads (weir-dataflow + weir-shard-K), of the generator (weir-src-K + weir-gen-K)
# sampled every 0.1 s while they run, and of the whole process (from /proc), peak RSS and
# the view's rows.
# The queries are read from tests/nexmark_queries.rs (the ones the tests check).
set -e
BIN=$1; Q=$2; W=${3:-2}; N=${N:-10000000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
D=$(mktemp -d)
"$BIN" serve --data-dir "$D/data" --listen 127.0.0.1:0 --http-listen off --workers "$W" \
  --checkpoint-interval 0 2>"$D/err" &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null || true; rm -rf "$D"' EXIT
for _ in $(seq 1 150); do grep -q 'addr=127.0.0.1:' "$D/err" 2>/dev/null && break; sleep 0.2; done
PORT=$(grep -o 'addr=127.0.0.1:[0-9]*' "$D/err" | tail -1 | cut -d: -f2)
P="psql -X -q -h 127.0.0.1 -p $PORT -U weir -d weir"
for t in person auction bid; do
  $P -c "CREATE SOURCE $t (WATERMARK FOR date_time AS date_time - INTERVAL '4 seconds') WITH (connector = 'nexmark', nexmark.table.type = '$t', nexmark.event.num = '$N', nexmark.event.rate = '100')"
done
SQL=$(python3 - "$ROOT/tests/nexmark_queries.rs" "$Q" <<'PY'
import re, sys
src = open(sys.argv[1]).read()
q = sys.argv[2]
i = src.index('"' + q + '",') + len(q) + 3
chunk = src[i:src.index('),\n', i)]
s = ''.join(re.findall(r'"((?:[^"\\]|\\.)*)"', chunk, re.S))
s = re.sub(r'\\\n\s*', ' ', s).replace('\\"', '"')
print(s.replace('{bid}', 'bid').replace('{auction}', 'auction').replace('{person}', 'person'))
PY
)
# CPU ticks of the server's threads whose name starts with one of the arguments
cpu() {
  local s=0 name p
  for t in /proc/$PID/task/*; do
    name=$(cat "$t/comm" 2>/dev/null) || continue
    for p in "$@"; do
      case $name in
        "$p"*) s=$((s + $(awk '{print $14+$15}' "$t/stat" 2>/dev/null || echo 0))); break;;
      esac
    done
  done
  echo $s
}
# the generator's threads end with a bounded source: their CPU is sampled while they run
( m=0; while kill -0 $PID 2>/dev/null; do g=$(cpu weir-src weir-gen 2>/dev/null || echo 0)
    [ "$g" -gt "$m" ] 2>/dev/null && m=$g && echo $m > "$D/gen"; sleep 0.1; done ) &
SAMPLER=$!
S=$(date +%s.%N)
$P -c "CREATE MATERIALIZED VIEW v AS $SQL"
$P -c "FLUSH"
E=$(date +%s.%N)
C=$(cpu weir-dataflow weir-shard)
sleep 0.2; kill $SAMPLER 2>/dev/null || true
G=$(cat "$D/gen" 2>/dev/null || echo 0)
T=$(awk '{print $14+$15}' /proc/$PID/stat)
RSS=$(grep VmHWM /proc/$PID/status | awk '{print $2}')
ROWS=$($P -Atc "SELECT count(*) FROM v")
echo "$Q workers=$W wall=$(echo "$E - $S" | bc | cut -c1-6) dfcpu=$(echo "scale=2; $C/100" | bc) gencpu=$(echo "scale=2; $G/100" | bc) allcpu=$(echo "scale=2; $T/100" | bc) rss=$((RSS / 1024))MiB rows=$ROWS"
