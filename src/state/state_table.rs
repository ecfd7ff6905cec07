//! Keyed state tables: the one way operators and views keep state.
//!
//! A state table maps ordered byte keys to byte values. Operators declare theirs when they
//! are built ([`TableDecl`]: a name and the layout of its keys) and use point
//! `get`/`put`/`delete`, prefix scans and bounded range scans in both directions (a min/max
//! reads the last key of a range), and range deletes (closing a window frees it in one
//! call). Every write is also appended to the table's change log; [`StateTable::flush`]
//! writes that log, the changes since the last flush, as one blob into a store write
//! batch (a checkpoint), and
//! [`StateTable::load`] reads a table back (recovery). The framework, not the operator,
//! calls those two.
//!
//! Spilling (`--memory-limit`): the cache holds every entry until the dataflow worker asks
//! a table to [`evict`](StateTable::evict) bytes (the state tables' footprint is over the
//! process's state-cache budget, or the process over its memory limit). Eviction is a
//! CLOCK sweep: every read and write marks an entry hot; the sweep clears hot marks and
//! moves entries that stayed cold since the last sweep to the spill store
//! (`state/spill.rs`). Reads and writes bring spilled entries back first ("fault in"):
//! a point access reads one key from the spill store, a prefix or range read the part of
//! the range that was spilled. An ordered table remembers which key ranges may have
//! spilled entries, so accesses outside them never touch the spill store; a hashed table
//! with spilled entries looks a missing key up there. An entry is in memory or in the
//! spill store, never both. Checkpoints write both; the spill store is never read at
//! recovery (a checkpoint holds everything).
//! A spill-store error cannot be answered in the middle of a read: the read goes on
//! without the missing entries and the table keeps the error, which fails its view at the
//! end of the epoch ([`StateTable::take_error`]) before anything it computed is published. The change log costs one append per write (no lookup, no hashing; a
//! key written twice between checkpoints is logged twice: reading a dirty set back at
//! flush time cost a B-tree lookup per key, 28% of the dataflow thread on Nexmark q7).
//! Logging starts with the first flush (which writes the whole cache as a base) or load:
//! a table that is never flushed logs nothing. Whoever flushes a table to a prefix for the
//! first time must make sure nothing older is stored there (a rebuilt view's prefix is
//! cleared).
//!
//! Stored format: under the table's store prefix, `b` ++ generation ++ chunk (the base
//! snapshot) and `d` ++ number (the deltas after it), each a blob (see [`BlobWriter`]) of
//! entries with [`VALUE_FORMAT`] and a CRC-32. Keys are usually `arrow_row` encodings,
//! which arrow does not promise to keep stable across releases: [`STATE_FORMAT`] names the
//! arrow release along with our own version, and state written under another format is
//! never decoded (the view is rebuilt).
//!
//! An ordered table holds each key's first 16 bytes inline in the B-tree beside the shared
//! key ([`OrdKey`]) and looks keys up by borrowed bytes ([`Probe`]): a descent decides most
//! comparisons without reading keys from the heap.
//!
//! Invariant (asserted in debug builds): `bytes` is the sum of the cached keys' and
//! values' lengths.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use hashbrown::HashMap;

use crate::error::{Result, WeirError};
use crate::state::store::{Durability, Store, WriteBatch};

/// The format of stored state: our version and the arrow release whose row encoding the
/// keys use. Part of every view's fingerprint; state written under another format is
/// rebuilt, never decoded. (A unit test keeps the arrow release in step with Cargo.lock.)
/// Version 2: an aggregate's shown rows are a hashed table keyed by group (`emitted.rs`).
pub const STATE_FORMAT: &str = "weir-state-2 arrow-59";

/// The first byte of every stored value: the layout of what follows.
pub const VALUE_FORMAT: u8 = 1;

/// What an operator declares for each of its state tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDecl {
    /// Unique within the operator (e.g. `rows`, `emitted`).
    pub name: &'static str,
    /// The layout of the keys, for EXPLAIN and for readers of the code (e.g.
    /// `partition ++ sort key ++ row`).
    pub key: &'static str,
    /// The layout of the values.
    pub value: &'static str,
    /// Whether the table is read by ranges (prefix and range scans, in key order): held in
    /// an ordered map. A table only read by key is held in a hash map (point access is
    /// several times faster); its `iter` is unordered and range reads are refused.
    pub ordered: bool,
}

/// Numbers of one flush.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FlushStats {
    pub keys: usize,
    pub bytes: usize,
    /// Store keys written straight to the store (a large base's chunks): the checkpoint's
    /// clearing of stale keys must leave them.
    pub direct_keys: Vec<Vec<u8>>,
}

/// Keys are shared between the cache and the dirty set (marking a key dirty allocates
/// nothing).
type Key = Arc<[u8]>;

/// An ordered table's key: its first 16 bytes held inline ahead of the shared key, so a
/// B-tree descent decides most comparisons without reading the keys from the heap (with
/// bare `Arc<[u8]>` keys every comparison loaded another heap object: `memcmp` was 27% of
/// Nexmark q7's dataflow thread). It orders as its bytes do: the head is the first 16
/// bytes, zero-padded, read big-endian, so heads order as the bytes (a key ordering before
/// another never has the larger head), and equal heads are decided by the whole bytes.
#[derive(Clone)]
struct OrdKey {
    head: u128,
    key: Key,
}

/// The head of a key (see [`OrdKey`]).
fn head_of(k: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    let n = k.len().min(16);
    b[..n].copy_from_slice(&k[..n]);
    u128::from_be_bytes(b)
}

impl OrdKey {
    fn new(key: Key) -> OrdKey {
        OrdKey {
            head: head_of(&key),
            key,
        }
    }
}

/// What an ordered table's map is searched by: a stored key, or a [`Probe`] over borrowed
/// bytes (no allocation per lookup).
trait KeyView {
    fn head(&self) -> u128;
    fn bytes(&self) -> &[u8];
}

impl KeyView for OrdKey {
    fn head(&self) -> u128 {
        self.head
    }
    fn bytes(&self) -> &[u8] {
        &self.key
    }
}

/// A key to look up (or bound a range with) in an ordered table.
struct Probe<'a> {
    head: u128,
    bytes: &'a [u8],
}

impl<'a> Probe<'a> {
    fn new(bytes: &'a [u8]) -> Probe<'a> {
        Probe {
            head: head_of(bytes),
            bytes,
        }
    }
}

impl KeyView for Probe<'_> {
    fn head(&self) -> u128 {
        self.head
    }
    fn bytes(&self) -> &[u8] {
        self.bytes
    }
}

impl PartialEq for dyn KeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for dyn KeyView + '_ {}

impl PartialOrd for dyn KeyView + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The order of ordered-table keys: by head, then by the whole bytes (see [`OrdKey`]).
fn key_order(a: (u128, &[u8]), b: (u128, &[u8])) -> std::cmp::Ordering {
    a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1))
}

impl Ord for dyn KeyView + '_ {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        key_order((self.head(), self.bytes()), (other.head(), other.bytes()))
    }
}

impl<'a> std::borrow::Borrow<dyn KeyView + 'a> for OrdKey {
    fn borrow(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

impl PartialEq for OrdKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for OrdKey {}

impl PartialOrd for OrdKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrdKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        key_order((self.head, &self.key), (other.head, &other.key))
    }
}

type OrderedMap = BTreeMap<OrdKey, Val>;

/// A hashed table's key with its hash kept beside it. With bare `Arc<[u8]>` keys the map
/// rehashed every key from the heap each time it grew, and every probe whose 7-bit tag
/// matched read another key from the heap to compare: on Nexmark q0 (9.2M rows into one
/// view) hashing keys on growth was 19% of the process and the compares another 5%, almost
/// all of it cache misses. Now growth moves the stored hashes, and a key's bytes are read
/// only when the full 64-bit hashes agree.
#[derive(Clone)]
struct HashKey {
    hash: u64,
    key: Key,
}

/// A key looked up in a hashed table: borrowed bytes and their hash.
struct HashProbe<'a> {
    hash: u64,
    bytes: &'a [u8],
}

impl std::hash::Hash for HashKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash)
    }
}

impl std::hash::Hash for HashProbe<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash)
    }
}

impl PartialEq for HashKey {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.key == other.key
    }
}

impl Eq for HashKey {}

impl hashbrown::Equivalent<HashKey> for HashProbe<'_> {
    fn equivalent(&self, k: &HashKey) -> bool {
        self.hash == k.hash && *self.bytes == *k.key
    }
}

impl From<&HashProbe<'_>> for HashKey {
    fn from(p: &HashProbe<'_>) -> HashKey {
        HashKey {
            hash: p.hash,
            key: Key::from(p.bytes),
        }
    }
}

/// The hasher of a hashed table's map: it hands on the hash a key carries.
#[derive(Default)]
struct StoredHash(u64);

impl std::hash::Hasher for StoredHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // keys write one u64 (their hash); anything else is folded in
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ *b as u64;
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// A hashed table's entries and the hasher of their keys' bytes.
#[derive(Default)]
struct HashedMap {
    map: HashMap<HashKey, Val, std::hash::BuildHasherDefault<StoredHash>>,
    hasher: ahash::RandomState,
}

impl HashedMap {
    fn probe<'a>(&self, bytes: &'a [u8]) -> HashProbe<'a> {
        HashProbe {
            hash: self.hasher.hash_one(bytes),
            bytes,
        }
    }
}

/// `range` of an ordered table's map, bounded by borrowed bytes.
fn range_of<'m>(
    m: &'m OrderedMap,
    range: (Bound<&[u8]>, Bound<&[u8]>),
) -> std::collections::btree_map::Range<'m, OrdKey, Val> {
    let (lo, hi) = (range.0.map(Probe::new), range.1.map(Probe::new));
    m.range::<dyn KeyView, _>((
        lo.as_ref().map(|p| p as &dyn KeyView),
        hi.as_ref().map(|p| p as &dyn KeyView),
    ))
}

/// [`range_of`], for writing the values (or marking them read).
fn range_mut_of<'m>(
    m: &'m mut OrderedMap,
    range: (Bound<&[u8]>, Bound<&[u8]>),
) -> std::collections::btree_map::RangeMut<'m, OrdKey, Val> {
    let (lo, hi) = (range.0.map(Probe::new), range.1.map(Probe::new));
    m.range_mut::<dyn KeyView, _>((
        lo.as_ref().map(|p| p as &dyn KeyView),
        hi.as_ref().map(|p| p as &dyn KeyView),
    ))
}

/// Values up to this many bytes (counts, join entries, top-N entries) are held inline.
const INLINE: usize = 29;

/// Bytes an entry takes in memory beyond its key and value (the key's `Arc`, the value's
/// slot, the map's share), for the footprint the state-cache budget is checked against.
pub const ENTRY_OVERHEAD: usize = 72;
/// Bytes an ordered table's entry takes beyond [`ENTRY_OVERHEAD`]: its key's inline head
/// ([`OrdKey`]).
const ORDERED_HEAD: usize = 16;
/// Bytes a hashed table's entry takes beyond [`ENTRY_OVERHEAD`]: its key's hash
/// ([`HashKey`]).
const HASHED_HASH: usize = 8;
/// Bytes per remembered spilled range of an ordered table (two keys and a map slot).
const RANGE_OVERHEAD: usize = 96;

