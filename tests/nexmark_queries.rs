//! The Nexmark queries in Weir's SQL, shared by `benches/nexmark.rs` and the Nexmark
//! oracle test. `{bid}`, `{auction}` and `{person}` stand for the relations read.

/// A query with its relations named `<prefix>bid`, `<prefix>auction`, `<prefix>person`.
pub fn instantiate(sql: &str, prefix: &str) -> String {
    sql.replace("{bid}", &format!("{prefix}bid"))
        .replace("{auction}", &format!("{prefix}auction"))
        .replace("{person}", &format!("{prefix}person"))
}

pub const QUERIES: &[(&str, &str)] = &[
    ("q0", "SELECT auction, bidder, price, date_time FROM {bid}"),
    (
        "q1",
        "SELECT auction, bidder, 0.908 * price AS price, date_time FROM {bid}",
    ),
    (
        "q2",
        "SELECT auction, price FROM {bid} WHERE auction % 123 = 0",
    ),
    (
        "q3",
        "SELECT p.name, p.city, p.state, a.id FROM {auction} a JOIN {person} p ON a.seller = p.id \
         WHERE a.category = 10 AND (p.state = 'or' OR p.state = 'id' OR p.state = 'ca')",
    ),
    (
        "q4",
        "SELECT q.category, avg(q.final) AS avg FROM ( \
           SELECT max(b.price) AS final, a.category FROM {auction} a JOIN {bid} b \
             ON a.id = b.auction AND b.date_time BETWEEN a.date_time AND a.expires \
           GROUP BY a.id, a.category) q \
         GROUP BY q.category",
    ),
    (
        "q5",
        "SELECT ab.auction, ab.num FROM ( \
           SELECT auction, count(*) AS num, window_start AS starttime \
           FROM HOP({bid}, date_time, INTERVAL '2 seconds', INTERVAL '10 seconds') \
           GROUP BY window_start, window_end, auction) ab \
         JOIN ( \
           SELECT max(num) AS maxn, starttime_c FROM ( \
             SELECT count(*) AS num, window_start AS starttime_c \
             FROM HOP({bid}, date_time, INTERVAL '2 seconds', INTERVAL '10 seconds') \
             GROUP BY auction, window_start, window_end) cb \
           GROUP BY starttime_c) mb \
         ON ab.starttime = mb.starttime_c AND ab.num >= mb.maxn",
    ),
    (
        "q7",
        "SELECT b.auction, b.price, b.bidder, b.date_time FROM {bid} b JOIN ( \
           SELECT max(price) AS maxprice, window_end AS date_time \
           FROM TUMBLE({bid}, date_time, INTERVAL '10 seconds') \
           GROUP BY window_start, window_end) b1 \
         ON b.price = b1.maxprice \
         WHERE b.date_time BETWEEN b1.date_time - INTERVAL '10 seconds' AND b1.date_time",
    ),
    (
        "q8",
        "SELECT p.id, p.name, p.starttime FROM ( \
           SELECT id, name, window_start AS starttime, window_end AS endtime \
           FROM TUMBLE({person}, date_time, INTERVAL '10 seconds') \
           GROUP BY id, name, window_start, window_end) p \
         JOIN ( \
           SELECT seller, window_start AS starttime, window_end AS endtime \
           FROM TUMBLE({auction}, date_time, INTERVAL '10 seconds') \
           GROUP BY seller, window_start, window_end) a \
         ON p.id = a.seller AND p.starttime = a.starttime AND p.endtime = a.endtime",
    ),
    (
        "q17",
        "SELECT auction, date_trunc('day', date_time) AS day, count(*) AS total_bids, \
           count(*) FILTER (WHERE price < 10000) AS rank1_bids, \
           count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids, \
           count(*) FILTER (WHERE price >= 1000000) AS rank3_bids, \
           min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price, \
           sum(price) AS sum_price \
         FROM {bid} GROUP BY auction, date_trunc('day', date_time)",
    ),
    (
        "q22",
        "SELECT auction, bidder, price, channel, \
           split_part(url, '/', 4) AS dir1, split_part(url, '/', 5) AS dir2, \
           split_part(url, '/', 6) AS dir3 FROM {bid}",
    ),
];
