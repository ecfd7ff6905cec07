//! A view's shards (`weir serve --workers N`): each stateful operator of a view's graph is
//! planned N times, every instance owning the keys that hash to it, and every epoch the
//! graph routes each row to the shard that owns it before the operator runs (the exchange
//! between stages, as dbsp's workers and Flink's key groups have it). Stateless operators
//! keep rows in the shard they are in (a fused chain), and split an unsharded batch (a
//! source's) into even slices. The shards of one node run in parallel once the node has
//! enough rows to be worth handing to another thread (`parallel.rs`: the shard pool); an
//! epoch still runs node after node, so it is complete when every shard of every node has
//! run.
//!
//! Routing is a pure function of the key's values (a fixed-seed hash), so a restarted
//! server routes every key to the shard whose checkpointed state holds it; the shard count
//! is part of a view's checkpoint (`ViewCheckpoint::shards`).

use std::sync::OnceLock;

use datafusion::arrow::array::UInt32Array;
use datafusion::common::hash_utils::{RandomState, create_hashes};

use crate::dataflow::changelog::Changelog;
use crate::error::{Result, WeirError};
use crate::operators::{Sharding, evaluate};

/// The seed of the routing hash: changing it moves keys between shards, so checkpoints of
/// sharded views taken with another seed would not restore (it is part of `STATE_FORMAT`'s
/// promise: never change it without changing that).
const ROUTING_SEED: u64 = 0x5745_4952_5348_4152;

