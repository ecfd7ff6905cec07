//! Postgres' network address types `inet` (a host address with an optional netmask) and
//! `cidr` (a network: no bits set right of the mask), stored as their canonical text (what
//! Postgres' output function prints), an Arrow `Utf8` whose field names the type
//! (`sql::types::PG_TYPE_KEY`), as `uuid` is. Equal values have equal text, so equality,
//! grouping, DISTINCT and joins need nothing of their own; ordering does: Postgres orders
//! by family (IPv4 first), then by the network part, the mask length, the whole address,
//! which [`sort_key`] encodes as bytes that order that way (`catalog/pg_semantics.rs` sorts
//! and compares through it, as it does enums).
//!
//! Input as Postgres reads it (`network_in`: IPv6 when the text has a `:`): an `inet` needs
//! all four IPv4 octets unless a mask length is given (`10.1/16`); a `cidr` may be
//! abbreviated and takes its mask from the address class when none is given (`10` is
//! `10.0.0.0/8`, `192.168.1` `192.168.1.0/24`) and refuses bits right of the mask (22P02
//! `invalid cidr value` with Postgres' detail). Output: an IPv6 address with its longest run
//! of two or more zero groups shortened to `::` and an embedded IPv4 address in dotted form,
//! an `inet`'s mask length shown unless it is the whole address, a `cidr`'s always.
//!
//! The functions and operators (one [`InetFn`] each): `host`, `text` (the cast to text:
//! always with the mask length), `abbrev`, `masklen`, `family`, `network`, `broadcast`,
//! `netmask`, `hostmask`, `set_masklen`, `inet_same_family`, `inet_merge`; containment
//! `<<`, `<<=`, `>>`, `>>=`, `&&`; `inet + bigint`, `inet - bigint`, `inet - inet`, `~`, `&`,
//! `|`. Errors are Postgres' (22P02 input, 22023 mask lengths and mixed families, 22003
//! out of range).

use std::fmt::Write as _;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryBuilder, BooleanBuilder, Int32Builder, Int64Builder,
    StringArray, StringBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Int64Type};
use datafusion::common::Result as DfResult;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};
use datafusion::prelude::SessionContext;

use crate::error::{WeirError, sqlstate};
use crate::sql::types::SqlType;

/// An address: IPv4 in the first four bytes of `addr`, or IPv6 in all sixteen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inet {
    pub v6: bool,
    pub bits: u8,
    pub addr: [u8; 16],
}

impl Inet {
    fn max_bits(&self) -> u8 {
        if self.v6 { 128 } else { 32 }
    }

    fn size(&self) -> usize {
        if self.v6 { 16 } else { 4 }
    }

    fn bytes(&self) -> &[u8] {
        &self.addr[..self.size()]
    }

    /// The address as one unsigned number (IPv4 in the low 32 bits).
    fn number(&self) -> u128 {
        self.bytes()
            .iter()
            .fold(0u128, |n, b| (n << 8) | u128::from(*b))
    }

    fn with_number(&self, n: u128) -> Inet {
        let mut out = *self;
        let size = self.size();
        for (i, b) in out.addr[..size].iter_mut().enumerate() {
            *b = (n >> (8 * (size - 1 - i))) as u8;
        }
        out
    }

    /// The mask of `bits` leading ones over the address's bytes, as a number.
    fn mask_number(&self, bits: u8) -> u128 {
        let width = u32::from(self.max_bits());
        let ones = if bits == 0 {
            0
        } else {
            u128::MAX << (128 - u32::from(bits))
        };
        ones >> (128 - width)
    }

    /// The address with the bits right of `bits` cleared.
    fn masked(&self, bits: u8) -> Inet {
        let mut out = self.with_number(self.number() & self.mask_number(bits));
        out.bits = bits;
        out
    }

    /// The first `n` bits of both addresses compare as Postgres' `bitncmp` does.
    fn prefix_cmp(&self, other: &Inet, n: u8) -> std::cmp::Ordering {
        let m = self.mask_number(n);
        (self.number() & m).cmp(&(other.number() & m))
    }

    /// How many leading bits, of the first `n`, the two addresses share.
    fn common_bits(&self, other: &Inet, n: u8) -> u8 {
        let width = u32::from(self.max_bits());
        let diff = (self.number() ^ other.number()) << (128 - width);
        (diff.leading_zeros().min(u32::from(n))) as u8
    }
}

fn invalid_syntax(cidr: bool, text: &str) -> WeirError {
    WeirError::new(
        sqlstate::INVALID_TEXT_REPRESENTATION,
        format!(
            "invalid input syntax for type {}: \"{text}\"",
            if cidr { "cidr" } else { "inet" }
        ),
    )
}

/// A text as Postgres' `inet_in` (`cidr` false) or `cidr_in` reads it.
pub fn parse(text: &str, cidr: bool) -> Result<Inet, WeirError> {
    let s = text.as_bytes();
    let v6 = s.contains(&b':');
    let read = if v6 {
        read_v6(s)
    } else if cidr {
        read_v4_network(s)
    } else {
        read_v4_host(s)
    };
    let Some((addr, bits)) = read else {
        return Err(invalid_syntax(cidr, text));
    };
    let ip = Inet { v6, bits, addr };
    if bits > ip.max_bits() {
        return Err(invalid_syntax(cidr, text));
    }
    if cidr && ip.masked(bits) != ip {
        return Err(WeirError::new(
            sqlstate::INVALID_TEXT_REPRESENTATION,
            format!("invalid cidr value: \"{text}\""),
        )
        .with_detail("Value has bits set to right of mask."));
    }
    Ok(ip)
}

