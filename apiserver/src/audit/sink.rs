//! The audit log backend (`--audit-log-path`, `-` for standard output): events are queued to
//! a writer thread, so requests never wait on the disk; a full queue drops the event (counted
//! and logged) rather than blocking. The file is rotated as upstream's (lumberjack) is:
//! past `--audit-log-maxsize` megabytes (100 when 0) it is renamed to
//! `<name>-<UTC time 2006-01-02T15-04-05.000><ext>` and a new one started; backups beyond
//! `--audit-log-maxbackup` (0 keeps all) or older than `--audit-log-maxage` days (0 keeps
//! all) are removed.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};

/// Events queued before new ones are dropped (upstream's batch buffer size).
const QUEUE: usize = 10_000;
const MEGABYTE: u64 = 1024 * 1024;
/// Lumberjack's size when none is given.
const DEFAULT_MAX_SIZE_MB: u64 = 100;

/// Rotation settings of a log file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rotation {
    /// Size in megabytes that triggers a rotation (0: 100).
    pub max_size_mb: u64,
    /// Rotated files kept (0: all).
    pub max_backups: usize,
    /// Days a rotated file is kept (0: forever).
    pub max_age_days: u64,
}

/// The queue in front of the writer thread.
#[derive(Debug)]
pub struct Sink {
    tx: SyncSender<Vec<u8>>,
    dropped: Arc<AtomicU64>,
}

impl Sink {
    /// Opens `path` (`-`: standard output) and starts the writer thread.
    pub fn open(path: &str, rotation: Rotation) -> Result<Sink, String> {
        let out = if path == "-" {
            Output::Stdout
        } else {
            let path = PathBuf::from(path);
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .map_err(|e| format!("creating {}: {e}", dir.display()))?;
            }
            let file = open_append(&path)?;
            let size = file.metadata().map(|m| m.len()).unwrap_or(0);
            Output::File(RotatingFile {
                path,
                file: BufWriter::new(file),
                size,
                rotation,
            })
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || write_loop(&rx, out))
            .map_err(|e| format!("starting the audit log writer: {e}"))?;
        Ok(Sink {
            tx,
            dropped: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Queues one event line (without its newline); never blocks.
    pub fn send(&self, line: Vec<u8>) {
        match self.tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    tracing::warn!(dropped = n, "audit log queue full; events dropped");
                }
            }
            Err(TrySendError::Disconnected(_)) => {
                tracing::warn!("audit log writer stopped; event dropped");
            }
        }
    }
}

fn open_append(path: &Path) -> Result<File, String> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("opening {}: {e}", path.display()))
}

enum Output {
    Stdout,
    File(RotatingFile),
}

struct RotatingFile {
    path: PathBuf,
    file: BufWriter<File>,
    size: u64,
    rotation: Rotation,
}

impl RotatingFile {
    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        let max_mb = if self.rotation.max_size_mb == 0 {
            DEFAULT_MAX_SIZE_MB
        } else {
            self.rotation.max_size_mb
        };
        let len = line.len() as u64 + 1;
        if self.size > 0 && self.size + len > max_mb * MEGABYTE {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        self.file.write_all(b"\n")?;
        self.size += len;
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        let stamp = jiff::Timestamp::now()
            .to_zoned(jiff::tz::TimeZone::UTC)
            .strftime("%Y-%m-%dT%H-%M-%S%.3f")
            .to_string();
        std::fs::rename(&self.path, backup_name(&self.path, &stamp))?;
        let file = open_append(&self.path).map_err(std::io::Error::other)?;
        self.file = BufWriter::new(file);
        self.size = 0;
        self.prune();
        Ok(())
    }

    /// Removes backups past the count and age limits.
    fn prune(&self) {
        let (max_backups, max_age) = (self.rotation.max_backups, self.rotation.max_age_days);
        if max_backups == 0 && max_age == 0 {
            return;
        }
        let mut backups = backups_of(&self.path);
        // Newest first (the stamp sorts as time).
        backups.sort_by(|a, b| b.0.cmp(&a.0));
        let cutoff = jiff::Timestamp::now()
            .checked_sub(jiff::SignedDuration::from_hours(24 * max_age as i64))
            .ok();
        for (i, (stamp, path)) in backups.iter().enumerate() {
            let too_many = max_backups > 0 && i >= max_backups;
            let too_old =
                max_age > 0 && cutoff.is_some_and(|c| parse_stamp(stamp).is_some_and(|t| t < c));
            if (too_many || too_old)
                && let Err(e) = std::fs::remove_file(path)
            {
                tracing::warn!(path = %path.display(), err = %e, "removing an old audit log");
            }
        }
    }
}

