//! Retractable sketches for the approximate aggregates of maintained views: a value can be
//! taken out again, and a sketch that saw inserts and deletes is byte for byte the sketch
//! of what remains (so it survives checkpoints and restarts exactly).
//!
//! - [`Hll`]: `approx_count_distinct(x)`. HyperLogLog with 2^9 = 512 registers (standard
//!   error 1.04/√512 = 4.6%) that counts, per register, the values at each level (the
//!   position of the first 1 bit of the hash) instead of keeping only the highest: a
//!   register's level is its highest level with a non-zero count, so a delete lowers it
//!   when its last value goes. Stored as, per register, its highest level and the counts
//!   of levels 1..=that as LEB128 varints: about one byte per register per doubling of
//!   the distinct values it saw (≈ 3 KiB at 10k distinct, ≈ 9 KiB at 1M).
//! - [`DdSketch`]: `approx_percentile(q) WITHIN GROUP (ORDER BY x)`. Logarithmic buckets
//!   of relative width 2% (relative accuracy α = 1%: the value returned for a rank is
//!   within 1% of the true value at that rank), positive and negative values in two
//!   stores and a zero count; counts are added and subtracted, so deletes are exact. At
//!   most [`DdSketch::MAX_BUCKETS`] buckets per store: beyond, the lowest buckets are
//!   merged into one (the guarantee then holds for ranks above them).
//!
//! Values are hashed by their row encoding (`arrow_row`) with FNV-1a and the murmur3
//! finalizer: a fixed function, part of the checkpoint format.

use std::collections::BTreeMap;

use crate::error::{Result, WeirError};
use crate::state::state_table::Reader;

/// FNV-1a 64 with murmur3's 64-bit finalizer (for avalanche): stable across builds.
pub fn hash64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(r: &mut Reader<'_>) -> Result<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = r.u8()?;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Ok(v);
        }
    }
    Err(WeirError::internal("sketch: varint too long"))
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// A sketch kept per group in a state table: read, changed, written back.
pub trait Retractable: Default + Sized {
    fn decode(bytes: &[u8]) -> Result<Self>;
    fn encode(&self, out: &mut Vec<u8>);
    /// Nothing left in it (the group's entry can go).
    fn is_empty(&self) -> bool;
}

impl Retractable for Hll {
    fn decode(bytes: &[u8]) -> Result<Self> {
        Hll::decode(bytes)
    }
    fn encode(&self, out: &mut Vec<u8>) {
        Hll::encode(self, out)
    }
    fn is_empty(&self) -> bool {
        self.levels.iter().all(Vec::is_empty)
    }
}

impl Retractable for DdSketch {
    fn decode(bytes: &[u8]) -> Result<Self> {
        DdSketch::decode(bytes)
    }
    fn encode(&self, out: &mut Vec<u8>) {
        DdSketch::encode(self, out)
    }
    fn is_empty(&self) -> bool {
        self.count() == 0
    }
}

/// A counting HyperLogLog (see the module header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hll {
    /// Per register, the count of values at levels 1, 2, ... (trailing zeros trimmed).
    levels: Vec<Vec<u64>>,
}

impl Default for Hll {
    fn default() -> Self {
        Hll {
            levels: vec![Vec::new(); Hll::REGISTERS],
        }
    }
}

impl Hll {
    pub const PRECISION: u32 = 9;
    pub const REGISTERS: usize = 1 << Hll::PRECISION;

    /// Add `weight` copies of a value (negative: take them out). A count never goes
    /// below zero (a delete of a value never added is ignored, as no view sends one).
    pub fn add(&mut self, value: &[u8], weight: i64) {
        let h = hash64(value);
        let reg = (h >> (64 - Hll::PRECISION)) as usize;
        let rest = h << Hll::PRECISION;
        let level = (rest.leading_zeros().min(64 - Hll::PRECISION) + 1) as usize;
        let counts = &mut self.levels[reg];
        if counts.len() < level {
            if weight <= 0 {
                return;
            }
            counts.resize(level, 0);
        }
        let c = &mut counts[level - 1];
        *c = (*c as i64).saturating_add(weight).max(0) as u64;
        while counts.last() == Some(&0) {
            counts.pop();
        }
    }

    /// The estimate of the number of distinct values (HyperLogLog with linear counting
    /// for small cardinalities).
    pub fn estimate(&self) -> u64 {
        let m = Hll::REGISTERS as f64;
        let mut sum = 0.0;
        let mut zeros = 0usize;
        for counts in &self.levels {
            let level = counts.len();
            if level == 0 {
                zeros += 1;
            }
            sum += 2f64.powi(-(level as i32));
        }
        let alpha = 0.7213 / (1.0 + 1.079 / m);
        let raw = alpha * m * m / sum;
        let e = if raw <= 2.5 * m && zeros > 0 {
            m * (m / zeros as f64).ln()
        } else {
            raw
        };
        e.round() as u64
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        for counts in &self.levels {
            out.push(counts.len() as u8);
            for c in counts {
                put_varint(out, *c);
            }
        }
    }

