//! The Nexmark generator (`connector = 'nexmark'`): person, auction or bid rows with
//! Nexmark's schema, the `nexmark` crate's events written column by column
//! (`nexmark_columns.rs`). Options: `nexmark.table.type` (person | auction |
//! bid), `nexmark.event.num` (events of all types to generate; default unbounded),
//! `nexmark.seed` (first event id; default 0), `nexmark.base.time` (event time of the first
//! event, ms since the epoch; default 2024-01-01), `nexmark.event.rate` (events per
//! second of event time; default 10,000). Deterministic for given options.

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use nexmark::config::NexmarkConfig;
use nexmark::event::EventType;

use crate::catalog::ColumnDesc;
use crate::connectors::nexmark_columns::EventColumns;
use crate::connectors::{Generator, Options, opt_u64};
use crate::error::{Result, WeirError};
use crate::sql::types::{SqlType, schema_of};

const BASE_TIME_MS: u64 = 1_704_067_200_000; // 2024-01-01 00:00:00 UTC

fn table_type(o: &Options) -> Result<EventType> {
    match o
        .get("nexmark.table.type")
        .map(|s| s.to_lowercase())
        .as_deref()
    {
        Some("person") => Ok(EventType::Person),
        Some("auction") => Ok(EventType::Auction),
        Some("bid") | None => Ok(EventType::Bid),
        Some(other) => Err(WeirError::invalid_parameter(format!(
            "nexmark.table.type must be person, auction or bid, not '{other}'"
        ))),
    }
}

fn default_columns(t: EventType) -> Vec<ColumnDesc> {
    let c = |name: &str, ty: SqlType| ColumnDesc {
        name: name.into(),
        ty,
        nullable: true,
    };
    use SqlType::*;
    match t {
        EventType::Person => vec![
            c("id", Int8),
            c("name", Text),
            c("email_address", Text),
            c("credit_card", Text),
            c("city", Text),
            c("state", Text),
            c("date_time", Timestamp(None)),
            c("extra", Text),
        ],
        EventType::Auction => vec![
            c("id", Int8),
            c("item_name", Text),
            c("description", Text),
            c("initial_bid", Int8),
            c("reserve", Int8),
            c("date_time", Timestamp(None)),
            c("expires", Timestamp(None)),
            c("seller", Int8),
            c("category", Int8),
            c("extra", Text),
        ],
        EventType::Bid => vec![
            c("auction", Int8),
            c("bidder", Int8),
            c("price", Int8),
            c("channel", Text),
            c("url", Text),
            c("date_time", Timestamp(None)),
            c("extra", Text),
        ],
    }
}

