//! Nexmark events written straight into Arrow columns: the events of the `nexmark` crate's
//! `EventGenerator` (same numbers, same random draws, same strings), without building an
//! `Event` per row. The crate makes every string of an event as a `String` (the bid's
//! channel and URL cloned from its tables, the `extra` padding one `char` at a time) that
//! the source then copied into its builders and freed: ~260 ns per bid on this machine,
//! most of a pass-through query's cost. Here each event's fields are drawn from the same
//! seeded `SmallRng` in the crate's order and appended where they go: tables' strings are
//! copied from the tables, random letters written into one reused buffer, `extra` not drawn
//! at all when no column wants it (it is an event's last draw), other unwanted strings
//! drawn and dropped (later draws depend on them).
//!
//! The crate stays the reference: `tests::columns_are_the_crates_events` compares every
//! column with the crate's events for each table type, offsets and seeds. What the crate
//! computes with overflowing arithmetic in its release build (an auction id below the first
//! epoch when `nexmark.seed` shifts ids) is computed wrapping here, as there.
//!
//! Only a constant event rate (`first_rate == next_rate`, the only one SQL can ask for) is
//! supported: the crate's square and sine rate shapes are refused when building.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{
    ArrayRef, Int64Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use nexmark::config::NexmarkConfig;
use nexmark::event::EventType;
use rand08::rngs::SmallRng;
use rand08::seq::SliceRandom;
use rand08::{Rng, RngCore, SeedableRng};

use crate::catalog::ColumnDesc;
use crate::error::{Result, WeirError};

const HOT_SELLER_RATIO: usize = 100;
const HOT_AUCTION_RATIO: usize = 100;
const HOT_BIDDER_RATIO: usize = 100;
/// Entries of the crate's table of (channel, URL) pairs for cold channels.
const CHANNELS: usize = 10_000;

/// The crate's cold-channel table: `channel-i` and a URL drawn from seed `i`, with a
/// `channel_id` parameter for nine in ten.
static CHANNEL_URLS: LazyLock<Vec<(String, String)>> = LazyLock::new(|| {
    (0..CHANNELS)
        .map(|i| {
            let mut url = base_url(i as u64);
            let mut rng = SmallRng::seed_from_u64(i as u64);
            if rng.gen_range(0..10) > 0 {
                url.push_str("&channel_id=");
                url.push_str(&i64::abs((i as i32).reverse_bits() as i64).to_string());
            }
            (format!("channel-{i}"), url)
        })
        .collect()
});

/// The crate's `get_base_url`: three path parts of 3–4 letters with `_` now and then.
fn base_url(seed: u64) -> String {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut part = || {
        let len = rng.gen_range(3..5usize);
        (0..len)
            .map(|_| {
                if rng.gen_range(0..13) == 0 {
                    '_'
                } else {
                    rng.gen_range(b'a'..=b'z') as char
                }
            })
            .collect::<String>()
    };
    let (a, b, c) = (part(), part(), part());
    format!("https://www.nexmark.com/{a}/{b}/{c}/item.htm?query=1")
}

/// One lowercase letter, as `rng.gen_range(b'a'..=b'z')` draws it (rand 0.8's single-sample
/// rule for `u8`: a 32-bit draw, widening multiply by 26, rejected above the zone), with
/// the zone computed once instead of per letter.
#[inline]
fn letter(rng: &mut SmallRng) -> u8 {
    const RANGE: u32 = 26;
    const ZONE: u32 = u32::MAX - (u32::MAX - RANGE + 1) % RANGE;
    loop {
        let m = rng.next_u32() as u64 * RANGE as u64;
        if (m as u32) <= ZONE {
            return b'a' + (m >> 32) as u8;
        }
    }
}

/// `len` letters appended to `out`.
#[inline]
fn letters(rng: &mut SmallRng, len: usize, out: &mut String) {
    out.reserve(len);
    for _ in 0..len {
        out.push(char::from(letter(rng)));
    }
}

/// `len` letters drawn and dropped.
#[inline]
fn skip_letters(rng: &mut SmallRng, len: usize) {
    for _ in 0..len {
        letter(rng);
    }
}

