//! The terminal of an `exec -t`: a pseudo-terminal opened in the container's own devpts
//! (`/proc/<init>/root/dev/ptmx`, so the command sees `/dev/pts/N` as `tty` names it), its
//! slave given to the command as stdin/stdout/stderr and controlling terminal, its master
//! kept by the kubelet to carry the bytes and to apply the client's window size
//! (`TIOCSWINSZ`, which also signals `SIGWINCH` to the terminal's foreground group).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{Mode, OFlags};
use rustix::pty::OpenptFlags;
use rustix::termios::Winsize;

/// A pseudo-terminal pair.
pub(crate) struct Pty {
    /// The kubelet's side: what the command writes is read here, what is written here is
    /// the command's input.
    pub(crate) master: File,
    /// The command's side.
    pub(crate) slave: OwnedFd,
}

/// Opens a pseudo-terminal in the devpts of the container whose first process is
/// `init_pid` (the host's `/dev/ptmx` if that fails), its slave owned by `uid`/`gid` as a
/// runtime's terminal is.
pub(crate) fn open(init_pid: u32, uid: u32, gid: u32) -> io::Result<Pty> {
    open_at(&format!("/proc/{init_pid}/root/dev/ptmx"), uid, gid).or_else(|e| {
        tracing::debug!(init_pid, error = %e, "container devpts unavailable, using the host's");
        open_at("/dev/ptmx", uid, gid)
    })
}

/// Opens a pseudo-terminal through the multiplexer `ptmx` (a devpts' `ptmx` node), its
/// slave owned by `uid`/`gid`.
pub(crate) fn open_at(ptmx: &str, uid: u32, gid: u32) -> io::Result<Pty> {
    let flags = OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC;
    let master = rustix::fs::open(ptmx, flags, Mode::empty())?;
    rustix::pty::unlockpt(&master)?;
    let slave = rustix::pty::ioctl_tiocgptpeer(
        &master,
        OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC,
    )?;
    if let Err(e) = rustix::fs::fchown(
        &slave,
        Some(rustix::fs::Uid::from_raw(uid)),
        Some(rustix::fs::Gid::from_raw(gid)),
    ) {
        tracing::debug!(uid, error = %e, "could not hand the terminal to the container's user");
    }
    Ok(Pty {
        master: File::from(master),
        slave,
    })
}

/// The number `N` of the terminal whose master is `master` (its slave is `pts/N` of its
/// devpts).
pub(crate) fn number(master: impl AsFd) -> io::Result<u32> {
    let name = rustix::pty::ptsname(master, Vec::new())?;
    name.to_string_lossy()
        .rsplit('/')
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| io::Error::other("unexpected terminal name"))
}

/// Sets the window size of the terminal whose master is `master`.
pub(crate) fn resize(master: impl AsFd, size: Size) -> io::Result<()> {
    rustix::termios::tcsetwinsize(
        master,
        Winsize {
            ws_row: size.height,
            ws_col: size.width,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )?;
    Ok(())
}

/// A terminal size as clients send it on the resize channel: `{"Width":W,"Height":H}`
/// (upstream's `remotecommand.TerminalSize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
pub(crate) struct Size {
    /// Columns.
    #[serde(rename = "Width", default)]
    pub(crate) width: u16,
    /// Rows.
    #[serde(rename = "Height", default)]
    pub(crate) height: u16,
}

/// Splits the resize channel's byte stream into sizes: JSON objects one after the other
/// (a SPDY stream may cut or join them anywhere; a WebSocket message holds one or more).
/// Bytes that are not a size are dropped, so bad input never stops the session.
#[derive(Debug, Default)]
pub(crate) struct SizeDecoder {
    pending: Vec<u8>,
}

/// The most a client may leave unparsed on the resize channel.
const MAX_PENDING: usize = 4096;

impl SizeDecoder {
    /// Feeds `data`, returning the complete sizes it finished.
    pub(crate) fn feed(&mut self, data: &[u8]) -> Vec<Size> {
        self.pending.extend_from_slice(data);
        let mut sizes = Vec::new();
        let mut consumed = 0;
        let mut it =
            serde_json::Deserializer::from_slice(&self.pending).into_iter::<serde_json::Value>();
        loop {
            match it.next() {
                Some(Ok(v)) => {
                    consumed = it.byte_offset();
                    match serde_json::from_value::<Size>(v) {
                        Ok(s) => sizes.push(s),
                        Err(e) => tracing::debug!(error = %e, "resize message is not a size"),
                    }
                }
                Some(Err(e)) if e.is_eof() => break,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "bad resize message dropped");
                    consumed = self.pending.len();
                    break;
                }
                None => {
                    consumed = self.pending.len();
                    break;
                }
            }
        }
        self.pending.drain(..consumed);
        if self.pending.len() > MAX_PENDING {
            self.pending.clear();
        }
        sizes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_found_whatever_the_cuts() {
        let mut d = SizeDecoder::default();
        assert!(d.feed(br#"{"Width":80,"#).is_empty());
        let got = d.feed(b"\"Height\":24}\n{\"Width\":100,\"Height\":30}\n{\"Wid");
        assert_eq!(
            got,
            vec![
                Size {
                    width: 80,
                    height: 24
                },
                Size {
                    width: 100,
                    height: 30
                }
            ]
        );
        assert_eq!(
            d.feed(br#"th":1,"Height":2}"#),
            vec![Size {
                width: 1,
                height: 2
            }]
        );
        assert!(d.feed(b"garbage").is_empty());
        assert_eq!(
            d.feed(br#"{"Width":5,"Height":6}"#),
            vec![Size {
                width: 5,
                height: 6
            }]
        );
    }

    #[test]
    fn a_window_size_reaches_the_terminal() {
        let pty = open(0, 0, 0).unwrap();
        resize(
            &pty.master,
            Size {
                width: 123,
                height: 45,
            },
        )
        .unwrap();
        let ws = rustix::termios::tcgetwinsize(&pty.slave).unwrap();
        assert_eq!((ws.ws_col, ws.ws_row), (123, 45));
    }
}
