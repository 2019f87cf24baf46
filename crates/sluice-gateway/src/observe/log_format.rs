//! The log format of the gateway: JSON lines.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// A subscriber writing one JSON object per event to `writer`: `timestamp` (RFC 3339, UTC),
/// `level`, `target` (`sluice::decision`, `sluice::event`, ...), `message`, and the event's
/// fields at the top level. `filter` selects events (`RUST_LOG` syntax).
///
/// ```
/// use std::io::Write;
/// use std::sync::{Arc, Mutex};
/// #[derive(Clone, Default)]
/// struct Buf(Arc<Mutex<Vec<u8>>>);
/// impl Write for Buf {
///     fn write(&mut self, b: &[u8]) -> std::io::Result<usize> { self.0.lock().unwrap().write(b) }
///     fn flush(&mut self) -> std::io::Result<()> { Ok(()) }
/// }
/// let buf = Buf::default();
/// let sink = buf.clone();
/// let subscriber = sluice_gateway::observe::json_lines(move || sink.clone(), "info".parse().unwrap());
/// tracing::subscriber::with_default(subscriber, || tracing::info!(target: "sluice::event", event = "start", "hello"));
/// let line: serde_json::Value = serde_json::from_slice(&buf.0.lock().unwrap()).unwrap();
/// assert_eq!(line["event"], "start");
/// assert_eq!(line["target"], "sluice::event");
/// ```
pub fn json_lines<W>(writer: W, filter: EnvFilter) -> impl tracing::Subscriber + Send + Sync + 'static
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_target(true)
        .with_env_filter(filter)
        .with_writer(writer)
        .finish()
}