/// A value: inline when small (no allocation), else on the heap; with its CLOCK mark
/// (read or written since the last eviction sweep).
#[derive(Clone)]
enum Val {
    Inline {
        hot: bool,
        len: u8,
        buf: [u8; INLINE],
    },
    Heap {
        hot: bool,
        data: Box<[u8]>,
    },
}

impl Val {
    fn new(v: &[u8]) -> Val {
        if v.len() <= INLINE {
            let mut buf = [0u8; INLINE];
            buf[..v.len()].copy_from_slice(v);
            Val::Inline {
                hot: true,
                len: v.len() as u8,
                buf,
            }
        } else {
            Val::Heap {
                hot: true,
                data: v.into(),
            }
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Val::Inline { len, buf, .. } => &buf[..*len as usize],
            Val::Heap { data, .. } => data,
        }
    }

    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn hot(&self) -> bool {
        match self {
            Val::Inline { hot, .. } | Val::Heap { hot, .. } => *hot,
        }
    }

    fn set_hot(&mut self, to: bool) {
        match self {
            Val::Inline { hot, .. } | Val::Heap { hot, .. } => *hot = to,
        }
    }

    /// Mark it read, and read it.
    fn touched(&mut self) -> &[u8] {
        self.set_hot(true);
        self.as_slice()
    }
}

/// The in-memory entries: ordered or hashed (see [`TableDecl::ordered`]).
enum Cache {
    Ordered(OrderedMap),
    Hashed(HashedMap),
}

impl Cache {
    fn len(&self) -> usize {
        match self {
            Cache::Ordered(m) => m.len(),
            Cache::Hashed(m) => m.map.len(),
        }
    }

    fn get(&self, k: &[u8]) -> Option<&Val> {
        match self {
            Cache::Ordered(m) => m.get(&Probe::new(k) as &dyn KeyView),
            Cache::Hashed(m) => m.map.get(&m.probe(k)),
        }
    }

    fn get_mut(&mut self, k: &[u8]) -> Option<&mut Val> {
        match self {
            Cache::Ordered(m) => m.get_mut(&Probe::new(k) as &dyn KeyView),
            Cache::Hashed(m) => {
                let probe = m.probe(k);
                m.map.get_mut(&probe)
            }
        }
    }

    fn insert(&mut self, k: Key, v: Val) {
        match self {
            Cache::Ordered(m) => {
                m.insert(OrdKey::new(k), v);
            }
            Cache::Hashed(m) => {
                let hash = m.hasher.hash_one(&*k);
                m.map.insert(HashKey { hash, key: k }, v);
            }
        }
    }

    fn remove_entry(&mut self, k: &[u8]) -> Option<(Key, Val)> {
        match self {
            Cache::Ordered(m) => m
                .remove_entry(&Probe::new(k) as &dyn KeyView)
                .map(|(k, v)| (k.key, v)),
            Cache::Hashed(m) => {
                let probe = m.probe(k);
                m.map.remove_entry(&probe).map(|(k, v)| (k.key, v))
            }
        }
    }

    fn clear(&mut self) {
        match self {
            Cache::Ordered(m) => m.clear(),
            Cache::Hashed(m) => m.map.clear(),
        }
    }

    fn entries(&self) -> Box<dyn Iterator<Item = (&[u8], &[u8])> + '_> {
        match self {
            Cache::Ordered(m) => Box::new(m.iter().map(|(k, v)| (k.key.as_ref(), v.as_slice()))),
            Cache::Hashed(m) => Box::new(m.map.iter().map(|(k, v)| (k.key.as_ref(), v.as_slice()))),
        }
    }

    fn ordered(&self, table: &str) -> &OrderedMap {
        match self {
            Cache::Ordered(m) => m,
            // an operator reading a point-access table by range is a bug in the operator
            Cache::Hashed(_) => panic!("state table \"{table}\" is not ordered: no range reads"),
        }
    }

    fn ordered_mut(&mut self, table: &str) -> &mut OrderedMap {
        match self {
            Cache::Ordered(m) => m,
            Cache::Hashed(_) => panic!("state table \"{table}\" is not ordered: no range reads"),
        }
    }
}

/// What a table has spilled (see [`StateTable::evict`]).
struct Spilled {
    /// The table's id in the spill store: its entries are stored under it.
    id: [u8; 8],
    /// Entries and bytes (keys and values) in the spill store.
    keys: usize,
    bytes: usize,
    /// Ordered tables: the key ranges `[start, end)` (end None: unbounded) where the spill
    /// store may hold entries of the table; outside them it holds none. Disjoint, so their
    /// ends increase with their starts.
    ranges: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Where the next sweep of an ordered table starts (after this key).
    hand: Option<Key>,
}

impl Spilled {
    fn new(id: u64) -> Spilled {
        Spilled {
            id: id.to_be_bytes(),
            keys: 0,
            bytes: 0,
            ranges: BTreeMap::new(),
            hand: None,
        }
    }

    fn store_key(&self, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(8 + key.len());
        k.extend_from_slice(&self.id);
        k.extend_from_slice(key);
        k
    }

    /// The end of the table's entries in the spill store.
    fn store_end(&self) -> Vec<u8> {
        // ids count up from 1: never all 0xff
        prefix_end(&self.id).unwrap_or_else(|| vec![0xff; 9])
    }

    /// Whether the spill store may hold `key`.
    fn covers(&self, ordered: bool, key: &[u8]) -> bool {
        if self.keys == 0 {
            return false;
        }
        if !ordered {
            return true;
        }
        match self
            .ranges
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()
        {
            Some((_, end)) => end.as_deref().is_none_or(|e| key < e),
            None => false,
        }
    }

    /// Whether the spill store may hold keys in `[lo, hi)`.
    fn overlaps(&self, ordered: bool, lo: &[u8], hi: Option<&[u8]>) -> bool {
        if self.keys == 0 {
            return false;
        }
        if !ordered {
            return true;
        }
        // the last range starting before `hi` ends furthest (the ranges are disjoint)
        let last = match hi {
            Some(h) => self
                .ranges
                .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(h)))
                .next_back(),
            None => self.ranges.iter().next_back(),
        };
        match last {
            Some((_, end)) => end.as_deref().is_none_or(|e| e > lo),
            None => false,
        }
    }

    /// Remember that `[lo, hi)` may have spilled entries (merged with the ranges it
    /// overlaps or touches).
    fn add_range(&mut self, lo: Vec<u8>, hi: Option<Vec<u8>>) {
        let mut start = lo;
        let mut end = hi;
        let touching: Vec<Vec<u8>> = {
            let upto = match &end {
                Some(h) => self
                    .ranges
                    .range::<[u8], _>((Bound::Unbounded, Bound::Included(h.as_slice()))),
                None => self.ranges.range::<[u8], _>(..),
            };
            upto.rev()
                .take_while(|(_, e)| e.as_deref().is_none_or(|e| e >= start.as_slice()))
                .map(|(s, _)| s.clone())
                .collect()
        };
        for s in touching {
            if let Some(e) = self.ranges.remove(&s) {
                if s < start {
                    start = s;
                }
                end = match (end, e) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                };
            }
        }
        self.ranges.insert(start, end);
    }

    /// Forget `[lo, hi)`: its spilled entries were read back.
    fn remove_range(&mut self, lo: &[u8], hi: Option<&[u8]>) {
        let overlapping: Vec<Vec<u8>> = {
            let before = match hi {
                Some(h) => self
                    .ranges
                    .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(h))),
                None => self.ranges.range::<[u8], _>(..),
            };
            before
                .rev()
                .take_while(|(_, e)| e.as_deref().is_none_or(|e| e > lo))
                .map(|(s, _)| s.clone())
                .collect()
        };
        for s in overlapping {
            let Some(e) = self.ranges.remove(&s) else {
                continue;
            };
            if s.as_slice() < lo {
                self.ranges.insert(s, Some(lo.to_vec()));
            }
            if let Some(h) = hi
                && e.as_deref().is_none_or(|e| e > h)
            {
                self.ranges.insert(h.to_vec(), e);
            }
        }
    }
}

/// `[lo, hi)` of a range given by bounds (hi None: unbounded).
fn half_open(range: (Bound<&[u8]>, Bound<&[u8]>)) -> (Vec<u8>, Option<Vec<u8>>) {
    let after = |k: &[u8]| {
        let mut v = k.to_vec();
        v.push(0);
        v
    };
    let lo = match range.0 {
        Bound::Unbounded => Vec::new(),
        Bound::Included(k) => k.to_vec(),
        Bound::Excluded(k) => after(k),
    };
    let hi = match range.1 {
        Bound::Unbounded => None,
        Bound::Included(k) => Some(after(k)),
        Bound::Excluded(k) => Some(k.to_vec()),
    };
    (lo, hi)
}

pub struct StateTable {
    decl: TableDecl,
    cache: Cache,
    /// The changes since the last flush, as they happened (the next delta blob): a write
    /// appends its key and new value, a delete its key. No lookup and no hashing at
    /// flush time: the flush hands this blob over as it is.
    log: Log,
    /// Whether changed keys are tracked: from the first flush or load on. Before it nothing
    /// of the table is stored, so the first flush writes the whole cache, and a table that
    /// is never flushed keeps no set of changed (or deleted) keys growing beside it.
    tracking: bool,
    /// Bytes of keys and values held.
    bytes: usize,
    /// What the store holds of this table (see [`StateTable::flush`]).
    stored: Stored,
    /// What it spilled (None: nothing yet).
    spill: Option<Box<Spilled>>,
    /// A spill-store error met by a read or write (see [`StateTable::take_error`]).
    error: Option<String>,
}

/// The blobs a table has written: its base snapshot's generation, the last delta number,
/// their keys (deleted when a new base is written) and the deltas' bytes since the base.
#[derive(Default)]
struct Stored {
    base: u64,
    next_delta: u64,
    blobs: Vec<Vec<u8>>,
    delta_bytes: usize,
}

/// Store key tags under a table's prefix: `b` ++ generation ++ chunk (the base snapshot),
/// `d` ++ number (a delta after it). `b` sorts first, so a prefix scan reads the base and
/// then the deltas in order.
const BASE_TAG: u8 = b'b';
const DELTA_TAG: u8 = b'd';
/// `a`: the generation of the base snapshot in force (written with every new base, in the
/// checkpoint's own commit; sorts before the blobs). A large base is written in commits of
/// its own before the checkpoint's, so a crash can leave chunks of a newer generation that
/// no checkpoint names: a load skips them.
const MARK_TAG: u8 = b'a';
/// A new base of a table this large (in memory and spilled) is written chunk by chunk
/// straight to the store, not gathered in the checkpoint's batch in memory.
const DIRECT_BASE_BYTES: usize = 4 * BLOB_BYTES;
/// Chunks written straight to the store are this small: the store queues up to five
/// memtables (each at least one value) before it stalls writers, and 8 MiB values held
/// 92 MiB there while a 300 MiB base was written (heaptrack).
const DIRECT_BLOB_BYTES: usize = 1 << 20;
/// A base snapshot is cut into values of about this size.
const BLOB_BYTES: usize = 8 << 20;
/// Deltas may add up to the table's size (at least this much) before a new base is written.
const MIN_REBASE_BYTES: usize = 1 << 20;

