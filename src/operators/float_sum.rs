//! Exact sums of `double precision` values (not an operator: the accumulator shared by the
//! incremental `Aggregate` and the one-shot `sum`/`avg` of ad-hoc queries).
//!
//! A running float sum that adds and subtracts loses everything below the largest
//! magnitude it has seen (`1e308 + 1 - 1e308` is `0`), so a view maintained under
//! retractions drifts from its query. [`ExactSum`] keeps the sum as an integer multiple of
//! 2⁻¹⁰⁷⁴ (the smallest double), in 32-bit limbs held in `i64`s so that additions need no
//! carry until the value is read; NaN and ±Infinity are counted apart. Adding `x` with
//! weight `w` and later `x` with weight `-w` restores the state exactly, and the value read
//! is the exact sum rounded once to the nearest double (ties to even): the same whatever
//! the order or grouping of the additions. A sum of finite values beyond the double range
//! reads as ±Infinity; any NaN, or both infinities, read as NaN.
//!
//! Only the limbs the values touch are kept (a window that grows as needed), so a group
//! of values of similar magnitude holds a handful of limbs.

/// Bits per limb.
const LIMB_BITS: u32 = 32;
/// Carry-free additions before the limbs are normalized (each adds < 2³² per limb; an
/// `i64` limb holds 2³¹ of them).
const NORMALIZE_EVERY: u32 = 1 << 30;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExactSum {
    /// Index of `limbs[0]`: limb `i` weighs 2^(32·(base + i) − 1074).
    base: u32,
    limbs: Vec<i64>,
    adds: u32,
    nan: i64,
    pos_inf: i64,
    neg_inf: i64,
}

impl ExactSum {
    pub fn new() -> Self {
        Self::default()
    }

