//! Writing a snapshot file crash-safely: a reader of `path` sees the old snapshot or the new
//! one, whole, never a mix or a torn file, whenever the process or the machine stops.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::Path;

use super::SnapshotStats;
use crate::limiter::Limiter;
use crate::sync::unmodelled::{AtomicU64, Ordering};

/// Distinguishes the temporary files of concurrent saves in one process.
static SEQ: AtomicU64 = AtomicU64::new(0);

impl Limiter {
    /// Writes a snapshot to `path` crash-safely: into a new temporary file in the same
    /// directory (`.NAME.PID.N.tmp`), fsynced, renamed over `path` (atomic on POSIX), and the
    /// directory fsynced so that the rename itself survives a power loss. On an error the
    /// temporary file is removed and `path` is left as it was.
    pub fn save(&self, path: impl AsRef<Path>) -> io::Result<SnapshotStats> {
        let path = path.as_ref();
        let name = path.file_name().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: not a file name", path.display()),
            )
        })?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        // Relaxed: only uniqueness matters, not order.
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(
            ".{}.{}.{n}.tmp",
            name.to_string_lossy(),
            std::process::id()
        ));
        let written = (|| {
            let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            let stats = self.snapshot(&mut file)?;
            file.sync_all()?;
            drop(file);
            fs::rename(&tmp, path)?;
            Ok(stats)
        })();
        match written {
            Ok(stats) => {
                sync_dir(dir)?;
                Ok(stats)
            }
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                Err(e)
            }
        }
    }
}

/// Makes a rename in `dir` durable (POSIX: fsync the directory). Elsewhere a no-op.
fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = (dir, File::open);
    Ok(())
}