/// A blob: [`VALUE_FORMAT`], CRC-32 of the rest, entry count (u32 LE), then per entry
/// key length (u32 LE), key, and either 0 (deleted) or 1, value length (u32 LE), value.
struct BlobWriter {
    buf: Vec<u8>,
    entries: u32,
}

impl BlobWriter {
    fn new() -> BlobWriter {
        BlobWriter::with_capacity(4096)
    }

    fn with_capacity(bytes: usize) -> BlobWriter {
        let mut buf = Vec::with_capacity(bytes);
        buf.push(VALUE_FORMAT);
        buf.extend_from_slice(&[0; 8]);
        BlobWriter { buf, entries: 0 }
    }

    fn len(&self) -> usize {
        self.buf.len()
    }

    fn key(&mut self, key: &[u8]) {
        self.entries += 1;
        self.buf
            .extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(key);
    }

    fn put(&mut self, key: &[u8], value: &[u8]) {
        self.key(key);
        self.buf.push(1);
        self.buf
            .extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(value);
    }

    fn delete(&mut self, key: &[u8]) {
        self.key(key);
        self.buf.push(0);
    }

    fn finish(mut self) -> Vec<u8> {
        self.buf[5..9].copy_from_slice(&self.entries.to_le_bytes());
        let crc = crc32fast::hash(&self.buf[5..]);
        self.buf[1..5].copy_from_slice(&crc.to_le_bytes());
        self.buf
    }
}

/// Where the chunks of a new base go: straight into the store (a large table) or into the
/// checkpoint's batch.
struct BaseWriter<'a> {
    prefix: &'a [u8],
    base: u64,
    chunks: u32,
    direct: Option<&'a dyn Store>,
    failed: Option<String>,
}

impl BaseWriter<'_> {
    fn emit(
        &mut self,
        v: Vec<u8>,
        stats: &mut FlushStats,
        blobs: &mut Vec<Vec<u8>>,
        batch: &mut WriteBatch,
    ) {
        let mut k = self.prefix.to_vec();
        k.push(BASE_TAG);
        k.extend_from_slice(&self.base.to_be_bytes());
        k.extend_from_slice(&self.chunks.to_be_bytes());
        self.chunks += 1;
        stats.bytes += k.len() + v.len();
        blobs.push(k.clone());
        match self.direct {
            Some(store) => {
                stats.direct_keys.push(k.clone());
                let mut wb = WriteBatch::default();
                wb.put(k, v);
                if let Err(e) = store.commit(wb, Durability::Buffered) {
                    self.failed
                        .get_or_insert(format!("cannot write a checkpoint chunk: {e}"));
                }
            }
            None => batch.put(k, v),
        }
    }
}

/// The change log: blobs of about [`LOG_CHUNK`] bytes each. A log that grew as one buffer
/// was copied at every doubling and took fresh pages from the kernel each second (memmove
/// and page clearing were 10% of the dataflow thread on Nexmark q7 with checkpoints on);
/// chunks of this size are allocated once and their memory is reused after the writer
/// frees them. Each chunk becomes a delta blob of its own, in order.
struct Log {
    done: Vec<Vec<u8>>,
    cur: BlobWriter,
    /// Entries and bytes in all chunks.
    entries: u32,
    bytes: usize,
}

/// Bytes per change-log chunk.
const LOG_CHUNK: usize = 1 << 20;

impl Log {
    fn new() -> Log {
        Log {
            done: Vec::new(),
            cur: BlobWriter::new(),
            entries: 0,
            bytes: 0,
        }
    }

    fn len(&self) -> usize {
        self.bytes + self.cur.len()
    }

    fn put(&mut self, key: &[u8], value: &[u8]) {
        self.cur.put(key, value);
        self.next();
    }

    fn delete(&mut self, key: &[u8]) {
        self.cur.delete(key);
        self.next();
    }

    fn next(&mut self) {
        self.entries += 1;
        if self.cur.len() >= LOG_CHUNK {
            let full =
                std::mem::replace(&mut self.cur, BlobWriter::with_capacity(LOG_CHUNK + 4096));
            self.bytes += full.len();
            self.done.push(full.finish());
        }
    }

    /// The finished blobs, in order.
    fn finish(mut self) -> Vec<Vec<u8>> {
        if self.cur.entries > 0 {
            self.done.push(self.cur.finish());
        }
        self.done
    }
}

/// Visit a blob's entries (value None: deleted); the error says what is wrong with it.
fn read_blob(
    blob: &[u8],
    mut visit: impl FnMut(&[u8], Option<&[u8]>),
) -> std::result::Result<(), String> {
    let Some((&format, rest)) = blob.split_first() else {
        return Err("empty".into());
    };
    if format != VALUE_FORMAT {
        return Err(format!("in format {format}, not {VALUE_FORMAT}"));
    }
    if rest.len() < 8 {
        return Err("truncated".into());
    }
    let crc = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
    if crc32fast::hash(&rest[4..]) != crc {
        return Err("corrupt (checksum mismatch)".into());
    }
    let mut r = Reader::new(&rest[4..], "state blob");
    let entries = u32::from_le_bytes(
        r.take(4)
            .map_err(|e| e.message)?
            .try_into()
            .unwrap_or_default(),
    );
    let u32_of = |b: &[u8]| u32::from_le_bytes(b.try_into().unwrap_or_default()) as usize;
    for _ in 0..entries {
        let kl = u32_of(r.take(4).map_err(|e| e.message)?);
        let key = r.take(kl).map_err(|e| e.message)?;
        match r.u8().map_err(|e| e.message)? {
            0 => visit(key, None),
            _ => {
                let vl = u32_of(r.take(4).map_err(|e| e.message)?);
                visit(key, Some(r.take(vl).map_err(|e| e.message)?));
            }
        }
    }
    if r.remaining() != 0 {
        return Err("longer than its entries".into());
    }
    Ok(())
}

impl StateTable {
    pub fn new(decl: TableDecl) -> StateTable {
        StateTable {
            cache: if decl.ordered {
                Cache::Ordered(BTreeMap::new())
            } else {
                Cache::Hashed(HashedMap::default())
            },
            decl,
            log: Log::new(),
            tracking: false,
            bytes: 0,
            stored: Stored::default(),
            spill: None,
            error: None,
        }
    }

    pub fn decl(&self) -> &TableDecl {
        &self.decl
    }