    /// Append the state to `out` (for state tables).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.base.to_le_bytes());
        out.extend_from_slice(&self.adds.to_le_bytes());
        for v in [self.nan, self.pos_inf, self.neg_inf] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&(self.limbs.len() as u32).to_le_bytes());
        for l in &self.limbs {
            out.extend_from_slice(&l.to_le_bytes());
        }
    }

    /// Read a state written by [`ExactSum::encode`].
    pub fn decode(r: &mut crate::state::state_table::Reader<'_>) -> crate::error::Result<Self> {
        let base = r.u32()?;
        let adds = r.u32()?;
        let (nan, pos_inf, neg_inf) = (r.i64()?, r.i64()?, r.i64()?);
        let n = r.u32()? as usize;
        let mut limbs = Vec::with_capacity(n.min(r.remaining() / 8));
        for _ in 0..n {
            limbs.push(r.i64()?);
        }
        Ok(ExactSum {
            base,
            limbs,
            adds,
            nan,
            pos_inf,
            neg_inf,
        })
    }

    /// Add `x · weight` exactly.
    pub fn add(&mut self, x: f64, weight: i64) {
        if weight == 0 {
            return;
        }
        if x.is_nan() {
            self.nan += weight;
            return;
        }
        if x.is_infinite() {
            if x > 0.0 {
                self.pos_inf += weight;
            } else {
                self.neg_inf += weight;
            }
            return;
        }
        let bits = x.to_bits();
        let exp = ((bits >> 52) & 0x7ff) as u32;
        let frac = bits & ((1u64 << 52) - 1);
        let (mantissa, pos) = if exp == 0 {
            (frac, 0)
        } else {
            (frac | (1u64 << 52), exp - 1)
        };
        if mantissa == 0 {
            return;
        }
        let negative = (x < 0.0) != (weight < 0);
        let product = mantissa as u128 * weight.unsigned_abs() as u128;
        self.add_shifted(product, pos, negative);
    }

    /// Add `value · 2^pos` (in units of 2⁻¹⁰⁷⁴).
    fn add_shifted(&mut self, value: u128, pos: u32, negative: bool) {
        let idx = pos / LIMB_BITS;
        let shift = pos % LIMB_BITS;
        // value << shift spans at most 128 + 31 bits: six limbs
        self.cover(idx, idx + 6);
        let mask = (1u128 << LIMB_BITS) - 1;
        let low = (value & ((1u128 << (LIMB_BITS - shift)) - 1)) << shift;
        let mut rest = value >> (LIMB_BITS - shift);
        let at = (idx - self.base) as usize;
        let sign = if negative { -1 } else { 1 };
        self.limbs[at] += sign * low as i64;
        let mut k = at + 1;
        while rest != 0 {
            self.limbs[k] += sign * (rest & mask) as i64;
            rest >>= LIMB_BITS;
            k += 1;
        }
        self.adds += 1;
        if self.adds >= NORMALIZE_EVERY {
            self.normalize();
        }
    }

    /// Make the window hold limbs `lo..hi`.
    fn cover(&mut self, lo: u32, hi: u32) {
        if self.limbs.is_empty() {
            self.base = lo;
            self.limbs = vec![0; (hi - lo) as usize];
            return;
        }
        if lo < self.base {
            let grow = (self.base - lo) as usize;
            let mut v = vec![0; grow];
            v.extend_from_slice(&self.limbs);
            self.limbs = v;
            self.base = lo;
        }
        let end = self.base + self.limbs.len() as u32;
        if hi > end {
            self.limbs.resize(self.limbs.len() + (hi - end) as usize, 0);
        }
    }

    /// Propagate carries: every limb but the top one in [0, 2³²), the top one signed.
    fn normalize(&mut self) {
        let n = self.limbs.len();
        for i in 0..n {
            let carry = self.limbs[i] >> LIMB_BITS;
            if carry != 0 {
                if i + 1 == n {
                    self.limbs.push(0);
                }
                self.limbs[i] -= carry << LIMB_BITS;
                self.limbs[i + 1] += carry;
            }
        }
        // drop zero limbs at the top (keeping a negative top limb) and at the bottom
        while self.limbs.len() > 1 && self.limbs[self.limbs.len() - 1] == 0 {
            self.limbs.pop();
        }
        let zeros = self.limbs.iter().take_while(|l| **l == 0).count();
        if zeros == self.limbs.len() {
            self.limbs.clear();
            self.base = 0;
        } else if zeros > 0 {
            self.limbs.drain(..zeros);
            self.base += zeros as u32;
        }
        self.adds = 0;
    }

    /// Fold another sum in (the merge of partial aggregates).
    pub fn merge(&mut self, other: &ExactSum) {
        self.nan += other.nan;
        self.pos_inf += other.pos_inf;
        self.neg_inf += other.neg_inf;
        if other.limbs.is_empty() {
            return;
        }
        // keep both within carry-free range
        self.normalize();
        let mut o = other.clone();
        o.normalize();
        if o.limbs.is_empty() {
            return;
        }
        let end = o.base + o.limbs.len() as u32;
        self.cover(o.base, end + 1);
        for (i, l) in o.limbs.iter().enumerate() {
            let at = (o.base - self.base) as usize + i;
            self.limbs[at] += l;
        }
        self.normalize();
    }

    /// The sum, rounded once to the nearest double.
    pub fn value(&self) -> f64 {
        if self.nan != 0 || (self.pos_inf != 0 && self.neg_inf != 0) {
            return f64::NAN;
        }
        if self.pos_inf != 0 {
            return if self.pos_inf > 0 {
                f64::INFINITY
            } else {
                f64::NAN
            };
        }
        if self.neg_inf != 0 {
            return if self.neg_inf > 0 {
                f64::NEG_INFINITY
            } else {
                f64::NAN
            };
        }
        let mut s = self.clone();
        s.normalize();
        if s.limbs.is_empty() {
            return 0.0;
        }
        let negative = *s.limbs.last().unwrap_or(&0) < 0;
        if negative {
            for l in s.limbs.iter_mut() {
                *l = -*l;
            }
            s.normalize();
        }
        let v = magnitude_to_f64(&s.limbs, s.base);
        if negative { -v } else { v }
    }

    /// Bytes of the state (a DataFusion partial state; later, a checkpoint).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut s = self.clone();
        s.normalize();
        let mut out = Vec::with_capacity(32 + 8 * s.limbs.len());
        out.extend_from_slice(&s.base.to_le_bytes());
        out.extend_from_slice(&(s.limbs.len() as u32).to_le_bytes());
        for l in &s.limbs {
            out.extend_from_slice(&l.to_le_bytes());
        }
        for c in [s.nan, s.pos_inf, s.neg_inf] {
            out.extend_from_slice(&c.to_le_bytes());
        }
        out
    }

    pub fn from_bytes(b: &[u8]) -> Option<ExactSum> {
        let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
        let i64_at = |o: usize| Some(i64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
        let base = u32_at(0)?;
        let n = u32_at(4)? as usize;
        if b.len() != 8 + 8 * n + 24 || base > 4096 {
            return None;
        }
        let limbs = (0..n)
            .map(|i| i64_at(8 + 8 * i))
            .collect::<Option<Vec<_>>>()?;
        let o = 8 + 8 * n;
        Some(ExactSum {
            base,
            limbs,
            adds: NORMALIZE_EVERY / 2,
            nan: i64_at(o)?,
            pos_inf: i64_at(o + 8)?,
            neg_inf: i64_at(o + 16)?,
        })
    }

    /// Heap bytes held (for memory accounting).
    pub fn heap_size(&self) -> usize {
        self.limbs.capacity() * 8
    }
}