/// Decimal digits from `at`, as a number no larger than `max` (None past it).
fn decimal(s: &[u8], at: &mut usize, max: u32) -> Option<u32> {
    let mut v = 0u32;
    while let Some(d) = s.get(*at).filter(|c| c.is_ascii_digit()) {
        v = v * 10 + u32::from(d - b'0');
        if v > max {
            return None;
        }
        *at += 1;
    }
    Some(v)
}

/// A `/bits` suffix at `at` (the `/` already read): digits to the end.
fn suffix_bits(s: &[u8], at: usize, max: u32) -> Option<u8> {
    if !s.get(at).is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let mut i = at;
    let mut v = 0u32;
    while let Some(d) = s.get(i).filter(|c| c.is_ascii_digit()) {
        v = v.saturating_mul(10).saturating_add(u32::from(d - b'0'));
        i += 1;
    }
    (i == s.len() && v <= max).then_some(v as u8)
}

/// Dotted decimal octets (at most four, each up to 255) from `at` into `addr`, up to the end
/// or a `/`: how many. `digit_after_dot`: a `.` must be followed by a digit (cidr's reader;
/// inet's ends the octets there).
fn dotted_octets(
    s: &[u8],
    at: &mut usize,
    addr: &mut [u8; 16],
    digit_after_dot: bool,
) -> Option<usize> {
    let mut n = 0usize;
    while s.get(*at).is_some_and(u8::is_ascii_digit) {
        let v = decimal(s, at, 255)?;
        if n == 4 {
            return None;
        }
        addr[n] = v as u8;
        n += 1;
        match s.get(*at) {
            None | Some(b'/') => break,
            Some(b'.') if !digit_after_dot || s.get(*at + 1).is_some_and(u8::is_ascii_digit) => {
                *at += 1
            }
            Some(_) => return None,
        }
    }
    Some(n)
}

/// An IPv4 `inet`: dotted decimal octets, all four unless `/bits` follows (and then at
/// least the octets the mask covers).
fn read_v4_host(s: &[u8]) -> Option<([u8; 16], u8)> {
    let mut addr = [0u8; 16];
    let mut at = 0usize;
    let n = dotted_octets(s, &mut at, &mut addr, false)?;
    let bits = match s.get(at) {
        None if n == 4 => 32,
        Some(b'/') if n > 0 => suffix_bits(s, at + 1, 32)?,
        _ => return None,
    };
    (usize::from(bits / 8) <= n).then_some((addr, bits))
}

/// An IPv4 `cidr`: octets (as few as one) or `0x` hex digits, the mask length from `/bits`
/// or else from the address class, the octets it covers filled with zeros.
fn read_v4_network(s: &[u8]) -> Option<([u8; 16], u8)> {
    let mut addr = [0u8; 16];
    let mut n = 0usize;
    let mut at = 0usize;
    if s.starts_with(b"0x") || s.starts_with(b"0X") {
        if !s.get(2).is_some_and(u8::is_ascii_hexdigit) {
            return None;
        }
        at = 2;
        let mut half: Option<u8> = None;
        while let Some(d) = s.get(at).and_then(|c| (*c as char).to_digit(16)) {
            at += 1;
            match half.take() {
                None => half = Some(d as u8),
                Some(h) => {
                    if n == 4 {
                        return None;
                    }
                    addr[n] = h << 4 | d as u8;
                    n += 1;
                }
            }
        }
        if let Some(h) = half {
            if n == 4 {
                return None;
            }
            addr[n] = h << 4;
            n += 1;
        }
    } else if s.first().is_some_and(u8::is_ascii_digit) {
        n = dotted_octets(s, &mut at, &mut addr, true)?;
    } else {
        return None;
    }
    let bits = match s.get(at) {
        None => None,
        Some(b'/') if n > 0 => Some(suffix_bits(s, at + 1, 32)?),
        _ => return None,
    };
    if n == 0 {
        return None;
    }
    let bits = bits.unwrap_or_else(|| {
        let class = match addr[0] {
            240.. => 32,
            224.. => 8,
            192.. => 24,
            128.. => 16,
            _ => 8,
        };
        let bits = class.max(8 * n as u8);
        if bits == 8 && addr[0] == 224 { 4 } else { bits }
    });
    Some((addr, bits))
}

/// A mask length after an IPv6 address: decimal, no leading zero, at most 128.
fn v6_bits(s: &[u8]) -> Option<u8> {
    if s.is_empty() || (s.len() > 1 && s[0] == b'0') || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v = 0u32;
    for d in s {
        v = v * 10 + u32::from(d - b'0');
        if v > 128 {
            return None;
        }
    }
    Some(v as u8)
}

