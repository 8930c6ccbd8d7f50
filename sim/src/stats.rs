//! Small statistics helpers for the reports.

use std::time::Duration;

use serde::Serialize;

/// Minimum, median, 99th percentile and maximum of a set of durations, in seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// How many values.
    pub count: usize,
    /// The smallest.
    pub min: f64,
    /// The median (nearest rank).
    pub p50: f64,
    /// The 99th percentile (nearest rank).
    pub p99: f64,
    /// The largest.
    pub max: f64,
    /// The mean.
    pub mean: f64,
}

impl Summary {
    /// Summarises `values`; all zero when empty.
    pub fn of(values: &[Duration]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        let mut v: Vec<f64> = values.iter().map(Duration::as_secs_f64).collect();
        v.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            // Nearest-rank percentile: the smallest value with at least p of the values <= it.
            let k = (p * v.len() as f64).ceil() as usize;
            v[k.clamp(1, v.len()) - 1]
        };
        Self {
            count: v.len(),
            min: v[0],
            p50: rank(0.5),
            p99: rank(0.99),
            max: v[v.len() - 1],
            mean: v.iter().sum::<f64>() / v.len() as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_secs).collect();
        let s = Summary::of(&v);
        assert_eq!((s.min, s.p50, s.p99, s.max), (1.0, 50.0, 99.0, 100.0));
        assert_eq!(Summary::of(&[]).count, 0);
        assert_eq!(Summary::of(&[Duration::from_secs(3)]).p99, 3.0);
    }
}
