//! The formats `sluice simulate --access-log` reads.

use crate::combined::CombinedFormat;
use crate::json_line::JsonFields;
use crate::log_request::{LineError, LogRequest};

/// How the lines of an access log are written.
#[derive(Debug, Clone)]
pub enum LogFormat {
    /// nginx and Apache common and combined lines.
    Combined(CombinedFormat),
    /// One JSON object per line, with these fields.
    Json(JsonFields),
}

impl LogFormat {
    /// `combined` or `json`.
    pub fn name(&self) -> &'static str {
        match self {
            LogFormat::Combined(_) => "combined",
            LogFormat::Json(_) => "json",
        }
    }

    /// The headers lines may carry, lower case, as [`LogRequest::headers`] indexes them.
    pub fn header_names(&self) -> Vec<String> {
        match self {
            LogFormat::Combined(c) => c.header_names(),
            LogFormat::Json(j) => j.header_names().to_vec(),
        }
    }

    /// Reads one line (without its line break) into `out`.
    pub fn parse(&self, line: &[u8], out: &mut LogRequest) -> Result<(), LineError> {
        match self {
            LogFormat::Combined(c) => c.parse(line, out),
            LogFormat::Json(j) => j.parse(line, out),
        }
    }
}
