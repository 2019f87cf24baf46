//! `sluice serve`: the seed service without a config, the gateway with one.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sluice_core::{Policy, SystemClock};
use sluice_gateway::admin::{serve_admin, serve_inspected};
use sluice_gateway::gateway::Gateway;
use sluice_gateway::observe;
use sluice_gateway::seed::{SeedConfig, SeedService};
use sluice_gateway::serve::{Listeners, Protocols, serve_per_core, termination};
use sluice_gateway::tls::Certificates;
use sluice_rls::Rls;
use sluice_rls::admin::WithRls;
use sluice_store::{MemoryOptions, MemoryStore, NamedPolicy};
use tokio::net::TcpListener;

/// Arguments of `sluice serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A TOML configuration (routes, policies, keys, upstream, store). Without it, sluice runs
    /// the default service: GET /api/hello limited per client IP by a token bucket
    /// (PORT, RATE_LIMIT_CAPACITY, RATE_LIMIT_REFILL_PER_SECOND), GET /health; ADMIN_PORT adds
    /// the admin listener (status page, /metrics) on 127.0.0.1.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// How long to let in-flight requests finish after SIGTERM or SIGINT.
    #[arg(long, default_value = "30s", value_parser = parse_drain)]
    pub drain: Duration,
}

fn parse_drain(s: &str) -> Result<Duration, String> {
    sluice_config::parse_duration(s).map(Duration::from_nanos)
}

/// Runs `sluice serve`.
pub fn run(args: Args) -> anyhow::Result<()> {
    // Client traffic runs on one single-threaded runtime per core (`serve_per_core`); this one
    // runs signals, reloads and the admin listener.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        match args.config {
            None => seed(args.drain).await,
            Some(path) => gateway(path, args.drain).await,
        }
    })
}

async fn seed(drain: Duration) -> anyhow::Result<()> {
    let cfg = SeedConfig::from_lookup(|k| std::env::var(k).ok())?;
    let bucket = cfg.policy()?;
    let policies = vec![NamedPolicy { name: "per-ip".into(), policy: Policy::from(bucket) }];
    let store = MemoryStore::new(policies, MemoryOptions::default(), Arc::new(SystemClock::new()));
    let listeners = bind_any(cfg.port)?;
    let addr = listeners.local_addr();
    let stop = termination();
    println!("sluice listening on http://{addr} (port {})", addr.port());
    println!(
        "limit: {} requests per bucket, {} tokens per second (GET /api/hello, per client IP)",
        cfg.capacity, cfg.refill_per_second
    );
    let service = Arc::new(SeedService::new(Arc::new(store), cfg.capacity));
    // ADMIN_PORT: the admin listener (status page, metrics, health) on the loopback interface.
    let admin = match cfg.admin_port {
        Some(port) => {
            let at = SocketAddr::from(([127, 0, 0, 1], port));
            let l = TcpListener::bind(at).await.with_context(|| format!("cannot listen on {at} (ADMIN_PORT)"))?;
            println!("sluice admin listening on http://{}", l.local_addr()?);
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(serve_inspected(l, service.clone(), async move {
                let _ = stopped.await;
            }));
            Some((stop, task))
        }
        None => None,
    };
    serve_per_core(listeners, service, stop, drain).await?;
    if let Some((stop, task)) = admin {
        let _ = stop.send(());
        let _ = task.await;
    }
    println!("sluice stopped");
    Ok(())
}

/// Worker threads for client traffic: one per core.
fn workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Worker threads for a configuration's client traffic: `[server] workers`, else one per core.
fn config_workers(server: &sluice_config::Server) -> usize {
    server.workers.unwrap_or_else(workers)
}

/// Binds all interfaces, IPv6 and IPv4 where the host allows both, else IPv4.
fn bind_any(port: u16) -> anyhow::Result<Listeners> {
    match Listeners::bind(SocketAddr::from(([0u16; 8], port)), workers()) {
        Ok(l) => Ok(l),
        Err(_) => Listeners::bind(SocketAddr::from(([0, 0, 0, 0], port)), workers())
            .with_context(|| format!("cannot listen on port {port}")),
    }
}

