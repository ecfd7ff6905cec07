#!/bin/bash
# usage: weir.sh A|B|C [workers]; release weir; prints wall seconds of COPY+FLUSH and peak RSS
Q=$1; W=${2:-2}
BIN=${WEIR_BIN:-target/release/weir}
D=$(mktemp -d)
$BIN serve --data-dir $D/data --listen 127.0.0.1:0 --http-listen off --workers $W --checkpoint-interval 0 2>$D/err &
PID=$!
for i in $(seq 1 100); do grep -q 'addr=127.0.0.1:' $D/err 2>/dev/null && break; sleep 0.2; done
PORT=$(grep -o 'addr=127.0.0.1:[0-9]*' $D/err | tail -1 | cut -d: -f2)
P="psql -X -q -h 127.0.0.1 -p $PORT -U weir -d weir"
$P -c "CREATE TABLE bids (auction bigint, price bigint, ts timestamp, WATERMARK FOR ts AS ts - INTERVAL '4 seconds') APPEND ONLY"
case $Q in
A) $P -c "CREATE MATERIALIZED VIEW v AS SELECT auction, window_start, count(*) AS n, max(price) AS mx FROM TUMBLE(bids, ts, INTERVAL '10 seconds') GROUP BY auction, window_start, window_end" ;;
B) $P -c "CREATE MATERIALIZED VIEW v AS SELECT auction, window_start, count(*) AS n FROM HOP(bids, ts, INTERVAL '2 seconds', INTERVAL '10 seconds') GROUP BY auction, window_start, window_end" ;;
C) $P -c "CREATE MATERIALIZED VIEW v AS SELECT auction, count(*) AS n, sum(price) AS s FROM bids GROUP BY auction" ;;
N) $P -c "CREATE MATERIALIZED VIEW v AS SELECT 1 AS one" ;;
esac
S=$(date +%s.%N)
$P -c "\copy bids from '/tmp/fb/bids.csv' with (format csv)"
$P -c "FLUSH"
E=$(date +%s.%N)
ROWS=$($P -Atc "SELECT count(*) FROM v")
RSS=$(grep VmHWM /proc/$PID/status | awk '{print $2}')
echo "weir $Q workers=$W wall=$(echo "$E - $S" | bc) s rows=$ROWS peak_rss=$((RSS/1024)) MiB"
kill $PID; wait $PID 2>/dev/null; rm -rf $D