/// The crate's `gen_price`.
#[inline]
fn price(rng: &mut SmallRng) -> usize {
    (10.0_f32.powf(rng.r#gen::<f32>() * 6.0) * 100.0).round() as usize
}

/// The length of the crate's `gen_next_extra` padding for an event of `current` bytes
/// (drawn from `rng` as the crate does; the letters follow).
#[inline]
fn extra_len(rng: &mut SmallRng, current: usize, average: usize) -> usize {
    if current > average {
        return 0;
    }
    let desired = average - current;
    let delta = (desired + 2) / 5;
    let min = desired - delta;
    min + if delta == 0 {
        0
    } else {
        rng.gen_range(0..2 * delta)
    }
}

/// The fields of one table type, in the crate's struct order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    // bid
    Auction,
    Bidder,
    Price,
    Channel,
    Url,
    // person
    Name,
    EmailAddress,
    CreditCard,
    City,
    State,
    // auction
    ItemName,
    Description,
    InitialBid,
    Reserve,
    Expires,
    Seller,
    Category,
    // all
    Id,
    DateTime,
    Extra,
}

fn field(kind: EventType, name: &str) -> Option<Field> {
    use Field::*;
    Some(match (kind, name) {
        (EventType::Bid, "auction") => Auction,
        (EventType::Bid, "bidder") => Bidder,
        (EventType::Bid, "price") => Price,
        (EventType::Bid, "channel") => Channel,
        (EventType::Bid, "url") => Url,
        (EventType::Person, "id") | (EventType::Auction, "id") => Id,
        (EventType::Person, "name") => Name,
        (EventType::Person, "email_address") => EmailAddress,
        (EventType::Person, "credit_card") => CreditCard,
        (EventType::Person, "city") => City,
        (EventType::Person, "state") => State,
        (EventType::Auction, "item_name") => ItemName,
        (EventType::Auction, "description") => Description,
        (EventType::Auction, "initial_bid") => InitialBid,
        (EventType::Auction, "reserve") => Reserve,
        (EventType::Auction, "expires") => Expires,
        (EventType::Auction, "seller") => Seller,
        (EventType::Auction, "category") => Category,
        (_, "date_time") => DateTime,
        (_, "extra") => Extra,
        _ => return None,
    })
}

/// A column being built.
enum Out {
    I(Int64Builder),
    S(StringBuilder),
    T(TimestampMicrosecondBuilder),
}

impl Out {
    fn int(&mut self, v: i64) {
        if let Out::I(b) = self {
            b.append_value(v)
        }
    }
    fn text(&mut self, v: &str) {
        if let Out::S(b) = self {
            b.append_value(v)
        }
    }
    fn millis(&mut self, ms: u64) {
        if let Out::T(b) = self {
            b.append_value(ms as i64 * 1000)
        }
    }
    fn finish(self) -> ArrayRef {
        match self {
            Out::I(mut b) => Arc::new(b.finish()),
            Out::S(mut b) => Arc::new(b.finish()),
            Out::T(mut b) => Arc::new(b.finish()),
        }
    }
}

/// Where each field goes: the output column's index, or none.
struct Targets([Option<usize>; 20]);

impl Targets {
    #[inline]
    fn get(&self, f: Field) -> Option<usize> {
        self.0[f as usize]
    }
    #[inline]
    fn wants(&self, f: Field) -> bool {
        self.0[f as usize].is_some()
    }
}

/// The events of one table type as columns.
pub struct EventColumns {
    cfg: NexmarkConfig,
    kind: EventType,
    denominator: usize,
    /// Event time between two events, in microseconds (the crate's `f32`).
    delay_us: f32,
    /// Where the declared columns' fields go.
    targets: Targets,
    columns: Vec<ColumnDesc>,
    schema: SchemaRef,
}

impl EventColumns {
    pub fn new(
        cfg: NexmarkConfig,
        kind: EventType,
        columns: &[ColumnDesc],
        schema: SchemaRef,
    ) -> Result<EventColumns> {
        if cfg.first_rate != cfg.next_rate {
            return Err(WeirError::internal(
                "the nexmark generator supports a constant event rate only",
            ));
        }
        let mut targets = Targets([None; 20]);
        for (i, c) in columns.iter().enumerate() {
            let f = field(kind, &c.name).ok_or_else(|| {
                WeirError::internal(format!("nexmark has no column \"{}\"", c.name))
            })?;
            targets.0[f as usize] = Some(i);
        }
        let denominator = cfg.person_proportion + cfg.auction_proportion + cfg.bid_proportion;
        let delay_us =
            cfg.us_per_unit as f32 / cfg.first_rate as f32 * cfg.num_event_generators as f32;
        Ok(EventColumns {
            cfg,
            kind,
            denominator,
            delay_us,
            targets,
            columns: columns.to_vec(),
            schema,
        })
    }

    /// The event number of this type's `offset`-th event (the crate's `global_offset`).
    fn event_number(&self, offset: u64) -> usize {
        let c = &self.cfg;
        let k = offset as usize;
        let global = match self.kind {
            EventType::Person => {
                k / c.person_proportion * self.denominator + k % c.person_proportion
            }
            EventType::Auction => {
                k / c.auction_proportion * self.denominator
                    + c.person_proportion
                    + k % c.auction_proportion
            }
            EventType::Bid => {
                k / c.bid_proportion * self.denominator
                    + c.person_proportion
                    + c.auction_proportion
                    + k % c.bid_proportion
            }
        };
        c.first_event_number + global
    }

    /// Event time (ms) of event `n` (the crate's `event_timestamp` for one rate).
    #[inline]
    fn timestamp(&self, n: usize) -> u64 {
        self.cfg.base_time + ((n as f32 * self.delay_us) / 1000.0).round() as u64
    }

    fn person_last_id(&self, event_id: usize) -> usize {
        let c = &self.cfg;
        let epoch = event_id / self.denominator;
        let offset = (event_id % self.denominator).min(c.person_proportion - 1);
        epoch.wrapping_mul(c.person_proportion).wrapping_add(offset)
    }

    fn person_next_id(&self, event_id: usize, rng: &mut SmallRng) -> usize {
        let people = self.person_last_id(event_id).wrapping_add(1);
        let active = people.min(self.cfg.active_people);
        people - active + rng.gen_range(0..active + self.cfg.person_id_lead)
    }

    fn auction_last_id(&self, event_id: usize) -> usize {
        let c = &self.cfg;
        let mut epoch = event_id / self.denominator;
        let mut offset = event_id % self.denominator;
        if offset < c.person_proportion {
            epoch = epoch.wrapping_sub(1);
            offset = c.auction_proportion - 1;
        } else if c.person_proportion + c.auction_proportion <= offset {
            offset = c.auction_proportion - 1;
        } else {
            offset -= c.person_proportion;
        }
        epoch
            .wrapping_mul(c.auction_proportion)
            .wrapping_add(offset)
    }

    fn auction_next_id(&self, event_id: usize, rng: &mut SmallRng) -> usize {
        let max = self.auction_last_id(event_id);
        let min = max.saturating_sub(self.cfg.in_flight_auctions);
        min + rng.gen_range(0..max.wrapping_sub(min).wrapping_add(1) + self.cfg.auction_id_lead)
    }

    /// `n` events of this type from its `offset`-th, as a batch of the declared columns.
    pub fn batch(&self, offset: u64, n: usize) -> Result<RecordBatch> {
        let mut outs: Vec<Out> = self
            .columns
            .iter()
            .map(|c| match field(self.kind, &c.name) {
                Some(Field::DateTime | Field::Expires) => {
                    Out::T(TimestampMicrosecondBuilder::with_capacity(n))
                }
                Some(
                    Field::Auction
                    | Field::Bidder
                    | Field::Price
                    | Field::Id
                    | Field::InitialBid
                    | Field::Reserve
                    | Field::Seller
                    | Field::Category,
                ) => Out::I(Int64Builder::with_capacity(n)),
                f => Out::S(StringBuilder::with_capacity(n, n * self.text_bytes(f))),
            })
            .collect();
        let mut scratch = String::with_capacity(256);
        for i in 0..n as u64 {
            let number = self.event_number(offset + i);
            match self.kind {
                EventType::Bid => self.bid(number, &mut outs, &mut scratch),
                EventType::Auction => self.auction(number, &mut outs, &mut scratch),
                EventType::Person => self.person(number, &mut outs, &mut scratch),
            }
        }
        let arrays: Vec<ArrayRef> = outs.into_iter().map(Out::finish).collect();
        Ok(RecordBatch::try_new(self.schema.clone(), arrays)?)
    }

    /// About how many bytes a value of the text field `f` takes (its builder's capacity:
    /// growing a builder copies its values, 8% of a bid source's thread at 32 bytes each).
    fn text_bytes(&self, f: Option<Field>) -> usize {
        let c = &self.cfg;
        match f {
            Some(Field::Extra) => match self.kind {
                EventType::Bid => c.avg_bid_byte_size,
                EventType::Auction => c.avg_auction_byte_size,
                EventType::Person => c.avg_person_byte_size,
            },
            Some(Field::Url) => 96,
            Some(Field::Description) => 100,
            _ => 24,
        }
    }

    /// Appends `f`'s value if a column wants it.
    #[inline]
    fn put_int(&self, outs: &mut [Out], f: Field, v: usize) {
        if let Some(i) = self.targets.get(f) {
            outs[i].int(v as i64)
        }
    }
    #[inline]
    fn put_text(&self, outs: &mut [Out], f: Field, v: &str) {
        if let Some(i) = self.targets.get(f) {
            outs[i].text(v)
        }
    }
    #[inline]
    fn put_time(&self, outs: &mut [Out], f: Field, ms: u64) {
        if let Some(i) = self.targets.get(f) {
            outs[i].millis(ms)
        }
    }
    /// `len` random letters for `f`, appended if a column wants them, drawn either way.
    #[inline]
    fn put_letters(
        &self,
        outs: &mut [Out],
        f: Field,
        rng: &mut SmallRng,
        len: usize,
        s: &mut String,
    ) {
        if let Some(i) = self.targets.get(f) {
            s.clear();
            letters(rng, len, s);
            outs[i].text(s);
        } else {
            skip_letters(rng, len);
        }
    }
    /// The `extra` padding: drawn only when a column wants it (no later draw depends on it).
    #[inline]
    fn put_extra(
        &self,
        outs: &mut [Out],
        rng: &mut SmallRng,
        current: usize,
        average: usize,
        s: &mut String,
    ) {
        if self.targets.wants(Field::Extra) {
            let len = extra_len(rng, current, average);
            self.put_letters(outs, Field::Extra, rng, len, s);
        }
    }

    /// Event `number`'s id, event time and random draws (seeded by its id), as the crate's
    /// `Event::new` starts every event.
    fn event_start(&self, number: usize) -> (usize, u64, SmallRng) {
        let id = self.cfg.first_event_id + number;
        (
            id,
            self.timestamp(number),
            SmallRng::seed_from_u64(id as u64),
        )
    }

    /// The crate's `Bid::new`.
    fn bid(&self, number: usize, outs: &mut [Out], s: &mut String) {
        let c = &self.cfg;
        let (id, time, mut rng) = self.event_start(number);
        let rng = &mut rng;
        let auction = if 0 < rng.gen_range(0..c.hot_auction_ratio) {
            (self.auction_last_id(id) / HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO
        } else {
            self.auction_next_id(id, rng)
        };
        let bidder = if 0 < rng.gen_range(0..c.hot_bidder_ratio) {
            (self.person_last_id(id) / HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1
        } else {
            self.person_next_id(id, rng)
        };
        let price = price(rng);
        let (channel, url) = if rng.gen_range(0..c.hot_channel_ratio) > 0 {
            let i = rng.gen_range(0..c.hot_channels.len());
            (c.hot_channels[i].as_str(), c.hot_urls[i].as_str())
        } else {
            CHANNEL_URLS
                .choose(rng)
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .unwrap_or_default()
        };
        self.put_int(
            outs,
            Field::Auction,
            auction.wrapping_add(c.first_auction_id),
        );
        self.put_int(outs, Field::Bidder, bidder.wrapping_add(c.first_person_id));
        self.put_int(outs, Field::Price, price);
        self.put_text(outs, Field::Channel, channel);
        self.put_text(outs, Field::Url, url);
        self.put_time(outs, Field::DateTime, time);
        self.put_extra(outs, rng, 32, c.avg_bid_byte_size, s);
    }

    /// The crate's `Auction::new`.
    fn auction(&self, number: usize, outs: &mut [Out], s: &mut String) {
        let c = &self.cfg;
        let (id, time, mut rng) = self.event_start(number);
        let rng = &mut rng;
        self.put_int(
            outs,
            Field::Id,
            self.auction_last_id(id).wrapping_add(c.first_auction_id),
        );
        self.put_letters(outs, Field::ItemName, rng, 20, s);
        self.put_letters(outs, Field::Description, rng, 100, s);
        let initial_bid = price(rng);
        let reserve = initial_bid + price(rng);
        // the crate's `next_length`
        let events_for_auctions = (c.in_flight_auctions * self.denominator) / c.auction_proportion;
        let horizon = self.timestamp(number + events_for_auctions) - time;
        let expires = time + 1 + rng.gen_range(0..(horizon * 2).max(1));
        let seller = if rng.gen_range(0..c.hot_seller_ratio) > 0 {
            (self.person_last_id(id) / HOT_SELLER_RATIO) * HOT_SELLER_RATIO
        } else {
            self.person_next_id(id, rng)
        };
        let category = c.first_category_id + rng.gen_range(0..c.num_categories);
        self.put_int(outs, Field::InitialBid, initial_bid);
        self.put_int(outs, Field::Reserve, reserve);
        self.put_time(outs, Field::DateTime, time);
        self.put_time(outs, Field::Expires, expires);
        self.put_int(outs, Field::Seller, seller.wrapping_add(c.first_person_id));
        self.put_int(outs, Field::Category, category);
        // 8 + the two strings + five 8-byte numbers
        self.put_extra(outs, rng, 8 + 20 + 100 + 40, c.avg_auction_byte_size, s);
    }

    /// The crate's `Person::new`.
    fn person(&self, number: usize, outs: &mut [Out], s: &mut String) {
        let c = &self.cfg;
        let (id, time, mut rng) = self.event_start(number);
        let rng = &mut rng;
        self.put_int(
            outs,
            Field::Id,
            self.person_last_id(id).wrapping_add(c.first_person_id),
        );
        let first = c.first_names.choose(rng).map_or("", String::as_str);
        let last = c.last_names.choose(rng).map_or("", String::as_str);
        let name_len = first.len() + 1 + last.len();
        if self.targets.wants(Field::Name) {
            s.clear();
            s.push_str(first);
            s.push(' ');
            s.push_str(last);
            self.put_text(outs, Field::Name, s);
        }
        // `{7 letters}@{5 letters}.com`
        if self.targets.wants(Field::EmailAddress) {
            s.clear();
            letters(rng, 7, s);
            s.push('@');
            letters(rng, 5, s);
            s.push_str(".com");
            self.put_text(outs, Field::EmailAddress, s);
        } else {
            skip_letters(rng, 12);
        }
        // four groups of four digits
        s.clear();
        for g in 0..4 {
            let v: i32 = rng.gen_range(0..10000);
            if g > 0 {
                s.push(' ');
            }
            let v = v as u32;
            for d in [v / 1000, v / 100 % 10, v / 10 % 10, v % 10] {
                s.push(char::from(b'0' + d as u8));
            }
        }
        self.put_text(outs, Field::CreditCard, s);
        let city = c.us_cities.choose(rng).map_or("", String::as_str);
        let state = c.us_states.choose(rng).map_or("", String::as_str);
        self.put_text(outs, Field::City, city);
        self.put_text(outs, Field::State, state);
        self.put_time(outs, Field::DateTime, time);
        // 8 + name + email (17) + credit card (19) + city + state
        let current = 8 + name_len + 17 + 19 + city.len() + state.len();
        self.put_extra(outs, rng, current, c.avg_person_byte_size, s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::types::{SqlType, schema_of};
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::{Int64Type, TimestampMicrosecondType};
    use nexmark::event::Event;

    /// Every column of the table type, in the crate's field order.
    fn all_columns(kind: EventType) -> Vec<ColumnDesc> {
        let sample = nexmark::EventGenerator::default()
            .with_type_filter(kind)
            .next()
            .unwrap();
        crate_fields(&sample)
            .into_iter()
            .map(|(name, _)| ColumnDesc {
                name: name.into(),
                ty: match name {
                    "date_time" | "expires" => SqlType::Timestamp(None),
                    "channel" | "url" | "extra" | "item_name" | "description" | "name"
                    | "email_address" | "credit_card" | "city" | "state" => SqlType::Text,
                    _ => SqlType::Int8,
                },
                nullable: true,
            })
            .collect()
    }

    /// The crate's event as (column name, text) pairs.
    fn crate_fields(e: &Event) -> Vec<(&'static str, String)> {
        match e {
            Event::Bid(b) => vec![
                ("auction", b.auction.to_string()),
                ("bidder", b.bidder.to_string()),
                ("price", b.price.to_string()),
                ("channel", b.channel.clone()),
                ("url", b.url.clone()),
                ("date_time", (b.date_time * 1000).to_string()),
                ("extra", b.extra.clone()),
            ],
            Event::Auction(a) => vec![
                ("id", a.id.to_string()),
                ("item_name", a.item_name.clone()),
                ("description", a.description.clone()),
                ("initial_bid", a.initial_bid.to_string()),
                ("reserve", a.reserve.to_string()),
                ("date_time", (a.date_time * 1000).to_string()),
                ("expires", (a.expires * 1000).to_string()),
                ("seller", a.seller.to_string()),
                ("category", a.category.to_string()),
                ("extra", a.extra.clone()),
            ],
            Event::Person(p) => vec![
                ("id", p.id.to_string()),
                ("name", p.name.clone()),
                ("email_address", p.email_address.clone()),
                ("credit_card", p.credit_card.clone()),
                ("city", p.city.clone()),
                ("state", p.state.clone()),
                ("date_time", (p.date_time * 1000).to_string()),
                ("extra", p.extra.clone()),
            ],
        }
    }

    fn cell(a: &ArrayRef, row: usize) -> String {
        match a.data_type() {
            datafusion::arrow::datatypes::DataType::Int64 => {
                a.as_primitive::<Int64Type>().value(row).to_string()
            }
            datafusion::arrow::datatypes::DataType::Timestamp(..) => a
                .as_primitive::<TimestampMicrosecondType>()
                .value(row)
                .to_string(),
            _ => a.as_string::<i32>().value(row).to_owned(),
        }
    }

    /// Every column of every table type is what the crate's generator makes, from the first
    /// event and from an offset, with another seed and rate, and with only some columns
    /// declared (unwanted strings skipped, `extra` not drawn).
    #[test]
    fn columns_are_the_crates_events() {
        for kind in [EventType::Bid, EventType::Auction, EventType::Person] {
            for (seed, rate, offset) in [(0, 10_000, 0u64), (0, 100, 123_457), (500, 7, 42)] {
                let cfg = NexmarkConfig {
                    first_event_id: seed,
                    first_rate: rate,
                    next_rate: rate,
                    ..Default::default()
                };
                let all = all_columns(kind);
                let subsets: Vec<Vec<ColumnDesc>> = vec![
                    all.clone(),
                    all.iter().rev().cloned().collect(),
                    all.iter().step_by(2).cloned().collect(),
                    all.iter()
                        .filter(|c| c.name != "extra" && c.ty == SqlType::Int8)
                        .cloned()
                        .collect(),
                ];
                let n = 3000;
                let want: Vec<Event> = nexmark::EventGenerator::new(cfg.clone())
                    .with_type_filter(kind)
                    .with_offset(offset)
                    .take(n)
                    .collect();
                for cols in subsets {
                    let schema =
                        schema_of(cols.iter().map(|c| (c.name.as_str(), &c.ty, c.nullable)));
                    let g = EventColumns::new(cfg.clone(), kind, &cols, schema).unwrap();
                    let batch = g.batch(offset, n).unwrap();
                    assert_eq!(batch.num_rows(), n);
                    for (row, e) in want.iter().enumerate() {
                        let fields = crate_fields(e);
                        for (ci, c) in cols.iter().enumerate() {
                            let expected =
                                &fields.iter().find(|(name, _)| *name == c.name).unwrap().1;
                            let got = cell(batch.column(ci), row);
                            assert_eq!(
                                &got, expected,
                                "{kind:?} seed {seed} rate {rate} offset {offset} row {row} \
                                 column {}",
                                c.name
                            );
                        }
                    }
                    assert!(batch.columns().iter().all(|c| c.null_count() == 0));
                }
            }
        }
    }
}
