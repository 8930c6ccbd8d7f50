//! The figures the sharding benches share: medians, percentiles, round trips and an ask rate.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

pub(crate) fn median<T: PartialOrd + Copy>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Microseconds.
pub(crate) fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// Round trips of `n` sequential asks, sorted.
pub(crate) async fn latencies<F, Fut>(n: usize, mut ask: F) -> Vec<Duration>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        ask(i).await;
        v.push(t.elapsed());
    }
    v.sort();
    v
}

/// Asks per second over `window` with `in_flight` at once.
pub(crate) async fn rate<F, Fut>(in_flight: usize, window: Duration, ask: F) -> f64
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let permits = Arc::new(Semaphore::new(in_flight));
    let start = Instant::now();
    let mut done = 0usize;
    let mut tasks = tokio::task::JoinSet::new();
    let mut i = 0;
    while start.elapsed() < window {
        let permit = permits.clone().acquire_owned().await.unwrap();
        let ask = ask.clone();
        tasks.spawn(async move {
            ask(i).await;
            drop(permit);
        });
        i += 1;
        while tasks.try_join_next().is_some() {
            done += 1;
        }
    }
    while tasks.join_next().await.is_some() {
        done += 1;
    }
    done as f64 / start.elapsed().as_secs_f64()
}