/// `audit.log` + stamp → `audit-<stamp>.log` (lumberjack's backup name).
fn backup_name(path: &Path, stamp: &str) -> PathBuf {
    let (prefix, ext) = name_parts(path);
    path.with_file_name(format!("{prefix}-{stamp}{ext}"))
}

/// (file name without extension, extension with its dot).
fn name_parts(path: &Path) -> (String, String) {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match path.extension() {
        Some(ext) => {
            let ext = format!(".{}", ext.to_string_lossy());
            (name[..name.len() - ext.len()].to_owned(), ext)
        }
        None => (name, String::new()),
    }
}

/// The rotated files of `path`: (stamp, path).
fn backups_of(path: &Path) -> Vec<(String, PathBuf)> {
    let (prefix, ext) = name_parts(path);
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let stamp = name
                .strip_prefix(&format!("{prefix}-"))?
                .strip_suffix(ext.as_str())?;
            parse_stamp(stamp)?;
            Some((stamp.to_owned(), e.path()))
        })
        .collect()
}

fn parse_stamp(stamp: &str) -> Option<jiff::Timestamp> {
    let civil = jiff::civil::DateTime::strptime("%Y-%m-%dT%H-%M-%S%.f", stamp).ok()?;
    civil
        .to_zoned(jiff::tz::TimeZone::UTC)
        .ok()
        .map(|z| z.timestamp())
}

fn write_loop(rx: &Receiver<Vec<u8>>, mut out: Output) {
    let stdout = std::io::stdout();
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(line) = next {
            let result = match &mut out {
                Output::Stdout => {
                    let mut lock = stdout.lock();
                    lock.write_all(&line).and_then(|()| lock.write_all(b"\n"))
                }
                Output::File(f) => f.write_line(&line),
            };
            if let Err(e) = result {
                tracing::warn!(err = %e, "writing the audit log");
            }
            next = rx.try_recv().ok();
        }
        // The queue is empty: make what was written visible.
        let flushed = match &mut out {
            Output::Stdout => stdout.lock().flush(),
            Output::File(f) => f.file.flush(),
        };
        if let Err(e) = flushed {
            tracing::warn!(err = %e, "flushing the audit log");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backup_names_follow_lumberjack() {
        assert_eq!(
            backup_name(Path::new("/var/log/audit.log"), "2026-01-02T03-04-05.678"),
            PathBuf::from("/var/log/audit-2026-01-02T03-04-05.678.log")
        );
        assert_eq!(
            backup_name(Path::new("audit"), "2026-01-02T03-04-05.678"),
            PathBuf::from("audit-2026-01-02T03-04-05.678")
        );
        assert!(parse_stamp("2026-01-02T03-04-05.678").is_some());
    }

    #[test]
    fn rotates_past_the_size_and_keeps_max_backups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let mut f = RotatingFile {
            path: path.clone(),
            file: BufWriter::new(open_append(&path).unwrap()),
            size: 0,
            rotation: Rotation {
                max_size_mb: 1,
                max_backups: 2,
                max_age_days: 0,
            },
        };
        let line = vec![b'x'; 400 * 1024];
        for _ in 0..12 {
            f.write_line(&line).unwrap();
            // Distinct stamps (millisecond resolution).
            std::thread::sleep(std::time::Duration::from_millis(3));
        }
        f.file.flush().unwrap();
        let backups = backups_of(&path);
        assert_eq!(backups.len(), 2, "{backups:?}");
        let current = std::fs::metadata(&path).unwrap().len();
        assert!(current <= MEGABYTE && current > 0);
        for (_, b) in backups {
            assert!(std::fs::metadata(b).unwrap().len() <= MEGABYTE);
        }
    }
}