/// A nonnegative normalized big integer (limb `i` weighs 2^(32·(base + i))) times 2⁻¹⁰⁷⁴,
/// rounded to the nearest double, ties to even.
fn magnitude_to_f64(limbs: &[i64], base: u32) -> f64 {
    let h = limbs.len() - 1;
    let top = limbs[h] as u64;
    let top_bits = 64 - top.leading_zeros();
    // bit length of the whole number, counted from 2^-1074
    let b = (base as u64 + h as u64) * LIMB_BITS as u64 + top_bits as u64;
    // the top (up to) four limbs in one u128
    let mut acc: u128 = 0;
    let mut acc_bits: u32 = 0;
    let mut k = h as isize;
    while k >= 0 && acc_bits < 97 {
        acc = (acc << LIMB_BITS) | limbs[k as usize] as u128;
        acc_bits = if acc_bits == 0 {
            top_bits
        } else {
            acc_bits + LIMB_BITS
        };
        k -= 1;
    }
    let mut sticky = limbs[..(k + 1).max(0) as usize].iter().any(|l| *l != 0);
    if b <= 53 {
        // fewer than 53 bits above 2^-1074: exactly a (sub)normal double
        let mut n: u64 = 0;
        for (i, l) in limbs.iter().enumerate() {
            n |= (*l as u64) << ((base as usize + i) * LIMB_BITS as usize);
        }
        return n as f64 * f64::from_bits(1);
    }
    // the top 64 bits, and whether anything below them is set
    let window: u64 = if acc_bits >= 64 {
        let drop = acc_bits - 64;
        sticky |= drop > 0 && acc & ((1u128 << drop) - 1) != 0;
        (acc >> drop) as u64
    } else {
        (acc << (64 - acc_bits)) as u64
    };
    let mut q = window >> 11;
    let r = window & 0x7ff;
    if r > 0x400 || (r == 0x400 && (sticky || q & 1 == 1)) {
        q += 1;
    }
    // the leading bit's exponent (value = 1.f × 2^e)
    let mut e = b as i64 - 1 - 1074;
    if q == 1u64 << 53 {
        q >>= 1;
        e += 1;
    }
    if e > 1023 {
        return f64::INFINITY;
    }
    let biased = (e + 1023) as u64;
    f64::from_bits((biased << 52) | (q & ((1u64 << 52) - 1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn sum(xs: &[(f64, i64)]) -> f64 {
        let mut s = ExactSum::new();
        for (x, w) in xs {
            s.add(*x, *w);
        }
        s.value()
    }

    #[test]
    fn cancellation_is_exact() {
        assert_eq!(sum(&[(1e308, 1), (1.0, 1), (1e308, -1)]), 1.0);
        assert_eq!(sum(&[(1e16, 1), (1.0, 1), (-1e16, 1)]), 1.0);
        assert_eq!(sum(&[(0.1, 1), (0.2, 1)]), 0.30000000000000004);
        assert_eq!(sum(&[(0.1, 3)]), 0.30000000000000004);
        assert_eq!(
            sum(&[(f64::MIN_POSITIVE / 4.0, 1), (1e-300, 1), (1e-300, -1)]),
            f64::MIN_POSITIVE / 4.0
        );
        assert_eq!(sum(&[(5e-324, 3)]), 1.5e-323);
        assert_eq!(sum(&[(-2.5, 2), (1.0, 1)]), -4.0);
        assert_eq!(sum(&[]), 0.0);
        assert_eq!(sum(&[(1e308, 2)]), f64::INFINITY);
        assert_eq!(
            sum(&[(f64::MAX, 1), (f64::MAX, 1), (f64::MAX, -1)]),
            f64::MAX
        );
    }

    #[test]
    fn non_finite_values_are_counted() {
        assert!(sum(&[(f64::NAN, 1), (1.0, 1)]).is_nan());
        assert_eq!(sum(&[(f64::NAN, 1), (f64::NAN, -1), (2.0, 1)]), 2.0);
        assert_eq!(sum(&[(f64::INFINITY, 1), (1.0, 1)]), f64::INFINITY);
        assert!(sum(&[(f64::INFINITY, 1), (f64::NEG_INFINITY, 1)]).is_nan());
        assert_eq!(
            sum(&[
                (f64::INFINITY, 1),
                (f64::NEG_INFINITY, 1),
                (f64::INFINITY, -1)
            ]),
            f64::NEG_INFINITY
        );
    }

    /// Against exact rational arithmetic on values that are multiples of a common power of
    /// two (so an i128 holds the exact sum), in random order, with retractions.
    #[test]
    fn random_sums_round_correctly() {
        let seed = 20261201u64;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for case in 0..2000 {
            let scale: i32 = rng.random_range(-60..60);
            let n = rng.random_range(1..40);
            let mut exact: i128 = 0;
            let mut s = ExactSum::new();
            let mut items = Vec::new();
            for _ in 0..n {
                let m: i64 = rng.random_range(-(1i64 << 53)..(1i64 << 53));
                let x = m as f64 * 2f64.powi(scale);
                let w: i64 = rng.random_range(-3..4);
                exact += m as i128 * w as i128;
                items.push((x, w));
            }
            for (x, w) in &items {
                s.add(*x, *w);
            }
            // retract and re-add a random prefix: the state must not change
            let before = s.clone().to_bytes();
            for (x, w) in items.iter().take(n / 2) {
                s.add(*x, -*w);
            }
            for (x, w) in items.iter().take(n / 2) {
                s.add(*x, *w);
            }
            assert_eq!(s.to_bytes(), before, "seed {seed} case {case}");
            // i128 → f64 rounds to nearest even, then the power of two scales exactly
            let want = exact as f64 * 2f64.powi(scale);
            assert_eq!(s.value(), want, "seed {seed} case {case}: {items:?}");
            let round = ExactSum::from_bytes(&s.to_bytes()).expect("round trip");
            assert_eq!(round.value(), want);
        }
    }

    #[test]
    fn merge_equals_adding_everything() {
        let mut a = ExactSum::new();
        let mut b = ExactSum::new();
        let mut all = ExactSum::new();
        for (i, x) in [1e300, 3.5, -1e-300, 7e-320, -1e300, 12345.678]
            .iter()
            .enumerate()
        {
            if i % 2 == 0 {
                a.add(*x, 1)
            } else {
                b.add(*x, 1)
            }
            all.add(*x, 1);
        }
        a.merge(&b);
        assert_eq!(a.value(), all.value());
        assert_eq!(a.value(), 12345.678 + 3.5);
    }
}
