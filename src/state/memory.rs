//! The process's memory budget (`weir serve --memory-limit`): one sampler thread reads the
//! process's resident set size every [`SAMPLE_EVERY`] and says whether it is over the
//! limit; what grows memory — sources handing batches to views, INSERT and COPY into tables
//! (whose rows go to the store, but whose changes feed views) — waits while it is
//! (backpressure), instead of the process growing into an out-of-memory kill. Reads, DDL
//! (a DROP frees memory) and checkpoints go on.
//!
//! Reaching the limit first drops what can be rebuilt on demand (registered with
//! [`MemoryBudget::on_limit`]: views' snapshot caches); only if that does not
//! bring memory under the limit do writers wait.
//!
//! The check is one atomic load (no lock per batch or row). Over the limit is entered at
//! the limit and left below it by [`HYSTERESIS`] of it, so writers do not flap around it.
//!
//! Views' state spills (`state/spill.rs`): the dataflow worker keeps the state tables
//! within their budget and, while the process is over the limit (it is woken by
//! [`MemoryBudget::while_over`]), spills more. What cannot spill (aggregates' groups,
//! views' contents) holds the writers paused until memory is freed (a view dropped,
//! windows closed).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// How often the resident set size is read.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(50);
/// Writers resume once memory is this fraction of the limit below it.
pub const HYSTERESIS: f64 = 0.05;
/// The default limit: this fraction of the cgroup's or the machine's memory.
pub const DEFAULT_FRACTION: f64 = 0.7;
/// Once views' state has all spilled, writers go on over the limit up to this much above
/// it (waiting could not free anything more).
pub const SPILLED_SLACK: f64 = 0.25;
/// Above this fraction of the limit, freed memory goes back to the system at once (see
/// [`eager_purge`]); below [`LAZY_PURGE_BELOW`], as mimalloc does by default.
pub const EAGER_PURGE_ABOVE: f64 = 0.7;
pub const LAZY_PURGE_BELOW: f64 = 0.5;

pub struct MemoryBudget {
    /// Bytes; u64::MAX: no limit.
    limit: u64,
    rss: AtomicU64,
    over: AtomicBool,
    /// Set by the dataflow worker: over the limit, views' state has all spilled (what holds
    /// the memory cannot spill). Writers then go on up to [`SPILLED_SLACK`] above the
    /// limit instead of waiting for memory that nothing will free.
    spilled_all: AtomicBool,
    /// Set by the dataflow worker: views' state has all spilled and what views hold that
    /// cannot spill is small (a tenth of the limit): the process is over its limit by
    /// memory that is not views' (caches, buffers, what the allocator keeps), which no wait
    /// frees. Writers go on.
    not_views: AtomicBool,
    /// Times writers found the budget over the limit and waited (for `weir_memory`).
    pauses: AtomicU64,
    /// Near the limit: freed pages are purged at once (see [`eager_purge`]).
    eager: AtomicBool,
    /// What can be dropped and rebuilt on demand (views' snapshot caches),
    /// asked to free its memory when the limit is reached, before anyone waits long.
    reclaimers: parking_lot::Mutex<Vec<Reclaimer>>,
    /// Told at every sample while over the limit (the dataflow worker, which spills
    /// state, is woken this way when paused sources send it nothing).
    while_over: parking_lot::Mutex<Vec<Box<dyn Fn() + Send + Sync>>>,
}

/// Frees what it can and says how many bytes.
pub type Reclaimer = Box<dyn Fn() -> usize + Send + Sync>;

