//! `[access_log]`: where the lines go, their format, and how the client is written.

use crate::error::{ConfigError, Source};
use crate::model::*;
use crate::raw::*;

/// `[access_log]`.
pub(super) fn access_log(src: &Source<'_>, raw: toml::Spanned<RawAccessLog>) -> Result<AccessLog, ConfigError> {
    let span = raw.span();
    let a = raw.into_inner();
    let err =
        |field: &str, msg: String| src.error(Some(src.field_line(&span, field)), format!("access_log.{field}"), msg);
    let to = match a.path.as_str() {
        "-" => LogDestination::Stdout,
        "" => return Err(err("path", "names a file, or `-` for standard output".into())),
        path => {
            let path = std::path::PathBuf::from(path);
            // The file is created at start; its directory must be there (a typo would otherwise
            // be found only when the first line is written).
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
            if !parent.is_dir() {
                return Err(err(
                    "path",
                    format!("{}: the directory {} does not exist", path.display(), parent.display()),
                ));
            }
            LogDestination::File(path)
        }
    };
    let format = match a.format.as_deref() {
        None | Some("combined") => AccessLogFormat::Combined,
        Some("json") => AccessLogFormat::Json,
        Some(other) => return Err(err("format", format!("`{other}` is not a format: `combined` or `json`"))),
    };
    let client = match a.client.as_deref() {
        None | Some("address") => ClientInLog::Address,
        Some("hash") => ClientInLog::Hash,
        Some(other) => {
            return Err(err(
                "client",
                format!(
                    "`{other}` is not a choice: `address` (the addresses), or `hash` (no address: the client's key hash)"
                ),
            ));
        }
    };
    Ok(AccessLog { to, format, client })
}
