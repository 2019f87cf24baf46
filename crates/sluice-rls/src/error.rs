//! Errors of the descriptor files: each names the file, the line and the field.

use std::fmt;

/// A descriptor file that cannot be used, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RlsConfigError {
    /// The file, as found in the directory (or the name given to [`crate::parse_file`]).
    pub file: String,
    /// 1-based line of the offending field, when known.
    pub line: Option<usize>,
    /// The field's path, e.g. `descriptors[0].rate_limit.unit` (`(file)`, `(syntax)` otherwise).
    pub field: String,
    /// What is wrong, and what would be right.
    pub message: String,
}

impl fmt::Display for RlsConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}: {}", self.file, self.field, self.message),
            None => write!(f, "{}: {}: {}", self.file, self.field, self.message),
        }
    }
}

impl std::error::Error for RlsConfigError {}
