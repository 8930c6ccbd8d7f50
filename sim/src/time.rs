//! Virtual time and each node's drifting clock.
//!
//! The simulator keeps one global virtual time, a [`Duration`] since the start of the run. Each node
//! reads its own monotonic clock, which runs at `1 + drift_ppm / 10⁶` times the global rate, and
//! its own wall clock, offset from the global one (the core uses wall time only to age tombstones).
//! The core is handed `Instant`s: a base instant taken once per run plus the node's local elapsed
//! time. Only differences between instants matter to the core, so the base does not make a run
//! depend on when it was started.

use std::time::Duration;

const MILLION: u128 = 1_000_000;

/// A node's monotonic clock: local elapsed time as a function of global time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    /// Parts per million by which the node's clock runs fast (positive) or slow (negative).
    drift_ppm: i32,
}

impl Clock {
    /// The largest drift accepted, ±50 %, so the local clock always moves forward.
    pub const MAX_DRIFT_PPM: i32 = 500_000;

    /// A clock that runs `drift_ppm` parts per million fast (or slow when negative).
    ///
    /// # Panics
    /// When `|drift_ppm|` exceeds [`Clock::MAX_DRIFT_PPM`].
    pub fn new(drift_ppm: i32) -> Self {
        assert!(drift_ppm.abs() <= Self::MAX_DRIFT_PPM, "drift {drift_ppm} ppm out of range");
        Self { drift_ppm }
    }

    /// A clock without drift.
    pub fn exact() -> Self {
        Self::new(0)
    }

    /// The drift in parts per million.
    pub fn drift_ppm(self) -> i32 {
        self.drift_ppm
    }

    fn rate(self) -> u128 {
        // In range by construction: 500_000 ..= 1_500_000.
        (1_000_000_i64 + i64::from(self.drift_ppm)).unsigned_abs().into()
    }

    /// The local elapsed time at global time `global` (rounded down to the nanosecond).
    pub fn local(self, global: Duration) -> Duration {
        let nanos = global.as_nanos() * self.rate() / MILLION;
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The earliest global time at which the local clock reads at least `local`.
    pub fn global_at(self, local: Duration) -> Duration {
        let rate = self.rate();
        let mut nanos = (local.as_nanos() * MILLION).div_ceil(rate);
        // Rounding in `local` may need one more nanosecond.
        while nanos * rate / MILLION < local.as_nanos() {
            nanos += 1;
        }
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exact_clock_reads_global_time() {
        let c = Clock::exact();
        let t = Duration::from_millis(1234);
        assert_eq!(c.local(t), t);
        assert_eq!(c.global_at(t), t);
    }

    #[test]
    fn a_fast_clock_reaches_a_local_deadline_early_and_never_before_it() {
        for ppm in [-499_999, -20_000, -1, 1, 7, 1000, 333_333] {
            let c = Clock::new(ppm);
            for ms in [0u64, 1, 999, 1000, 123_457, 3_600_000] {
                let local = Duration::from_nanos(ms * 1_000_003 + 17);
                let g = c.global_at(local);
                assert!(c.local(g) >= local, "ppm {ppm}: local({g:?}) < {local:?}");
                if g > Duration::ZERO {
                    assert!(
                        c.local(g - Duration::from_nanos(1)) < local,
                        "ppm {ppm}: not earliest"
                    );
                }
            }
        }
    }
}
