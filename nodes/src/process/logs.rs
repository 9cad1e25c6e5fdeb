//! Container logs in the CRI format the kubelet reads (`<RFC 3339 nano> <stream> <F|P>
//! <content>`, one line per output line, `P` for a fragment of a longer line), and their
//! reading as `GET /containerLogs` serves them: `tailLines`, `sinceSeconds`/`sinceTime`,
//! `timestamps`, `limitBytes`, `follow`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use k8s_openapi::jiff::Timestamp;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Mutex, broadcast, mpsc, watch};

/// Longest line written as one entry; longer ones are split into `P` fragments (as
/// containerd's 16 KiB buffer).
const MAX_LINE: usize = 16 * 1024;
/// Size at which a container instance's log file is rotated, as the kubelet's
/// `containerLogMaxSize` (10 MiB).
pub(crate) const MAX_LOG_BYTES: u64 = 10 * 1024 * 1024;
/// Log files kept per container instance, the current one included, as the kubelet's
/// `containerLogMaxFiles` (5); the oldest rotated file is deleted past it.
pub(crate) const MAX_LOG_FILES: u64 = 5;

/// A container instance's log file, shared by its stdout and stderr pumps. Once it
/// reaches [`MAX_LOG_BYTES`] it is renamed to `<path>.<n>` (n counting up) and writing
/// continues in a new file at `path`, so readers of `path` see the latest output.
pub(crate) struct LogFile {
    path: PathBuf,
    file: Mutex<Current>,
}

/// The open file, the bytes written to it, and how many rotations happened.
struct Current {
    file: tokio::fs::File,
    written: u64,
    rotations: u64,
}

/// The name of the `n`th rotated file of `path`.
fn rotated(path: &Path, n: u64) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n:06}"));
    PathBuf::from(name)
}

impl LogFile {
    /// Creates (truncates) the file at `path`.
    pub(crate) async fn create(path: &Path) -> std::io::Result<Arc<Self>> {
        let file = tokio::fs::File::create(path).await?;
        Ok(Arc::new(LogFile {
            path: path.to_path_buf(),
            file: Mutex::new(Current {
                file,
                written: 0,
                rotations: 0,
            }),
        }))
    }

    async fn write_entry(&self, stream: &str, tag: char, content: &[u8]) {
        let mut line = format!("{} {stream} {tag} ", Timestamp::now()).into_bytes();
        line.extend_from_slice(content);
        line.push(b'\n');
        let mut cur = self.file.lock().await;
        if cur.written > 0 && cur.written + line.len() as u64 > MAX_LOG_BYTES {
            self.rotate(&mut cur).await;
        }
        cur.written += line.len() as u64;
        if let Err(e) = cur.file.write_all(&line).await {
            tracing::debug!(error = %e, "container log write failed");
        }
    }

    /// Renames the current file aside, deletes the oldest rotated file past
    /// [`MAX_LOG_FILES`], and opens a fresh file at `path`.
    async fn rotate(&self, cur: &mut Current) {
        let _ = cur.file.flush().await;
        cur.rotations += 1;
        let n = cur.rotations;
        if let Err(e) = tokio::fs::rename(&self.path, rotated(&self.path, n)).await {
            tracing::warn!(error = %e, path = %self.path.display(), "container log rotation failed");
            return;
        }
        if n >= MAX_LOG_FILES {
            let _ = tokio::fs::remove_file(rotated(&self.path, n + 1 - MAX_LOG_FILES)).await;
        }
        match tokio::fs::File::create(&self.path).await {
            Ok(f) => {
                cur.file = f;
                cur.written = 0;
            }
            Err(e) => {
                tracing::warn!(error = %e, path = %self.path.display(), "container log reopen failed");
            }
        }
    }
}

/// Copies `reader` (a container's stdout or stderr) into `log` line by line and to
/// `output` (for attach) until EOF.
pub(crate) async fn pump(
    mut reader: impl AsyncRead + Unpin,
    stream: &'static str,
    log: Arc<LogFile>,
    output: broadcast::Sender<(u8, Bytes)>,
) {
    let channel = if stream == "stdout" { 1 } else { 2 };
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 8192];
    loop {
        let n = match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        let _ = output.send((channel, Bytes::copy_from_slice(chunk)));
        pending.extend_from_slice(chunk);
        while let Some(pos) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=pos).collect();
            log.write_entry(stream, 'F', &line[..line.len() - 1]).await;
        }
        while pending.len() >= MAX_LINE {
            let part: Vec<u8> = pending.drain(..MAX_LINE).collect();
            log.write_entry(stream, 'P', &part).await;
        }
    }
    if !pending.is_empty() {
        log.write_entry(stream, 'P', &pending).await;
    }
}

