//! The phi-accrual failure detector that decides whether a heartbeating peer is still alive.
//!
//! Instead of a yes/no timeout, the detector keeps a window of heartbeat inter-arrival times and turns
//! the time since the last heartbeat into a suspicion level φ = −log10(P(a heartbeat is still this
//! late)), using a normal distribution fitted to the window. A node counts as available while
//! φ < threshold. With the defaults (threshold 8, 3 s acceptable pause, 1 s heartbeats) a peer that
//! stops heartbeating is suspected after about 4.5 to 5.3 s, depending on how regular its heartbeats
//! were.
//!
//! Time is passed in by the caller and measured in whole milliseconds, as in the reference
//! implementation: sub-millisecond jitter never changes a decision.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Tuning of a [`PhiAccrualFailureDetector`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PhiSettings {
    /// φ at or above which the monitored node counts as unavailable. Must be positive.
    pub threshold: f64,
    /// How many inter-arrival intervals the history keeps; the oldest is dropped first. At least 1.
    pub max_sample_size: usize,
    /// Floor of the standard deviation, so that very regular heartbeats do not make the detector
    /// jumpy. Must be positive.
    pub min_std_deviation: Duration,
    /// A pause in heartbeats that is still tolerated: added to the mean interval.
    pub acceptable_heartbeat_pause: Duration,
    /// The expected heartbeat interval, used to seed the history at the first heartbeat. Must be
    /// positive; normally the heartbeat interval.
    pub first_heartbeat_estimate: Duration,
}

impl Default for PhiSettings {
    fn default() -> Self {
        Self {
            threshold: 8.0,
            max_sample_size: 1000,
            min_std_deviation: Duration::from_millis(100),
            acceptable_heartbeat_pause: Duration::from_secs(3),
            first_heartbeat_estimate: Duration::from_secs(1),
        }
    }
}

impl PhiSettings {
    /// Checks the constraints documented on each field.
    ///
    /// # Errors
    /// Names the first field whose value the detector cannot work with.
    pub fn validate(&self) -> Result<(), PhiSettingsError> {
        if self.threshold.is_nan() || self.threshold <= 0.0 {
            return Err(PhiSettingsError::Threshold(self.threshold));
        }
        if self.max_sample_size == 0 {
            return Err(PhiSettingsError::MaxSampleSize);
        }
        if self.min_std_deviation.is_zero() {
            return Err(PhiSettingsError::MinStdDeviation);
        }
        if self.first_heartbeat_estimate.as_millis() == 0 {
            return Err(PhiSettingsError::FirstHeartbeatEstimate);
        }
        Ok(())
    }
}

/// Why [`PhiSettings`] cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PhiSettingsError {
    /// The threshold is zero, negative or NaN.
    #[error("failure detector threshold must be > 0, got {0}")]
    Threshold(f64),
    /// The history could hold no interval.
    #[error("failure detector max_sample_size must be >= 1")]
    MaxSampleSize,
    /// A zero floor would divide by zero for perfectly regular heartbeats.
    #[error("failure detector min_std_deviation must be > 0")]
    MinStdDeviation,
    /// The bootstrap history needs an interval of at least one millisecond.
    #[error("failure detector first_heartbeat_estimate must be >= 1ms")]
    FirstHeartbeatEstimate,
}

/// A phi-accrual failure detector for one monitored node.
///
/// Feed it [`heartbeat`](Self::heartbeat) on every heartbeat response and ask
/// [`is_available`](Self::is_available) or [`phi`](Self::phi). A detector that has never seen a
/// heartbeat is not monitoring and reports φ = 0 (available).
#[derive(Clone, Debug)]
pub struct PhiAccrualFailureDetector {
    settings: PhiSettings,
    history: IntervalHistory,
    last: Option<Instant>,
}

impl PhiAccrualFailureDetector {
    /// A detector that has seen no heartbeat yet. Settings are expected to pass
    /// [`PhiSettings::validate`]; a zero sample size is treated as 1.
    pub fn new(settings: PhiSettings) -> Self {
        Self { settings, history: IntervalHistory::new(settings.max_sample_size), last: None }
    }

    /// The settings this detector was built with.
    pub fn settings(&self) -> &PhiSettings {
        &self.settings
    }