/// The dotted IPv4 tail of an IPv6 address (one to four octets, no leading zeros), written
/// at `out`; a `/bits` may end it.
fn v4_tail(s: &[u8], out: &mut [u8], bits: &mut Option<u8>) -> Option<()> {
    for (i, part) in s.split(|c| *c == b'.').enumerate() {
        let (octet, rest) = match part.iter().position(|c| *c == b'/') {
            Some(p) => (&part[..p], Some(&part[p + 1..])),
            None => (part, None),
        };
        if octet.is_empty()
            || (octet.len() > 1 && octet[0] == b'0')
            || !octet.iter().all(u8::is_ascii_digit)
            || i > 3
        {
            return None;
        }
        let v: u32 = std::str::from_utf8(octet).ok()?.parse().ok()?;
        if v > 255 {
            return None;
        }
        out[i] = v as u8;
        if let Some(rest) = rest {
            // the mask ends the text: what follows it is not an octet
            if s.split(|c| *c == b'.').count() > i + 1 {
                return None;
            }
            *bits = Some(v6_bits(rest)?);
        }
    }
    Some(())
}

/// An IPv6 address: up to eight groups of one to four hex digits, one `::` for a run of
/// zero groups, an IPv4 address as its last 32 bits, `/bits` (128 without).
fn read_v6(s: &[u8]) -> Option<([u8; 16], u8)> {
    let mut tmp = [0u8; 16];
    let mut tp = 0usize;
    let mut gap: Option<usize> = None;
    let mut at = 0usize;
    if s.first() == Some(&b':') {
        if s.get(1) != Some(&b':') {
            return None;
        }
        at = 1;
    }
    let mut token = at;
    let mut group: Option<u16> = None;
    let mut digits = 0;
    let mut bits: Option<u8> = None;
    while at < s.len() {
        let c = s[at];
        at += 1;
        if let Some(d) = (c as char).to_digit(16) {
            digits += 1;
            if digits > 4 {
                return None;
            }
            group = Some(group.unwrap_or(0) << 4 | d as u16);
            continue;
        }
        match c {
            b':' => {
                token = at;
                match group.take() {
                    None => {
                        if gap.is_some() {
                            return None;
                        }
                        gap = Some(tp);
                    }
                    Some(g) => {
                        if at == s.len() || tp + 2 > 16 {
                            return None;
                        }
                        tmp[tp..tp + 2].copy_from_slice(&g.to_be_bytes());
                        tp += 2;
                        digits = 0;
                    }
                }
            }
            b'.' if tp + 4 <= 16
                && v4_tail(&s[token..], &mut tmp[tp..tp + 4], &mut bits).is_some() =>
            {
                tp += 4;
                group = None;
                break;
            }
            b'/' => {
                bits = Some(v6_bits(&s[at..])?);
                break;
            }
            _ => return None,
        }
    }
    if let Some(g) = group {
        if tp + 2 > 16 {
            return None;
        }
        tmp[tp..tp + 2].copy_from_slice(&g.to_be_bytes());
        tp += 2;
    }
    if let Some(g) = gap {
        if tp == 16 {
            return None;
        }
        let n = tp - g;
        let moved: Vec<u8> = tmp[g..tp].to_vec();
        tmp[g..tp].fill(0);
        tmp[16 - n..].copy_from_slice(&moved);
        tp = 16;
    }
    (tp == 16).then_some((tmp, bits.unwrap_or(128)))
}

