//! Static endpoints per service name, taken from `[discovery.config.services.<name>]`.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::{DiscoveryError, Lookup, Resolved, ResolvedTarget, ServiceDiscovery};

/// Discovery from a fixed table of services.
#[derive(Clone, Debug, Default)]
pub struct ConfigDiscovery {
    services: BTreeMap<String, Vec<ResolvedTarget>>,
}

impl ConfigDiscovery {
    /// A table mapping service names to their endpoints.
    pub fn new(services: BTreeMap<String, Vec<ResolvedTarget>>) -> Self {
        Self { services }
    }
}

impl ServiceDiscovery for ConfigDiscovery {
    fn lookup<'a>(
        &'a self,
        lookup: &'a Lookup,
        _timeout: Duration,
    ) -> BoxFuture<'a, Result<Resolved, DiscoveryError>> {
        let result = match self.services.get(&lookup.service_name) {
            Some(targets) => Ok(Resolved::new(lookup.service_name.clone(), targets.clone())),
            None => Err(DiscoveryError::NotFound {
                lookup: lookup.to_string(),
                reason: format!(
                    "no [discovery.config.services.{}] table; configured services: [{}]",
                    lookup.service_name,
                    self.services.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            }),
        };
        Box::pin(async move { result })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_configured_service_resolves_to_its_endpoints_and_an_unknown_one_is_not_found() {
        let target = ResolvedTarget::new("127.0.0.1", Some(8558), Some([127, 0, 0, 1].into()));
        let discovery =
            ConfigDiscovery::new(BTreeMap::from([("orders".to_string(), vec![target.clone()])]));
        let timeout = Duration::from_secs(1);

        let resolved = discovery.lookup(&Lookup::new("orders"), timeout).await.unwrap();
        assert_eq!(resolved.targets, vec![target]);

        let error = discovery.lookup(&Lookup::new("billing"), timeout).await.unwrap_err();
        let text = error.to_string();
        assert!(text.contains("billing") && text.contains("orders"), "{text}");
    }
}