    /// Entries, in memory and spilled.
    pub fn len(&self) -> usize {
        self.cache.len() + self.spill.as_ref().map_or(0, |s| s.keys)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of keys and values held in memory.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Bytes of keys and values spilled.
    pub fn spilled_bytes(&self) -> usize {
        self.spill.as_ref().map_or(0, |s| s.bytes)
    }

    /// Entries spilled.
    pub fn spilled_keys(&self) -> usize {
        self.spill.as_ref().map_or(0, |s| s.keys)
    }

    /// Bytes an entry takes beyond its key and value (see [`ENTRY_OVERHEAD`]).
    fn entry_overhead(&self) -> usize {
        match self.cache {
            Cache::Ordered(_) => ENTRY_OVERHEAD + ORDERED_HEAD,
            Cache::Hashed(_) => ENTRY_OVERHEAD + HASHED_HASH,
        }
    }

    /// Estimated bytes the table takes in memory: keys, values and their overhead, and
    /// the remembered spilled ranges (what the state-cache budget counts).
    pub fn footprint(&self) -> usize {
        self.bytes
            + self.cache.len() * self.entry_overhead()
            + self
                .spill
                .as_ref()
                .map_or(0, |s| s.ranges.len() * RANGE_OVERHEAD)
    }

    /// Keys the next flush writes.
    pub fn dirty_keys(&self) -> usize {
        if self.tracking {
            self.log.entries as usize
        } else {
            self.len()
        }
    }

    /// The first spill-store error a read or write met since the last call (its view
    /// must fail: the read went on without the entries it could not read back).
    pub fn take_error(&mut self) -> Option<String> {
        self.error.take()
    }

    fn fail(&mut self, what: String) {
        let msg = format!("state table \"{}\": {what}", self.decl.name);
        tracing::error!(error = %msg, "state spill store");
        self.error.get_or_insert(msg);
    }

    /// Bring `key` back from the spill store if it is there.
    fn ensure_key(&mut self, key: &[u8]) {
        let Some(sp) = self.spill.as_deref_mut() else {
            return;
        };
        if !sp.covers(self.decl.ordered, key) || self.cache.get(key).is_some() {
            return;
        }
        let Some(store) = crate::state::spill::store() else {
            return;
        };
        let sk = sp.store_key(key);
        let got = store.get(&sk).and_then(|v| {
            v.map(|v| store.write(vec![], vec![sk]).map(|_| v))
                .transpose()
        });
        match got {
            Ok(Some(v)) => {
                sp.keys -= 1;
                sp.bytes -= key.len() + v.len();
                store.add_bytes(-((key.len() + v.len()) as i64));
                self.bytes += key.len() + v.len();
                self.cache.insert(key.into(), Val::new(&v));
            }
            Ok(None) => {}
            Err(e) => self.fail(format!("cannot read a spilled entry back: {e}")),
        }
    }

    /// Bring the spilled entries with keys in `[lo, hi)` back into memory.
    fn ensure_range(&mut self, lo: &[u8], hi: Option<&[u8]>) {
        let Some(sp) = self.spill.as_deref_mut() else {
            return;
        };
        let ordered = self.decl.ordered;
        if !sp.overlaps(ordered, lo, hi) {
            return;
        }
        let Some(store) = crate::state::spill::store() else {
            return;
        };
        let from = sp.store_key(lo);
        let to = match hi {
            Some(h) => sp.store_key(h),
            None => sp.store_end(),
        };
        let mut got: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let read = store
            .scan(&from, Some(&to), &mut |k, v| {
                got.push((k.get(8..).unwrap_or_default().to_vec(), v.to_vec()))
            })
            .and_then(|_| store.write(vec![], got.iter().map(|(k, _)| sp.store_key(k)).collect()));
        if let Err(e) = read {
            self.fail(format!("cannot read spilled entries back: {e}"));
            return;
        }
        let mut moved = 0usize;
        for (k, v) in got {
            moved += k.len() + v.len();
            debug_assert!(
                self.cache.get(&k).is_none(),
                "a key both in memory and spilled"
            );
            self.cache.insert(k.into(), Val::new(&v));
            sp.keys -= 1;
        }
        sp.bytes -= moved;
        self.bytes += moved;
        store.add_bytes(-(moved as i64));
        if ordered {
            sp.remove_range(lo, hi);
        }
    }

    /// Evict about `target` bytes of footprint (see [`footprint`](Self::footprint)):
    /// entries not read or written since the last sweep go to the spill store (the sweep
    /// clears the marks of the others; a second round takes those if the first did not
    /// free enough). Returns the footprint freed; 0 without a spill store.
    pub fn evict(&mut self, target: usize) -> usize {
        let Some(store) = crate::state::spill::store() else {
            return 0;
        };
        if target == 0 || self.cache.len() == 0 {
            return 0;
        }
        let overhead = self.entry_overhead();
        let sp = self
            .spill
            .get_or_insert_with(|| Box::new(Spilled::new(store.table_id())));
        let name = self.decl.name;
        let mut freed = 0usize;
        for _round in 0..2 {
            // (pieces of consecutive victims in key order, for the ranges)
            let mut pieces: Vec<Vec<Key>> = Vec::new();
            // a cold entry is a victim (its footprint), a hot one is marked cold
            let take = |k: &Key, v: &mut Val, piece: &mut Vec<Key>| -> usize {
                if v.hot() {
                    v.set_hot(false);
                    return 0;
                }
                piece.push(k.clone());
                k.len() + v.len() + overhead
            };
            match &mut self.cache {
                Cache::Hashed(m) => {
                    let mut piece = Vec::new();
                    for (k, v) in m.map.iter_mut() {
                        let k = &k.key;
                        if freed >= target {
                            break;
                        }
                        freed += take(k, v, &mut piece);
                    }
                    pieces.push(piece);
                }
                Cache::Ordered(m) => {
                    let hand = sp.hand.clone();
                    let after: (Bound<&[u8]>, Bound<&[u8]>) = match &hand {
                        Some(h) => (Bound::Excluded(h.as_ref()), Bound::Unbounded),
                        None => (Bound::Unbounded, Bound::Unbounded),
                    };
                    let mut piece = Vec::new();
                    for (k, v) in range_mut_of(m, after) {
                        if freed >= target {
                            break;
                        }
                        sp.hand = Some(k.key.clone());
                        freed += take(&k.key, v, &mut piece);
                    }
                    pieces.push(piece);
                    if freed < target
                        && let Some(h) = &hand
                    {
                        let mut piece = Vec::new();
                        for (k, v) in
                            range_mut_of(m, (Bound::Unbounded, Bound::Included(h.as_ref())))
                        {
                            if freed >= target {
                                break;
                            }
                            sp.hand = Some(k.key.clone());
                            freed += take(&k.key, v, &mut piece);
                        }
                        pieces.push(piece);
                    }
                }
            }
            let victims: usize = pieces.iter().map(|p| p.len()).sum();
            if victims > 0 {
                let mut puts = Vec::with_capacity(victims);
                for k in pieces.iter().flatten() {
                    if let Some(v) = self.cache.get(k) {
                        puts.push((sp.store_key(k), v.as_slice().to_vec()));
                    }
                }
                if let Err(e) = store.write(puts, vec![]) {
                    // nothing was removed from memory: the table stays whole
                    tracing::warn!(table = name, error = %e, "cannot spill state; it stays in memory");
                    return 0;
                }
                let mut moved = 0usize;
                for piece in &pieces {
                    for k in piece {
                        if let Some((k, v)) = self.cache.remove_entry(k) {
                            moved += k.len() + v.len();
                            sp.keys += 1;
                        }
                    }
                    if let (Cache::Ordered(_), Some(first), Some(last)) =
                        (&self.cache, piece.first(), piece.last())
                    {
                        sp.add_range(first.to_vec(), Some(successor(last)));
                    }
                }
                self.bytes -= moved;
                sp.bytes += moved;
                store.add_bytes(moved as i64);
            }
            if freed >= target || self.cache.len() == 0 {
                break;
            }
        }
        self.check_invariants();
        freed
    }

    /// Evict about `share` (0..=1) of the table's footprint (see [`evict`](Self::evict)).
    pub fn evict_share(&mut self, share: f64) -> usize {
        self.evict((self.footprint() as f64 * share) as usize)
    }

    /// Delete whatever the table has spilled (it is being replaced or dropped).
    fn drop_spilled(&mut self) {
        let Some(sp) = self.spill.take() else {
            return;
        };
        let Some(store) = crate::state::spill::store() else {
            return;
        };
        if sp.keys == 0 {
            return;
        }
        // deleted in batches: a table of millions of spilled entries is not listed at once
        const DELETE_BATCH: usize = 16_384;
        let mut keys = Vec::with_capacity(DELETE_BATCH);
        let mut failed = None;
        let r = store.scan(&sp.id, Some(&sp.store_end()), &mut |k, _| {
            keys.push(k.to_vec());
            if keys.len() >= DELETE_BATCH
                && let Err(e) = store.write(vec![], std::mem::take(&mut keys))
            {
                failed.get_or_insert(e);
            }
        });
        let r = r
            .and_then(|_| store.write(vec![], keys))
            .and_then(|_| failed.map_or(Ok(()), Err));
        store.add_bytes(-(sp.bytes as i64));
        if let Err(e) = r {
            // garbage on disk only: the directory is wiped at the next start
            tracing::warn!(table = self.decl.name, error = %e, "cannot delete spilled state");
        }
    }

    pub fn get(&mut self, key: &[u8]) -> Option<&[u8]> {
        if self.spill.is_some() {
            self.ensure_key(key);
        }
        self.cache.get_mut(key).map(|v| v.touched())
    }

    /// The spill-store key prefix of the table's spilled entries (each is stored under it
    /// ++ its key), if it has spilled any.
    pub fn spilled_prefix(&self) -> Option<Vec<u8>> {
        self.spill
            .as_ref()
            .filter(|s| s.keys > 0)
            .map(|s| s.id.to_vec())
    }

    /// Visit every spilled entry (read from the spill store, left there).
    pub fn visit_spilled(&self, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        let (Some(sp), Some(store)) = (self.spill.as_ref(), crate::state::spill::store()) else {
            return Ok(());
        };
        if sp.keys == 0 {
            return Ok(());
        }
        store.scan(&sp.id, Some(&sp.store_end()), &mut |k, v| {
            visit(k.get(8..).unwrap_or_default(), v)
        })
    }

    /// The entries in memory, without marking anything read (a view's contents are read
    /// this way by other threads under the publication lock; what has spilled is read with
    /// [`spilled_prefix`](Self::spilled_prefix)).
    pub fn iter_resident(&self) -> Vec<(&[u8], &[u8])> {
        match &self.cache {
            Cache::Ordered(m) => m
                .iter()
                .map(|(k, v)| (k.key.as_ref(), v.as_slice()))
                .collect(),
            Cache::Hashed(m) => m
                .map
                .iter()
                .map(|(k, v)| (k.key.as_ref(), v.as_slice()))
                .collect(),
        }
    }

    /// Every entry, in key order for an ordered table, in no order for a hashed one
    /// (spilled entries are read back first).
    pub fn iter(&mut self) -> Vec<(&[u8], &[u8])> {
        if self.spill.is_some() {
            self.ensure_range(&[], None);
        }
        match &self.cache {
            Cache::Ordered(m) => m
                .iter()
                .map(|(k, v)| (k.key.as_ref(), v.as_slice()))
                .collect(),
            Cache::Hashed(m) => m
                .map
                .iter()
                .map(|(k, v)| (k.key.as_ref(), v.as_slice()))
                .collect(),
        }
    }

    pub fn put(&mut self, key: &[u8], value: &[u8]) {
        self.upsert(key, |_| Some(Val::new(value)));
    }

    /// Read-modify-write: `f` gets the current value (None if absent) and returns the new
    /// one (None deletes). An ordered table walks its B-tree once whether the key is there
    /// or not (a lookup then an insert were two: most of an interval join's insert cost;
    /// the key is allocated either way, which a new key needs anyway); a hashed one looks
    /// an existing key up once and allocates only a new key.
    fn upsert(&mut self, key: &[u8], f: impl FnOnce(Option<&[u8]>) -> Option<Val>) {
        use std::collections::btree_map::Entry;
        if self.spill.is_some() {
            self.ensure_key(key);
        }
        let bytes = &mut self.bytes;
        let log = self.tracking.then_some(&mut self.log);
        match &mut self.cache {
            Cache::Ordered(m) => match m.entry(OrdKey::new(Key::from(key))) {
                Entry::Occupied(mut o) => match f(Some(o.get().as_slice())) {
                    Some(new) if new.as_slice() == o.get().as_slice() => {}
                    Some(new) => {
                        written(bytes, log, key, Some(o.get().len()), Some(new.as_slice()));
                        *o.get_mut() = new;
                    }
                    None => written(bytes, log, key, Some(o.remove().len()), None),
                },
                Entry::Vacant(slot) => {
                    if let Some(new) = f(None) {
                        written(bytes, log, key, None, Some(new.as_slice()));
                        slot.insert(new);
                    }
                }
            },
            // one hash per write; the key is copied only when it is new
            Cache::Hashed(m) => match m.map.entry_ref(&m.probe(key)) {
                hashbrown::hash_map::EntryRef::Occupied(mut o) => {
                    match f(Some(o.get().as_slice())) {
                        Some(new) if new.as_slice() == o.get().as_slice() => {}
                        Some(new) => {
                            written(bytes, log, key, Some(o.get().len()), Some(new.as_slice()));
                            *o.get_mut() = new;
                        }
                        None => written(bytes, log, key, Some(o.remove().len()), None),
                    }
                }
                hashbrown::hash_map::EntryRef::Vacant(slot) => {
                    if let Some(new) = f(None) {
                        written(bytes, log, key, None, Some(new.as_slice()));
                        slot.insert(new);
                    }
                }
            },
        }
    }

    /// Update a value (`f` gets the current value or None and returns the new one, None
    /// to delete), with one lookup of an existing key.
    pub fn update<V: AsRef<[u8]>>(
        &mut self,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> Option<V>,
    ) {
        self.upsert(key, |old| f(old).map(|v| Val::new(v.as_ref())));
    }

    /// Add `delta` to the count (i64 LE) at `key` (0 when absent); the entry goes away at
    /// 0. Returns the count before and after. One lookup for an existing key.
    pub fn add_count(&mut self, key: &[u8], delta: i64) -> (i64, i64) {
        let mut old = 0;
        self.upsert(key, |v| {
            old = v.map(count_of).unwrap_or(0);
            let new = old + delta;
            (new != 0).then(|| Val::new(&new.to_le_bytes()))
        });
        (old, old + delta)
    }

    pub fn delete(&mut self, key: &[u8]) {
        if self.spill.is_some() {
            self.ensure_key(key);
        }
        if let Some((_, v)) = self.cache.remove_entry(key) {
            let log = self.tracking.then_some(&mut self.log);
            written(&mut self.bytes, log, key, Some(v.len()), None);
        }
    }

    /// Entries with keys in `range`, in key order (`.rev()` for descending).
    pub fn range<'a>(
        &'a mut self,
        range: (Bound<&[u8]>, Bound<&[u8]>),
    ) -> impl DoubleEndedIterator<Item = (&'a [u8], &'a [u8])> + 'a {
        if self.spill.is_some() {
            let (lo, hi) = half_open(range);
            self.ensure_range(&lo, hi.as_deref());
        }
        range_mut_of(self.cache.ordered_mut(self.decl.name), range)
            .map(|(k, v)| (k.key.as_ref(), v.touched()))
    }

    /// Entries whose key starts with `prefix`, in key order (allocates nothing when
    /// nothing is spilled: the hot path of probes).
    pub fn prefix<'a>(
        &'a mut self,
        prefix: &'a [u8],
    ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        if self.spill.is_some() {
            self.ensure_range(prefix, prefix_end(prefix).as_deref());
        }
        range_mut_of(
            self.cache.ordered_mut(self.decl.name),
            (Bound::Included(prefix), Bound::Unbounded),
        )
        .take_while(move |(k, _)| k.key.starts_with(prefix))
        .map(|(k, v)| (k.key.as_ref(), v.touched()))
    }

    /// The first (or with `last`, the last) entry whose key starts with `prefix`: what a
    /// min or max reads. Of spilled entries only that one comes back (a prefix read would
    /// bring back the whole range: for a global min/max, every value), and the store is
    /// asked only when a spilled entry may lie beyond the edge of those in memory: what it
    /// answers narrows the spilled ranges, so the next read of the same edge stays in
    /// memory until more of the prefix spills.
    pub fn prefix_edge(&mut self, prefix: &[u8], last: bool) -> Option<(&[u8], &[u8])> {
        let end = prefix_end(prefix);
        let ordered = self.decl.ordered;
        let store = crate::state::spill::store();
        if let Some(sp) = self.spill.as_deref()
            && let Some(store) = store
            && sp.overlaps(ordered, prefix, end.as_deref())
        {
            // the edge among the entries in memory, and where a spilled one would beat it
            let in_memory: Option<Vec<u8>> = {
                let hi: Bound<&[u8]> = match &end {
                    Some(e) => Bound::Excluded(e.as_slice()),
                    None => Bound::Unbounded,
                };
                let mut r = range_of(
                    self.cache.ordered(self.decl.name),
                    (Bound::Included(prefix), hi),
                );
                let e = if last { r.next_back() } else { r.next() };
                e.map(|(k, _)| k.key.to_vec())
            };
            let (lo, hi): (Vec<u8>, Option<Vec<u8>>) = match (&in_memory, last) {
                (None, _) => (prefix.to_vec(), end.clone()),
                (Some(m), true) => (successor(m), end.clone()),
                (Some(m), false) => (prefix.to_vec(), Some(m.clone())),
            };
            if sp.overlaps(ordered, &lo, hi.as_deref()) {
                let to = match &hi {
                    Some(h) => sp.store_key(h),
                    None => sp.store_end(),
                };
                match store.edge(&sp.store_key(&lo), &to, last) {
                    Ok(Some(k)) => {
                        let k = k.get(8..).unwrap_or_default().to_vec();
                        // no spilled entry lies beyond `k` on this side of the prefix
                        if let Some(sp) = self.spill.as_deref_mut() {
                            if last {
                                sp.remove_range(&successor(&k), end.as_deref());
                            } else {
                                sp.remove_range(prefix, Some(&k));
                            }
                        }
                        self.ensure_key(&k);
                    }
                    Ok(None) => {
                        // nothing spilled beyond the edge in memory
                        if let Some(sp) = self.spill.as_deref_mut() {
                            sp.remove_range(&lo, hi.as_deref());
                        }
                    }
                    Err(e) => self.fail(format!("cannot read a spilled entry back: {e}")),
                }
            }
        }
        let hi: Bound<&[u8]> = match &end {
            Some(e) => Bound::Excluded(e.as_slice()),
            None => Bound::Unbounded,
        };
        let mut r = range_mut_of(
            self.cache.ordered_mut(self.decl.name),
            (Bound::Included(prefix), hi),
        );
        let e = if last { r.next_back() } else { r.next() };
        e.map(|(k, v)| (k.key.as_ref(), v.touched()))
    }

    /// Bring the spilled entries under `prefix` back into memory, for reads through a
    /// shared borrow ([`prefix_resident`](Self::prefix_resident)).
    pub fn fetch_prefix(&mut self, prefix: &[u8]) {
        if self.spill.is_some() {
            self.ensure_range(prefix, prefix_end(prefix).as_deref());
        }
    }

    /// Entries whose key starts with `prefix` that are in memory: all of them after
    /// [`fetch_prefix`](Self::fetch_prefix) (checked in debug builds). Marks nothing read.
    pub fn prefix_resident<'a>(
        &'a self,
        prefix: &'a [u8],
    ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        debug_assert!(
            self.spill.as_ref().is_none_or(|s| !s.overlaps(
                self.decl.ordered,
                prefix,
                prefix_end(prefix).as_deref()
            )),
            "state table \"{}\": a prefix read without fetch_prefix",
            self.decl.name
        );
        range_of(
            self.cache.ordered(self.decl.name),
            (Bound::Included(prefix), Bound::Unbounded),
        )
        .take_while(move |(k, _)| k.key.starts_with(prefix))
        .map(|(k, v)| (k.key.as_ref(), v.as_slice()))
    }

    /// Entries whose key starts with `prefix`, in both directions (`.rev()`, `next_back()`
    /// for the last key under a prefix, as max needs).
    pub fn prefix_range<'a>(
        &'a mut self,
        prefix: &[u8],
    ) -> impl DoubleEndedIterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let end = prefix_end(prefix);
        if self.spill.is_some() {
            self.ensure_range(prefix, end.as_deref());
        }
        let hi: Bound<&[u8]> = match &end {
            Some(e) => Bound::Excluded(e.as_slice()),
            None => Bound::Unbounded,
        };
        range_mut_of(
            self.cache.ordered_mut(self.decl.name),
            (Bound::Included(prefix), hi),
        )
        .map(|(k, v)| (k.key.as_ref(), v.touched()))
    }

    /// Delete every entry with a key in `range`; returns how many.
    pub fn delete_range(&mut self, range: (Bound<&[u8]>, Bound<&[u8]>)) -> usize {
        self.remove_range(range).len()
    }

    /// Remove the entries with keys in `range`; their keys, in order.
    fn remove_range(&mut self, range: (Bound<&[u8]>, Bound<&[u8]>)) -> Vec<Key> {
        if self.spill.is_some() {
            let (lo, hi) = half_open(range);
            self.ensure_range(&lo, hi.as_deref());
        }
        let map = self.cache.ordered_mut(self.decl.name);
        let mut log = self.tracking.then_some(&mut self.log);
        let bytes = &mut self.bytes;
        let mut keys = Vec::new();
        let mut removed = |k: Key, v: Val| {
            written(bytes, log.as_deref_mut(), &k, Some(v.len()), None);
            keys.push(k);
        };
        if let (Bound::Unbounded, Bound::Excluded(hi)) = range {
            // from the first key on (what a watermark frees): the map is split where the
            // range ends, one descent instead of a lookup per removed key
            let kept = map.split_off(&Probe::new(hi) as &dyn KeyView);
            for (k, v) in std::mem::replace(map, kept) {
                removed(k.key, v);
            }
        } else {
            let in_range: Vec<OrdKey> = range_of(map, range).map(|(k, _)| k.clone()).collect();
            for k in in_range {
                if let Some((k, v)) = map.remove_entry(&k) {
                    removed(k.key, v);
                }
            }
        }
        keys
    }

    /// For a table whose keys start with a time ([`i64_key`]): remove every entry whose
    /// time is at most `limit` and return them ([`Taken::iter`]: time and the rest of the
    /// key, in order) — what a watermark frees.
    pub fn take_up_to(&mut self, limit: i64) -> Taken {
        let next = i64_key(limit.saturating_add(1));
        let range = if limit == i64::MAX {
            (Bound::Unbounded, Bound::Unbounded)
        } else {
            (Bound::Unbounded, Bound::Excluded(&next[..]))
        };
        Taken(self.remove_range(range))
    }

    /// Delete every entry whose key starts with `prefix`; returns how many.
    pub fn delete_prefix(&mut self, prefix: &[u8]) -> usize {
        let end = prefix_end(prefix);
        let hi = match &end {
            Some(e) => Bound::Excluded(e.as_slice()),
            None => Bound::Unbounded,
        };
        self.delete_range((Bound::Included(prefix), hi))
    }

    /// Make the next flush write the whole table (its stored copy is being rewritten from
    /// scratch, e.g. after a failed checkpoint; whatever the store holds under its prefix
    /// is cleared by the caller).
    pub fn rewrite_all(&mut self) {
        self.tracking = false;
        self.log = Log::new();
        // the generation counter goes on: chunks of an unnamed newer base may be in the
        // store (written for a checkpoint that was lost)
        self.stored = Stored {
            base: self.stored.base,
            ..Stored::default()
        };
    }

    /// Write what changed since the last flush into `batch`, under `store_prefix`, and
    /// forget that it changed: one delta blob of the changed entries (deleted ones
    /// marked), or a new base snapshot of the whole table (first flush, after
    /// [`rewrite_all`](Self::rewrite_all), or once the deltas since the last base outweigh
    /// the table), which deletes the older blobs in the same batch. Few large values, not
    /// one store key per entry: writing and reading a checkpoint stays sequential.
    ///
    /// A new base of a large table (see [`DIRECT_BASE_BYTES`]) is written to `direct` a
    /// chunk at a time, in commits of its own (not synced: the checkpoint's commit syncs
    /// the journal they are in), so a checkpoint holds one chunk of it in memory; the
    /// checkpoint's batch then names its generation (see [`MARK_TAG`]).
    pub fn flush(
        &mut self,
        store_prefix: &[u8],
        batch: &mut WriteBatch,
        direct: Option<&dyn Store>,
    ) -> FlushStats {
        self.check_invariants();
        let mut stats = FlushStats::default();
        // deltas may add up to the table's size (in memory and spilled) before they are
        // folded into a new base
        let size = self.bytes + self.spilled_bytes();
        let rebase =
            !self.tracking || self.stored.delta_bytes + self.log.len() > size.max(MIN_REBASE_BYTES);
        if rebase {
            self.tracking = true;
            self.log = Log::new();
            for k in self.stored.blobs.drain(..) {
                batch.delete(k);
            }
            self.stored.delta_bytes = 0;
            self.stored.base += 1;
            let base = self.stored.base;
            let mut out = BaseWriter {
                prefix: store_prefix,
                base,
                chunks: 0,
                direct: direct.filter(|_| size >= DIRECT_BASE_BYTES),
                failed: None,
            };
            let chunk_bytes = match out.direct {
                Some(_) => DIRECT_BLOB_BYTES,
                None => BLOB_BYTES,
            };
            let mut blob = BlobWriter::new();
            for (k, v) in self.cache.entries() {
                blob.put(k, v);
                stats.keys += 1;
                if blob.len() >= chunk_bytes {
                    let full = std::mem::replace(&mut blob, BlobWriter::new()).finish();
                    out.emit(full, &mut stats, &mut self.stored.blobs, batch);
                }
            }
            // spilled entries are written from the spill store, one at a time
            if let (Some(sp), Some(store)) = (
                self.spill.as_deref().filter(|s| s.keys > 0),
                crate::state::spill::store(),
            ) {
                let blobs = &mut self.stored.blobs;
                let r = store.scan(&sp.id, Some(&sp.store_end()), &mut |k, v| {
                    blob.put(k.get(8..).unwrap_or_default(), v);
                    stats.keys += 1;
                    if blob.len() >= chunk_bytes {
                        let full = std::mem::replace(&mut blob, BlobWriter::new()).finish();
                        out.emit(full, &mut stats, blobs, batch);
                    }
                });
                if let Err(e) = r {
                    out.failed.get_or_insert(format!(
                        "cannot read spilled entries for a checkpoint: {e}"
                    ));
                }
            }
            if blob.entries > 0 || out.chunks == 0 {
                out.emit(blob.finish(), &mut stats, &mut self.stored.blobs, batch);
            }
            let mut mark = store_prefix.to_vec();
            mark.push(MARK_TAG);
            batch.put(mark, base.to_be_bytes().to_vec());
            if let Some(msg) = out.failed {
                self.fail(msg);
            }
            return stats;
        }
        if self.log.entries == 0 {
            return stats;
        }
        let log = std::mem::replace(&mut self.log, Log::new());
        stats.keys += log.entries as usize;
        for v in log.finish() {
            self.stored.next_delta += 1;
            let mut k = store_prefix.to_vec();
            k.push(DELTA_TAG);
            k.extend_from_slice(&self.stored.next_delta.to_be_bytes());
            stats.bytes += k.len() + v.len();
            self.stored.delta_bytes += v.len();
            self.stored.blobs.push(k.clone());
            batch.put(k, v);
        }
        stats
    }

    /// Replace the contents with what `store` holds under `store_prefix` (the base
    /// snapshot, then the deltas in order; nothing dirty afterwards). A blob in another
    /// format or whose checksum fails is an error naming the table and the store key:
    /// such state must be rebuilt, never decoded.
    pub fn load(&mut self, store: &dyn Store, store_prefix: &[u8]) -> Result<()> {
        self.drop_spilled();
        self.cache.clear();
        self.log = Log::new();
        // replayed writes are not changes to log
        self.tracking = false;
        self.bytes = 0;
        self.stored = Stored::default();
        let name = self.decl.name;
        let budget = crate::state::spill::cache_budget();
        // the base generation a checkpoint named (None: a checkpoint written before marks,
        // with one generation only)
        let mut marked: Option<u64> = None;
        let mut named_found = false;
        store.scan_prefix(store_prefix, &mut |k, v| {
            let rest = &k[store_prefix.len()..];
            if rest == [MARK_TAG] {
                let id: [u8; 8] = v.try_into().map_err(|_| {
                    WeirError::internal(format!("state table \"{name}\": corrupt base mark"))
                })?;
                marked = Some(u64::from_be_bytes(id));
                return Ok(());
            }
            let (tag, id) = match rest.split_first() {
                Some((t, id)) if id.len() >= 8 => (
                    *t,
                    u64::from_be_bytes(id[..8].try_into().unwrap_or_default()),
                ),
                _ => {
                    return Err(WeirError::internal(format!(
                        "state table \"{name}\": unexpected store key {}",
                        hex(k)
                    )));
                }
            };
            match tag {
                BASE_TAG => {
                    self.stored.base = self.stored.base.max(id);
                    if marked.is_some_and(|m| m != id) {
                        // chunks of a base no checkpoint named (a crash while it was being
                        // written): deleted with the next base, never read
                        self.stored.blobs.push(k.to_vec());
                        return Ok(());
                    }
                    named_found = true;
                }
                DELTA_TAG => {
                    self.stored.next_delta = self.stored.next_delta.max(id);
                    self.stored.delta_bytes += v.len();
                }
                _ => {
                    return Err(WeirError::internal(format!(
                        "state table \"{name}\": unexpected store key {}",
                        hex(k)
                    )));
                }
            }
            read_blob(v, |key, value| match value {
                Some(value) => self.upsert(key, |_| Some(Val::new(value))),
                None => self.delete(key),
            })
            .map_err(|what| {
                WeirError::new(
                    crate::error::sqlstate::DATA_CORRUPTED,
                    format!(
                        "state table \"{name}\": the blob at store key {} is {what}",
                        hex(k)
                    ),
                )
            })?;
            self.stored.blobs.push(k.to_vec());
            // recovery under --memory-limit: a table larger than half the state cache
            // spills while it loads instead of growing past the limit
            let footprint = self.footprint() as u64;
            if budget != u64::MAX && footprint > budget / 2 {
                self.evict((footprint - budget / 4) as usize);
            }
            Ok(())
        })?;
        self.tracking = true;
        if let Some(e) = self.take_error() {
            return Err(WeirError::internal(e));
        }
        if let Some(m) = marked
            && !named_found
        {
            return Err(WeirError::new(
                crate::error::sqlstate::DATA_CORRUPTED,
                format!(
                    "state table \"{name}\": the base its checkpoint names (generation {m}) is missing"
                ),
            ));
        }
        Ok(())
    }

    fn check_invariants(&self) {
        debug_assert_eq!(
            self.bytes,
            self.cache
                .entries()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>(),
            "state table {}: byte count drifted",
            self.decl.name
        );
    }
}