/// Postgres' `inet_net_ntop`: the address (IPv4 all four octets), then `/bits` when `bits`
/// is given and not the whole address.
fn write_address(out: &mut String, ip: &Inet, bits: Option<u8>) {
    if !ip.v6 {
        let a = &ip.addr;
        let _ = write!(out, "{}.{}.{}.{}", a[0], a[1], a[2], a[3]);
    } else {
        let words: Vec<u16> = ip
            .addr
            .chunks(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect();
        // the first longest run of two or more zero groups
        let (mut best, mut cur): ((usize, usize), Option<(usize, usize)>) = ((0, 0), None);
        for (i, w) in words.iter().enumerate() {
            if *w == 0 {
                let run = cur.map_or((i, 1), |(b, l)| (b, l + 1));
                cur = Some(run);
                if run.1 > best.1 {
                    best = run;
                }
            } else {
                cur = None;
            }
        }
        let (base, len) = if best.1 >= 2 { best } else { (usize::MAX, 0) };
        for i in 0..8 {
            if base != usize::MAX && i >= base && i < base + len {
                if i == base {
                    out.push(':');
                }
                continue;
            }
            if i != 0 {
                out.push(':');
            }
            if i == 6
                && base == 0
                && (len == 6 || (len == 7 && words[7] != 1) || (len == 5 && words[5] == 0xffff))
            {
                let a = &ip.addr;
                let _ = write!(out, "{}.{}.{}.{}", a[12], a[13], a[14], a[15]);
                break;
            }
            let _ = write!(out, "{:x}", words[i]);
        }
        if base != usize::MAX && base + len == 8 {
            out.push(':');
        }
    }
    if let Some(b) = bits
        && b != ip.max_bits()
    {
        let _ = write!(out, "/{b}");
    }
}

/// The value as Postgres' output function prints it.
pub fn write_value(out: &mut String, ip: &Inet, cidr: bool) {
    write_address(out, ip, Some(ip.bits));
    if cidr && ip.bits == ip.max_bits() {
        let _ = write!(out, "/{}", ip.bits);
    }
}

/// `abbrev(cidr)`: only the octets (groups) the mask covers.
fn write_abbreviated_network(out: &mut String, ip: &Inet) {
    let bits = ip.bits;
    if !ip.v6 {
        let start = out.len();
        if bits == 0 {
            out.push('0');
        }
        let whole = usize::from(bits / 8);
        for (i, b) in ip.addr[..whole].iter().enumerate() {
            if i > 0 {
                out.push('.');
            }
            let _ = write!(out, "{b}");
        }
        let part = bits % 8;
        if part > 0 {
            if out.len() > start {
                out.push('.');
            }
            let m = (((1u32 << part) - 1) << (8 - part)) as u8;
            let _ = write!(out, "{}", ip.addr[whole] & m);
        }
        let _ = write!(out, "/{bits}");
        return;
    }
    if bits == 0 {
        out.push_str("::/0");
        return;
    }
    let s = ip.masked(bits).addr;
    let words = match usize::from(bits).div_ceil(16) {
        1 => 2,
        w => w,
    };
    // Postgres' search for the run of zero groups to shorten (a run that does not beat the
    // best so far is not reset, so it goes on counting after a non-zero group)
    let (mut zero_s, mut zero_l, mut tmp_s, mut tmp_l) = (0usize, 0usize, 0usize, 0usize);
    for w in 0..words {
        if s[2 * w] | s[2 * w + 1] == 0 {
            if tmp_l == 0 {
                tmp_s = w;
            }
            tmp_l += 1;
        } else if tmp_l != 0 && zero_l < tmp_l {
            zero_s = tmp_s;
            zero_l = tmp_l;
            tmp_l = 0;
        }
    }
    if tmp_l != 0 && zero_l < tmp_l {
        zero_s = tmp_s;
        zero_l = tmp_l;
    }
    let is_v4 = zero_l != words
        && zero_s == 0
        && (zero_l == 6
            || (zero_l == 5 && s[10] == 0xff && s[11] == 0xff)
            || (zero_l == 7 && s[14] != 0 && s[15] != 1));
    let start = out.len();
    for p in 0..words {
        if zero_l != 0 && p >= zero_s && p < zero_s + zero_l {
            if p == zero_s {
                out.push(':');
            }
            if p == words - 1 {
                out.push(':');
            }
            continue;
        }
        if is_v4 && p > 5 {
            out.push(if p == 6 { ':' } else { '.' });
            let _ = write!(out, "{}", s[2 * p]);
            if p != 7 || bits > 120 {
                let _ = write!(out, ".{}", s[2 * p + 1]);
            }
        } else {
            if out.len() > start {
                out.push(':');
            }
            let _ = write!(out, "{:x}", u16::from_be_bytes([s[2 * p], s[2 * p + 1]]));
        }
    }
    let _ = write!(out, "/{bits}");
}

/// The canonical text of an `inet` typed by a user, or Postgres' 22P02.
pub fn canonical_inet(text: &str) -> Result<String, WeirError> {
    let mut out = String::new();
    write_value(&mut out, &parse(text, false)?, false);
    Ok(out)
}

/// The canonical text of a `cidr` typed by a user, or Postgres' 22P02.
pub fn canonical_cidr(text: &str) -> Result<String, WeirError> {
    let mut out = String::new();
    write_value(&mut out, &parse(text, true)?, true);
    Ok(out)
}

/// Bytes that order as Postgres orders the values (`network_cmp`): the family, the address
/// cut to its mask, the mask length, the whole address. Two values compare by their
/// common mask length first: a shorter mask's cut address is a prefix of the longer's
/// padded with zeros, so it sorts first when the other's extra network bits are set, and by
/// the mask length when they are not, as `network_cmp` has it.
pub fn write_sort_key(out: &mut Vec<u8>, ip: &Inet) {
    out.push(u8::from(ip.v6));
    out.extend_from_slice(ip.masked(ip.bits).bytes());
    out.push(ip.bits);
    out.extend_from_slice(ip.bytes());
}

/// The binary wire form (Postgres' `inet_send`): family (2 IPv4, 3 IPv6), mask length,
/// whether a cidr, the address's length, the address.
pub fn to_binary(text: &str, cidr: bool) -> Option<Vec<u8>> {
    let ip = parse(text, false).ok()?;
    let mut out = vec![
        if ip.v6 { 3 } else { 2 },
        ip.bits,
        u8::from(cidr),
        ip.size() as u8,
    ];
    out.extend_from_slice(ip.bytes());
    Some(out)
}

/// A value from its binary wire form, as canonical text.
pub fn from_binary(raw: &[u8], cidr: bool) -> Option<String> {
    let head: [u8; 4] = raw.get(..4)?.try_into().ok()?;
    let [family, bits, _, len] = head;
    let addr = raw.get(4..)?;
    let v6 = match (family, len) {
        (2, 4) => false,
        (3, 16) => true,
        _ => return None,
    };
    if addr.len() != usize::from(len) {
        return None;
    }
    let mut a = [0u8; 16];
    a[..addr.len()].copy_from_slice(addr);
    let ip = Inet { v6, bits, addr: a };
    if bits > ip.max_bits() || (cidr && ip.masked(bits) != ip) {
        return None;
    }
    let mut out = String::new();
    write_value(&mut out, &ip, cidr);
    Some(out)
}

/// Which of the functions and operators an [`InetFn`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InetOp {
    InetIn,
    CidrIn,
    /// `inet::cidr`, `network(inet)`: the address cut to its mask.
    Network,
    /// The cast to text and `text(inet)`: the mask length always shown.
    Text,
    Host,
    Abbrev,
    Masklen,
    Family,
    Broadcast,
    Netmask,
    Hostmask,
    SetMasklen,
    SameFamily,
    Merge,
    SortKey,
    ContainedBy,
    ContainedByOrEqual,
    Contains,
    ContainsOrEqual,
    Overlaps,
    Plus,
    Minus,
    Difference,
    Not,
    And,
    Or,
}

