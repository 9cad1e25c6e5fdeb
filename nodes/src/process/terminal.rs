//! The terminal of a container whose spec sets `tty: true`: its command runs on a
//! pseudo-terminal of the container's own devpts (so `tty` names `/dev/pts/N` and the
//! terminal is its controlling terminal), whose master the kubelet keeps to feed the log
//! and attached clients, to write attach's stdin and to apply attach's window sizes.
//!
//! The devpts only exists once the container's setup script has mounted it, so the two
//! meet half-way (see [`sandbox::TTY_READY`]): the script says so on stdout, the kubelet
//! opens a terminal through `/proc/<init>/root/<rootfs>/dev/pts/ptmx` and answers its
//! number on the script's stdin.

use std::io;
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Child;

use super::sandbox;
use crate::kubelet::pty::{self, Pty};

/// How long the container's setup may take to reach its devpts.
const SETUP_WAIT: Duration = Duration::from_secs(20);

/// Opens the terminal of the container instance `child` (started from a [`sandbox::Spec`]
/// with `tty`, its root at `rootfs`) and hands its slave to the script; returns the pair.
/// The caller keeps the slave open until the container has exited: a master whose slave
/// is closed reads EIO, as it would in the moment before the script opens its own.
pub(crate) async fn open(child: &mut Child, rootfs: &Path, uid: u32, gid: u32) -> io::Result<Pty> {
    let unshare_pid = child
        .id()
        .ok_or_else(|| io::Error::other("the container exited"))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| io::Error::other("no setup output"))?;
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    let read = tokio::time::timeout(SETUP_WAIT, reader.read_line(&mut line)).await;
    child.stdout = Some(reader.into_inner());
    match read {
        Ok(Ok(n)) if n > 0 && line.trim_end() == sandbox::TTY_READY => {}
        Ok(Ok(_)) => return Err(io::Error::other("the container setup failed")),
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err(io::Error::other("the container setup took too long")),
    }
    let init = sandbox::init_pid(unshare_pid)
        .await
        .ok_or_else(|| io::Error::other("the container's first process is gone"))?;
    let ptmx = format!("/proc/{init}/root{}/dev/pts/ptmx", rootfs.display());
    let terminal = pty::open_at(&ptmx, uid, gid)?;
    let n = pty::number(&terminal.master)?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| io::Error::other("no setup input"))?;
    stdin.write_all(format!("{n}\n").as_bytes()).await?;
    stdin.flush().await?;
    tracing::debug!(init, n, "container terminal open");
    Ok(terminal)
}