    pub fn decode(bytes: &[u8]) -> Result<Hll> {
        let mut r = Reader::new(bytes, "approx_count_distinct sketch");
        let mut h = Hll::default();
        for counts in h.levels.iter_mut() {
            let n = r.u8()? as usize;
            for _ in 0..n {
                counts.push(get_varint(&mut r)?);
            }
        }
        Ok(h)
    }
}

/// A DDSketch with deletions (see the module header).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DdSketch {
    zeros: u64,
    positive: BTreeMap<i32, u64>,
    negative: BTreeMap<i32, u64>,
}

impl DdSketch {
    /// Relative accuracy.
    pub const ALPHA: f64 = 0.01;
    pub const MAX_BUCKETS: usize = 2048;
    /// Magnitudes below this count as zero.
    const MIN_VALUE: f64 = 1e-12;

    fn gamma() -> f64 {
        (1.0 + DdSketch::ALPHA) / (1.0 - DdSketch::ALPHA)
    }

    fn index(x: f64) -> i32 {
        (x.ln() / DdSketch::gamma().ln()).ceil() as i32
    }

    /// The value a bucket stands for: within α of every value in it.
    fn value(i: i32) -> f64 {
        let g = DdSketch::gamma();
        2.0 * g.powi(i) / (g + 1.0)
    }

    /// Add `weight` copies of `x` (negative: take them out). NaN is ignored.
    pub fn add(&mut self, x: f64, weight: i64) {
        if x.is_nan() {
            return;
        }
        let bump = |c: &mut u64| *c = (*c as i64).saturating_add(weight).max(0) as u64;
        if x.abs() < DdSketch::MIN_VALUE {
            bump(&mut self.zeros);
            return;
        }
        let i = DdSketch::index(x.abs().min(f64::MAX));
        let store = if x > 0.0 {
            &mut self.positive
        } else {
            &mut self.negative
        };
        // a value below a collapsed store's lowest bucket lands in it
        let i = match store.keys().next() {
            Some(low) if store.len() >= DdSketch::MAX_BUCKETS && i < *low => *low,
            _ => i,
        };
        let c = store.entry(i).or_insert(0);
        bump(c);
        if *c == 0 {
            store.remove(&i);
        }
        for store in [&mut self.positive, &mut self.negative] {
            while store.len() > DdSketch::MAX_BUCKETS {
                // merge the lowest bucket into the next
                let Some((low, n)) = store.pop_first() else {
                    break;
                };
                let Some((_, next)) = store.iter_mut().next() else {
                    store.insert(low, n);
                    break;
                };
                *next += n;
            }
        }
    }

    pub fn count(&self) -> u64 {
        self.zeros + self.positive.values().sum::<u64>() + self.negative.values().sum::<u64>()
    }