    /// Records a heartbeat that arrived at `now`.
    ///
    /// The first heartbeat seeds the history with two intervals around the first-heartbeat estimate
    /// (`m − m/4` and `m + m/4`). Later heartbeats record the interval since the previous one, except
    /// when the node was already suspected at arrival (φ ≥ threshold): the long gap of a failure would
    /// skew the statistics.
    pub fn heartbeat(&mut self, now: Instant) {
        match self.last {
            None => self.history = self.bootstrap_history(),
            Some(last) => {
                if self.is_available(now) {
                    self.history.push(millis_between(last, now));
                }
            }
        }
        self.last = Some(now);
    }

    /// The suspicion level at `now`: 0.0 before the first heartbeat, log10(2) ≈ 0.30 when exactly the
    /// expected time (mean interval plus acceptable pause) has passed, growing without bound after.
    pub fn phi(&self, now: Instant) -> f64 {
        let Some(last) = self.last else {
            return 0.0;
        };
        self.phi_after(millis_between(last, now))
    }

    /// Whether the node counts as alive at `now`: φ below the threshold.
    pub fn is_available(&self, now: Instant) -> bool {
        self.phi(now) < self.settings.threshold
    }

    /// Whether at least one heartbeat has been recorded.
    pub fn is_monitoring(&self) -> bool {
        self.last.is_some()
    }

    /// The time since the last heartbeat, in whole milliseconds, at which φ first reaches
    /// `threshold` given the current history; `None` when not monitoring or when φ never gets there
    /// (a NaN or infinite threshold). Found by bisection, since φ grows monotonically with the gap.
    pub fn time_to_reach(&self, threshold: f64) -> Option<Duration> {
        self.last?;
        let reaches = |ms: u64| self.phi_after(ms) >= threshold;
        if reaches(0) {
            return Some(Duration::ZERO);
        }
        // φ overflows to infinity within a few hundred standard deviations, so doubling ends fast.
        let mut hi: u64 = 1;
        while !reaches(hi) {
            if hi >= u64::MAX / 2 {
                return None;
            }
            hi *= 2;
        }
        let mut lo = hi / 2; // invariant: !reaches(lo) && reaches(hi)
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if reaches(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(Duration::from_millis(hi))
    }

    fn phi_after(&self, delta_ms: u64) -> f64 {
        let mean =
            self.history.mean() + self.settings.acceptable_heartbeat_pause.as_secs_f64() * 1e3;
        let std_deviation =
            self.history.std_deviation().max(self.settings.min_std_deviation.as_secs_f64() * 1e3);
        phi_of(delta_ms as f64, mean, std_deviation)
    }

    fn bootstrap_history(&self) -> IntervalHistory {
        let mean = saturating_millis(self.settings.first_heartbeat_estimate);
        let std_deviation = mean / 4;
        let mut history = IntervalHistory::new(self.settings.max_sample_size);
        history.push(mean - std_deviation);
        history.push(mean + std_deviation);
        history
    }
}

/// φ for a gap of `delta` when gaps are normally distributed with `mean` and `std_deviation`,
/// using the logistic approximation of the normal CDF. Both branches are the same function; each is
/// the numerically stable form on its side of the mean.
fn phi_of(delta: f64, mean: f64, std_deviation: f64) -> f64 {
    let y = (delta - mean) / std_deviation;
    let e = (-y * (1.5976 + 0.070566 * y * y)).exp();
    let phi =
        if delta > mean { -(e / (1.0 + e)).log10() } else { -(1.0 - 1.0 / (1.0 + e)).log10() };
    // −log10(1.0) is −0.0; report a plain zero.
    if phi <= 0.0 { 0.0 } else { phi }
}

fn millis_between(earlier: Instant, later: Instant) -> u64 {
    saturating_millis(later.saturating_duration_since(earlier))
}

fn saturating_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The last `max_sample_size` inter-arrival intervals in ms, with running integer sums so that mean
/// and variance cost O(1).
#[derive(Clone, Debug)]
struct IntervalHistory {
    max_sample_size: usize,
    intervals: VecDeque<u64>,
    sum: u128,
    sum_of_squares: u128,
}

impl IntervalHistory {
    fn new(max_sample_size: usize) -> Self {
        Self {
            max_sample_size: max_sample_size.max(1),
            intervals: VecDeque::new(),
            sum: 0,
            sum_of_squares: 0,
        }
    }