impl InetOp {
    pub const ALL: [InetOp; 26] = [
        InetOp::InetIn,
        InetOp::CidrIn,
        InetOp::Network,
        InetOp::Text,
        InetOp::Host,
        InetOp::Abbrev,
        InetOp::Masklen,
        InetOp::Family,
        InetOp::Broadcast,
        InetOp::Netmask,
        InetOp::Hostmask,
        InetOp::SetMasklen,
        InetOp::SameFamily,
        InetOp::Merge,
        InetOp::SortKey,
        InetOp::ContainedBy,
        InetOp::ContainedByOrEqual,
        InetOp::Contains,
        InetOp::ContainsOrEqual,
        InetOp::Overlaps,
        InetOp::Plus,
        InetOp::Minus,
        InetOp::Difference,
        InetOp::Not,
        InetOp::And,
        InetOp::Or,
    ];

    pub fn name(self) -> &'static str {
        match self {
            InetOp::InetIn => "weir_inet_in",
            InetOp::CidrIn => "weir_cidr_in",
            InetOp::Network => "network",
            InetOp::Text => "weir_inet_text",
            InetOp::Host => "host",
            InetOp::Abbrev => "abbrev",
            InetOp::Masklen => "masklen",
            InetOp::Family => "family",
            InetOp::Broadcast => "broadcast",
            InetOp::Netmask => "netmask",
            InetOp::Hostmask => "hostmask",
            InetOp::SetMasklen => "set_masklen",
            InetOp::SameFamily => "inet_same_family",
            InetOp::Merge => "inet_merge",
            InetOp::SortKey => "weir_inet_sort_key",
            InetOp::ContainedBy => "weir_inet_contained_by",
            InetOp::ContainedByOrEqual => "weir_inet_contained_by_or_equal",
            InetOp::Contains => "weir_inet_contains",
            InetOp::ContainsOrEqual => "weir_inet_contains_or_equal",
            InetOp::Overlaps => "weir_inet_overlaps",
            InetOp::Plus => "weir_inet_plus",
            InetOp::Minus => "weir_inet_minus",
            InetOp::Difference => "weir_inet_difference",
            InetOp::Not => "weir_inet_not",
            InetOp::And => "weir_inet_and",
            InetOp::Or => "weir_inet_or",
        }
    }

    fn arity(self) -> usize {
        match self {
            InetOp::InetIn
            | InetOp::CidrIn
            | InetOp::Network
            | InetOp::Text
            | InetOp::Host
            | InetOp::Abbrev
            | InetOp::Masklen
            | InetOp::Family
            | InetOp::Broadcast
            | InetOp::Netmask
            | InetOp::Hostmask
            | InetOp::SortKey
            | InetOp::Not => 1,
            _ => 2,
        }
    }
}

/// The declared type of an argument's field: `cidr`, or (anything else) `inet`.
fn is_cidr(f: &Field) -> bool {
    crate::sql::types::field_sql_type(f) == Some(SqlType::Cidr)
}

/// One of the functions and operators over `inet` / `cidr` (see the module header).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct InetFn {
    op: InetOp,
    signature: Signature,
}

impl InetFn {
    pub fn new(op: InetOp) -> InetFn {
        InetFn {
            op,
            signature: Signature::new(TypeSignature::Any(op.arity()), Volatility::Immutable),
        }
    }

    pub fn udf(op: InetOp) -> Arc<ScalarUDF> {
        Arc::new(ScalarUDF::new_from_impl(InetFn::new(op)))
    }

    /// The result's SQL type, given whether the first argument is a `cidr`.
    fn result(&self, first_cidr: bool) -> SqlType {
        match self.op {
            InetOp::CidrIn | InetOp::Network | InetOp::Merge => SqlType::Cidr,
            InetOp::SetMasklen if first_cidr => SqlType::Cidr,
            InetOp::InetIn
            | InetOp::Broadcast
            | InetOp::Netmask
            | InetOp::Hostmask
            | InetOp::SetMasklen
            | InetOp::Plus
            | InetOp::Minus
            | InetOp::Not
            | InetOp::And
            | InetOp::Or => SqlType::Inet,
            InetOp::Text | InetOp::Host | InetOp::Abbrev => SqlType::Text,
            InetOp::Masklen | InetOp::Family => SqlType::Int4,
            InetOp::Difference => SqlType::Int8,
            InetOp::SameFamily
            | InetOp::ContainedBy
            | InetOp::ContainedByOrEqual
            | InetOp::Contains
            | InetOp::ContainsOrEqual
            | InetOp::Overlaps => SqlType::Bool,
            InetOp::SortKey => SqlType::Bytea,
        }
    }
}

