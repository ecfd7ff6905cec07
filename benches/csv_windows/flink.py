import sys, time
from pyflink.table import EnvironmentSettings, TableEnvironment
q, p = sys.argv[1], sys.argv[2]
t0 = time.time()
env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
env.get_config().set("parallelism.default", p)
env.execute_sql("""CREATE TABLE bids (auction BIGINT, price BIGINT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '4' SECOND)
  WITH ('connector' = 'filesystem', 'path' = 'file:///tmp/fb/bids.csv', 'format' = 'csv')""")
if q == 'C':
    env.execute_sql("CREATE TABLE sink (auction BIGINT, n BIGINT, s BIGINT) WITH ('connector' = 'blackhole')")
    sql = "INSERT INTO sink SELECT auction, COUNT(*), SUM(price) FROM bids GROUP BY auction"
else:
    env.execute_sql("CREATE TABLE sink (auction BIGINT, ws TIMESTAMP(3), n BIGINT, mx BIGINT) WITH ('connector' = 'blackhole')")
    win = ("TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '10' SECOND)" if q == 'A'
           else "HOP(TABLE bids, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND)")
    mx = "MAX(price)" if q == 'A' else "CAST(0 AS BIGINT)"
    sql = f"INSERT INTO sink SELECT auction, window_start, COUNT(*), {mx} FROM TABLE({win}) GROUP BY auction, window_start, window_end"
env.execute_sql(sql).wait()
print(f"flink {q} p={p} wall={time.time() - t0:.1f} s")
