//! Every limit decision of an access-log run as CSV:
//! `time,line,late,route,policy,key_hash,key_type,decision,remaining,retry_after`.

use std::io::{self, Write};

use sluice_core::Nanos;

use crate::access_run::{LimitDecision, LimitInfo, LogSink, RouteInfo};
use crate::decimal::format_seconds;
use crate::log_request::LogRequest;
use crate::log_time::format_rfc3339;
use crate::report::csv_field;

/// A [`LogSink`] writing one CSV line per limit decision. `time` is the virtual time of the
/// decision (RFC 3339, UTC), `line` the log line, `late` whether it came beyond the reorder
/// window; `key_hash` and `decision` are as in the gateway's decision logs; `retry_after` is in
/// seconds with nine decimals.
///
/// ```
/// use sluice_core::Decision;
/// use sluice_sim::{AccessDecisionCsv, LimitDecision, LimitInfo, LimitVerdict, LogRequest, LogSink, RouteInfo};
/// use sluice_store::KeyHash;
/// let mut csv = AccessDecisionCsv::new(Vec::new()).unwrap();
/// let limit = LimitInfo { policy: 0, policy_name: "per-ip".into(), algorithm: "fixed-window".into(), key: "ip".into(), shadow: false };
/// let route = RouteInfo { name: "login".into(), path: "/login".into(), limits: vec![limit.clone()], not_simulable: None };
/// let decision = Decision { allowed: false, limit: 1, remaining: 0, reset_after: 0, retry_after: 500_000_000, delay: 0 };
/// let d = LimitDecision { key: KeyHash([0xab; 16]), key_type: "ip", verdict: LimitVerdict::Denied, decision };
/// let mut request = LogRequest::default();
/// request.line = 7;
/// csv.decision(&request, 1_000_000_000, false, &route, &limit, &d).unwrap();
/// let text = String::from_utf8(csv.into_inner().unwrap()).unwrap();
/// assert_eq!(text.lines().nth(1), Some("1970-01-01T00:00:01Z,7,false,login,per-ip,abababababababababababababababab,ip,denied,0,0.500000000"));
/// ```
pub struct AccessDecisionCsv<W: Write> {
    /// Where the lines go.
    out: W,
}

impl<W: Write> AccessDecisionCsv<W> {
    /// Writes the header line to `out`.
    pub fn new(mut out: W) -> io::Result<Self> {
        writeln!(out, "time,line,late,route,policy,key_hash,key_type,decision,remaining,retry_after")?;
        Ok(Self { out })
    }

    /// Flushes and returns the writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

impl<W: Write> LogSink for AccessDecisionCsv<W> {
    fn decision(
        &mut self,
        request: &LogRequest,
        at: Nanos,
        late: bool,
        route: &RouteInfo,
        limit: &LimitInfo,
        d: &LimitDecision,
    ) -> io::Result<()> {
        writeln!(
            self.out,
            "{},{},{late},{},{},{},{},{},{},{}",
            format_rfc3339(at),
            request.line,
            csv_field(&route.name),
            csv_field(&limit.policy_name),
            d.key.to_hex(),
            d.key_type,
            d.verdict.name(),
            d.decision.remaining,
            format_seconds(d.decision.retry_after)
        )
    }
}
