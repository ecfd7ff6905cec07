//! Group keys to the dense slots an operator keeps its per-group vectors in (the
//! aggregate's `keys[g]`, `row_counts[g]`, ...): a hash table of slot numbers whose keys
//! are the operator's own slot list, each key's hash kept per slot. A key is held once (a
//! map of `Box<[u8]>` to slot held it twice, two allocations per new group), growing the
//! table moves stored hashes instead of reading every key from the heap again, and a key
//! is compared only when the full 64-bit hashes agree (on Nexmark q5, whose hopping windows
//! make five groups per bid, the boxed map's `memcmp`, hashing and allocations were a fifth
//! of the dataflow thread).
//!
//! Not an operator: no state of its own to checkpoint (the operator's slot list and its
//! state tables are what it restores from).

use hashbrown::HashTable;

#[derive(Default)]
pub struct SlotIndex {
    table: HashTable<u32>,
    /// The hash of slot g's key (meaningful while g is in the table).
    hashes: Vec<u64>,
    state: ahash::RandomState,
}

impl SlotIndex {
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.state.hash_one(key)
    }

    /// The slot of `key` (whose hash is `hash`), `keys` being the operator's slot list.
    pub fn find(&self, keys: &[Box<[u8]>], hash: u64, key: &[u8]) -> Option<u32> {
        self.table
            .find(hash, |&g| {
                self.hashes[g as usize] == hash && *keys[g as usize] == *key
            })
            .copied()
    }

    /// Whether slot `g` is in the index (a live group; free slots are not).
    pub fn contains_slot(&self, g: u32) -> bool {
        self.hashes
            .get(g as usize)
            .is_some_and(|&h| self.table.find(h, |&x| x == g).is_some())
    }

    /// Put slot `g`, whose key hashes to `hash` and is not in the index.
    pub fn insert(&mut self, g: u32, hash: u64) {
        let gi = g as usize;
        if self.hashes.len() <= gi {
            self.hashes.resize(gi + 1, 0);
        }
        self.hashes[gi] = hash;
        let hashes = &self.hashes;
        self.table.insert_unique(hash, g, |&x| hashes[x as usize]);
    }

    /// Take slot `g` out (its key may be gone from the slot list already).
    pub fn remove_slot(&mut self, g: u32) {
        let Some(&h) = self.hashes.get(g as usize) else {
            return;
        };
        if let Ok(entry) = self.table.find_entry(h, |&x| x == g) {
            entry.remove();
        }
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    pub fn shrink_to_fit(&mut self) {
        let hashes = &self.hashes;
        self.table.shrink_to_fit(|&x| hashes[x as usize]);
    }

    pub fn clear(&mut self) {
        self.table.clear();
        self.hashes.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(ix: &SlotIndex, keys: &[Box<[u8]>], key: &[u8]) -> Option<u32> {
        ix.find(keys, ix.hash(key), key)
    }

    #[test]
    fn slots_are_found_by_key_and_removed_by_slot() {
        let mut keys: Vec<Box<[u8]>> = Vec::new();
        let mut ix = SlotIndex::default();
        for i in 0..10_000u32 {
            let k: Box<[u8]> = i.to_be_bytes().into();
            assert_eq!(get(&ix, &keys, &k), None);
            let h = ix.hash(&k);
            keys.push(k);
            ix.insert(i, h);
        }
        assert_eq!(ix.len(), 10_000);
        for i in (0..10_000u32).step_by(3) {
            assert_eq!(get(&ix, &keys, &i.to_be_bytes()), Some(i));
            ix.remove_slot(i);
            keys[i as usize] = Box::default();
            assert!(!ix.contains_slot(i));
        }
        assert_eq!(ix.len(), 10_000 - 3334);
        assert!(ix.contains_slot(1));
        assert_eq!(get(&ix, &keys, &3u32.to_be_bytes()), None);
        assert_eq!(get(&ix, &keys, &4u32.to_be_bytes()), Some(4));
        ix.shrink_to_fit();
        assert_eq!(get(&ix, &keys, &9998u32.to_be_bytes()), Some(9998));
        // a freed slot taken by another key
        let k: Box<[u8]> = b"other".as_slice().into();
        let h = ix.hash(&k);
        keys[0] = k;
        ix.insert(0, h);
        assert_eq!(get(&ix, &keys, b"other"), Some(0));
        assert!(ix.contains_slot(0));
    }
}