async fn gateway(path: PathBuf, drain: Duration) -> anyhow::Result<()> {
    let config = sluice_config::load(&path)?;
    let listen = config.server.listen;
    // A memory store with `snapshot` starts from the file and writes it every interval and
    // once more after draining; one it cannot write stops the start.
    let (stores, snapshots) = sluice_gateway::stores::with_snapshots(&config)?;
    let gateway = Arc::new(Gateway::new(config, stores)?);
    let snapshots = snapshots.map(|s| s.counted_by(gateway.observer().metrics()));
    // A file that configures only the rate-limit service opens no gateway listener.
    let gateway_wanted = !rls_only(&gateway.config().config);
    let mut listeners = match gateway_wanted {
        true => Some(
            Listeners::bind(listen, config_workers(&gateway.config().config.server))
                .with_context(|| format!("cannot listen on {listen}"))?
                .with_protocols(Protocols::of(&gateway.config().config.server)),
        ),
        false => None,
    };
    let certificates = match &gateway.config().config.server.tls {
        Some(files) => {
            let loaded = Certificates::load(files).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            Some(Arc::new(loaded))
        }
        None => None,
    };
    if let Some(c) = &certificates {
        listeners = listeners.map(|l| l.with_tls(c.clone()));
        tokio::spawn(c.clone().watch(TLS_WATCH_INTERVAL));
    }
    let rls = start_rls(&gateway).await?;
    // The admin listener (metrics, health, config) is apart from client traffic; it stops
    // once client requests are drained. The rate-limit service counts into the gateway's
    // observer: one scrape shows every face.
    let admin = match gateway.config().config.admin.as_ref().map(|a| a.listen) {
        Some(at) => {
            let l = TcpListener::bind(at).await.with_context(|| format!("cannot listen on {at} (admin)"))?;
            let admin_addr = l.local_addr()?;
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let shutdown = async move {
                let _ = stopped.await;
            };
            let task = match &rls {
                Some(r) => {
                    let view = WithRls::new(gateway.clone(), r.rls.clone());
                    tokio::spawn(serve_inspected(l, Arc::new(view), shutdown))
                }
                None => tokio::spawn(serve_admin(l, gateway.clone(), shutdown)),
            };
            Some((admin_addr, stop, task))
        }
        None => None,
    };
    let stop = termination();
    tokio::spawn(reload_on_hangup(hangup(), gateway.clone(), path.clone(), certificates));
    tokio::spawn(reopen_on_usr1(usr1(), gateway.clone()));
    let health_checks = tokio::spawn(check_upstreams(gateway.clone()));
    let admin_addr = admin.as_ref().map(|a| a.0);
    let listen = listeners.as_ref().map(Listeners::local_addr);
    observe::started(&gateway.config().config, listen, admin_addr, &path.display().to_string());
    if let Some(r) = &rls {
        println!("{}", r.line);
    }
    if listeners.is_none() {
        println!(
            "no gateway listener: {} configures no route, upstream, forward_auth or decision_api, only [rls]",
            path.display()
        );
    }
    let interval_writes = snapshots.clone().map(|s| tokio::spawn(s.write_every_interval()));
    let served = match listeners {
        Some(listeners) => serve_per_core(listeners, gateway, stop, drain).await,
        None => {
            stop.await;
            Ok(())
        }
    };
    health_checks.abort();
    served?;
    if let (Some(writes), Some(snapshots)) = (interval_writes, snapshots) {
        writes.abort();
        let _ = tokio::task::spawn_blocking(move || snapshots.write_last()).await;
    }
    if let Some((_, stop, task)) = admin {
        let _ = stop.send(());
        let _ = task.await;
    }
    if let Some(r) = rls {
        let _ = r.stop.send(());
        let _ = r.task.await;
    }
    observe::stopped();
    Ok(())
}

/// Whether `config` asks for the rate-limit service alone: `[rls]`, and no route, upstream,
/// forward-auth or decision API turned on by name: then no gateway listener is opened (it
/// would answer 404 to everything, or open the decision API nobody asked for).
fn rls_only(config: &sluice_config::Config) -> bool {
    config.rls.is_some()
        && config.routes.is_empty()
        && config.upstream.is_none()
        && config.upstreams.is_empty()
        && config.forward_auth.is_none()
        && config.decision_api.enabled != Some(true)
}