impl Drop for StateTable {
    fn drop(&mut self) {
        self.drop_spilled();
    }
}

/// The smallest key greater than every key starting with `prefix` (None: no such key,
/// the prefix is empty or all 0xff).
/// The least key after `key` (in byte order: `key` ++ 0).
fn successor(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.extend_from_slice(key);
    k.push(0);
    k
}

/// Account for a write of `key` whose value was `old` bytes long and is now `new` (None:
/// absent): the cached bytes, and the change log when the table logs.
fn written(
    bytes: &mut usize,
    log: Option<&mut Log>,
    key: &[u8],
    old: Option<usize>,
    new: Option<&[u8]>,
) {
    if let Some(o) = old {
        *bytes -= key.len() + o;
    }
    if let Some(n) = new {
        *bytes += key.len() + n.len();
    }
    if let Some(log) = log {
        match new {
            Some(n) => log.put(key, n),
            None => log.delete(key),
        }
    }
}

/// Entries [`StateTable::take_up_to`] removed: their keys as they were (no copy per entry).
pub struct Taken(Vec<Key>);

impl Taken {
    /// (time, rest of the key) of each entry, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (i64, &[u8])> {
        self.0
            .iter()
            .map(|k| (i64_of_key(k), k.get(8..).unwrap_or_default()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// A count stored as a value (i64 LE; 0 for anything else).
pub fn count_of(v: &[u8]) -> i64 {
    v.try_into().map(i64::from_le_bytes).unwrap_or(0)
}

/// An i64 as 8 bytes whose byte order is the numbers' order (for keys).
pub fn i64_key(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

/// The i64 at the start of a key written with [`i64_key`].
pub fn i64_of_key(k: &[u8]) -> i64 {
    let b: [u8; 8] = k.get(..8).and_then(|b| b.try_into().ok()).unwrap_or([0; 8]);
    (u64::from_be_bytes(b) ^ (1 << 63)) as i64
}

/// Reads fixed-width little-endian fields from a stored value; running out of bytes is an
/// error naming the state (a value from another layout), never a panic.
pub struct Reader<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8], what: &'static str) -> Reader<'a> {
        Reader { bytes, what }
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len()
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.bytes.len() < n {
            return Err(WeirError::internal(format!(
                "stored {} is truncated ({} bytes left, {n} needed)",
                self.what,
                self.bytes.len()
            )));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn i64(&mut self) -> Result<i64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(i64::from_le_bytes(a))
    }

    pub fn i128(&mut self) -> Result<i128> {
        let mut a = [0u8; 16];
        a.copy_from_slice(self.take(16)?);
        Ok(i128::from_le_bytes(a))
    }

    /// A u32 length, then that many bytes.
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::fjall_store::FjallStore;

    /// An ordered table's keys order as their bytes, through the inline head and through
    /// probes: short keys, keys with zero bytes where a padded head has its zeros, keys
    /// that agree on the 16 bytes of the head and differ after it.
    #[test]
    fn ordered_keys_order_as_their_bytes() {
        let mut keys: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0, 0],
            vec![1],
            vec![1, 0],
            vec![0xff; 15],
            vec![0xff; 16],
            vec![0xff; 17],
        ];
        let base: Vec<u8> = (0u8..16).collect();
        for tail in [vec![], vec![0], vec![0, 1], vec![1], vec![0xff]] {
            let mut k = base.clone();
            k.extend(tail);
            keys.push(k);
            keys.push(base[..15].to_vec());
        }
        let mut seed = 7u64;
        for _ in 0..300 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = (seed >> 59) as usize % 20;
            keys.push(
                (0..len)
                    .map(|i| ((seed >> (i % 8 * 8)) as u8) % 3)
                    .collect(),
            );
        }
        for a in &keys {
            for b in &keys {
                let (ka, kb) = (OrdKey::new(a[..].into()), OrdKey::new(b[..].into()));
                assert_eq!(ka.cmp(&kb), a.cmp(b), "{a:?} vs {b:?}");
                let (pa, pb) = (Probe::new(a), Probe::new(b));
                let (va, vb): (&dyn KeyView, &dyn KeyView) = (&pa, &kb);
                assert_eq!(va.cmp(vb), a.cmp(b), "probe {a:?} vs {b:?}");
                assert_eq!((&ka as &dyn KeyView).cmp(&pb as &dyn KeyView), a.cmp(b));
            }
        }
    }

