//! The watermark rule, in one place. A watermarked relation (`WATERMARK FOR col AS col -
//! INTERVAL 'd'`) has, at any moment, the watermark *largest event time seen − d*; it never
//! moves back. Tables, generators and Kafka sources (per partition, then the minimum over
//! the partitions that are not idle) and a view's backfill all compute it with these
//! functions, so the same rows always give the same watermark.

use datafusion::arrow::array::{Array, TimestampMicrosecondArray};
use datafusion::arrow::record_batch::RecordBatch;

/// Where a relation's event time is and how far its watermark trails it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatermarkSpec {
    /// The event-time column (timestamp, µs).
    pub column: usize,
    /// The declared delay, µs.
    pub delay_us: i64,
}

impl WatermarkSpec {
    pub fn new((column, delay_us): (usize, i64)) -> WatermarkSpec {
        WatermarkSpec { column, delay_us }
    }

    /// The watermark that event time `t` allows: `t − delay`.
    pub fn bound(&self, t: i64) -> i64 {
        t.saturating_sub(self.delay_us)
    }

    /// The watermark after `batch` arrived, from `current`.
    pub fn after_batch(&self, current: Option<i64>, batch: &RecordBatch) -> Option<i64> {
        let max = batch
            .columns()
            .get(self.column)
            .and_then(|c| max_event_time(c.as_ref()));
        advance(current, max.map(|m| self.bound(m)))
    }
}

/// The largest non-NULL event time of a timestamp column (None if it has none or is not a
/// microsecond timestamp).
pub fn max_event_time(column: &dyn Array) -> Option<i64> {
    let ts = column
        .as_any()
        .downcast_ref::<TimestampMicrosecondArray>()?;
    datafusion::arrow::compute::max(ts)
}

/// `current` moved forward to `candidate`, never back.
pub fn advance(current: Option<i64>, candidate: Option<i64>) -> Option<i64> {
    match (current, candidate) {
        (Some(c), Some(n)) => Some(c.max(n)),
        (c, n) => c.or(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};

    fn batch(ts: &[Option<i64>]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        )]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(TimestampMicrosecondArray::from(ts.to_vec()))],
        )
        .unwrap()
    }

    #[test]
    fn largest_event_time_minus_delay_never_moving_back() {
        let spec = WatermarkSpec::new((0, 10));
        let w = spec.after_batch(None, &batch(&[Some(100), None, Some(50)]));
        assert_eq!(w, Some(90));
        // an older batch does not move it back; NULLs and empty batches do not move it
        assert_eq!(spec.after_batch(w, &batch(&[Some(20)])), Some(90));
        assert_eq!(spec.after_batch(w, &batch(&[None])), Some(90));
        assert_eq!(spec.after_batch(None, &batch(&[None])), None);
        assert_eq!(spec.after_batch(w, &batch(&[Some(150)])), Some(140));
        // no overflow at the ends of the range
        assert_eq!(WatermarkSpec::new((0, 10)).bound(i64::MIN), i64::MIN);
    }
}