impl MemoryBudget {
    /// No limit (embedded engines, unit tests): nothing ever waits.
    pub fn unlimited() -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit: u64::MAX,
            rss: AtomicU64::new(0),
            over: AtomicBool::new(false),
            spilled_all: AtomicBool::new(false),
            not_views: AtomicBool::new(false),
            pauses: AtomicU64::new(0),
            eager: AtomicBool::new(false),
            reclaimers: parking_lot::Mutex::new(Vec::new()),
            while_over: parking_lot::Mutex::new(Vec::new()),
        })
    }

    /// A budget of `limit` bytes, sampled by a thread of its own.
    pub fn start(limit: u64) -> Arc<MemoryBudget> {
        let b = Arc::new(MemoryBudget {
            limit,
            rss: AtomicU64::new(resident_bytes().unwrap_or(0)),
            over: AtomicBool::new(false),
            spilled_all: AtomicBool::new(false),
            not_views: AtomicBool::new(false),
            pauses: AtomicU64::new(0),
            eager: AtomicBool::new(false),
            reclaimers: parking_lot::Mutex::new(Vec::new()),
            while_over: parking_lot::Mutex::new(Vec::new()),
        });
        let weak = Arc::downgrade(&b);
        let spawned = std::thread::Builder::new()
            .name("weir-memory".into())
            .spawn(move || {
                while let Some(b) = weak.upgrade() {
                    b.sample();
                    drop(b);
                    std::thread::sleep(SAMPLE_EVERY);
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the memory sampler; --memory-limit is not enforced");
        }
        b
    }

    fn sample(&self) {
        let Some(rss) = resident_bytes() else {
            return;
        };
        self.rss.store(rss, Ordering::Release);
        let eager = self.eager.load(Ordering::Acquire);
        if !eager && rss as f64 >= self.limit as f64 * EAGER_PURGE_ABOVE {
            self.eager.store(true, Ordering::Release);
            eager_purge(true);
        } else if eager && (rss as f64) < self.limit as f64 * LAZY_PURGE_BELOW {
            self.eager.store(false, Ordering::Release);
            eager_purge(false);
        }
        let was = self.over.load(Ordering::Acquire);
        let resume_below = self.limit as f64 * (1.0 - HYSTERESIS);
        let now = if was {
            (rss as f64) >= resume_below
        } else {
            rss >= self.limit
        };
        if now && !was {
            // what threads freed and the allocator still holds goes back first
            give_back_freed();
            // caches next: they are rebuilt on demand
            let freed: usize = self.reclaimers.lock().iter().map(|r| r()).sum();
            if freed > 0 {
                tracing::info!(freed = %crate::limits::format_size(freed), "memory limit reached: snapshot caches dropped");
                if let Some(rss) = resident_bytes() {
                    self.rss.store(rss, Ordering::Release);
                    if rss < self.limit {
                        return;
                    }
                }
            }
        }
        if now {
            for f in self.while_over.lock().iter() {
                f();
            }
        }
        if now != was {
            self.over.store(now, Ordering::Release);
            if now {
                tracing::warn!(
                    rss = %crate::limits::format_size(rss as usize),
                    limit = %crate::limits::format_size(self.limit as usize),
                    "memory limit reached: sources and writers pause until memory is freed"
                );
            } else {
                tracing::info!(
                    rss = %crate::limits::format_size(rss as usize),
                    "memory below the limit again: sources and writers go on"
                );
            }
        }
    }

    /// Register something to tell at every sample while over the limit.
    pub fn while_over(&self, f: Box<dyn Fn() + Send + Sync>) {
        self.while_over.lock().push(f);
    }

    /// Register something to drop when the limit is reached.
    pub fn on_limit(&self, r: Reclaimer) {
        self.reclaimers.lock().push(r);
    }

    /// Whether the process is over its limit (as last sampled, with the hysteresis).
    pub fn over(&self) -> bool {
        self.over.load(Ordering::Acquire)
    }

    /// Whether a writer must wait now — a source handing rows to views, an INSERT or a
    /// COPY (tables keep their rows in the store: what they add to memory is what the views
    /// over them add): over the limit, unless views' state has all spilled and the process
    /// is within [`SPILLED_SLACK`] of it (the state a writer adds spills at once; waiting
    /// would not free anything).
    pub fn must_wait(&self) -> bool {
        self.over.load(Ordering::Acquire)
            && !self.not_views.load(Ordering::Acquire)
            && !(self.spilled_all.load(Ordering::Acquire)
                && (self.rss.load(Ordering::Acquire) as f64)
                    < self.limit as f64 * (1.0 + SPILLED_SLACK))
    }

    /// Whether the process is over its limit (whatever writers do about it).
    pub fn over_limit(&self) -> bool {
        self.over.load(Ordering::Acquire)
    }

    /// The dataflow worker: whether views' state has all spilled, and whether what views
    /// hold that cannot spill is small (see `spilled_all`, `not_views`).
    pub fn set_spilled_all(&self, all: bool, not_views: bool) {
        let was_not_views = self.not_views.swap(not_views, Ordering::AcqRel);
        if self.spilled_all.swap(all, Ordering::AcqRel) != all && all && !not_views {
            tracing::warn!(
                rss = %crate::limits::format_size(self.resident() as usize),
                limit = %crate::limits::format_size(self.limit as usize),
                "over the memory limit with views' state spilled: the rest cannot spill; \
                 sources and writers go on up to 25% over the limit"
            );
        }
        static TOLD: AtomicBool = AtomicBool::new(false);
        if not_views && !was_not_views && !TOLD.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                rss = %crate::limits::format_size(self.resident() as usize),
                limit = %crate::limits::format_size(self.limit as usize),
                "over the memory limit, but not by views' state (it has spilled): sources \
                 and writers go on; the limit may be too small for this server (logged once)"
            );
        }
    }

    pub fn limit(&self) -> Option<u64> {
        (self.limit != u64::MAX).then_some(self.limit)
    }

    /// The resident set size as last sampled.
    pub fn resident(&self) -> u64 {
        self.rss.load(Ordering::Acquire)
    }

    pub fn pauses(&self) -> u64 {
        self.pauses.load(Ordering::Acquire)
    }

    /// A source thread: wait while over the limit (`paused` is told once when a wait
    /// begins); false when `stop` was set meanwhile.
    pub fn wait_blocking(&self, stop: &AtomicBool, paused: impl FnOnce()) -> bool {
        if !self.must_wait() {
            return true;
        }
        self.pauses.fetch_add(1, Ordering::AcqRel);
        paused();
        while self.must_wait() {
            if stop.load(Ordering::Acquire) {
                return false;
            }
            // what this thread allocated and others freed meanwhile (its batches, freed by
            // the dataflow thread) is returned only by this thread: do it while waiting
            give_back_freed();
            std::thread::sleep(SAMPLE_EVERY);
        }
        true
    }

    /// A statement that adds rows: wait while [`must_wait`](Self::must_wait); `check` is
    /// called between waits (a cancelled statement stops waiting with its error).
    pub async fn wait<E>(&self, mut check: impl FnMut() -> Result<(), E>) -> Result<(), E> {
        if !self.must_wait() {
            return Ok(());
        }
        self.pauses.fetch_add(1, Ordering::AcqRel);
        while self.must_wait() {
            check()?;
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
        Ok(())
    }
}