/// How a log is read (`PodLogOptions` as the kubelet gets them).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ReadOptions {
    /// Keep streaming until the container instance ends.
    pub(crate) follow: bool,
    /// Only the last N lines.
    pub(crate) tail_lines: Option<usize>,
    /// Only entries at or after this instant.
    pub(crate) since: Option<Timestamp>,
    /// Prefix each line with its timestamp.
    pub(crate) timestamps: bool,
    /// Stop after this many bytes.
    pub(crate) limit_bytes: Option<u64>,
}

/// One parsed entry.
struct Entry<'a> {
    time: &'a str,
    full: bool,
    content: &'a [u8],
}

fn parse(line: &[u8]) -> Option<Entry<'_>> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let time = std::str::from_utf8(parts.next()?).ok()?;
    let _stream = parts.next()?;
    let tag = parts.next()?;
    let content = parts.next().unwrap_or_default();
    Some(Entry {
        time,
        full: tag != b"P",
        content,
    })
}

/// Renders entries of `data` (whole lines) into `out` with `opts`; `budget` counts down
/// `limitBytes`. Returns false once the budget is spent.
fn render(data: &[u8], opts: &ReadOptions, budget: &mut Option<u64>, out: &mut Vec<u8>) -> bool {
    let mut at_line_start = true;
    for line in data.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let Some(e) = parse(line) else { continue };
        if let Some(since) = opts.since
            && e.time.parse::<Timestamp>().is_ok_and(|t| t < since)
        {
            continue;
        }
        let mut piece = Vec::with_capacity(e.content.len() + 40);
        if opts.timestamps && at_line_start {
            piece.extend_from_slice(e.time.as_bytes());
            piece.push(b' ');
        }
        piece.extend_from_slice(e.content);
        if e.full {
            piece.push(b'\n');
        }
        at_line_start = e.full;
        if let Some(left) = budget {
            let take = (*left).min(piece.len() as u64) as usize;
            out.extend_from_slice(&piece[..take]);
            *left -= take as u64;
            if *left == 0 {
                return false;
            }
        } else {
            out.extend_from_slice(&piece);
        }
    }
    true
}

/// The start offset of the last `n` full lines of `data`.
fn tail_start(data: &[u8], n: usize) -> usize {
    if n == 0 {
        return data.len();
    }
    let mut count = 0;
    let mut i = data.len();
    // Walk entries backwards; a line ends at an `F` entry.
    let lines: Vec<(usize, bool)> = {
        let mut v = Vec::new();
        let mut start = 0;
        for (pos, b) in data.iter().enumerate() {
            if *b == b'\n' {
                let full = parse(&data[start..pos]).is_none_or(|e| e.full);
                v.push((start, full));
                start = pos + 1;
            }
        }
        v
    };
    for (start, full) in lines.iter().rev() {
        if *full {
            if count == n {
                return i;
            }
            count += 1;
        }
        i = *start;
    }
    i
}

/// Streams the log at `path` into `tx` as `opts` say; with `follow`, keeps reading until
/// `done` turns true and the file is read to its end (or the receiver goes away).
pub(crate) async fn stream(
    path: PathBuf,
    opts: ReadOptions,
    mut done: Option<watch::Receiver<bool>>,
    tx: mpsc::Sender<Bytes>,
) {
    let data = tokio::fs::read(&path).await.unwrap_or_default();
    let complete = data.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
    let start = opts
        .tail_lines
        .map_or(0, |n| tail_start(&data[..complete], n));
    let mut budget = opts.limit_bytes;
    let mut out = Vec::new();
    let more = render(&data[start..complete], &opts, &mut budget, &mut out);
    if !out.is_empty() && tx.send(Bytes::from(out)).await.is_err() {
        return;
    }
    if !more || !opts.follow {
        return;
    }
    let mut offset = complete as u64;
    let mut file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(_) => return,
    };
    let mut carry: Vec<u8> = Vec::new();
    // The file now at `path` once the one being read was rotated away; switched to after
    // the rotated one is read to its end.
    let mut next: Option<tokio::fs::File> = None;
    loop {
        let finished = done.as_ref().is_none_or(|d| *d.borrow());
        let mut chunk = Vec::new();
        if tokio::io::AsyncSeekExt::seek(&mut file, std::io::SeekFrom::Start(offset))
            .await
            .is_ok()
        {
            let _ = (&mut file).take(1 << 20).read_to_end(&mut chunk).await;
        }
        offset += chunk.len() as u64;
        carry.extend_from_slice(&chunk);
        if let Some(p) = carry.iter().rposition(|b| *b == b'\n') {
            let lines: Vec<u8> = carry.drain(..=p).collect();
            let mut out = Vec::new();
            let more = render(&lines, &opts, &mut budget, &mut out);
            if !out.is_empty() && tx.send(Bytes::from(out)).await.is_err() {
                return;
            }
            if !more {
                return;
            }
        }
        if !chunk.is_empty() {
            continue;
        }
        if let Some(f) = next.take() {
            file = f;
            offset = 0;
            continue;
        }
        if let Some(f) = rotated_away(&path, &file).await {
            next = Some(f);
            continue;
        }
        if finished {
            return;
        }
        let wait = tokio::time::sleep(Duration::from_millis(100));
        match done.as_mut() {
            Some(d) => {
                tokio::select! {
                    () = wait => {}
                    _ = d.changed() => {}
                    () = tx.closed() => return,
                }
            }
            None => wait.await,
        }
    }
}

