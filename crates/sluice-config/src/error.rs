//! Configuration errors that name the file, the line and the field.

use std::fmt;

/// A configuration that cannot be used, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (as given), or `<input>` when parsing a string.
    pub file: String,
    /// 1-based line of the offending field or table, when known.
    pub line: Option<usize>,
    /// The field's path, e.g. `policy[1].refill_per_second` or `server.listen`.
    pub field: String,
    /// What is wrong, and what would be right.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}: {}", self.file, self.field, self.message),
            None => write!(f, "{}: {}: {}", self.file, self.field, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Maps byte offsets to lines and finds fields inside a table's span (the file's validation's:
/// without the `toml` feature nothing reads a file).
#[cfg_attr(not(feature = "toml"), allow(dead_code))]
pub(crate) struct Source<'a> {
    pub file: &'a str,
    pub text: &'a str,
}

#[cfg_attr(not(feature = "toml"), allow(dead_code))]
impl Source<'_> {
    /// A path named in the configuration: relative paths are taken from the config file's
    /// folder.
    pub(crate) fn beside(&self, path: &str) -> std::path::PathBuf {
        let dir = std::path::Path::new(self.file).parent().unwrap_or(std::path::Path::new(""));
        dir.join(path)
    }

    pub fn line_of(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end].iter().filter(|&&b| b == b'\n').count() + 1
    }

    /// The line of `field = ...` inside the byte range `within`, else the range's first line.
    pub fn field_line(&self, within: &std::ops::Range<usize>, field: &str) -> usize {
        let start = within.start.min(self.text.len());
        // A table's span may cover only its `[header]`: extend it to the next header.
        let mut end = within.end.min(self.text.len());
        while end < self.text.len() {
            let line_end = self.text[end..].find('\n').map_or(self.text.len(), |i| end + i + 1);
            if self.text[line_end..].trim_start_matches([' ', '\t']).starts_with('[') {
                end = line_end;
                break;
            }
            end = line_end;
        }
        let slice = &self.text[start..end];
        let mut offset = 0;
        for piece in slice.split_inclusive(['\n', ',', '{']) {
            let trimmed = piece.trim_start_matches([' ', '\t', '{', ',']);
            if let Some(rest) = trimmed.strip_prefix(field)
                && rest.trim_start().starts_with('=')
            {
                return self.line_of(start + offset);
            }
            offset += piece.len();
        }
        self.line_of(start)
    }

    pub fn error(&self, line: Option<usize>, field: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError { file: self.file.to_string(), line, field: field.into(), message: message.into() }
    }
}