    /// Appends an interval, dropping the oldest when full. Intervals are capped at `u32::MAX` ms
    /// (about 49 days) so that the sum of squares fits in a `u128` for any sample size.
    fn push(&mut self, interval: u64) {
        let interval = interval.min(u64::from(u32::MAX));
        while self.intervals.len() >= self.max_sample_size {
            let Some(oldest) = self.intervals.pop_front() else { break };
            self.sum -= u128::from(oldest);
            self.sum_of_squares -= u128::from(oldest) * u128::from(oldest);
        }
        self.intervals.push_back(interval);
        self.sum += u128::from(interval);
        self.sum_of_squares += u128::from(interval) * u128::from(interval);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.intervals.len()
    }

    fn mean(&self) -> f64 {
        if self.intervals.is_empty() {
            return 0.0;
        }
        self.sum as f64 / self.intervals.len() as f64
    }

    /// Population variance.
    fn variance(&self) -> f64 {
        if self.intervals.is_empty() {
            return 0.0;
        }
        let mean = self.mean();
        // Rounding can push a true zero slightly negative; the square root of that would be NaN.
        (self.sum_of_squares as f64 / self.intervals.len() as f64 - mean * mean).max(0.0)
    }

    fn std_deviation(&self) -> f64 {
        self.variance().sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::disallowed_methods, reason = "tests need a base instant; only offsets matter")]
    fn t0() -> Instant {
        Instant::now()
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The settings of the reference spec's test detector: no acceptable pause, 10 ms floor.
    fn spec_settings() -> PhiSettings {
        PhiSettings {
            threshold: 8.0,
            max_sample_size: 1000,
            min_std_deviation: ms(10),
            acceptable_heartbeat_pause: Duration::ZERO,
            first_heartbeat_estimate: Duration::from_secs(1),
        }
    }

    /// The normal CDF value a φ stands for.
    fn cdf(phi: f64) -> f64 {
        1.0 - 10f64.powf(-phi)
    }

    fn assert_close(actual: f64, expected: f64, tolerance: f64) {
        assert!(
            (actual - expected).abs() <= tolerance,
            "{actual} is not within {tolerance} of {expected}"
        );
    }

    /// Feeds heartbeats at the given cumulative offsets from `start`.
    fn feed(fd: &mut PhiAccrualFailureDetector, start: Instant, offsets_ms: &[u64]) {
        for &o in offsets_ms {
            fd.heartbeat(start + ms(o));
        }
    }

    #[test]
    fn default_settings_are_the_reference_defaults() {
        let s = PhiSettings::default();
        assert_eq!(s.threshold, 8.0);
        assert_eq!(s.max_sample_size, 1000);
        assert_eq!(s.min_std_deviation, ms(100));
        assert_eq!(s.acceptable_heartbeat_pause, Duration::from_secs(3));
        assert_eq!(s.first_heartbeat_estimate, Duration::from_secs(1));
        assert_eq!(s.validate(), Ok(()));
    }

    #[test]
    fn settings_the_detector_cannot_work_with_are_rejected() {
        let ok = PhiSettings::default();
        assert!(matches!(
            PhiSettings { threshold: 0.0, ..ok }.validate(),
            Err(PhiSettingsError::Threshold(_))
        ));
        assert!(matches!(
            PhiSettings { threshold: f64::NAN, ..ok }.validate(),
            Err(PhiSettingsError::Threshold(_))
        ));
        assert_eq!(
            PhiSettings { max_sample_size: 0, ..ok }.validate(),
            Err(PhiSettingsError::MaxSampleSize)
        );
        assert_eq!(
            PhiSettings { min_std_deviation: Duration::ZERO, ..ok }.validate(),
            Err(PhiSettingsError::MinStdDeviation)
        );
        assert_eq!(
            PhiSettings { first_heartbeat_estimate: Duration::from_micros(10), ..ok }.validate(),
            Err(PhiSettingsError::FirstHeartbeatEstimate)
        );
    }

    #[test]
    fn the_logistic_approximation_is_a_good_enough_normal_cdf() {
        assert_close(cdf(phi_of(0.0, 0.0, 10.0)), 0.5, 0.001);
        assert_close(cdf(phi_of(6.0, 0.0, 10.0)), 0.7257, 0.001);
        assert_close(cdf(phi_of(15.0, 0.0, 10.0)), 0.9332, 0.001);
        assert_close(cdf(phi_of(20.0, 0.0, 10.0)), 0.97725, 0.001);
        assert_close(cdf(phi_of(25.0, 0.0, 10.0)), 0.99379, 0.001);
        assert_close(cdf(phi_of(35.0, 0.0, 10.0)), 0.99977, 0.001);
        assert_close(cdf(phi_of(40.0, 0.0, 10.0)), 0.99997, 0.0001);
        assert_close(cdf(phi_of(-25.0, 0.0, 10.0)), 0.00621, 0.001);
    }

    #[test]
    fn phi_is_monotonic_in_the_gap_across_both_branches() {
        let mut previous = -1.0;
        for delta in 0..=4000 {
            let phi = phi_of(f64::from(delta) / 100.0, 20.0, 10.0);
            assert!(phi >= previous, "phi dropped at {delta}: {phi} < {previous}");
            previous = phi;
        }
    }

    #[test]
    fn outliers_give_finite_or_zero_phi_without_nan() {
        assert_close(phi_of(10.0, 0.0, 1.0), 38.0, 1.0);
        assert_eq!(phi_of(-25.0, 0.0, 1.0), 0.0);
        assert_eq!(phi_of(1e12, 0.0, 1.0), f64::INFINITY);
        assert_eq!(phi_of(-1e12, 0.0, 1.0), 0.0);
    }

    #[test]
    fn phi_values_are_realistic_for_mean_1000_and_deviation_100() {
        for (delta, expected) in [
            (0.0, 0.0),
            (500.0, 0.1),
            (1000.0, 0.3),
            (1200.0, 1.6),
            (1400.0, 4.7),
            (1600.0, 10.8),
            (1700.0, 15.3),
        ] {
            assert_close(phi_of(delta, 1000.0, 100.0), expected, 0.1);
        }
    }

    #[test]
    fn phi_is_zero_and_the_node_available_before_the_first_heartbeat() {
        let fd = PhiAccrualFailureDetector::new(PhiSettings::default());
        let t = t0();
        assert!(!fd.is_monitoring());
        assert_eq!(fd.phi(t), 0.0);
        assert_eq!(fd.phi(t + Duration::from_secs(3600)), 0.0);
        assert!(fd.is_available(t + Duration::from_secs(3600)));
        assert_eq!(fd.time_to_reach(8.0), None);
    }

    #[test]
    fn phi_after_one_heartbeat_is_based_on_the_first_heartbeat_estimate() {
        let mut fd = PhiAccrualFailureDetector::new(spec_settings());
        let t = t0();
        fd.heartbeat(t);
        assert!(fd.is_monitoring());
        assert_close(fd.phi(t + ms(1000)), 0.3, 0.2);
        assert_close(fd.phi(t + ms(2000)), 4.5, 0.3);
        assert!(fd.phi(t + ms(3000)) > 15.0);
    }

    #[test]
    fn phi_at_exactly_the_expected_time_is_log10_of_2() {
        let mut fd = PhiAccrualFailureDetector::new(PhiSettings::default());
        let t = t0();
        fd.heartbeat(t);
        // Mean 1000 ms of bootstrap history plus 3 s acceptable pause.
        assert_close(fd.phi(t + ms(4000)), 2f64.log10(), 1e-12);
    }

    #[test]
    fn phi_grows_with_the_time_since_the_last_heartbeat() {
        let mut fd = PhiAccrualFailureDetector::new(PhiSettings::default());
        let t = t0();
        feed(&mut fd, t, &[0, 1000, 2000, 3000]);
        let mut previous = 0.0;
        for gap in (0..10_000).step_by(10) {
            let phi = fd.phi(t + ms(3000 + gap));
            assert!(phi >= previous, "phi dropped at gap {gap}");
            previous = phi;
        }
        assert!(previous > 8.0);
    }

    #[test]
    fn phi_is_zero_for_a_time_before_the_last_heartbeat() {
        let mut fd = PhiAccrualFailureDetector::new(PhiSettings::default());
        let t = t0() + Duration::from_secs(10);
        fd.heartbeat(t);
        assert_eq!(fd.phi(t - Duration::from_secs(5)), 0.0);
    }

    #[test]
    fn the_first_interval_after_the_second_heartbeat_enters_the_history() {
        let mut fd = PhiAccrualFailureDetector::new(spec_settings());
        let t = t0();
        feed(&mut fd, t, &[0, 100]);
        assert_eq!(fd.history.len(), 3);
        assert!(fd.phi(t + ms(200)) > 0.0);
        assert!(fd.phi(t + ms(300)) > fd.phi(t + ms(200)));
    }

    #[test]
    fn a_node_is_available_after_a_series_of_successful_heartbeats() {
        let mut fd = PhiAccrualFailureDetector::new(spec_settings());
        let t = t0();
        feed(&mut fd, t, &[0, 1000, 1100]);
        assert!(fd.is_available(t + ms(1200)));
    }

    #[test]
    fn a_node_becomes_unavailable_when_heartbeats_are_missed() {
        let mut fd =
            PhiAccrualFailureDetector::new(PhiSettings { threshold: 3.0, ..spec_settings() });
        let t = t0();
        feed(&mut fd, t, &[0, 1000, 1100, 1200]);
        assert!(fd.is_available(t + ms(1300)));
        assert!(!fd.is_available(t + ms(8200)));
    }

    #[test]
    fn a_node_becomes_available_again_when_heartbeats_resume_after_a_failure() {
        let settings =
            PhiSettings { acceptable_heartbeat_pause: Duration::from_secs(3), ..spec_settings() };
        let mut fd = PhiAccrualFailureDetector::new(settings);
        let t = t0();
        let mut now = t;
        for _ in 0..1000 {
            fd.heartbeat(now);
            now += ms(1000);
        }
        assert!(fd.is_available(now));
        now += Duration::from_secs(5 * 60);
        assert!(!fd.is_available(now));
        for _ in 0..100 {
            fd.heartbeat(now);
            now += ms(1000);
        }
        assert!(fd.is_available(now));
    }

    #[test]
    fn configured_acceptable_pause_tolerates_some_missing_heartbeats() {
        let settings =
            PhiSettings { acceptable_heartbeat_pause: Duration::from_secs(3), ..spec_settings() };
        let mut fd = PhiAccrualFailureDetector::new(settings);
        let t = t0();
        feed(&mut fd, t, &[0, 1000, 2000, 3000, 4000, 5000]);
        assert!(fd.is_available(t + ms(5500)));
        assert!(fd.is_available(t + ms(9000)));
    }

    #[test]
    fn the_node_fails_after_the_configured_acceptable_pause() {
        let settings =
            PhiSettings { acceptable_heartbeat_pause: Duration::from_secs(3), ..spec_settings() };
        let mut fd = PhiAccrualFailureDetector::new(settings);
        let t = t0();
        feed(&mut fd, t, &[0, 1000, 2000, 3000, 4000, 5000]);
        assert!(!fd.is_available(t + ms(5000 + 5500)));
    }

    #[test]
    fn only_the_last_max_sample_size_intervals_count() {
        let settings = PhiSettings { max_sample_size: 3, ..spec_settings() };
        let mut fd = PhiAccrualFailureDetector::new(settings);
        let t = t0();
        // Three 100 ms intervals fill the window and push out the bootstrap samples.
        feed(&mut fd, t, &[0, 100, 200, 300]);
        let phi1 = fd.phi(t + ms(300 + 150));
        // Slow heartbeats are recorded and pushed out again by three more 100 ms intervals.
        feed(&mut fd, t, &[900, 1400, 1900, 2000, 2100, 2200]);
        assert_eq!(fd.history.len(), 3);
        let phi2 = fd.phi(t + ms(2200 + 150));
        assert_close(phi2, phi1, 0.001);
    }

    #[test]
    fn min_std_deviation_floors_the_deviation_of_perfectly_regular_heartbeats() {
        let settings =
            PhiSettings { acceptable_heartbeat_pause: Duration::ZERO, ..PhiSettings::default() };
        let mut fd = PhiAccrualFailureDetector::new(settings);
        let t = t0();
        for i in 0..=1000 {
            fd.heartbeat(t + ms(i * 1000));
        }
        let last = t + ms(1_000_000);
        assert_eq!(fd.history.std_deviation(), 0.0);
        // With σ floored at 100 ms, one σ late is the same φ as the pure formula gives.
        assert_close(fd.phi(last + ms(1100)), phi_of(1100.0, 1000.0, 100.0), 1e-12);
        assert!(fd.phi(last + ms(1100)).is_finite());
    }

    #[test]
    fn a_heartbeat_arriving_after_the_node_was_suspected_is_not_recorded() {
        let mut fd = PhiAccrualFailureDetector::new(PhiSettings::default());
        let t = t0();
        feed(&mut fd, t, &[0, 1000, 2000]);
        assert_eq!(fd.history.len(), 4);
        let mean_before = fd.history.mean();
        let late = t + ms(2000 + 60_000);
        assert!(!fd.is_available(late));
        fd.heartbeat(late);
        assert_eq!(fd.history.len(), 4);
        assert_eq!(fd.history.mean(), mean_before);
        assert!(fd.is_available(late + ms(1000)));
        // The next on-time heartbeat is recorded again.
        fd.heartbeat(late + ms(1000));
        assert_eq!(fd.history.len(), 5);
    }

    #[test]
    fn the_history_computes_mean_and_population_variance() {
        let mut h = IntervalHistory::new(20);
        for i in [100, 200, 125, 340, 130] {
            h.push(i);
        }
        assert_close(h.mean(), 179.0, 1e-5);
        assert_close(h.variance(), 7584.0, 1e-5);
    }

    #[test]
    fn the_history_has_zero_variance_for_one_sample() {
        let mut h = IntervalHistory::new(20);
        h.push(1000);
        assert_eq!(h.variance(), 0.0);
    }

    #[test]
    fn the_history_is_capped_at_max_sample_size_oldest_first() {
        let mut h = IntervalHistory::new(3);
        for i in [100, 110, 90] {
            h.push(i);
        }
        assert_close(h.mean(), 100.0, 1e-5);
        assert_close(h.variance(), 66.6666667, 1e-5);
        h.push(140);
        assert_eq!(h.len(), 3);
        assert_close(h.mean(), 113.333333, 1e-5);
        assert_close(h.variance(), 422.222222, 1e-5);
        h.push(80);
        assert_close(h.mean(), 103.333333, 1e-5);
        assert_close(h.variance(), 688.888889, 1e-5);
    }

    #[test]
    fn huge_intervals_do_not_overflow_the_running_sums() {
        let mut h = IntervalHistory::new(4);
        for _ in 0..10 {
            h.push(u64::MAX);
        }
        assert_eq!(h.len(), 4);
        assert_eq!(h.mean(), f64::from(u32::MAX));
        assert!(!h.std_deviation().is_nan());
    }

    #[test]
    fn the_bootstrap_history_is_the_estimate_plus_and_minus_a_quarter() {
        let mut fd = PhiAccrualFailureDetector::new(PhiSettings::default());
        fd.heartbeat(t0());
        assert_eq!(fd.history.intervals, [750, 1250]);
        assert_close(fd.history.mean(), 1000.0, 1e-12);
        assert_close(fd.history.std_deviation(), 250.0, 1e-12);
    }

    #[test]
    fn time_to_reach_is_the_first_millisecond_at_which_phi_reaches_the_threshold() {
        let mut fd = PhiAccrualFailureDetector::new(PhiSettings::default());
        let t = t0();
        fd.heartbeat(t);
        let at = fd.time_to_reach(8.0).unwrap();
        assert!(fd.phi(t + at) >= 8.0);
        assert!(fd.phi(t + at - ms(1)) < 8.0);
        assert!(!fd.is_available(t + at));
        assert!(fd.is_available(t + at - ms(1)));
        assert_eq!(fd.time_to_reach(0.0), Some(Duration::ZERO));
        assert_eq!(fd.time_to_reach(f64::NAN), None);
        let to_infinity = fd.time_to_reach(f64::INFINITY).unwrap();
        assert_eq!(fd.phi(t + to_infinity), f64::INFINITY);
    }

    #[test]
    fn phi_crosses_threshold_after_about_5_3_seconds_with_bootstrap_history() {
        let mut fd = PhiAccrualFailureDetector::new(PhiSettings::default());
        fd.heartbeat(t0());
        let at = fd.time_to_reach(8.0).unwrap();
        assert_close(at.as_secs_f64(), 5.31, 0.020);
    }

    #[test]
    fn phi_crosses_threshold_after_about_4_5_seconds_with_steady_heartbeats() {
        let mut fd = PhiAccrualFailureDetector::new(PhiSettings::default());
        let t = t0();
        for i in 0..2000 {
            fd.heartbeat(t + ms(i * 1000));
        }
        assert!(fd.history.std_deviation() < 100.0);
        let at = fd.time_to_reach(8.0).unwrap();
        assert_close(at.as_secs_f64(), 4.52, 0.020);
    }

    #[test]
    fn phi_crosses_threshold_4_after_about_4_9_seconds_with_bootstrap_history() {
        let mut fd =
            PhiAccrualFailureDetector::new(PhiSettings { threshold: 4.0, ..Default::default() });
        fd.heartbeat(t0());
        let at = fd.time_to_reach(4.0).unwrap();
        assert_close(at.as_secs_f64(), 4.91, 0.020);
    }
}
