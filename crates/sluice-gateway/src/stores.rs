//! The store a configuration asks for (`[store]`), built again on every reload so that
//! policies that did not change keep their state; and, for a memory store with
//! `snapshot`, the state read back at start and written by [`Snapshots`].

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sluice_config::{Config, OnError, Snapshot, StoreConfig};
use sluice_core::{Clock, SystemClock, ceil_millis};
use sluice_redis::{RedisOptions, RedisStore};
use sluice_store::{
    KeyHasher, LeaseOptions, LeasedStore, MemoryOptions, MemoryStore, NamedPolicy, Restored, SnapshotError, Store,
    Written,
};

use crate::error::GatewayError;
use crate::observe::{EVENT_TARGET as TARGET, Metrics, SnapshotWrites};

/// Builds the store of a configuration; on reload it is given the store in use.
pub trait StoreBuilder: Send + Sync + 'static {
    /// The store for `config` (its policies in config order).
    fn build(&self, config: &Config, previous: Option<&Arc<dyn Store>>) -> Result<Arc<dyn Store>, GatewayError>;
}

/// The builder for `config.store`: memory (reading the system clock) or Redis. It neither reads
/// nor writes a `snapshot`: [`with_snapshots`] does, for the one process that owns the file (a
/// second store of that process, the rate-limit service's, starts empty).
pub fn for_config(config: &Config) -> Box<dyn StoreBuilder> {
    match &config.store {
        StoreConfig::Memory { .. } => {
            Box::new(MemoryStores { snapshot_elsewhere: true, ..MemoryStores::new(Arc::new(SystemClock::new())) })
        }
        StoreConfig::Redis { .. } => Box::new(RedisStores::default()),
    }
}

/// The store builder of the process that owns `config`'s snapshot: for a memory store with
/// `snapshot`, a builder that reads it when it first builds, and the [`Snapshots`] that write it.
/// Fails when the snapshot cannot be written ([`check_snapshot`]): better at start than a warning
/// every interval while the limits are lost on the next restart.
pub fn with_snapshots(config: &Config) -> Result<(Box<dyn StoreBuilder>, Option<Snapshots>), GatewayError> {
    check_snapshot(config)?;
    let (StoreConfig::Memory { snapshot: Some(snapshot), .. }, Some(secret)) =
        (&config.store, &config.server.key_secret)
    else {
        return Ok(match &config.store {
            StoreConfig::Memory { .. } => (Box::new(MemoryStores::new(Arc::new(SystemClock::new()))), None),
            StoreConfig::Redis { .. } => (Box::new(RedisStores::default()), None),
        });
    };
    let stores = MemoryStores::new(Arc::new(SystemClock::new()))
        .with_snapshot(snapshot.clone(), KeyHasher::from_secret(secret.expose().as_bytes()));
    let snapshots = stores.snapshots();
    Ok((Box::new(stores), snapshots))
}

