//! Log lines captured in a test: the layer's tests here and sluice-tower's (which includes this
//! file) read what a store failure logs.

use std::sync::{Arc, Mutex};

/// Log lines written while it lives, on this thread (tests run on a current-thread runtime).
pub struct Logs {
    lines: Arc<Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

impl Logs {
    /// Starts capturing this thread's log lines.
    pub fn capture() -> Logs {
        #[derive(Clone)]
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Sink(lines.clone());
        let subscriber = tracing_subscriber::fmt().with_writer(move || sink.clone()).with_ansi(false).finish();
        Logs { lines, _guard: tracing::subscriber::set_default(subscriber) }
    }

    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.lines.lock().unwrap()).into_owned()
    }

    /// How many times `text` was logged so far.
    pub fn count(&self, text: &str) -> usize {
        self.text().matches(text).count()
    }
}
