//! Several methods tried in order: the first that answers with at least one target wins.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::{DiscoveryError, Lookup, Resolved, ServiceDiscovery};

/// Tries each method in order, moving on after an error or an empty answer.
#[derive(Clone, Debug)]
pub struct AggregateDiscovery {
    methods: Vec<(String, Arc<dyn ServiceDiscovery>)>,
}

impl AggregateDiscovery {
    /// The methods, each with the name used in errors and logs.
    pub fn new(methods: Vec<(String, Arc<dyn ServiceDiscovery>)>) -> Self {
        Self { methods }
    }
}

impl ServiceDiscovery for AggregateDiscovery {
    fn lookup<'a>(
        &'a self,
        lookup: &'a Lookup,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Resolved, DiscoveryError>> {
        Box::pin(async move {
            if self.methods.is_empty() {
                return Err(DiscoveryError::Config(
                    "aggregate discovery has no methods; set discovery.aggregate.discovery_methods"
                        .into(),
                ));
            }
            let mut failures = Vec::new();
            let mut last_empty = None;
            for (name, method) in &self.methods {
                match method.lookup(lookup, timeout).await {
                    Ok(resolved) if !resolved.targets.is_empty() => return Ok(resolved),
                    Ok(resolved) => {
                        tracing::debug!(method = %name, %lookup, "no targets; trying the next method");
                        last_empty = Some(resolved);
                    }
                    Err(error) => {
                        tracing::debug!(method = %name, %lookup, %error, "failed; trying the next method");
                        failures.push(format!("{name}: {error}"));
                    }
                }
            }
            match last_empty {
                Some(resolved) => Ok(resolved),
                None => Err(DiscoveryError::Failed {
                    lookup: lookup.to_string(),
                    reason: format!("every method failed: {}", failures.join("; ")),
                }),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::{ConfigDiscovery, ResolvedTarget};

    fn config(service: &str, targets: Vec<ResolvedTarget>) -> Arc<dyn ServiceDiscovery> {
        Arc::new(ConfigDiscovery::new(BTreeMap::from([(service.to_string(), targets)])))
    }

    #[tokio::test]
    async fn the_next_method_is_tried_after_an_error_or_an_empty_answer() {
        let target = ResolvedTarget::new("10.0.0.1", Some(8558), None);
        let aggregate = AggregateDiscovery::new(vec![
            ("failing".into(), config("other", vec![])),
            ("empty".into(), config("svc", vec![])),
            ("good".into(), config("svc", vec![target.clone()])),
        ]);
        let resolved = aggregate.lookup(&Lookup::new("svc"), Duration::from_secs(1)).await.unwrap();
        assert_eq!(resolved.targets, vec![target]);
    }

    #[tokio::test]
    async fn when_every_method_fails_the_error_names_each_of_them() {
        let aggregate = AggregateDiscovery::new(vec![
            ("first".into(), config("a", vec![])),
            ("second".into(), config("b", vec![])),
        ]);
        let error =
            aggregate.lookup(&Lookup::new("svc"), Duration::from_secs(1)).await.unwrap_err();
        let text = error.to_string();
        assert!(text.contains("first:") && text.contains("second:"), "{text}");
    }

    #[tokio::test]
    async fn an_empty_answer_is_returned_when_no_method_finds_targets() {
        let aggregate = AggregateDiscovery::new(vec![
            ("failing".into(), config("other", vec![])),
            ("empty".into(), config("svc", vec![])),
        ]);
        let resolved = aggregate.lookup(&Lookup::new("svc"), Duration::from_secs(1)).await.unwrap();
        assert!(resolved.targets.is_empty());
    }
}