/// Fails unless `config`'s snapshot, if it has one, can be written by this process: its
/// directory exists and takes a new file (one is created and removed there, named as the
/// writer names its temporary files), and the path is not a directory. For start-up and
/// `check-config` (which checks as the user running it).
pub fn check_snapshot(config: &Config) -> Result<(), GatewayError> {
    let StoreConfig::Memory { snapshot: Some(snapshot), .. } = &config.store else { return Ok(()) };
    let path = &snapshot.path;
    let refused = |reason: String| GatewayError::Snapshot { path: path.clone(), reason };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Some(name) = path.file_name() else { return Err(refused("it names no file".into())) };
    if path.is_dir() {
        return Err(refused("it is a directory".into()));
    }
    let probe = dir.join(format!(".{}.{}-check.tmp", name.to_string_lossy(), std::process::id()));
    match std::fs::OpenOptions::new().write(true).create_new(true).open(&probe) {
        Ok(file) => {
            drop(file);
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(refused(format!("no file can be created in {}: {e}", dir.display()))),
    }
}

/// The policies of a configuration as a store takes them.
pub fn named_policies(config: &Config) -> Vec<NamedPolicy> {
    config.policies.iter().map(|p| NamedPolicy { name: p.name.clone(), policy: p.policy }).collect()
}

/// The memory store's options from `[store]` (defaults when the store is not `memory`).
pub fn memory_options(config: &StoreConfig) -> MemoryOptions {
    match config {
        StoreConfig::Memory { max_keys, shards, when_full, .. } => {
            MemoryOptions { max_keys: *max_keys, shards: *shards, when_full: *when_full }
        }
        StoreConfig::Redis { .. } => MemoryOptions::default(),
    }
}

/// The store a builder built last, shared with what writes its snapshot.
type Current = Arc<Mutex<Option<Arc<MemoryStore>>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere mid-build or mid-write; what it guards is whole.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Builds in-memory stores: on reload, policies equal to the old ones keep their tables (and
/// so their state). With a snapshot, the first store starts from it.
pub struct MemoryStores {
    /// The clock every store it builds reads (a manual one in tests).
    clock: Arc<dyn Clock>,
    /// The store last built, whose tables a reload takes over.
    current: Current,
    /// The snapshot read at the first build, and the secret that seals it.
    snapshot: Option<(Snapshot, KeyHasher)>,
    /// Another builder of this process owns the configuration's snapshot: this one neither
    /// reads it nor refuses a configuration that names one ([`for_config`]).
    snapshot_elsewhere: bool,
}

impl MemoryStores {
    /// A builder whose stores read `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self { clock, current: Arc::new(Mutex::new(None)), snapshot: None, snapshot_elsewhere: false }
    }

    /// The same builder, whose first store starts from `snapshot` (sealed with `secret`).
    pub fn with_snapshot(self, snapshot: Snapshot, secret: KeyHasher) -> Self {
        Self { snapshot: Some((snapshot, secret)), ..self }
    }

    /// What writes the snapshot of the stores this builder builds; `None` without a snapshot.
    pub fn snapshots(&self) -> Option<Snapshots> {
        let (snapshot, secret) = self.snapshot.clone()?;
        let writes = Arc::new(Mutex::new(Writes::Open));
        Some(Snapshots { current: self.current.clone(), snapshot, secret, writes, counted: None })
    }

    /// The first store: from the snapshot when there is one (what became of it is logged).
    fn first(&self, policies: Vec<NamedPolicy>, options: MemoryOptions) -> MemoryStore {
        let Some((snapshot, secret)) = &self.snapshot else {
            return MemoryStore::new(policies, options, self.clock.clone());
        };
        let (store, restored) = MemoryStore::restore(policies, options, self.clock.clone(), &snapshot.path, secret);
        log_restored(&snapshot.path, &restored);
        store
    }
}

impl StoreBuilder for MemoryStores {
    fn build(&self, config: &Config, _previous: Option<&Arc<dyn Store>>) -> Result<Arc<dyn Store>, GatewayError> {
        let asked = match &config.store {
            StoreConfig::Memory { snapshot, .. } => snapshot.as_ref(),
            StoreConfig::Redis { .. } => None,
        };
        if !self.snapshot_elsewhere && asked != self.snapshot.as_ref().map(|(s, _)| s) {
            return Err(GatewayError::NeedsRestart("store.snapshot"));
        }
        let mut current = lock(&self.current);
        let policies = named_policies(config);
        let options = memory_options(&config.store);
        let store = match current.as_ref() {
            // Same bounds: unchanged policies keep their tables. New bounds: a new store.
            Some(old) if *old.options() == options => Arc::new(old.rebuild(policies)),
            Some(_) => Arc::new(MemoryStore::new(policies, options, self.clock.clone())),
            None => Arc::new(self.first(policies, options)),
        };
        *current = Some(store.clone());
        Ok(store)
    }
}

/// Logs what reading the snapshot at `path` did: what was restored, and every reason a policy
/// or the whole file starts empty.
fn log_restored(path: &Path, restored: &Restored) {
    let file = path.display().to_string();
    match restored {
        Restored::Missing => {
            tracing::info!(target: TARGET, event = "snapshot_missing", file, "no snapshot at {file}: starting empty")
        }
        Restored::Skipped(reason) => tracing::warn!(
            target: TARGET,
            event = "snapshot_skipped",
            file,
            reason = %reason,
            "snapshot {file} skipped ({reason}): starting empty"
        ),
        Restored::Loaded(loaded) => {
            let keys: u64 = loaded.policies.iter().map(|p| p.keys).sum();
            let elapsed_ms = ceil_millis(loaded.elapsed);
            tracing::info!(
                target: TARGET,
                event = "snapshot_restored",
                file,
                keys,
                elapsed_ms,
                "restored {keys} keys from {file}, aged by {elapsed_ms} ms"
            );
            for p in loaded.policies.iter().filter(|p| !p.restored) {
                tracing::warn!(
                    target: TARGET,
                    event = "snapshot_policy_fresh",
                    policy = p.name.as_str(),
                    "policy {} starts empty: the snapshot has no policy of that name and parameters (a changed \
                     policy is a new policy)",
                    p.name
                );
            }
            for p in loaded.policies.iter().filter(|p| p.dropped > 0) {
                tracing::warn!(
                    target: TARGET,
                    event = "snapshot_dropped",
                    policy = p.name.as_str(),
                    dropped = p.dropped,
                    "policy {}: {} states of the snapshot did not fit the store and were dropped",
                    p.name,
                    p.dropped
                );
            }
            if !loaded.left_out.is_empty() {
                tracing::info!(
                    target: TARGET,
                    event = "snapshot_left_out",
                    policies = loaded.left_out.join(","),
                    "not restored (no longer configured as written): {}",
                    loaded.left_out.join(", ")
                );
            }
        }
    }
}

/// Whether interval writes may still run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writes {
    /// Writing every interval.
    Open,
    /// The last snapshot is written: a late interval write must not replace it with an older
    /// state.
    Closed,
}

