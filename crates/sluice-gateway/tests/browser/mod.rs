//! Headless Chromium (Debian's `chromium`) for the tests that need a real browser: the status
//! page, and CORS as a page's `fetch` sees it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const INSTALL: &str = "apt-get install chromium";

/// A temporary directory, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let dir = std::env::temp_dir().join(format!("sluice-status-page-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Headless Chromium on `url` with `extra` flags, its own profile in `dir`; its stdout.
pub fn chromium(dir: &Path, url: &str, extra: &[String]) -> String {
    let profile = dir.join(format!("profile-{}", extra.len()));
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("chromium could not be started ({e}); install it: {INSTALL}"));
    let deadline = Instant::now() + Duration::from_secs(90);
    while child.try_wait().expect("chromium's status").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("chromium's output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "chromium failed: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    stdout
}

/// Fails the test, saying how to install it, when `chromium` cannot be run.
pub fn require_chromium() {
    let ran = Command::new("chromium").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    if let Err(e) = ran {
        panic!("chromium is needed by this test and could not be run ({e}); install it: {INSTALL}");
    }
}