    fn table() -> StateTable {
        StateTable::new(TableDecl {
            name: "t",
            key: "k",
            value: "v",
            ordered: true,
        })
    }

    type Entries = Vec<(Vec<u8>, Vec<u8>)>;

    /// The table stored under `p/`, loaded back, with its entries in key order.
    fn loaded(store: &dyn Store) -> (StateTable, Entries) {
        let mut back = table();
        back.load(store, b"p/").unwrap();
        let got = back
            .range((Bound::Unbounded, Bound::Unbounded))
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect();
        (back, got)
    }

    fn keys<'a>(it: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Vec<Vec<u8>> {
        it.map(|(k, _)| k.to_vec()).collect()
    }

    #[test]
    fn scans_in_both_directions_and_by_prefix() {
        let mut t = table();
        for k in [&b"a1"[..], b"a2", b"a\xff", b"b", b"b1", b"c"] {
            t.put(k, b"v");
        }
        assert_eq!(
            keys(t.prefix(b"a")),
            vec![b"a1".to_vec(), b"a2".to_vec(), b"a\xff".to_vec()]
        );
        assert_eq!(
            keys(t.prefix_range(b"a").rev()).first(),
            Some(&b"a\xff".to_vec())
        );
        assert_eq!(keys(t.prefix_range(b"a")), keys(t.prefix(b"a")));
        assert_eq!(keys(t.prefix(b"b")), vec![b"b".to_vec(), b"b1".to_vec()]);
        assert_eq!(keys(t.prefix(b"")).len(), 6);
        let r = (Bound::Included(&b"a2"[..]), Bound::Excluded(&b"b1"[..]));
        assert_eq!(
            keys(t.range(r)),
            vec![b"a2".to_vec(), b"a\xff".to_vec(), b"b".to_vec()]
        );
        assert_eq!(t.range(r).next_back().map(|(k, _)| k), Some(&b"b"[..]));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        let mut timed = table();
        for (t, rest) in [(5i64, &b"x"[..]), (-3, b"y"), (9, b"z"), (5, b"w")] {
            let mut k = i64_key(t).to_vec();
            k.extend_from_slice(rest);
            timed.put(&k, b"");
        }
        let taken = timed.take_up_to(5);
        assert_eq!(
            taken.iter().collect::<Vec<_>>(),
            vec![(-3, &b"y"[..]), (5, &b"w"[..]), (5, &b"x"[..])]
        );
        assert_eq!(timed.len(), 1);
        assert_eq!(timed.take_up_to(i64::MAX).len(), 1);
        for (a, b) in [(i64::MIN, -1), (-1, 0), (0, 1), (1, i64::MAX)] {
            assert!(i64_key(a) < i64_key(b));
            assert_eq!(i64_of_key(&i64_key(a)), a);
        }
    }

    /// A large table's new base goes to the store chunk by chunk (the checkpoint's batch
    /// holds only the generation mark); a crash before the checkpoint's commit leaves
    /// chunks no mark names, which a load skips and the next base deletes.
    #[test]
    fn a_large_base_is_written_in_chunks_before_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path()).unwrap();
        let mut t = table();
        let value = vec![7u8; 1000];
        let n = DIRECT_BASE_BYTES / 1000 + 100;
        for i in 0..n as u64 {
            t.put(&i64_key(i as i64), &value);
        }
        let mut batch = WriteBatch::default();
        let stats = t.flush(b"p/", &mut batch, Some(&store));
        assert_eq!(stats.keys, n);
        let batch_bytes: usize = batch
            .ops
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, |v| v.len()))
            .sum();
        assert!(
            batch_bytes < 1024,
            "the base went into the batch: {batch_bytes} bytes"
        );
        store.commit(batch, Durability::Sync).unwrap();
        let (_, got) = loaded(&store);
        assert_eq!(got.len(), n);
        // a second base whose checkpoint never commits: its chunks are in the store
        t.put(&i64_key(-1), b"new");
        t.rewrite_all();
        let mut lost = WriteBatch::default();
        t.flush(b"p/", &mut lost, Some(&store));
        drop(lost);
        let mut back = table();
        back.load(&store, b"p/").unwrap();
        assert_eq!(back.len(), n, "the unnamed generation is skipped");
        assert!(back.get(&i64_key(-1)).is_none());
        // the next base (from the loaded table, once its changes outweigh it) deletes the
        // stale chunks too
        let newer = vec![8u8; 1000];
        for i in 0..n as u64 {
            back.put(&i64_key(i as i64), &newer);
        }
        let mut batch = WriteBatch::default();
        back.flush(b"p/", &mut batch, Some(&store));
        store.commit(batch, Durability::Sync).unwrap();
        let gens: std::collections::BTreeSet<Vec<u8>> =
            crate::state::store::keys_with_prefix(&store, b"p/b")
                .unwrap()
                .into_iter()
                .map(|k| k[3..11].to_vec())
                .collect();
        assert_eq!(gens.len(), 1, "one generation left");
        let (_, got) = loaded(&store);
        assert_eq!(got.len(), n);
    }

    #[test]
    fn flush_writes_exactly_the_changed_keys_and_load_reads_them_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path()).unwrap();
        let mut t = table();
        t.put(b"k1", b"one");
        t.put(b"k2", b"two");
        t.put(b"k3", b"three");
        let mut batch = WriteBatch::default();
        let stats = t.flush(b"p/", &mut batch, None);
        assert_eq!(stats.keys, 3);
        store.commit(batch, Durability::Sync).unwrap();
        assert_eq!(t.dirty_keys(), 0);

        // one key changed twice, one deleted, one written with its old value: three
        // changes logged (the rewrite of k3 with the same value is none)
        t.put(b"k1", b"uno");
        t.put(b"k1", b"eins");
        t.delete(b"k2");
        t.put(b"k3", b"three");
        let mut batch = WriteBatch::default();
        assert_eq!(t.flush(b"p/", &mut batch, None).keys, 3);
        store.commit(batch, Durability::Sync).unwrap();

        // a range delete frees a window in one call and is flushed as deletes
        t.put(b"w/1/a", b"x");
        t.put(b"w/1/b", b"x");
        t.put(b"w/2/a", b"x");
        assert_eq!(t.delete_prefix(b"w/1/"), 2);
        let mut batch = WriteBatch::default();
        t.flush(b"p/", &mut batch, None);
        store.commit(batch, Durability::Sync).unwrap();

        let (back, got) = loaded(&store);
        assert_eq!(
            got,
            vec![
                (b"k1".to_vec(), b"eins".to_vec()),
                (b"k3".to_vec(), b"three".to_vec()),
                (b"w/2/a".to_vec(), b"x".to_vec()),
            ]
        );
        assert_eq!(back.bytes(), t.bytes());
        assert_eq!(back.dirty_keys(), 0);
    }

    /// Every way of writing (put, update to a value, to the same value, to None, add_count,
    /// delete, range deletes from the first key and from the middle, take_up_to), on an
    /// ordered and a hashed table with the change log on: the table, its byte count and
    /// what a flush writes (loaded back) stay equal to a model map.
    #[test]
    fn every_write_keeps_the_bytes_and_the_log_equal_to_a_model() {
        for ordered in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let store = FjallStore::open(dir.path()).unwrap();
            let decl = TableDecl {
                name: "t",
                key: "k",
                value: "v",
                ordered,
            };
            let mut t = StateTable::new(decl.clone());
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            let mut seed = 0x9e37_79b9_7f4a_7c15u64;
            let mut next = |n: u64| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed % n
            };
            for round in 0..6 {
                for _ in 0..300 {
                    let k = i64_key(next(64) as i64).to_vec();
                    let v = vec![b'v'; next(40) as usize];
                    match next(6) {
                        0 => {
                            t.put(&k, &v);
                            model.insert(k, v);
                        }
                        1 => {
                            t.update(&k, |_| (!v.is_empty()).then(|| v.clone()));
                            match v.is_empty() {
                                true => model.remove(&k),
                                false => model.insert(k, v),
                            };
                        }
                        2 => {
                            // the same value again: no change, nothing logged
                            if let Some(old) = model.get(&k) {
                                t.put(&k, old);
                            }
                        }
                        3 => {
                            let (_, n) = t.add_count(&k, 1);
                            match n {
                                0 => model.remove(&k),
                                n => model.insert(k, n.to_le_bytes().to_vec()),
                            };
                        }
                        4 => {
                            t.delete(&k);
                            model.remove(&k);
                        }
                        _ if ordered => {
                            let lo = i64_key(next(64) as i64);
                            let hi = i64_key(next(64) as i64);
                            if next(2) == 0 {
                                let limit = i64_of_key(&hi);
                                let taken: Vec<(i64, Vec<u8>)> = t
                                    .take_up_to(limit)
                                    .iter()
                                    .map(|(at, rest)| (at, rest.to_vec()))
                                    .collect();
                                let want: Vec<(i64, Vec<u8>)> = model
                                    .range(..=hi.to_vec())
                                    .map(|(k, _)| (i64_of_key(k), k[8..].to_vec()))
                                    .collect();
                                assert_eq!(taken, want);
                                model.retain(|k, _| k.as_slice() > &hi[..]);
                            } else if lo <= hi {
                                t.delete_range((
                                    Bound::Included(&lo[..]),
                                    Bound::Excluded(&hi[..]),
                                ));
                                model.retain(|k, _| {
                                    k.as_slice() < &lo[..] || k.as_slice() >= &hi[..]
                                });
                            }
                        }
                        _ => {}
                    }
                }
                let expect_bytes: usize = model.iter().map(|(k, v)| k.len() + v.len()).sum();
                assert_eq!(t.bytes(), expect_bytes, "ordered {ordered}, round {round}");
                let mut batch = WriteBatch::default();
                t.flush(b"p/", &mut batch, None);
                store.commit(batch, Durability::Sync).unwrap();
                let mut back = StateTable::new(decl.clone());
                back.load(&store, b"p/").unwrap();
                let want: Vec<(Vec<u8>, Vec<u8>)> = model.clone().into_iter().collect();
                assert_eq!(
                    spill_tests::sorted(&mut back),
                    want,
                    "ordered {ordered}, round {round}"
                );
            }
        }
    }

    /// A change log larger than a chunk is written as several delta blobs, read back in
    /// order: the last write of a key wins across chunks.
    #[test]
    fn a_log_of_many_chunks_reads_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path()).unwrap();
        let mut t = table();
        let key = |i: u32| format!("k{i:06}").into_bytes();
        for i in 0..20_000u32 {
            t.put(&key(i), &[1u8; 1000]);
        }
        let mut batch = WriteBatch::default();
        t.flush(b"p/", &mut batch, None);
        store.commit(batch, Durability::Sync).unwrap();
        // 9,000 changes of about 300 bytes: a log of several chunks (the table, 20 MB,
        // outweighs it: no new base)
        for i in 0..9_000u32 {
            t.put(&key(i % 3_000), &[(i / 3_000 + 2) as u8; 300]);
        }
        for i in 0..100u32 {
            t.delete(&key(i));
        }
        let mut batch = WriteBatch::default();
        let stats = t.flush(b"p/", &mut batch, None);
        assert_eq!(stats.keys, 9_100);
        assert!(stats.bytes > 2 * LOG_CHUNK, "{stats:?}");
        store.commit(batch, Durability::Sync).unwrap();
        let (back, got) = loaded(&store);
        assert_eq!(got.len(), 19_900);
        assert_eq!(got[0].0, key(100));
        assert!(got[..2_900].iter().all(|(_, v)| v == &vec![4u8; 300]));
        assert!(got[2_900..].iter().all(|(_, v)| v == &vec![1u8; 1000]));
        assert_eq!(back.bytes(), t.bytes());
    }

    /// Deltas pile up until they outweigh the table, then a new base replaces them all in
    /// the same batch; a table loaded from base + deltas goes on numbering after them; a
    /// flipped byte in a blob is refused by its checksum.
    #[test]
    fn deltas_are_folded_into_a_new_base_and_blobs_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path()).unwrap();
        let blobs = |store: &FjallStore| {
            let mut k = Vec::new();
            store
                .scan_prefix(b"p/", &mut |key, _| {
                    if key[2] != MARK_TAG {
                        k.push(key[2]);
                    }
                    Ok(())
                })
                .unwrap();
            k
        };
        let mut t = table();
        t.put(b"small", b"1");
        let flush = |t: &mut StateTable| {
            let mut batch = WriteBatch::default();
            t.flush(b"p/", &mut batch, None);
            store.commit(batch, Durability::Sync).unwrap();
        };
        flush(&mut t);
        assert_eq!(blobs(&store), vec![BASE_TAG]);
        // 1 KiB values rewritten: each flush one delta of ~100 KiB
        for round in 0..5u8 {
            for i in 0..100u32 {
                t.put(&i.to_be_bytes(), &[round; 1024]);
            }
            flush(&mut t);
        }
        assert_eq!(
            blobs(&store),
            vec![
                BASE_TAG, DELTA_TAG, DELTA_TAG, DELTA_TAG, DELTA_TAG, DELTA_TAG
            ]
        );
        let mut back = table();
        back.load(&store, b"p/").unwrap();
        assert_eq!(back.len(), t.len());
        assert_eq!(back.get(&7u32.to_be_bytes()), Some(&[4u8; 1024][..]));
        // the loaded copy goes on: more deltas until they outweigh the 1 MiB minimum
        for round in 5..20u8 {
            for i in 0..100u32 {
                back.put(&i.to_be_bytes(), &[round; 1024]);
            }
            back.delete(b"small");
            let mut batch = WriteBatch::default();
            back.flush(b"p/", &mut batch, None);
            store.commit(batch, Durability::Sync).unwrap();
        }
        let tags = blobs(&store);
        assert_eq!(
            tags.iter().filter(|t| **t == BASE_TAG).count(),
            1,
            "{tags:?}"
        );
        assert!(
            tags.len() < 16,
            "the deltas were folded into a new base: {tags:?}"
        );
        let mut again = table();
        again.load(&store, b"p/").unwrap();
        assert_eq!(again.len(), 100);
        assert_eq!(again.get(b"small"), None);
        assert_eq!(again.get(&99u32.to_be_bytes()), Some(&[19u8; 1024][..]));
        // damage one byte of one blob
        let mut victim = None;
        store
            .scan_prefix(b"p/", &mut |k, v| {
                if k[2] != MARK_TAG {
                    victim.get_or_insert_with(|| (k.to_vec(), v.to_vec()));
                }
                Ok(())
            })
            .unwrap();
        let (k, mut v) = victim.unwrap();
        let mid = v.len() / 2;
        v[mid] ^= 1;
        let mut batch = WriteBatch::default();
        batch.put(k, v);
        store.commit(batch, Durability::Sync).unwrap();
        let e = table().load(&store, b"p/").unwrap_err();
        assert!(e.message.contains("checksum"), "{}", e.message);
    }

    #[test]
    fn state_in_another_format_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path()).unwrap();
        let mut batch = WriteBatch::default();
        batch.put(b"p/k".to_vec(), vec![VALUE_FORMAT + 1, 7]);
        store.commit(batch, Durability::Sync).unwrap();
        let err = table().load(&store, b"p/").unwrap_err();
        assert!(err.message.contains("state table \"t\""), "{}", err.message);
        assert!(err.message.contains("702f6b"), "{}", err.message);
    }

    #[test]
    fn state_format_names_the_arrow_release_in_use() {
        // embedded at compile time: the test binary may run from another checkout's path
        let lock = include_str!("../../Cargo.lock");
        let at = lock
            .find("name = \"arrow-row\"\nversion = \"")
            .expect("arrow-row in Cargo.lock");
        let version = &lock[at + "name = \"arrow-row\"\nversion = \"".len()..];
        let major = version.split('.').next().unwrap();
        assert!(
            STATE_FORMAT.ends_with(&format!("arrow-{major}")),
            "arrow-row is {major}.x: bump STATE_FORMAT ({STATE_FORMAT}) so old state is rebuilt"
        );
    }
}