/// The table type's columns; declared columns must be among them, with their types.
pub fn columns(o: &Options, declared: &[ColumnDesc]) -> Result<Vec<ColumnDesc>> {
    let all = default_columns(table_type(o)?);
    if declared.is_empty() {
        return Ok(all);
    }
    for d in declared {
        let Some(c) = all.iter().find(|c| c.name == d.name) else {
            return Err(WeirError::invalid_parameter(format!(
                "nexmark {} has no column \"{}\" (columns: {})",
                o.get("nexmark.table.type")
                    .map(String::as_str)
                    .unwrap_or("bid"),
                d.name,
                all.iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        if c.ty != d.ty && !(c.ty == SqlType::Text && matches!(d.ty, SqlType::Varchar(_))) {
            return Err(WeirError::invalid_parameter(format!(
                "nexmark column \"{}\" is {}, not {}",
                d.name,
                c.ty.display_name(),
                d.ty.display_name()
            )));
        }
    }
    Ok(declared
        .iter()
        .map(|d| ColumnDesc {
            ty: all
                .iter()
                .find(|c| c.name == d.name)
                .map(|c| c.ty.clone())
                .unwrap_or(d.ty.clone()),
            ..d.clone()
        })
        .collect())
}

pub struct Nexmark {
    events: EventColumns,
    /// Events of this type made so far (the next one's number among its type).
    offset: u64,
    /// Events of this type still to generate (None: unbounded).
    remaining: Option<u64>,
    /// Events of this type the source yields in all (None: unbounded).
    total: Option<u64>,
    schema: SchemaRef,
    /// Slices a large batch is made in (`--workers`).
    slices: usize,
}

impl Nexmark {
    pub fn new(o: &Options, columns: &[ColumnDesc]) -> Result<Nexmark> {
        let kind = table_type(o)?;
        // the generator's arithmetic must not overflow on what SQL gives it
        for (key, max) in [
            ("nexmark.base.time", 253_402_300_799_999u64),
            ("nexmark.seed", 1u64 << 40),
            ("nexmark.event.num", 1u64 << 53),
            ("nexmark.event.rate", 1_000_000_000),
        ] {
            if let Some(v) = opt_u64(o, key)?
                && v > max
            {
                return Err(crate::error::WeirError::invalid_parameter(format!(
                    "option {key} must be at most {max}, not {v}"
                )));
            }
        }
        let mut cfg = NexmarkConfig {
            base_time: opt_u64(o, "nexmark.base.time")?.unwrap_or(BASE_TIME_MS),
            first_event_id: opt_u64(o, "nexmark.seed")?.unwrap_or(0) as usize,
            ..Default::default()
        };
        if let Some(rate) = opt_u64(o, "nexmark.event.rate")? {
            cfg.first_rate = rate.max(1) as usize;
            cfg.next_rate = rate.max(1) as usize;
        }
        // nexmark.event.num counts events of all types; this source keeps its type's share
        let remaining = opt_u64(o, "nexmark.event.num")?.map(|total| {
            let denom =
                (cfg.person_proportion + cfg.auction_proportion + cfg.bid_proportion) as u64;
            let share = match kind {
                EventType::Person => cfg.person_proportion,
                EventType::Auction => cfg.auction_proportion,
                EventType::Bid => cfg.bid_proportion,
            } as u64;
            total * share / denom.max(1)
        });
        let schema = schema_of(columns.iter().map(|c| (c.name.as_str(), &c.ty, c.nullable)));
        Ok(Nexmark {
            events: EventColumns::new(cfg, kind, columns, schema.clone())?,
            offset: 0,
            remaining,
            total: remaining,
            schema,
            slices: generator_slices(),
        })
    }
}

impl Generator for Nexmark {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn seek(&mut self, rows: u64) -> Result<()> {
        // the offset counts events of this type, as `rows` does
        self.offset = rows;
        if let Some(total) = self.total {
            self.remaining = Some(total.saturating_sub(rows));
        }
        Ok(())
    }

    /// The next at most `max_rows` rows. Batches are cut at fixed row counts (the runner's
    /// batch size, counted from the source's start), so a generator restored at a
    /// checkpoint's position makes the batches (and late decisions) of a run that never
    /// stopped; a large batch is made in slices, one per worker, put together into one.
    fn next_batch(&mut self, max_rows: usize) -> Result<Option<RecordBatch>> {
        let n = match self.remaining {
            Some(0) => return Ok(None),
            Some(r) => (r as usize).min(max_rows),
            None => max_rows,
        };
        // a large batch is generated in one slice per worker: each slice's events are the
        // ones a single generator would make at its offsets (each event is a function of
        // its number), so the batch is the same whatever the number of workers
        let slices = self.slices.min(n / SLICE_MIN_ROWS).max(1);
        let start = self.offset;
        let batch = if slices > 1 {
            let step = n.div_ceil(slices);
            let events = &self.events;
            let jobs: Vec<crate::parallel::Job<'_, RecordBatch>> = (0..slices)
                .map(|i| (i * step, step.min(n - (i * step).min(n))))
                .filter(|(_, len)| *len > 0)
                .map(|(from, len)| {
                    Box::new(move || events.batch(start + from as u64, len))
                        as crate::parallel::Job<'_, RecordBatch>
                })
                .collect();
            let parts = crate::parallel::run_all(crate::parallel::Pool::Sources, jobs)
                .into_iter()
                .collect::<Result<Vec<_>>>()?;
            datafusion::arrow::compute::concat_batches(&self.schema, &parts)?
        } else {
            self.events.batch(start, n)?
        };
        self.offset = start + n as u64;
        if let Some(r) = &mut self.remaining {
            *r -= n as u64;
        }
        Ok(Some(batch))
    }
}

/// Slices a large generator batch is made in: `--workers`, or `WEIR_GENERATOR_SLICES`
/// (a tuning knob: on a machine whose cores the views already keep busy, slicing only adds
/// hand-offs between threads).
fn generator_slices() -> usize {
    std::env::var("WEIR_GENERATOR_SLICES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(crate::parallel::workers)
        .max(1)
}

/// Rows a generator batch slice must have at least (smaller batches are made on the
/// source's own thread).
const SLICE_MIN_ROWS: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    /// Batches made in slices on the generator threads are the batches one thread makes,
    /// and a seek lands on the same events.
    #[test]
    fn slices_make_the_same_events_as_one_generator() {
        for kind in ["bid", "auction", "person"] {
            let o: Options = [
                ("nexmark.table.type".to_owned(), kind.to_owned()),
                ("nexmark.event.num".to_owned(), "1000000".to_owned()),
            ]
            .into_iter()
            .collect();
            let cols = columns(&o, &[]).unwrap();
            let batches = |slices: usize, seek: u64| {
                let mut g = Nexmark::new(&o, &cols).unwrap();
                g.slices = slices;
                g.seek(seek).unwrap();
                let mut out = Vec::new();
                for size in [4096, 3000, 100, 4096] {
                    out.push(g.next_batch(size).unwrap().unwrap());
                }
                out
            };
            let one = batches(1, 0);
            assert_eq!(one.iter().map(|b| b.num_rows()).sum::<usize>(), 11292);
            assert_eq!(batches(3, 0), one, "{kind}");
            assert_eq!(batches(2, 5000), batches(1, 5000), "{kind}");
        }
    }
}