/// Writes the memory store's snapshot: every interval while serving, and once more after the
/// last request is answered. Cheap to clone; one write at a time.
#[derive(Clone)]
pub struct Snapshots {
    /// The store in use (the latest a reload built).
    current: Current,
    /// Where and how often.
    snapshot: Snapshot,
    /// Seals the file.
    secret: KeyHasher,
    /// Serialises writes, and stops interval writes once the last one is done.
    writes: Arc<Mutex<Writes>>,
    /// Where each write, and each failure, is counted (`sluice_snapshot_writes_total`).
    counted: Option<SnapshotWrites>,
}

impl Snapshots {
    /// The same, counting its writes in `metrics` (the gateway's, shown on `/metrics`).
    pub fn counted_by(self, metrics: &Metrics) -> Self {
        Self { counted: Some(metrics.snapshot_writes()), ..self }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.snapshot.path
    }

    /// How often it is written while serving.
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.snapshot.interval)
    }

    /// Writes the store's state now (blocking I/O). `Ok(None)` after [`Snapshots::write_last`]
    /// or before any store was built.
    pub fn write(&self) -> Result<Option<Written>, SnapshotError> {
        let writes = lock(&self.writes);
        if *writes == Writes::Closed {
            return Ok(None);
        }
        self.write_locked()
    }

    fn write_locked(&self) -> Result<Option<Written>, SnapshotError> {
        let Some(store) = lock(&self.current).clone() else { return Ok(None) };
        let result = store.write_snapshot(&self.snapshot.path, &self.secret);
        if let Some(counted) = &self.counted {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            counted.record(result.is_ok(), now.as_secs_f64());
        }
        result.map(Some)
    }

    /// Writes the snapshot every interval until the task is dropped, each write on a blocking
    /// thread; a failure is logged and counted, and the next interval tries again.
    pub async fn write_every_interval(self) {
        let mut ticks = tokio::time::interval(self.interval());
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await; // the first tick is now: the state was just read
        loop {
            ticks.tick().await;
            let writer = self.clone();
            match tokio::task::spawn_blocking(move || writer.write()).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => self.log_failure(&e),
                Err(e) => tracing::error!(target: TARGET, event = "snapshot_failed", "snapshot write panicked: {e}"),
            }
        }
    }

    /// Writes the last snapshot (after the last request was answered) and stops interval
    /// writes; logs what it wrote. Blocking I/O.
    pub fn write_last(&self) -> Result<Option<Written>, SnapshotError> {
        let mut writes = lock(&self.writes);
        *writes = Writes::Closed;
        let result = self.write_locked();
        let file = self.snapshot.path.display().to_string();
        match &result {
            Ok(Some(w)) => tracing::info!(
                target: TARGET,
                event = "snapshot_written",
                file,
                keys = w.keys,
                cells = w.cells,
                bytes = w.bytes,
                "snapshot {file} written: {} keys, {} summary cells, {} bytes",
                w.keys,
                w.cells,
                w.bytes
            ),
            Ok(None) => {}
            Err(e) => self.log_failure(e),
        }
        result
    }

    fn log_failure(&self, e: &SnapshotError) {
        let file = self.snapshot.path.display().to_string();
        tracing::warn!(target: TARGET, event = "snapshot_failed", file, error = %e, "snapshot {file} not written: {e}");
    }
}