/// Envoy's rate-limit service (`[rls]`) beside the gateway, on this runtime, counting into the
/// gateway's observer; SIGHUP reloads its descriptor directory too.
async fn start_rls(gateway: &Gateway) -> anyhow::Result<Option<RlsTask>> {
    let config = &gateway.config().config;
    let Some(settings) = &config.rls else { return Ok(None) };
    let store = sluice_gateway::stores::for_config(config);
    let observer = gateway.observer().clone();
    let rls = Arc::new(Rls::with_observer(config, store, Arc::new(SystemClock::new()), observer)?);
    let at = settings.listen;
    let l = TcpListener::bind(at).await.with_context(|| format!("cannot listen on {at} (rls)"))?;
    let line = format!(
        "sluice rls listening on {} (gRPC, POST /json), domains: {}",
        l.local_addr()?,
        rls.domains().join(", ")
    );
    tokio::spawn(sluice_rls::reload_on_hangup(rls.clone()));
    if let Some(every) = settings.watch_interval {
        tokio::spawn(sluice_rls::reload_on_change(rls.clone(), Duration::from_nanos(every)));
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(sluice_rls::serve(l, rls.clone(), async move {
        let _ = stopped.await;
    }));
    Ok(Some(RlsTask { rls, line, stop, task }))
}

/// The rate-limit service running beside the gateway.
struct RlsTask {
    /// The service.
    rls: Arc<Rls>,
    /// Its listening line.
    line: String,
    /// Stops it.
    stop: tokio::sync::oneshot::Sender<()>,
    /// Its accept loop.
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// A signal handler installed at start.
#[cfg(unix)]
type InstalledSignal = tokio::signal::unix::Signal;
#[cfg(not(unix))]
type InstalledSignal = ();

/// The SIGHUP handler, installed now (before the listening line), so no early signal is lost.
fn hangup() -> Option<InstalledSignal> {
    #[cfg(unix)]
    {
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok()
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// SIGHUP reloads the configuration; a bad file is refused and the old one keeps serving. Each
/// reload is counted (`sluice_config_reloads_total`) and logged as an event; a refusal is also
/// told on stderr.
async fn reload_on_hangup(
    hup: Option<InstalledSignal>,
    gateway: Arc<Gateway>,
    path: PathBuf,
    tls: Option<Arc<Certificates>>,
) {
    #[cfg(unix)]
    {
        let Some(mut hup) = hup else { return };
        // One write, so a reader never sees half the line.
        let say = |line: String| std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        while hup.recv().await.is_some() {
            if let Err(e) = gateway.reload_file(&path) {
                let _ = say(format!("sluice reload refused, keeping the running configuration: {e}\n"));
            }
            // The certificate is read again from the files the configuration in force names
            // (a listener's TLS is set at start: a file that drops `[server.tls]` needs a restart).
            let files = gateway.config().config.server.tls.clone();
            if let (Some(tls), Some(files)) = (&tls, files)
                && let Err(e) = tls.reload(&files)
            {
                let _ = say(format!("sluice TLS reload refused, keeping the running certificate: {e}\n"));
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (gateway, path, tls);
    }
}

/// The upstreams' active health checks: every 100 ms, the targets of the configuration in
/// force whose check is due are asked (on this runtime, so client traffic's workers never
/// wait for a check).
async fn check_upstreams(gateway: Arc<Gateway>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        gateway.config().upstreams().check_due();
    }
}

/// The SIGUSR1 handler, installed now (before the listening line): the signal's default action
/// would end the process.
fn usr1() -> Option<InstalledSignal> {
    #[cfg(unix)]
    {
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1()).ok()
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// SIGUSR1 reopens the access log's file (as nginx's does): logrotate moves the file, then
/// signals, and the lines go on in a new file of the configured name.
async fn reopen_on_usr1(usr1: Option<InstalledSignal>, gateway: Arc<Gateway>) {
    #[cfg(unix)]
    {
        let Some(mut usr1) = usr1 else { return };
        while usr1.recv().await.is_some() {
            if let Some(log) = gateway.config().access_log() {
                log.reopen();
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (usr1, gateway);
    }
}

/// How often the certificate's files are looked at for a change.
const TLS_WATCH_INTERVAL: Duration = Duration::from_secs(2);