fn external(e: WeirError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

fn out_of_range() -> DataFusionError {
    external(WeirError::new(
        sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
        "result is out of range",
    ))
}

fn invalid_parameter(msg: String) -> DataFusionError {
    external(WeirError::new(sqlstate::INVALID_PARAMETER_VALUE, msg))
}

/// A column of values read back from their (canonical) text.
fn values(a: &ArrayRef) -> DfResult<StringArray> {
    Ok(cast(a, &DataType::Utf8)?.as_string::<i32>().clone())
}

fn read(text: &str) -> DfResult<Inet> {
    parse(text, false).map_err(external)
}

impl ScalarUDFImpl for InetFn {
    fn name(&self) -> &str {
        self.op.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        match args.first() {
            // the input functions read a text[]'s elements
            Some(list @ DataType::List(_))
                if matches!(self.op, InetOp::InetIn | InetOp::CidrIn) =>
            {
                Ok(list.clone())
            }
            _ => Ok(self.result(false).arrow_type()),
        }
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        if let Some(f) = args.arg_fields.first()
            && matches!(f.data_type(), DataType::List(_))
            && matches!(self.op, InetOp::InetIn | InetOp::CidrIn)
        {
            return Ok(Arc::new(Field::new(
                self.name(),
                f.data_type().clone(),
                true,
            )));
        }
        let first_cidr = args.arg_fields.first().is_some_and(|f| is_cidr(f));
        Ok(Arc::new(self.result(first_cidr).field(self.name(), true)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let arrays = args
            .args
            .iter()
            .map(|a| a.to_array(rows))
            .collect::<DfResult<Vec<ArrayRef>>>()?;
        let first_cidr = args.arg_fields.first().is_some_and(|f| is_cidr(f));
        let address = args.arg_fields.first().is_some_and(|f| {
            matches!(
                crate::sql::types::field_sql_type(f),
                Some(SqlType::Inet | SqlType::Cidr)
            )
        });
        let out = if self.op == InetOp::Text && !address {
            // `text(x)` of another type: its text
            cast(&arrays[0], &DataType::Utf8)?
        } else {
            self.evaluate(&arrays, rows, first_cidr)?
        };
        Ok(if scalar {
            ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

impl InetFn {
    fn evaluate(&self, arrays: &[ArrayRef], rows: usize, first_cidr: bool) -> DfResult<ArrayRef> {
        let mut buf = String::new();
        match self.op {
            InetOp::InetIn | InetOp::CidrIn => {
                let canonical = if self.op == InetOp::CidrIn {
                    canonical_cidr
                } else {
                    canonical_inet
                };
                let a = match arrays[0].data_type() {
                    DataType::List(_) => arrays[0].clone(),
                    _ => Arc::new(values(&arrays[0])?) as ArrayRef,
                };
                return Ok(crate::sql::pg_text::map_texts(&a, canonical)
                    .map_err(external)?
                    .unwrap_or(a));
            }
            InetOp::SortKey => {
                let a = values(&arrays[0])?;
                let mut out = BinaryBuilder::with_capacity(rows, rows * 10);
                let mut key = Vec::with_capacity(34);
                for v in a.iter() {
                    match v {
                        Some(t) => {
                            key.clear();
                            write_sort_key(&mut key, &read(t)?);
                            out.append_value(&key);
                        }
                        None => out.append_null(),
                    }
                }
                return Ok(Arc::new(out.finish()));
            }
            _ => {}
        }
        let a = values(&arrays[0])?;
        match self.op.arity() {
            1 => {
                let result = self.result(first_cidr);
                match result {
                    SqlType::Int4 => {
                        let mut out = Int32Builder::with_capacity(rows);
                        for v in a.iter() {
                            match v {
                                Some(t) => {
                                    let ip = read(t)?;
                                    out.append_value(match self.op {
                                        InetOp::Masklen => i32::from(ip.bits),
                                        _ => {
                                            if ip.v6 {
                                                6
                                            } else {
                                                4
                                            }
                                        }
                                    });
                                }
                                None => out.append_null(),
                            }
                        }
                        Ok(Arc::new(out.finish()))
                    }
                    _ => {
                        let mut out = StringBuilder::with_capacity(rows, rows * 16);
                        for v in a.iter() {
                            let Some(t) = v else {
                                out.append_null();
                                continue;
                            };
                            let ip = read(t)?;
                            buf.clear();
                            self.write_unary(&mut buf, &ip, first_cidr);
                            out.append_value(&buf);
                        }
                        Ok(Arc::new(out.finish()))
                    }
                }
            }
            _ => self.evaluate_binary(&a, &arrays[1], rows, first_cidr, &mut buf),
        }
    }

    fn write_unary(&self, out: &mut String, ip: &Inet, first_cidr: bool) {
        match self.op {
            InetOp::Network => write_value(out, &ip.masked(ip.bits), true),
            InetOp::Text => {
                write_address(out, ip, Some(ip.bits));
                if ip.bits == ip.max_bits() {
                    let _ = write!(out, "/{}", ip.bits);
                }
            }
            InetOp::Host => write_address(out, ip, None),
            InetOp::Abbrev if first_cidr => write_abbreviated_network(out, ip),
            InetOp::Abbrev => write_value(out, ip, false),
            InetOp::Broadcast => {
                let mut b = ip.with_number(ip.number() | !ip.mask_number(ip.bits));
                b.bits = ip.bits;
                write_value(out, &b, false);
            }
            InetOp::Netmask | InetOp::Hostmask => {
                let m = ip.mask_number(ip.bits);
                let m = if self.op == InetOp::Netmask {
                    m
                } else {
                    !m & ip.mask_number(ip.max_bits())
                };
                let mut r = ip.with_number(m);
                r.bits = ip.max_bits();
                write_value(out, &r, false);
            }
            InetOp::Not => {
                let r = ip.with_number(!ip.number() & ip.mask_number(ip.max_bits()));
                write_value(out, &r, false);
            }
            _ => {}
        }
    }

    fn evaluate_binary(
        &self,
        a: &StringArray,
        b: &ArrayRef,
        rows: usize,
        first_cidr: bool,
        buf: &mut String,
    ) -> DfResult<ArrayRef> {
        let number = matches!(self.op, InetOp::SetMasklen | InetOp::Plus | InetOp::Minus);
        let (texts, numbers) = if number {
            let n = cast(b, &DataType::Int64)?;
            (None, Some(n.as_primitive::<Int64Type>().clone()))
        } else {
            (Some(values(b)?), None)
        };
        let pair = |i: usize| -> DfResult<Option<(Inet, Option<Inet>, i64)>> {
            if a.is_null(i) {
                return Ok(None);
            }
            match (&texts, &numbers) {
                (Some(t), _) if !t.is_null(i) => {
                    Ok(Some((read(a.value(i))?, Some(read(t.value(i))?), 0)))
                }
                (_, Some(n)) if !n.is_null(i) => Ok(Some((read(a.value(i))?, None, n.value(i)))),
                _ => Ok(None),
            }
        };
        match self.result(first_cidr) {
            SqlType::Bool => {
                let mut out = BooleanBuilder::with_capacity(rows);
                for i in 0..rows {
                    let Some((x, Some(y), _)) = pair(i)? else {
                        out.append_null();
                        continue;
                    };
                    let same = x.v6 == y.v6;
                    out.append_value(match self.op {
                        InetOp::SameFamily => same,
                        InetOp::ContainedBy => {
                            same && x.bits > y.bits && x.prefix_cmp(&y, y.bits).is_eq()
                        }
                        InetOp::ContainedByOrEqual => {
                            same && x.bits >= y.bits && x.prefix_cmp(&y, y.bits).is_eq()
                        }
                        InetOp::Contains => {
                            same && y.bits > x.bits && x.prefix_cmp(&y, x.bits).is_eq()
                        }
                        InetOp::ContainsOrEqual => {
                            same && y.bits >= x.bits && x.prefix_cmp(&y, x.bits).is_eq()
                        }
                        _ => same && x.prefix_cmp(&y, x.bits.min(y.bits)).is_eq(),
                    });
                }
                Ok(Arc::new(out.finish()))
            }
            SqlType::Int8 => {
                let mut out = Int64Builder::with_capacity(rows);
                for i in 0..rows {
                    let Some((x, Some(y), _)) = pair(i)? else {
                        out.append_null();
                        continue;
                    };
                    if x.v6 != y.v6 {
                        return Err(invalid_parameter(
                            "cannot subtract inet values of different sizes".into(),
                        ));
                    }
                    let d = x.number() as i128 - y.number() as i128;
                    out.append_value(i64::try_from(d).map_err(|_| out_of_range())?);
                }
                Ok(Arc::new(out.finish()))
            }
            result => {
                let mut out = StringBuilder::with_capacity(rows, rows * 16);
                for i in 0..rows {
                    let Some((x, y, n)) = pair(i)? else {
                        out.append_null();
                        continue;
                    };
                    buf.clear();
                    let r = self.binary_value(x, y, n, result == SqlType::Cidr)?;
                    write_value(buf, &r, result == SqlType::Cidr);
                    out.append_value(&*buf);
                }
                Ok(Arc::new(out.finish()))
            }
        }
    }

    fn binary_value(&self, x: Inet, y: Option<Inet>, n: i64, cidr: bool) -> DfResult<Inet> {
        let max = x.mask_number(x.max_bits());
        match (self.op, y) {
            (InetOp::SetMasklen, _) => {
                let bits = if n == -1 { i64::from(x.max_bits()) } else { n };
                if !(0..=i64::from(x.max_bits())).contains(&bits) {
                    return Err(invalid_parameter(format!("invalid mask length: {n}")));
                }
                let bits = bits as u8;
                Ok(if cidr {
                    x.masked(bits)
                } else {
                    Inet { bits, ..x }
                })
            }
            (InetOp::Plus | InetOp::Minus, _) => {
                let n = if self.op == InetOp::Minus {
                    -i128::from(n)
                } else {
                    i128::from(n)
                };
                let sum = (x.number() as i128)
                    .checked_add(n)
                    .ok_or_else(out_of_range)?;
                if sum < 0 || sum as u128 > max {
                    return Err(out_of_range());
                }
                Ok(x.with_number(sum as u128))
            }
            (InetOp::Merge, Some(y)) => {
                if x.v6 != y.v6 {
                    return Err(invalid_parameter(
                        "cannot merge addresses from different families".into(),
                    ));
                }
                Ok(x.masked(x.common_bits(&y, x.bits.min(y.bits))))
            }
            (InetOp::And | InetOp::Or, Some(y)) => {
                if x.v6 != y.v6 {
                    return Err(invalid_parameter(format!(
                        "cannot {} inet values of different sizes",
                        if self.op == InetOp::And { "AND" } else { "OR" }
                    )));
                }
                let v = if self.op == InetOp::And {
                    x.number() & y.number()
                } else {
                    x.number() | y.number()
                };
                let mut r = x.with_number(v);
                r.bits = x.bits.max(y.bits);
                Ok(r)
            }
            _ => Err(DataFusionError::Internal(format!(
                "{} has no second address",
                self.op.name()
            ))),
        }
    }
}

/// The functions Postgres users call by name, and the ones operators and casts are
/// planned into.
pub fn register(ctx: &SessionContext) {
    for op in InetOp::ALL {
        let f = InetFn::udf(op).as_ref().clone();
        ctx.register_udf(match op {
            // Postgres' `text(inet)` (and of other values: their text)
            InetOp::Text => f.with_aliases(["text"]),
            _ => f,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(text: &str, cidr: bool) -> String {
        match if cidr {
            canonical_cidr(text)
        } else {
            canonical_inet(text)
        } {
            Ok(s) => s,
            Err(e) => format!("ERROR {}", e.message),
        }
    }

    /// Each pair: what PostgreSQL 15 printed for the input.
    #[test]
    fn reads_and_prints_as_postgres() {
        for (input, want) in [
            ("1.2.3.4", "1.2.3.4"),
            ("1.2.3.4/24", "1.2.3.4/24"),
            ("10.1/16", "10.1.0.0/16"),
            ("::1", "::1"),
            ("2001:DB8::1/64", "2001:db8::1/64"),
            ("::ffff:1.2.3.4", "::ffff:1.2.3.4"),
            ("::1.2.3.4", "::1.2.3.4"),
            ("::", "::"),
            ("1:0:0:2:0:0:0:3", "1:0:0:2::3"),
            ("1:0:0:2:0:0:3:4", "1::2:0:0:3:4"),
            ("01.02.003.4", "1.2.3.4"),
            ("1.2.3.4/08", "1.2.3.4/8"),
        ] {
            assert_eq!(out(input, false), want, "{input}");
        }
        for bad in [
            "1.2.3",
            " 1.2.3.4",
            "1.2.3.4 ",
            "1.2.3.256",
            "1.2.3.4/33",
            "::1/08",
            "",
            "x",
            "1:2",
            ":1",
            "1::2::3",
            "1.2.3.4/",
            "10.1/24",
        ] {
            assert!(
                out(bad, false).starts_with("ERROR invalid input syntax"),
                "{bad}"
            );
        }
        for (input, want) in [
            ("10", "10.0.0.0/8"),
            ("10.1", "10.1.0.0/16"),
            ("128", "128.0.0.0/16"),
            ("192.168.1", "192.168.1.0/24"),
            ("224", "224.0.0.0/4"),
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("2001:db8::/32", "2001:db8::/32"),
            ("1.2.3.4", "1.2.3.4/32"),
        ] {
            assert_eq!(out(input, true), want, "{input}");
        }
        assert_eq!(
            out("1.2.3.4/24", true),
            "ERROR invalid cidr value: \"1.2.3.4/24\""
        );
    }

    #[test]
    fn functions_answer_as_postgres() {
        let unary = |op: InetOp, text: &str, cidr: bool| {
            let mut s = String::new();
            InetFn::new(op).write_unary(&mut s, &parse(text, cidr).unwrap(), cidr);
            s
        };
        for (op, text, want) in [
            (InetOp::Network, "192.168.1.5/24", "192.168.1.0/24"),
            (InetOp::Broadcast, "192.168.1.5/24", "192.168.1.255/24"),
            (InetOp::Netmask, "192.168.1.5/24", "255.255.255.0"),
            (InetOp::Hostmask, "192.168.1.5/24", "0.0.0.255"),
            (InetOp::Netmask, "::1/64", "ffff:ffff:ffff:ffff::"),
            (InetOp::Hostmask, "::1/100", "::15.255.255.255"),
            (InetOp::Text, "1.2.3.4", "1.2.3.4/32"),
            (InetOp::Host, "1.2.3.4/24", "1.2.3.4"),
            (InetOp::Not, "1.2.3.4", "254.253.252.251"),
        ] {
            assert_eq!(unary(op, text, false), want, "{op:?} {text}");
        }
        for (text, want) in [
            ("10.1.0.0/16", "10.1/16"),
            ("0.0.0.0/0", "0/0"),
            ("10.1.2.0/23", "10.1.2/23"),
            ("2001:db8::/32", "2001:db8/32"),
            ("2001:db8:1::/48", "2001:db8:1/48"),
        ] {
            assert_eq!(unary(InetOp::Abbrev, text, true), want, "{text}");
        }
        assert_eq!(unary(InetOp::Abbrev, "10.1.0.0/16", false), "10.1.0.0/16");
    }

    #[test]
    fn sort_keys_order_as_postgres() {
        // ORDER BY a in Postgres 15
        let sorted = [
            "9.255.255.255",
            "10.0.0.0/8",
            "10.0.0.1/16",
            "10.0.0.1",
            "192.168.1.20/24",
            "::1",
        ];
        let keys: Vec<Vec<u8>> = sorted
            .iter()
            .map(|t| {
                let mut k = Vec::new();
                write_sort_key(&mut k, &parse(t, false).unwrap());
                k
            })
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
    }

    #[test]
    fn binary_form_round_trips() {
        for (t, cidr) in [("1.2.3.4/24", false), ("10.0.0.0/8", true), ("::1", false)] {
            let b = to_binary(t, cidr).unwrap();
            assert_eq!(from_binary(&b, cidr).as_deref(), Some(t));
        }
        assert_eq!(
            to_binary("1.2.3.4/24", false).unwrap(),
            vec![2, 24, 0, 4, 1, 2, 3, 4]
        );
    }
}
