#!/bin/bash
# usage: flink.sh A|B|C p; wall time and peak RSS of the JVM
export JAVA_HOME=${JAVA_HOME:-$(dirname $(dirname $(readlink -f $(which java))))}
/tmp/fenv/bin/python $(dirname $0)/flink.py $1 $2 > /tmp/fb/flink.out 2>/tmp/fb/flink.err &
PID=$!
PEAK=0
while kill -0 $PID 2>/dev/null; do
  for j in $(pgrep -x java); do
    r=$(grep VmRSS /proc/$j/status 2>/dev/null | awk '{print $2}'); [ -n "$r" ] && [ "$r" -gt "$PEAK" ] && PEAK=$r
  done
  sleep 0.5
done
echo "$(cat /tmp/fb/flink.out) peak_jvm_rss=$((PEAK/1024)) MiB"
