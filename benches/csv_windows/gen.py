# 10M bids: auction in 1..1000, price, ts 1 ms apart with up to 2 s disorder (seeded)
import random, sys, datetime
n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000
rnd = random.Random(42)
base = datetime.datetime(2024, 1, 1)
base_ms = int(base.timestamp() * 1000)
with open('/tmp/fb/bids.csv', 'w') as f:
    out = []
    for i in range(n):
        t = base_ms + i - rnd.randrange(0, 2000)
        s, ms = divmod(t, 1000)
        ts = datetime.datetime.utcfromtimestamp(s).strftime('%Y-%m-%d %H:%M:%S') + '.%03d' % ms
        out.append('%d,%d,%s\n' % (rnd.randrange(1, 1001), rnd.randrange(1, 100000), ts))
        if len(out) == 100000:
            f.write(''.join(out)); out = []
    f.write(''.join(out))