#[cfg(test)]
mod spill_tests {
    use super::*;
    use crate::state::fjall_store::FjallStore;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    fn decl(ordered: bool) -> TableDecl {
        TableDecl {
            name: "t",
            key: "k",
            value: "v",
            ordered,
        }
    }

    /// Keys of 1-3 bytes over a small alphabet (prefixes of each other, shared prefixes).
    fn key(rng: &mut SmallRng) -> Vec<u8> {
        let n = rng.random_range(1..=3);
        (0..n).map(|_| rng.random_range(0..4u8)).collect()
    }

    /// Every entry of `t` (spilled ones read back), in key order.
    pub(super) fn sorted(t: &mut StateTable) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut all: Vec<(Vec<u8>, Vec<u8>)> = t
            .iter()
            .into_iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect();
        all.sort();
        all
    }

    fn model_range(
        m: &BTreeMap<Vec<u8>, Vec<u8>>,
        lo: &[u8],
        hi: Option<&[u8]>,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        m.iter()
            .filter(|(k, _)| k.as_slice() >= lo && hi.is_none_or(|h| k.as_slice() < h))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Random reads, writes, range deletes, checkpoints and restores against a model,
    /// with evictions of random sizes between them: every answer is the model's.
    fn run(ordered: bool, seed: u64) {
        crate::state::spill::for_tests();
        let mut rng = SmallRng::seed_from_u64(seed);
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path()).unwrap();
        let mut t = StateTable::new(decl(ordered));
        let mut m: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut spilled_most = 0;
        for step in 0..3000 {
            let ctx = format!("seed {seed} step {step} ordered {ordered}");
            match rng.random_range(0..100) {
                0..30 => {
                    let k = key(&mut rng);
                    let v: Vec<u8> = vec![rng.random_range(0..255u8); rng.random_range(0..40)];
                    t.put(&k, &v);
                    m.insert(k, v);
                }
                30..40 => {
                    let k = key(&mut rng);
                    t.delete(&k);
                    m.remove(&k);
                }
                40..50 => {
                    let k = key(&mut rng);
                    let d = rng.random_range(-2..3i64);
                    let (old, new) = t.add_count(&k, d);
                    let mold = m.get(&k).map(|v| count_of(v)).unwrap_or(0);
                    assert_eq!(old, mold, "{ctx}");
                    if new == 0 {
                        m.remove(&k);
                    } else {
                        m.insert(k, new.to_le_bytes().to_vec());
                    }
                }
                50..65 => {
                    let k = key(&mut rng);
                    assert_eq!(t.get(&k).map(|v| v.to_vec()), m.get(&k).cloned(), "{ctx}");
                }
                65..72 if ordered => {
                    let p = key(&mut rng);
                    let end = prefix_end(&p);
                    let want = model_range(&m, &p, end.as_deref());
                    let first = t
                        .prefix_edge(&p, false)
                        .map(|(k, v)| (k.to_vec(), v.to_vec()));
                    assert_eq!(first, want.first().cloned(), "{ctx}");
                    let last = t
                        .prefix_edge(&p, true)
                        .map(|(k, v)| (k.to_vec(), v.to_vec()));
                    assert_eq!(last, want.last().cloned(), "{ctx}");
                }
                72..80 if ordered => {
                    let p = key(&mut rng);
                    let got: Vec<(Vec<u8>, Vec<u8>)> = t
                        .prefix(&p)
                        .map(|(k, v)| (k.to_vec(), v.to_vec()))
                        .collect();
                    let end = prefix_end(&p);
                    assert_eq!(got, model_range(&m, &p, end.as_deref()), "{ctx}");
                    let last = t.prefix_range(&p).next_back().map(|(k, _)| k.to_vec());
                    assert_eq!(
                        last,
                        model_range(&m, &p, end.as_deref())
                            .last()
                            .map(|e| e.0.clone()),
                        "{ctx}"
                    );
                }
                80..85 if ordered => {
                    let (a, b) = (key(&mut rng), key(&mut rng));
                    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                    let n = t.delete_range((Bound::Included(&lo), Bound::Excluded(&hi)));
                    let gone = model_range(&m, &lo, Some(&hi));
                    assert_eq!(n, gone.len(), "{ctx}");
                    for (k, _) in gone {
                        m.remove(&k);
                    }
                }
                85..88 => {
                    // a checkpoint, then a restore from it into a fresh table
                    let mut batch = WriteBatch::default();
                    t.flush(b"p/", &mut batch, None);
                    store.commit(batch, Durability::Buffered).unwrap();
                    if rng.random_bool(0.3) {
                        t = StateTable::new(decl(ordered));
                        t.load(&store, b"p/").unwrap();
                    }
                }
                _ => {
                    let target = rng.random_range(0..(t.footprint() + 1));
                    t.evict(target);
                }
            }
            assert_eq!(t.len(), m.len(), "{ctx}");
            assert!(t.take_error().is_none(), "{ctx}");
            spilled_most = spilled_most.max(t.spilled_keys());
        }
        assert!(spilled_most > 10, "seed {seed}: nothing much ever spilled");
        assert_eq!(sorted(&mut t), model_range(&m, &[], None), "seed {seed}");
        assert_eq!(t.spilled_keys(), 0, "a full read brings everything back");
    }

    #[test]
    fn spilled_tables_answer_as_if_everything_were_in_memory() {
        let seed: u64 = std::env::var("WEIR_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| rand::rng().random());
        println!("seed {seed} (WEIR_SEED to repeat)");
        for i in 0..4 {
            run(true, seed.wrapping_add(i));
            run(false, seed.wrapping_add(i));
        }
    }

    #[test]
    fn eviction_takes_cold_entries_first_and_reads_bring_them_back() {
        crate::state::spill::for_tests();
        let mut t = StateTable::new(decl(true));
        for i in 0..1000u32 {
            t.put(&i.to_be_bytes(), &[7; 20]);
        }
        let full = t.footprint();
        // the first sweep only clears the marks of entries written since the last one;
        // its second round takes the coldest
        let freed = t.evict(full / 2);
        assert!(freed >= full / 2, "freed {freed} of {full}");
        assert!(t.spilled_keys() >= 400, "{}", t.spilled_keys());
        assert_eq!(t.len(), 1000);
        // touch a few: the next sweep keeps them
        let hot: Vec<u32> = (0..1000).step_by(100).collect();
        for i in &hot {
            assert_eq!(t.get(&i.to_be_bytes()), Some(&[7u8; 20][..]));
        }
        let cold = (t.cache.len() - hot.len()) * (24 + t.entry_overhead());
        t.evict(cold);
        assert_eq!(
            t.spilled_keys(),
            1000 - hot.len(),
            "only the read ones stay"
        );
        assert_eq!(t.bytes(), hot.len() * 24);
        // a prefix read brings back its part only, and the range is remembered as read
        let n = t.prefix(&[0, 0, 1]).count();
        assert_eq!(n, 256);
        assert!(t.spilled_keys() < 1000 - hot.len());
        assert_eq!(t.delete_prefix(&[]), 1000);
        assert_eq!((t.len(), t.spilled_keys(), t.spilled_bytes()), (0, 0, 0));
    }
}