/// Stop the process from getting transparent huge pages. mimalloc asks for them on its
/// arena (`MADV_HUGEPAGE`, before `main` runs); with them, freed memory stayed resident in
/// 2 MiB pages: at a 128 MiB limit 110 MiB of the resident set were huge pages while the
/// views held 30 MiB, and spilling state could not bring the process under its limit.
/// `PR_SET_THP_DISABLE` is the process-wide switch (it also covers mappings advised
/// before). Called once at start.
pub fn no_huge_pages() {
    // SAFETY: prctl with PR_SET_THP_DISABLE only sets a flag of this process
    let r = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if r != 0 {
        tracing::debug!("PR_SET_THP_DISABLE failed: transparent huge pages stay as configured");
    }
}

/// mimalloc's `mi_option_purge_delay` (its index in `mi_option_t`; the same in mimalloc 2
/// and 3, which libmimalloc-sys builds by default).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// The purge delay mimalloc started with (1000 ms in mimalloc 3, unless
/// `MIMALLOC_PURGE_DELAY` says otherwise), restored below the limit.
static LAZY_PURGE_DELAY: std::sync::OnceLock<std::os::raw::c_long> = std::sync::OnceLock::new();

fn purge_delay() -> std::os::raw::c_long {
    // SAFETY: reading an option; any thread may do it
    unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) }
}

