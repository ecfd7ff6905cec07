//! The process's helper threads (`weir serve --workers N`): two pools of N - 1 long-lived
//! threads, one for views' shards (`dataflow/shards.rs`, threads `weir-shard-K`) and one for
//! sources that split their work (a generator's batch, `connectors/nexmark.rs`, threads
//! `weir-gen-K`). A caller runs its first job itself and hands the others to the pool, so N
//! jobs run on N cores; the pools are rayon's (work-stealing, scoped: jobs may borrow the
//! caller's data), kept separate so a source never waits behind a view or the reverse.
//! Long-lived threads with names keep per-thread CPU readable in `/proc/<pid>/task`.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Result, WeirError};

static WORKERS: AtomicUsize = AtomicUsize::new(1);

/// Set `--workers` (at start, before the first view or source runs).
pub fn set_workers(n: usize) {
    WORKERS.store(n.max(1), Ordering::Release);
}

/// `--workers`: shards per new view, slices per generator batch.
pub fn workers() -> usize {
    WORKERS.load(Ordering::Acquire)
}

/// A boxed job that may borrow from its caller.
pub type Job<'a, T> = Box<dyn FnOnce() -> Result<T> + Send + 'a>;

/// Which pool a job runs on.
#[derive(Clone, Copy)]
pub enum Pool {
    Shards,
    Sources,
}

fn pool(which: Pool) -> Option<&'static rayon::ThreadPool> {
    static SHARDS: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    static SOURCES: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    let (cell, name) = match which {
        Pool::Shards => (&SHARDS, "weir-shard"),
        Pool::Sources => (&SOURCES, "weir-gen"),
    };
    cell.get_or_init(|| {
        let threads = workers().saturating_sub(1).max(1);
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(move |i| format!("{name}-{i}"))
            // evaluating a view's expressions recurses once per statement level
            .stack_size(crate::limits::THREAD_STACK_BYTES)
            .build()
            .map_err(|e| tracing::error!(error = %e, "cannot start the {name} threads: jobs run one after another"))
            .ok()
    })
    .as_ref()
}

/// Run `jobs`, the first on this thread and the others on `which` pool, and return their
/// results in order. A panic in a job is its internal error (the others still finish).
pub fn run_all<T: Send>(which: Pool, jobs: Vec<Job<'_, T>>) -> Vec<Result<T>> {
    let mut results: Vec<Option<Result<T>>> = jobs.iter().map(|_| None).collect();
    let mut jobs = jobs.into_iter();
    let Some(first) = jobs.next() else {
        return Vec::new();
    };
    match pool(which) {
        Some(pool) if jobs.len() > 0 => {
            let (head, rest) = results.split_at_mut(1);
            pool.in_place_scope(|scope| {
                for (job, slot) in jobs.zip(rest.iter_mut()) {
                    scope.spawn(move |_| *slot = Some(catch(job)));
                }
                head[0] = Some(catch(first));
            });
        }
        _ => {
            results[0] = Some(catch(first));
            for (job, slot) in jobs.zip(results.iter_mut().skip(1)) {
                *slot = Some(catch(job));
            }
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(WeirError::internal("a parallel job did not run"))))
        .collect()
}

fn catch<T>(job: Job<'_, T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).unwrap_or_else(|p| {
        Err(WeirError::internal(format!(
            "internal error in a parallel job: {}",
            panic_message(&p)
        )))
    })
}

/// The message of a caught panic.
pub fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_borrow_and_return_in_order_and_a_panic_is_an_error() {
        let data = [1u64, 2, 3, 4];
        let jobs: Vec<Job<'_, u64>> = data
            .iter()
            .map(|x| Box::new(move || Ok(x * 10)) as Job<'_, u64>)
            .collect();
        let out: Vec<u64> = run_all(Pool::Shards, jobs)
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(out, vec![10, 20, 30, 40]);
        let jobs: Vec<Job<'_, u64>> =
            vec![Box::new(|| Ok(1)), Box::new(|| panic!("shard blew up"))];
        let out = run_all(Pool::Sources, jobs);
        assert_eq!(*out[0].as_ref().unwrap(), 1);
        assert!(
            out[1]
                .as_ref()
                .unwrap_err()
                .message
                .contains("shard blew up")
        );
    }
}