/// Builds a Redis store per configuration. State lives in Redis under keys that carry a
/// fingerprint of each policy's parameters, so a reload keeps the state of unchanged policies.
/// What the process knows of that Redis (the deny cache, the breaker, the counters, the `local`
/// fallback's state) is kept too when the store's settings did not change
/// ([`RedisStore::rebuild`]): a key denied before an outage stays denied after a reload during it.
#[derive(Default)]
pub struct RedisStores {
    /// The store last built, whose knowledge of Redis a reload with the same settings takes over.
    current: Mutex<Option<Arc<RedisStore>>>,
}

impl StoreBuilder for RedisStores {
    fn build(&self, config: &Config, _previous: Option<&Arc<dyn Store>>) -> Result<Arc<dyn Store>, GatewayError> {
        let StoreConfig::Redis { urls, cluster, on_error, timeout_ms, key_prefix, sentinel } = &config.store else {
            return Err(GatewayError::NeedsRestart("store.kind"));
        };
        let exposed: Vec<String> = urls.iter().map(|u| u.expose().to_owned()).collect();
        let on_error = match on_error {
            OnError::FailOpen => sluice_redis::OnError::FailOpen,
            OnError::FailClosed => sluice_redis::OnError::FailClosed,
            OnError::Local => sluice_redis::OnError::Local,
        };
        let mut options = match (sentinel, cluster) {
            (Some(s), _) => RedisOptions::sentinel(&s.master, s.urls.iter().map(|u| u.expose().to_owned()), on_error),
            (None, true) => RedisOptions::cluster(exposed, on_error),
            (None, false) => RedisOptions::single(exposed[0].clone(), on_error),
        };
        options.timeout = Duration::from_millis(*timeout_ms);
        options.key_prefix = key_prefix.clone();
        let mut current = lock(&self.current);
        let built = match current.as_ref() {
            // Same settings: the same Redis, seen the same way. Other settings: a new store.
            Some(old) if *old.options() == options => old.rebuild(named_policies(config)),
            _ => RedisStore::new(named_policies(config), options),
        };
        let store = Arc::new(built.map_err(|e| GatewayError::Store(e.to_string()))?);
        *current = Some(store.clone());
        drop(current);
        // Quota leases for the policies that ask (`lease = "auto"`): a reload starts them
        // afresh (the units the last configuration's leases held come back with their window).
        let leased = config.leased_policies();
        let decides: Arc<dyn Store> = if leased.contains(&true) {
            let clock = Arc::new(SystemClock::new());
            let leases = Arc::new(LeasedStore::new(store.clone(), leased, LeaseOptions::default(), clock));
            give_back_idle(&leases);
            leases
        } else {
            store.clone()
        };
        // Redis evicting sluice's keys under memory pressure would reset limits: say so at start
        // (asked in the background, so a slow Redis does not hold start-up).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let asked = store.clone();
            runtime.spawn(async move {
                if let Some(warning) = asked.eviction_warning().await {
                    tracing::warn!(target: "sluice::event", event = "redis_may_evict", "{warning}");
                }
            });
        }
        Ok(decides)
    }
}

/// Gives back the leases of keys gone quiet ([`LeasedStore::return_idle`]) every
/// [`LeaseOptions::idle`], on a task that ends with the store (a reload's store starts its own).
/// Without a runtime (a store built outside one), leases end with their windows only.
fn give_back_idle(leases: &Arc<LeasedStore>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
    let weak = Arc::downgrade(leases);
    let every = Duration::from_nanos(leases.options().idle.max(1_000_000));
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            let Some(leases) = weak.upgrade() else { return };
            leases.return_idle().await;
        }
    });
}
