//! Measuring: a closed-loop load driver with latency percentiles, and CPU / memory readings of the
//! server process from `/proc`.

use std::future::Future;
use std::time::{Duration, Instant};

/// What one measured run produced.
#[derive(Debug, Default, Clone)]
pub(crate) struct Measurement {
    pub(crate) elapsed: Duration,
    pub(crate) ops: u64,
    pub(crate) entities: u64,
    /// Extra per-run figure (entities examined, conflicts), when the workload has one.
    pub(crate) extra: u64,
    pub(crate) latencies_us: Vec<u32>,
}

impl Measurement {
    pub(crate) fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    pub(crate) fn entities_per_s(&self) -> f64 {
        self.entities as f64 / self.elapsed.as_secs_f64()
    }

    pub(crate) fn extra_per_s(&self) -> f64 {
        self.extra as f64 / self.elapsed.as_secs_f64()
    }

    /// This run and `other` as one: their operations over their time together.
    pub(crate) fn merged(mut self, other: Measurement) -> Measurement {
        self.elapsed += other.elapsed;
        self.ops += other.ops;
        self.entities += other.entities;
        self.extra += other.extra;
        self.latencies_us.extend(other.latencies_us);
        self
    }

    /// The `q` quantile latency in milliseconds.
    pub(crate) fn percentile_ms(&mut self, q: f64) -> Option<f64> {
        if self.latencies_us.is_empty() {
            return None;
        }
        self.latencies_us.sort_unstable();
        let index =
            ((self.latencies_us.len() as f64 * q) as usize).min(self.latencies_us.len() - 1);
        Some(f64::from(self.latencies_us[index]) / 1000.0)
    }
}

/// What one operation did: entities moved and an extra count (conflicts, examined entities).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct OpResult {
    pub(crate) entities: u64,
    pub(crate) extra: u64,
}

impl OpResult {
    /// An operation that moved `entities` entities and has no extra count.
    pub(crate) fn entities(entities: u64) -> OpResult {
        OpResult { entities, extra: 0 }
    }
}

/// Runs `concurrency` workers, each calling `op(worker, sequence)` back to back, for `warmup` and
/// then for `duration`; only the second period is measured.
pub(crate) async fn drive<F, Fut>(
    concurrency: usize,
    warmup: Duration,
    duration: Duration,
    op: F,
) -> Measurement
where
    F: Fn(usize, u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = OpResult> + Send,
{
    let started = Instant::now();
    let measure_from = started + warmup;
    let stop_at = measure_from + duration;
    let mut workers = Vec::new();
    for worker in 0..concurrency {
        let op = op.clone();
        workers.push(tokio::spawn(async move {
            let mut m = Measurement::default();
            for sequence in 0u64.. {
                let begun = Instant::now();
                if begun >= stop_at {
                    break;
                }
                let result = op(worker, sequence).await;
                if begun >= measure_from {
                    m.ops += 1;
                    m.entities += result.entities;
                    m.extra += result.extra;
                    m.latencies_us
                        .push(begun.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
                }
            }
            m
        }));
    }
    let mut total = Measurement::default();
    for worker in workers {
        let m = worker.await.expect("worker");
        total.ops += m.ops;
        total.entities += m.entities;
        total.extra += m.extra;
        total.latencies_us.extend(m.latencies_us);
    }
    total.elapsed = duration;
    total
}

/// CPU time and resident memory of a process, from `/proc`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProcessSample {
    at: Instant,
    cpu_ticks: u64,
    pub(crate) rss_bytes: u64,
}

impl ProcessSample {
    pub(crate) fn take(pid: u32) -> Option<ProcessSample> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let cpu_ticks =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let rss_kib: u64 = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some(ProcessSample {
            at: Instant::now(),
            cpu_ticks,
            rss_bytes: rss_kib * 1024,
        })
    }

    /// Cores used between `earlier` and `self` (clock ticks are 1/100 s on Linux).
    pub(crate) fn cores_since(&self, earlier: &ProcessSample) -> f64 {
        let cpu_seconds = (self.cpu_ticks - earlier.cpu_ticks) as f64 / 100.0;
        cpu_seconds / self.at.duration_since(earlier.at).as_secs_f64()
    }
}

/// A small deterministic random generator for keys (xorshift64*).
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}
