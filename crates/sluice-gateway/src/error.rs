//! What can go wrong building or reloading a gateway.

/// An error building or reloading a gateway. A refused reload leaves the running configuration
/// serving.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The configuration file cannot be loaded (its error names the file, line and field).
    #[error(transparent)]
    Config(#[from] sluice_config::ConfigError),
    /// `[upstream] url` cannot be used.
    #[error("upstream url `{url}`: {reason}")]
    UpstreamUrl {
        /// The URL as configured.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The store cannot be built (Redis URL, options).
    #[error("the store cannot be built: {0}")]
    Store(String),
    /// The memory store's snapshot cannot be written where `store.snapshot` says: found at
    /// start (and by `check-config`) rather than at the first write.
    #[error(
        "store.snapshot `{}`: cannot be written ({reason}): the limits would not survive a restart",
        path.display()
    )]
    Snapshot {
        /// The snapshot file as configured.
        path: std::path::PathBuf,
        /// Why, naming the directory.
        reason: String,
    },
    /// `[access_log] path` cannot be opened for appending.
    #[error("access_log.path `{}`: cannot be opened ({reason})", path.display())]
    AccessLog {
        /// The file as configured.
        path: std::path::PathBuf,
        /// Why.
        reason: String,
    },
    /// A setting that only a restart can change was changed in a reload.
    #[error("{0} cannot change on reload: restart to change it")]
    NeedsRestart(&'static str),
}
