//! The rate-limit service's face on the request lifecycle: a request's ruling is acted on,
//! answered to Envoy and observed the way every face's is ([`sluice_http::lifecycle`]).
//!
//! Its answer is Envoy's whatever the action: a status per descriptor and the overall code
//! (`OVER_LIMIT` for a denial), or the gRPC error of a store that could not decide. A shaping
//! delay is never held: Envoy's protocol has no place for it.

use std::convert::Infallible;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use sluice_config::HeaderStyle;
use sluice_core::{Decision, Nanos};
use sluice_http::lifecycle::{Counted, Face, Observe};
use sluice_http::pipeline::Ruling;
use sluice_http::response::Answer;
use tonic::Status;

use crate::answer::answer;
use crate::descriptor_match::ResolvedDescriptor;
use crate::json::status_of;
use crate::metrics::Metrics;
use crate::snapshot::Snapshot;

/// What Envoy is answered from: the request's descriptors and what the store decided of each.
pub(crate) struct Answering<'d, 's> {
    /// The request's descriptors, resolved and with `replaces` applied.
    pub descriptors: &'d [ResolvedDescriptor<'s>],
    /// One decision per check (none for a check the store was not asked), or the store's
    /// failure.
    pub decided: Result<Vec<Option<Decision>>, Status>,
    /// The time `duration_until_reset` counts from.
    pub now: Nanos,
    /// Each descriptor's status is counted here.
    pub metrics: &'d Metrics,
    /// The rate-limit header styles Envoy is asked to add.
    pub styles: &'d [HeaderStyle],
}

impl Answering<'_, '_> {
    /// The answer to Envoy.
    pub fn answered(self) -> Result<RateLimitResponse, Status> {
        let decided = self.decided?;
        Ok(answer(self.descriptors, &decided, self.now, self.metrics, self.styles))
    }
}

impl Face for Answering<'_, '_> {
    type Request = ();
    type Response = Result<RateLimitResponse, Status>;
    type Error = Infallible;

    const HOLDS_DELAY: bool = false;

    /// sluice's own answers are for requests refused before a decision, which a request of
    /// descriptors never is; would one come, Envoy is told of it as an internal error.
    fn answer(&self, answer: Answer) -> Self::Response {
        Err(Status::internal(format!("the rate-limit service answered {}", answer.status)))
    }

    /// The HTTP status `POST /json` answers with (200, 429; 500 for an error).
    fn status(response: &Self::Response) -> u16 {
        response.as_ref().map_or(500, |r| status_of(r).as_u16())
    }

    async fn pass_on(self, _: (), _: Counted<'_>, _: &Ruling<'_>) -> Result<Self::Response, Infallible> {
        Ok(self.answered())
    }

    fn deny(self, _: Counted<'_>, _: &Ruling<'_>) -> Result<Self::Response, Infallible> {
        Ok(self.answered())
    }

    fn unavailable(self, _: Counted<'_>, _: &Ruling<'_>) -> Result<Self::Response, Infallible> {
        Ok(self.answered())
    }
}

/// Observes a load's requests: each domain's decisions counted in its route, as the gateway
/// counts its own.
pub(crate) struct Observed<'s>(pub &'s Snapshot);

impl Observe for Observed<'_> {
    fn decided(&self, at: Counted<'_>, ruling: &Ruling<'_>, status: u16) {
        let route = self.0.route(at.name());
        route.record(&ruling.checks, &ruling.kinds, ruling.policies(), &ruling.outcome, ruling.timing).emit(status);
    }

    fn unmatched(&self) {
        self.0.observed.unmatched();
    }
}
