//! The snapshot on disk: replaced atomically, opened with a bound on its size.
//!
//! A new snapshot is written to a temporary file in the same directory, flushed to the disk
//! (`fsync`), renamed over the old one, and the directory is flushed too, so that after a
//! crash at any point the path holds either the old snapshot or the new one, whole. The file is
//! created readable and writable by its owner only: it holds no secret and no raw key, but what
//! it says about who was limited is nobody else's business.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `path` through `write` (given the temporary file), atomically.
pub(crate) fn replace<T>(path: &Path, write: impl FnOnce(&mut File) -> io::Result<T>) -> io::Result<T> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().ok_or_else(|| io::Error::other("the snapshot path names no file"))?;
    static N: AtomicU64 = AtomicU64::new(0);
    let temp = dir.join(format!(
        ".{}.{}-{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut file = create_private(&temp)?;
        let value = write(&mut file)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temp, path)?;
        sync_dir(&dir)?;
        Ok(value)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

fn create_private(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

/// Flushes a directory's entries (the rename) to the disk, where the system allows it.
fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// Opens the snapshot at `path` if there is one, with its length.
pub(crate) fn open(path: &Path) -> io::Result<Option<(File, u64)>> {
    match File::open(path) {
        Ok(f) => {
            let len = f.metadata()?.len();
            Ok(Some((f, len)))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}
