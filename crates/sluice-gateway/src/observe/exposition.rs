//! The two text formats `/metrics` speaks: OpenMetrics, which Prometheus asks for, and the
//! Prometheus text format (0.0.4) for every other reader (`curl … | promtool check metrics`,
//! older agents).
//!
//! The metrics are rendered once, as OpenMetrics; the text format is derived from that. The two
//! differ where a reader of the text format would misread OpenMetrics: a counter's `HELP` and
//! `TYPE` name its family (`sluice_shed`) while its sample is `sluice_shed_total`, which the text
//! format takes for another metric, without help; and `# EOF`, `# UNIT`, `unknown` and `info`
//! exist only in OpenMetrics.

use std::fmt::Write;

/// Content type of the OpenMetrics text format.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Content type of the Prometheus text format.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A text format of the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposition {
    /// OpenMetrics 1.0.
    OpenMetrics,
    /// The Prometheus text format, version 0.0.4.
    Text,
}

impl Exposition {
    /// The format a request's `Accept` header asks for: OpenMetrics when it names
    /// `application/openmetrics-text` (with a quality above 0, and not below the text format's),
    /// as Prometheus does; the text format otherwise, and when no `Accept` is sent.
    ///
    /// ```
    /// use sluice_gateway::observe::Exposition;
    /// let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    /// assert_eq!(Exposition::negotiate(Some(prometheus)), Exposition::OpenMetrics);
    /// assert_eq!(Exposition::negotiate(Some("*/*")), Exposition::Text);
    /// assert_eq!(Exposition::negotiate(None), Exposition::Text);
    /// assert_eq!(Exposition::negotiate(Some("text/plain, application/openmetrics-text;q=0.5")), Exposition::Text);
    /// ```
    pub fn negotiate(accept: Option<&str>) -> Self {
        let (mut openmetrics, mut text) = (0.0_f32, 0.0_f32);
        for range in accept.unwrap_or("").split(',') {
            let mut params = range.split(';').map(str::trim);
            let media = params.next().unwrap_or("").to_ascii_lowercase();
            let q = params
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                .map_or(1.0, |(_, v)| v.trim().parse::<f32>().unwrap_or(0.0));
            match media.as_str() {
                "application/openmetrics-text" => openmetrics = openmetrics.max(q),
                "text/plain" => text = text.max(q),
                _ => {}
            }
        }
        if openmetrics > 0.0 && openmetrics >= text { Exposition::OpenMetrics } else { Exposition::Text }
    }

    /// Its content type.
    pub fn content_type(self) -> &'static str {
        match self {
            Exposition::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Exposition::Text => TEXT_CONTENT_TYPE,
        }
    }

    /// `openmetrics` (an exposition as `Metrics::render` writes it) in this format.
    pub fn of(self, openmetrics: String) -> String {
        match self {
            Exposition::OpenMetrics => openmetrics,
            Exposition::Text => text_format(&openmetrics),
        }
    }
}

/// `openmetrics` in the Prometheus text format: a counter's `HELP` and `TYPE` name its `_total`
/// sample and an info's its `_info` sample (a gauge); `unknown` is `untyped`; `# UNIT` and
/// `# EOF` are left out. Samples are written alike in both formats.
///
/// ```
/// let om = "# HELP sluice_shed Requests shed.\n# TYPE sluice_shed counter\nsluice_shed_total 3\n# EOF\n";
/// assert_eq!(
///     sluice_gateway::observe::text_format(om),
///     "# HELP sluice_shed_total Requests shed.\n# TYPE sluice_shed_total counter\nsluice_shed_total 3\n"
/// );
/// ```
pub fn text_format(openmetrics: &str) -> String {
    // A family's TYPE follows its HELP: read every type first.
    let types: std::collections::HashMap<&str, &str> =
        openmetrics.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.split_once(' ')).collect();
    let renamed = |name: &str| -> String {
        match types.get(name) {
            Some(&"counter") => format!("{name}_total"),
            Some(&"info") => format!("{name}_info"),
            _ => name.to_string(),
        }
    };
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let _ = writeln!(out, "# HELP {} {help}", renamed(name));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let kind = match kind {
                "counter" => "counter",
                "gauge" | "info" | "stateset" => "gauge",
                "histogram" | "gaugehistogram" => "histogram",
                "summary" => "summary",
                _ => "untyped",
            };
            let _ = writeln!(out, "# TYPE {} {kind}", renamed(name));
        } else if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_the_text_format_reads_otherwise_changes() {
        let om = "# HELP a_seconds Time.\n# TYPE a_seconds histogram\n# UNIT a_seconds seconds\n\
                  a_seconds_bucket{le=\"+Inf\"} 1\na_seconds_sum 0.5\na_seconds_count 1\n\
                  # HELP up Up.\n# TYPE up gauge\nup 1\n\
                  # HELP build Build.\n# TYPE build info\nbuild_info{version=\"1\"} 1\n\
                  # HELP odd Odd.\n# TYPE odd unknown\nodd 2\n# EOF\n";
        assert_eq!(
            text_format(om),
            "# HELP a_seconds Time.\n# TYPE a_seconds histogram\n\
             a_seconds_bucket{le=\"+Inf\"} 1\na_seconds_sum 0.5\na_seconds_count 1\n\
             # HELP up Up.\n# TYPE up gauge\nup 1\n\
             # HELP build_info Build.\n# TYPE build_info gauge\nbuild_info{version=\"1\"} 1\n\
             # HELP odd Odd.\n# TYPE odd untyped\nodd 2\n"
        );
    }

    #[test]
    fn an_accept_header_chooses_the_format() {
        for (accept, format) in [
            (Some("application/openmetrics-text"), Exposition::OpenMetrics),
            (Some("Application/OpenMetrics-Text; version=1.0.0"), Exposition::OpenMetrics),
            (Some("application/openmetrics-text;q=0"), Exposition::Text),
            (Some("application/openmetrics-text;q=0.2, text/plain;q=0.9"), Exposition::Text),
            (Some("text/plain"), Exposition::Text),
            (Some("application/json"), Exposition::Text),
            (Some(""), Exposition::Text),
            (Some("application/openmetrics-text;q=nonsense"), Exposition::Text),
        ] {
            assert_eq!(Exposition::negotiate(accept), format, "{accept:?}");
        }
    }
}
