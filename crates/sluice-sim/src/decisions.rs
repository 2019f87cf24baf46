//! Every decision of a run as CSV: `time,key,algorithm,keyed_by,allowed,remaining,retry_after`.

use std::io::Write;

use sluice_core::Decision;

use crate::arrival::Arrival;
use crate::decimal::format_seconds;
use crate::report::csv_field;
use crate::simulation::{DecisionSink, Lane};

/// A [`DecisionSink`] that writes one CSV line per decision. Times and `retry_after` are seconds
/// with nine decimals; `key` is the raw key the lane counted by (`*` for the global scope).
///
/// ```
/// use sluice_sim::{Arrival, DecisionCsv, KeyScope, Limits, Simulation};
/// let sim = Simulation::new(&["fixed-window"], &[KeyScope::Ip], &Limits { limit: 1, ..Limits::default() }).unwrap();
/// let mut out = DecisionCsv::new(Vec::new()).unwrap();
/// let arrivals = [Arrival::keyed(0, "10.0.0.1", "a"), Arrival::keyed(250_000_000, "10.0.0.1", "a")];
/// sim.run(&arrivals, &mut out).unwrap();
/// let text = String::from_utf8(out.into_inner().unwrap()).unwrap();
/// assert_eq!(text, "time,key,algorithm,keyed_by,allowed,remaining,retry_after\n\
///                   0.000000000,10.0.0.1,fixed-window,ip,true,0,0.000000000\n\
///                   0.250000000,10.0.0.1,fixed-window,ip,false,0,0.750000000\n");
/// ```
pub struct DecisionCsv<W: Write> {
    out: W,
}

impl<W: Write> DecisionCsv<W> {
    /// Writes the header line to `out`.
    pub fn new(mut out: W) -> std::io::Result<Self> {
        writeln!(out, "time,key,algorithm,keyed_by,allowed,remaining,retry_after")?;
        Ok(Self { out })
    }

    /// Flushes and returns the writer.
    pub fn into_inner(mut self) -> std::io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

impl<W: Write> DecisionSink for DecisionCsv<W> {
    fn decision(&mut self, arrival: &Arrival, lane: &Lane, d: &Decision) -> std::io::Result<()> {
        writeln!(
            self.out,
            "{},{},{},{},{},{},{}",
            format_seconds(arrival.at),
            csv_field(lane.scope.raw_key(arrival)),
            csv_field(&lane.algorithm),
            lane.scope,
            d.allowed,
            d.remaining,
            format_seconds(d.retry_after)
        )
    }
}
