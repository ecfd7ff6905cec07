-- The statements docker-compose.yml's `setup` service runs against Weir (see docs/kafka.md).
-- IF NOT EXISTS makes it safe to run again after a restart.

CREATE SOURCE IF NOT EXISTS bids (
    auction BIGINT,
    bidder BIGINT,
    price BIGINT,
    channel TEXT,
    date_time TIMESTAMP,
    WATERMARK FOR date_time AS date_time - INTERVAL '2 seconds'
) INCLUDE partition AS kafka_partition
WITH (
    connector = 'kafka',
    topic = 'bids',
    properties.bootstrap.server = 'redpanda:9092',
    scan.startup.mode = 'earliest'
) FORMAT PLAIN ENCODE JSON;

-- bids and top price per auction per 10-second window, updated as bids arrive
CREATE MATERIALIZED VIEW IF NOT EXISTS bids_per_auction AS
SELECT auction, window_start, count(*) AS bids, max(price) AS top_price
FROM TUMBLE(bids, date_time, INTERVAL '10 seconds')
GROUP BY auction, window_start, window_end;

-- closed windows only, written to the `bid_stats` topic once each (exactly-once)
CREATE MATERIALIZED VIEW IF NOT EXISTS closed_windows AS
SELECT window_start, count(*) AS bids, sum(price) AS volume
FROM TUMBLE(bids, date_time, INTERVAL '10 seconds')
GROUP BY window_start, window_end
EMIT ON WINDOW CLOSE;

CREATE SINK IF NOT EXISTS bid_stats_out FROM closed_windows
WITH (connector = 'kafka', topic = 'bid_stats', properties.bootstrap.server = 'redpanda:9092')
FORMAT PLAIN ENCODE JSON;