/// Whether pages a thread frees go back to the system at once (`true`) or after mimalloc's
/// delay. The delay saves system calls, but a delayed purge happens only when the freeing
/// thread allocates or frees again: a thread that goes idle (a blocking-pool thread after a
/// COPY chunk, a connection's task) keeps its freed pages resident, measured at 30-60 MiB
/// after one 8 MiB COPY (mimalloc 3 delays purges by a second). Near the limit that is memory writers wait for, so the budget
/// turns purging eager there and lazy again well below it.
pub fn eager_purge(on: bool) {
    let lazy = *LAZY_PURGE_DELAY.get_or_init(purge_delay);
    // 1 ms, not 0: mimalloc 3 skips its pass over the purges already scheduled when the
    // delay is 0, so what was freed before the switch would stay resident
    let delay = if on { EAGER_PURGE_DELAY_MS } else { lazy };
    // SAFETY: setting an option is a store to mimalloc's option table; any thread may do it
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, delay) };
    if on {
        // purge now what was scheduled under the long delay (a forced collection purges
        // every arena's scheduled ranges, whichever thread freed them)
        give_back_freed();
    }
}

/// The purge delay near the limit (mimalloc multiplies it by 10 for its arenas).
const EAGER_PURGE_DELAY_MS: std::os::raw::c_long = 1;

/// Give memory this thread freed back to the system now (mimalloc keeps freed pages a
/// while otherwise: after a DROP the process stayed over its limit for seconds).
pub fn give_back_freed() {
    // SAFETY: mi_collect only walks the calling thread's heap; no preconditions
    unsafe { libmimalloc_sys::mi_collect(true) };
}

/// The default `--memory-limit`: [`DEFAULT_FRACTION`] of the cgroup's memory limit when one
/// is set, else of the machine's memory; with where it came from.
pub fn default_limit() -> Option<(u64, &'static str)> {
    if let Some(c) = cgroup_limit() {
        return Some((
            (c as f64 * DEFAULT_FRACTION) as u64,
            "of the cgroup's memory limit",
        ));
    }
    physical_memory().map(|m| {
        (
            (m as f64 * DEFAULT_FRACTION) as u64,
            "of the machine's memory",
        )
    })
}

/// cgroup v2 `memory.max`, or v1 `memory.limit_in_bytes` (a huge value there: no limit).
fn cgroup_limit() -> Option<u64> {
    let physical = physical_memory().unwrap_or(u64::MAX);
    for path in [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ] {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(v) = text.trim().parse::<u64>()
            && v < physical
        {
            return Some(v);
        }
    }
    None
}

/// `MemTotal` of `/proc/meminfo`, bytes.
fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The memory the process holds: its anonymous resident memory plus shared memory
/// (`RssAnon` + `RssShmem` of `/proc/self/status`), bytes. The resident pages of the
/// binary itself (`RssFile`: code, clean and reclaimable by the kernel; 60 MiB for a debug
/// build) are not counted: they are not what a limit on the server's memory is about, and
/// spilling cannot shrink them.
pub fn resident_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    };
    Some(field("RssAnon:")? + field("RssShmem:").unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Also: near the limit, freed pages are purged at once (the option index names
    /// mimalloc's purge delay: mimalloc 3's default is 1000 ms, and it is restored). One
    /// test, as the option is process-wide.
    #[test]
    fn over_the_limit_writers_wait_until_memory_falls_below_it() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(purge_delay(), 1000);
        }
        let lazy = purge_delay();
        let b = MemoryBudget::unlimited();
        assert!(!b.over());
        let stop = AtomicBool::new(false);
        assert!(b.wait_blocking(&stop, || panic!("no wait without a limit")));
        // a limit far below what this process holds: over at the first sample
        let tight = MemoryBudget::start(1 << 20);
        std::thread::sleep(SAMPLE_EVERY * 3);
        assert!(tight.over(), "resident {} bytes", tight.resident());
        assert_eq!(
            purge_delay(),
            EAGER_PURGE_DELAY_MS,
            "eager purging near the limit"
        );
        stop.store(true, Ordering::Release);
        let mut told = false;
        assert!(
            !tight.wait_blocking(&stop, || told = true),
            "stopped while waiting"
        );
        assert!(told);
        assert_eq!(tight.pauses(), 1);
        // far above: never over
        let roomy = MemoryBudget::start(1 << 50);
        std::thread::sleep(SAMPLE_EVERY * 2);
        assert!(!roomy.over());
        assert!(roomy.resident() > 0);
        assert!(default_limit().is_some_and(|(l, _)| l > 0));
        drop(tight);
        eager_purge(false);
        assert_eq!(purge_delay(), lazy);
    }
}
