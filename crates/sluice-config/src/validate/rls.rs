//! `[rls]`: the rate-limit service's listener, descriptor directory, charging and watching.

use sluice_core::NANOS_PER_MILLI;

use super::address::addr;
use crate::duration::parse_duration;
use crate::error::{ConfigError, Source};
use crate::model::*;
use crate::raw::*;

/// `[rls]`.
pub(super) fn rls(src: &Source<'_>, raw: toml::Spanned<RawRls>) -> Result<Rls, ConfigError> {
    let span = raw.span();
    let r = raw.into_inner();
    let listen = addr(src, &span, "rls", "listen", r.listen.as_deref().unwrap_or("0.0.0.0:8081"))?;
    let charge = match r.charge.as_deref().unwrap_or("all-or-nothing") {
        "all-or-nothing" => RlsCharge::AllOrNothing,
        "independent" => RlsCharge::Independent,
        other => {
            let line = Some(src.field_line(&span, "charge"));
            return Err(src.error(
                line,
                "rls.charge",
                format!("`{other}` is neither `all-or-nothing` nor `independent`"),
            ));
        }
    };
    let watch_interval = match parse_duration(r.watch_interval.as_deref().unwrap_or("2s")) {
        Ok(0) => None,
        Ok(n) if n < 100 * NANOS_PER_MILLI => {
            let line = Some(src.field_line(&span, "watch_interval"));
            return Err(src.error(line, "rls.watch_interval", "must be at least 100ms, or 0s for SIGHUP only"));
        }
        Ok(n) => Some(n),
        Err(m) => return Err(src.error(Some(src.field_line(&span, "watch_interval")), "rls.watch_interval", m)),
    };
    Ok(Rls { listen, descriptors: r.descriptors.into(), charge, watch_interval })
}
