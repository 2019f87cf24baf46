//! `[decision_log]`: the share of admissions logged and the rate of denial lines.

use crate::error::{ConfigError, Source};
use crate::model::*;
use crate::raw::*;

/// `[decision_log]`, or its defaults.
pub(super) fn decision_log(
    src: &Source<'_>,
    raw: Option<toml::Spanned<RawDecisionLog>>,
) -> Result<DecisionLog, ConfigError> {
    let Some(raw) = raw else {
        return Ok(DecisionLog { sample: 0.01, denials_per_second: 100.0 });
    };
    let span = raw.span();
    let d = raw.into_inner();
    let err =
        |field: &str, msg: String| src.error(Some(src.field_line(&span, field)), format!("decision_log.{field}"), msg);
    let sample = d.sample.unwrap_or(0.01);
    if !(0.0..=1.0).contains(&sample) {
        return Err(err("sample", format!("{sample} is not a share between 0 and 1")));
    }
    let denials_per_second = d.denials_per_second.unwrap_or(100.0);
    if !(denials_per_second.is_finite() && denials_per_second >= 0.0) {
        return Err(err("denials_per_second", format!("{denials_per_second} is not a rate (0 or more)")));
    }
    Ok(DecisionLog { sample, denials_per_second })
}