/// Rows a node needs in one epoch before its shards run on threads of their own (fewer run
/// one after another on the dataflow thread: a thread costs more than a small batch).
/// `WEIR_PARALLEL_MIN_ROWS` lowers it for tests.
pub fn parallel_min_rows() -> usize {
    static MIN: OnceLock<usize> = OnceLock::new();
    *MIN.get_or_init(|| {
        std::env::var("WEIR_PARALLEL_MIN_ROWS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2048)
    })
}

/// A batch on its way to a node: the shard it was produced in (None: produced unsharded).
pub type Part = (Option<usize>, Changelog);

/// Split the parts arriving on one port of a node with `n` shards: one list per shard.
pub fn route(sharding: &Sharding, parts: Vec<Part>, n: usize) -> Result<Vec<Vec<Changelog>>> {
    let mut out: Vec<Vec<Changelog>> = vec![Vec::new(); n];
    match sharding {
        Sharding::Single => Err(WeirError::internal(
            "an unshardable operator was given shards",
        )),
        Sharding::Any => {
            // rows already in a shard stay there; unsharded batches are cut into one even
            // share per shard, all of them together: shard 0 takes the first rows, shard 1
            // the next, so reading the shards' outputs in shard order keeps the rows' order
            // (a row's insert stays before its retraction). The batches are sliced where a
            // share ends, never copied into one (concatenating the source's batches, text
            // columns and all, was 9% of q5's process with two workers).
            let mut loose = Vec::new();
            for (from, part) in parts {
                match from {
                    Some(s) if s < n => out[s].push(part),
                    _ if part.is_empty() => {}
                    _ => loose.push(part),
                }
            }
            let len: usize = loose.iter().map(Changelog::len).sum();
            if len < parallel_min_rows() {
                out[0].extend(loose);
                return Ok(out);
            }
            let step = len.div_ceil(n);
            // rows handed out so far; shard `at / step` takes the next ones
            let mut at = 0usize;
            for part in loose {
                let mut start = 0usize;
                while start < part.len() {
                    let shard = at / step;
                    let l = (step - at % step).min(part.len() - start);
                    out[shard].push(if start == 0 && l == part.len() {
                        part.clone()
                    } else {
                        Changelog::new(part.data.slice(start, l), part.weights.slice(start, l))
                    });
                    start += l;
                    at += l;
                }
            }
            Ok(out)
        }
        Sharding::Key(exprs) => {
            // parts in the order they came, each split by key: equal keys keep their order
            for (_, part) in parts {
                if part.is_empty() {
                    continue;
                }
                let cols = exprs
                    .iter()
                    .map(|e| evaluate(e, &part.data))
                    .collect::<Result<Vec<_>>>()?;
                let mut hashes = vec![0u64; part.len()];
                create_hashes(&cols, &RandomState::with_seed(ROUTING_SEED), &mut hashes)?;
                let first = shard_of(hashes[0], n);
                if hashes.iter().all(|h| shard_of(*h, n) == first) {
                    out[first].push(part);
                    continue;
                }
                let mut picks: Vec<Vec<u32>> = vec![Vec::new(); n];
                for (i, h) in hashes.iter().enumerate() {
                    picks[shard_of(*h, n)].push(i as u32);
                }
                for (s, rows) in picks.into_iter().enumerate() {
                    if rows.is_empty() {
                        continue;
                    }
                    out[s].push(part.take(&UInt32Array::from(rows))?);
                }
            }
            Ok(out)
        }
    }
}

fn shard_of(hash: u64, n: usize) -> usize {
    // the high bits: the hash's low bits also pick hash-table buckets downstream
    ((hash as u128 * n as u128) >> 64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::changelog::tests::{changelog, render};
    use datafusion::arrow::array::Int64Array;
    use datafusion::physical_expr::expressions::Column;
    use std::sync::Arc;

    #[test]
    fn equal_keys_meet_in_one_shard_and_no_row_is_lost() {
        let rows: String = (0..200)
            .map(|i| format!("+ {} {i}\n", i % 17))
            .chain((0..50).map(|i| format!("- {} {i}\n", i % 17)))
            .collect();
        let cl = changelog("k:i64 v:i64", &rows);
        let key = Sharding::Key(vec![Arc::new(Column::new("k", 0))]);
        let shards = route(&key, vec![(None, cl.clone())], 3).unwrap();
        let mut owner = std::collections::HashMap::new();
        let mut seen = Vec::new();
        for (s, parts) in shards.iter().enumerate() {
            assert!(!parts.is_empty(), "17 keys left shard {s} empty");
            for p in parts {
                for i in 0..p.len() {
                    let k = p
                        .data
                        .column(0)
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .unwrap()
                        .value(i);
                    assert_eq!(*owner.entry(k).or_insert(s), s, "key {k} in two shards");
                }
                seen.push(p.clone());
            }
        }
        assert_eq!(render(&seen), render(std::slice::from_ref(&cl)));
        // routing is a function of the key alone: the same rows again (as a shard's
        // output, or after a restart) go where they went
        for (s, parts) in shards.iter().enumerate() {
            for p in parts {
                let again = route(&key, vec![(Some(0), p.clone())], 3).unwrap();
                assert_eq!(again[s].len(), 1);
            }
        }
        // stateless: a shard's rows stay in it; a large unsharded batch is sliced evenly
        let any = route(&Sharding::Any, vec![(Some(2), cl.clone())], 3).unwrap();
        assert_eq!(any[2].len(), 1);
        let big: String = (0..3 * parallel_min_rows())
            .map(|i| format!("+ {i} 0\n"))
            .collect();
        let sliced = route(
            &Sharding::Any,
            vec![(None, changelog("k:i64 v:i64", &big))],
            3,
        )
        .unwrap();
        assert!(
            sliced
                .iter()
                .all(|p| p.len() == 1 && p[0].len() == parallel_min_rows())
        );
        // several unsharded batches: even shares cut across them, in order, none copied
        let sizes = [parallel_min_rows() / 2, 5, parallel_min_rows() * 2, 7];
        let mut next = 0usize;
        let parts: Vec<Part> = sizes
            .iter()
            .map(|n| {
                let rows: String = (next..next + n).map(|i| format!("+ {i} 0\n")).collect();
                next += n;
                (None, changelog("k:i64 v:i64", &rows))
            })
            .collect();
        let shares = route(&Sharding::Any, parts, 2).unwrap();
        let lens: Vec<usize> = shares
            .iter()
            .map(|p| p.iter().map(Changelog::len).sum())
            .collect();
        let total: usize = sizes.iter().sum();
        assert_eq!(lens, vec![total.div_ceil(2), total - total.div_ceil(2)]);
        // shard 0's rows then shard 1's are the rows as they came
        let keys: Vec<i64> = shares
            .iter()
            .flatten()
            .flat_map(|p| {
                let k = p
                    .data
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap();
                k.values().to_vec()
            })
            .collect();
        assert_eq!(keys, (0..total as i64).collect::<Vec<_>>());
    }
}
