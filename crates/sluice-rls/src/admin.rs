//! The admin listener of `sluice serve` when the rate-limit service runs beside the gateway:
//! the gateway's endpoints, its status page listing the service's domains too.

use std::sync::Arc;

use serde_json::Value;
use sluice_gateway::admin::{Inspect, Status};
use sluice_gateway::gateway::Gateway;

use crate::service::Rls;

/// The gateway and the rate-limit service counting into its observer, as the admin listener
/// shows them: `/metrics` is the gateway's registry, which holds the service's decisions too
/// (`route="rls:<domain>"`); `/status.json` lists the service's routes after the gateway's;
/// readiness and `/config` are the gateway's.
pub struct WithRls {
    /// The gateway.
    gateway: Arc<Gateway>,
    /// The rate-limit service beside it.
    rls: Arc<Rls>,
}

impl WithRls {
    /// The admin view of `gateway` and `rls`, which must count into the gateway's observer
    /// ([`Rls::with_observer`] with [`Gateway::observer`]) for its metrics to show.
    pub fn new(gateway: Arc<Gateway>, rls: Arc<Rls>) -> Self {
        debug_assert!(
            Arc::ptr_eq(gateway.observer(), rls.observer()),
            "the service counts into the gateway's observer"
        );
        Self { gateway, rls }
    }
}

impl Inspect for WithRls {
    fn metrics_text(&self) -> String {
        self.gateway.metrics_text()
    }

    fn readiness(&self) -> (bool, &'static str) {
        self.gateway.readiness()
    }

    fn config_json(&self) -> Value {
        self.gateway.config_json()
    }

    fn status(&self) -> Status {
        let mut status = self.gateway.status();
        status.decisions.extend(self.rls.counts());
        status
    }
}