/// The file now at `path` when it is no longer `file` (the log was rotated).
async fn rotated_away(path: &Path, file: &tokio::fs::File) -> Option<tokio::fs::File> {
    use std::os::unix::fs::MetadataExt;
    let now = tokio::fs::metadata(path).await.ok()?;
    let open = file.metadata().await.ok()?;
    if now.ino() == open.ino() && now.dev() == open.dev() {
        return None;
    }
    tokio::fs::File::open(path).await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &[u8] = b"2026-01-01T00:00:01.5Z stdout F one\n2026-01-01T00:00:02Z stderr P tw\n2026-01-01T00:00:02.1Z stderr F o\n2026-01-01T00:00:03Z stdout F three\n";

    fn read(opts: ReadOptions) -> String {
        let complete = LOG.len();
        let start = opts
            .tail_lines
            .map_or(0, |n| tail_start(&LOG[..complete], n));
        let mut budget = opts.limit_bytes;
        let mut out = Vec::new();
        render(&LOG[start..], &opts, &mut budget, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[tokio::test]
    async fn a_full_log_is_rotated_keeping_five_files_and_follow_crosses_rotations() {
        let dir = std::env::temp_dir().join(format!("capstan-logs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("0.log");
        let log = LogFile::create(&path).await.unwrap();
        let (tx, mut rx) = mpsc::channel(1024);
        let (done_tx, done_rx) = watch::channel(false);
        let follow = ReadOptions {
            follow: true,
            ..Default::default()
        };
        let reader = tokio::spawn(stream(path.clone(), follow, Some(done_rx), tx));
        let filler = vec![b'x'; 1000];
        let lines = 60 * 1024;
        let mut expected = 0usize;
        // Checks the lines the follower sent are the next ones in order.
        let check = |chunk: Bytes, expected: &mut usize| {
            for line in chunk.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                assert!(line.starts_with(format!("{expected:08} ").as_bytes()));
                *expected += 1;
            }
        };
        for i in 0..lines {
            let mut content = format!("{i:08} ").into_bytes();
            content.extend_from_slice(&filler);
            log.write_entry("stdout", 'F', &content).await;
            // Let the follower catch up every MiB (it may skip a file only when it lags
            // more than a whole rotation, as the kubelet's reader).
            if i % 1024 == 1023 {
                while expected <= i {
                    let chunk = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                        .await
                        .unwrap()
                        .unwrap();
                    check(chunk, &mut expected);
                }
            }
        }
        let files = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(files, MAX_LOG_FILES as usize);
        for entry in std::fs::read_dir(&dir).unwrap() {
            assert!(entry.unwrap().metadata().unwrap().len() <= MAX_LOG_BYTES);
        }
        let (tail_tx, mut tail_rx) = mpsc::channel(4);
        let tail = ReadOptions {
            tail_lines: Some(1),
            ..Default::default()
        };
        stream(path.clone(), tail, None, tail_tx).await;
        let last = tail_rx.recv().await.unwrap();
        assert!(last.starts_with(format!("{:08} ", lines - 1).as_bytes()));
        done_tx.send(true).unwrap();
        while let Some(chunk) = rx.recv().await {
            check(chunk, &mut expected);
        }
        reader.await.unwrap();
        assert_eq!(expected, lines);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn logs_are_read_with_tail_since_timestamps_and_limits() {
        assert_eq!(read(ReadOptions::default()), "one\ntwo\nthree\n");
        let tail = ReadOptions {
            tail_lines: Some(2),
            ..Default::default()
        };
        assert_eq!(read(tail), "two\nthree\n");
        let since = ReadOptions {
            since: Some("2026-01-01T00:00:02.05Z".parse().unwrap()),
            ..Default::default()
        };
        assert_eq!(read(since), "o\nthree\n");
        let stamps = ReadOptions {
            timestamps: true,
            tail_lines: Some(1),
            ..Default::default()
        };
        assert_eq!(read(stamps), "2026-01-01T00:00:03Z three\n");
        let limited = ReadOptions {
            limit_bytes: Some(5),
            ..Default::default()
        };
        assert_eq!(read(limited), "one\nt");
        let none = ReadOptions {
            tail_lines: Some(0),
            ..Default::default()
        };
        assert_eq!(read(none), "");
    }
}