    /// The value at rank `q * (count - 1)` (nearest rank, rounded down), within α of the
    /// true value at that rank; None when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * (n - 1) as f64).floor() as u64;
        let mut seen = 0u64;
        // most negative first: the negative store from its largest magnitude down
        for (i, c) in self.negative.iter().rev() {
            seen += c;
            if seen > rank {
                return Some(-DdSketch::value(*i));
            }
        }
        seen += self.zeros;
        if seen > rank {
            return Some(0.0);
        }
        for (i, c) in &self.positive {
            seen += c;
            if seen > rank {
                return Some(DdSketch::value(*i));
            }
        }
        self.positive
            .keys()
            .next_back()
            .map(|i| DdSketch::value(*i))
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.zeros);
        for store in [&self.positive, &self.negative] {
            put_varint(out, store.len() as u64);
            let mut prev = 0i64;
            for (i, c) in store {
                put_varint(out, zigzag(i64::from(*i) - prev));
                prev = i64::from(*i);
                put_varint(out, *c);
            }
        }
    }

    pub fn decode(bytes: &[u8]) -> Result<DdSketch> {
        let mut r = Reader::new(bytes, "approx_percentile sketch");
        let mut s = DdSketch {
            zeros: get_varint(&mut r)?,
            ..Default::default()
        };
        for positive in [true, false] {
            let n = get_varint(&mut r)?;
            let mut prev = 0i64;
            for _ in 0..n {
                let i = prev + unzigzag(get_varint(&mut r)?);
                prev = i;
                let c = get_varint(&mut r)?;
                let store = if positive {
                    &mut s.positive
                } else {
                    &mut s.negative
                };
                store.insert(i as i32, c);
            }
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn seed() -> u64 {
        let s = std::env::var("WEIR_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(rand::random::<u64>);
        println!("sketch seed {s} (WEIR_SEED={s} to replay)");
        s
    }

    /// Inserts with duplicates, then deletes: the sketch equals the one built from what
    /// remains, survives encoding, and its estimates over 200 trials have the standard
    /// error HyperLogLog promises (mean relative error near 0, RMS under 1.3 x 4.6%,
    /// every trial within 5 standard errors).
    #[test]
    fn hll_retracts_exactly_and_estimates_within_its_error() {
        let seed = seed();
        let mut rng = StdRng::seed_from_u64(seed);
        let sigma = 1.04 / (Hll::REGISTERS as f64).sqrt();
        let (mut sum, mut sq) = (0.0, 0.0);
        let trials = 200;
        for trial in 0..trials {
            let n: u64 = [100, 1_000, 10_000, 50_000][trial % 4];
            let base = rng.random::<u64>();
            let mut h = Hll::default();
            let mut kept = Hll::default();
            let mut distinct = 0u64;
            for v in 0..n {
                let bytes = (base ^ v).to_le_bytes();
                let copies = rng.random_range(1..3i64);
                h.add(&bytes, copies);
                if rng.random_bool(0.3) {
                    h.add(&bytes, -copies); // all copies go
                } else {
                    if copies == 2 && rng.random_bool(0.5) {
                        h.add(&bytes, -1); // one copy goes, the value stays
                    }
                    kept.add(&bytes, 1);
                    distinct += 1;
                }
            }
            let mut enc = Vec::new();
            h.encode(&mut enc);
            let back = Hll::decode(&enc).expect("decode");
            assert_eq!(back.estimate(), h.estimate(), "seed {seed}");
            assert_eq!(
                h.estimate(),
                kept.estimate(),
                "seed {seed}: not retracted exactly"
            );
            let err = (h.estimate() as f64 - distinct as f64) / distinct as f64;
            assert!(
                err.abs() < 5.0 * sigma,
                "seed {seed}, trial {trial}: {} for {distinct} distinct",
                h.estimate()
            );
            sum += err;
            sq += err * err;
        }
        let (mean, rms) = (sum / trials as f64, (sq / trials as f64).sqrt());
        println!(
            "HLL relative error over {trials} trials: mean {mean:.4}, rms {rms:.4} (sigma {sigma:.4})"
        );
        assert!(mean.abs() < 0.02, "seed {seed}: biased, mean {mean}");
        assert!(rms < 1.3 * sigma, "seed {seed}: rms {rms} > 1.3 sigma");
        // everything deleted: empty again
        let mut h = Hll::default();
        for v in 0..1000u64 {
            h.add(&v.to_le_bytes(), 1);
        }
        for v in 0..1000u64 {
            h.add(&v.to_le_bytes(), -1);
        }
        assert_eq!(h, Hll::default());
        assert_eq!(h.estimate(), 0);
    }

    /// Every quantile is within α of the true value at its rank, after inserts and
    /// deletes; the sketch equals the one of what remains and survives encoding.
    #[test]
    fn ddsketch_quantiles_within_alpha_after_deletes() {
        let seed = seed();
        let mut rng = StdRng::seed_from_u64(seed);
        for trial in 0..50 {
            let mut s = DdSketch::default();
            let mut kept = DdSketch::default();
            let mut values = Vec::new();
            for _ in 0..rng.random_range(1..5000) {
                // log-uniform magnitudes over 12 decades, both signs, some zeros
                let x = if rng.random_bool(0.02) {
                    0.0
                } else {
                    let m = 10f64.powf(rng.random_range(-4.0..8.0));
                    if rng.random_bool(0.3) { -m } else { m }
                };
                s.add(x, 1);
                if rng.random_bool(0.4) {
                    s.add(x, -1);
                } else {
                    kept.add(x, 1);
                    values.push(x);
                }
            }
            assert_eq!(s, kept, "seed {seed}: not retracted exactly");
            let mut enc = Vec::new();
            s.encode(&mut enc);
            assert_eq!(DdSketch::decode(&enc).expect("decode"), s, "seed {seed}");
            values.sort_by(f64::total_cmp);
            if values.is_empty() {
                assert_eq!(s.quantile(0.5), None);
                continue;
            }
            for q in [0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0] {
                let rank = (q * (values.len() - 1) as f64).floor() as usize;
                let truth = values[rank];
                let est = s.quantile(q).expect("non-empty");
                assert!(
                    (est - truth).abs() <= DdSketch::ALPHA * truth.abs() + 1e-12,
                    "seed {seed}, trial {trial}, q {q}: {est} for {truth}"
                );
            }
        }
    }
}
