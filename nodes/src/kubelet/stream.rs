//! `exec` and `attach` sessions over the Kubernetes stream protocols, whatever carries them
//! ([`Session`]):
//!
//! - WebSocket `v5.channel.k8s.io`, `v4.channel.k8s.io`: each binary message starts with
//!   its channel (0 stdin, 1 stdout, 2 stderr, 3 error — the final `metav1.Status`, with the
//!   exit code as an `ExitCode` cause —, 4 resize); in v5 a client closes stdin with
//!   `[255, 0]` ([`ws_session`]);
//! - SPDY/3.1 `v4.channel.k8s.io` (kubectl up to 1.29): one SPDY stream per channel, named
//!   by its `streamType` header (`error`, `stdin`, `stdout`, `stderr`, `resize`), stdin ending
//!   at the client's FIN ([`spdy_session`]).
//!
//! With a terminal (`tty`), the command runs on a pseudo-terminal ([`pty`]) and the sizes
//! the client sends on the resize channel (`{"Width":W,"Height":H}`) are applied to it; the
//! command starts once the client's first size is there (kubectl sends it right after
//! connecting; a client that sends none is waited for [`FIRST_SIZE_WAIT`] at most).

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::pty::{self, Size, SizeDecoder};
use super::spdy;
use super::ws::{self, Message};
use crate::process::registry::Instance;
use crate::process::sandbox;

/// How long a SPDY client has to open the streams it asked for (upstream's
/// `streamCreationTimeout` default).
const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a terminal exec waits for the client's first window size before it starts.
const FIRST_SIZE_WAIT: Duration = Duration::from_millis(500);

/// How long a terminal's last output is read after its command exited (a background
/// process that keeps the terminal open must not hold the session).
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// The end-of-file character of a terminal in canonical mode (`VEOF`, ^D): what a
/// terminal's input gets when the client closes stdin.
const VEOF: u8 = 0x04;

/// Which streams the client asked for.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Streams {
    /// stdin.
    pub(crate) stdin: bool,
    /// stdout.
    pub(crate) stdout: bool,
    /// stderr.
    pub(crate) stderr: bool,
    /// A terminal.
    pub(crate) tty: bool,
}

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
const CLOSE: u8 = 255;

/// The final status of an exec: Success, or the upstream NonZeroExitCode failure.
pub(crate) fn exit_status(argv: &[String], code: i32) -> Value {
    if code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
            argv.join(" ")
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

/// An internal error as the error channel carries it.
pub(crate) fn error_status(message: &str) -> Value {
    json!({"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError", "code": 500})
}

fn channel_message(channel: u8, data: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(data.len() + 1);
    m.push(channel);
    m.extend_from_slice(data);
    m
}

/// What a session sends to the client.
pub(crate) enum Outgoing {
    /// Bytes on a channel (stdout, stderr, error).
    Data(u8, Vec<u8>),
    /// A WebSocket pong.
    Pong(Vec<u8>),
    /// The end of the session.
    Close,
}

/// What the client sent: stdin bytes, or the end of stdin.
pub(crate) enum Input {
    /// stdin bytes.
    Data(Bytes),
    /// The end of stdin.
    Eof,
}

/// A client's stream session over WebSocket or SPDY: channel data out, stdin and window
/// sizes in.
pub(crate) struct Session {
    out: mpsc::Sender<Outgoing>,
    input: mpsc::Receiver<Input>,
    /// The client's latest terminal size, if it sent one.
    resize: watch::Receiver<Option<Size>>,
    writer: JoinHandle<()>,
    reader: JoinHandle<()>,
}

impl Session {
    /// Sends the final status on the error channel, closes, and waits for the writes.
    async fn finish(self, status: Value) {
        let _ = self
            .out
            .send(Outgoing::Data(ERROR, status.to_string().into_bytes()))
            .await;
        let _ = self.out.send(Outgoing::Close).await;
        drop(self.out);
        let _ = self.writer.await;
        self.reader.abort();
    }
}

/// A WebSocket session (`v5.channel.k8s.io`, `v4.channel.k8s.io`) over the upgraded `io`.
pub(crate) fn ws_session<IO>(io: IO) -> Session
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (r, w) = tokio::io::split(io);
    let (out_tx, out_rx) = mpsc::channel::<Outgoing>(64);
    let writer = tokio::spawn(ws_writer(w, out_rx));
    let (in_tx, input) = mpsc::channel::<Input>(64);
    let (size_tx, resize) = watch::channel(None);
    let reader = tokio::spawn(ws_reader(r, in_tx, size_tx, out_tx.clone()));
    Session {
        out: out_tx,
        input,
        resize,
        writer,
        reader,
    }
}

/// Writes whatever the session sends, answering pings; ends with a close frame.
async fn ws_writer<W: AsyncWrite + Unpin>(mut w: W, mut rx: mpsc::Receiver<Outgoing>) {
    while let Some(out) = rx.recv().await {
        let r = match out {
            Outgoing::Data(ch, b) => ws::write_binary(&mut w, &channel_message(ch, &b)).await,
            Outgoing::Pong(p) => ws::write_pong(&mut w, &p).await,
            Outgoing::Close => {
                let _ = ws::write_close(&mut w).await;
                let _ = w.shutdown().await;
                return;
            }
        };
        if r.is_err() {
            return;
        }
    }
}

/// Reads client messages until it closes; stdin goes to `stdin`, window sizes to `sizes`.
async fn ws_reader<R: AsyncRead + Unpin>(
    r: R,
    stdin: mpsc::Sender<Input>,
    sizes: watch::Sender<Option<Size>>,
    out: mpsc::Sender<Outgoing>,
) {
    let mut r = ws::Reader::new(r);
    let mut decoder = SizeDecoder::default();
    let mut pongs = Vec::new();
    loop {
        let msg = r.next(&mut pongs).await;
        for p in pongs.drain(..) {
            let _ = out.send(Outgoing::Pong(p)).await;
        }
        match msg {
            Ok(Message::Data(d)) if d.is_empty() => {}
            Ok(Message::Data(d)) => match d[0] {
                STDIN if d.len() > 1 => {
                    let _ = stdin
                        .send(Input::Data(Bytes::copy_from_slice(&d[1..])))
                        .await;
                }
                CLOSE if d.get(1) == Some(&STDIN) => {
                    let _ = stdin.send(Input::Eof).await;
                }
                RESIZE => {
                    for size in decoder.feed(&d[1..]) {
                        sizes.send_replace(Some(size));
                    }
                }
                _ => {}
            },
            Ok(Message::Close) | Err(_) => {
                let _ = stdin.send(Input::Eof).await;
                return;
            }
        }
    }
}

/// The SPDY streams a `v4.channel.k8s.io` client opens for `streams`, as upstream's
/// kubelet counts them: error always, stdin/stdout as asked, stderr unless a terminal
/// (which merges it), resize with a terminal.
fn expected_stream_types(streams: Streams) -> Vec<&'static str> {
    let mut t = vec!["error"];
    if streams.stdin {
        t.push("stdin");
    }
    if streams.stdout {
        t.push("stdout");
    }
    if streams.stderr && !streams.tty {
        t.push("stderr");
    }
    if streams.tty {
        t.push("resize");
    }
    t
}

/// A SPDY session (`v4.channel.k8s.io`) over the upgraded `io`, once the client opened
/// the streams `streams` implies (`None` if it did not within the timeout).
pub(crate) async fn spdy_session<IO>(io: IO, streams: Streams) -> Option<Session>
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut incoming, sender, conn_writer) = spdy::serve(io);
    let expected = expected_stream_types(streams);
    let mut got: HashMap<String, spdy::Stream> = HashMap::new();
    let gathered = tokio::time::timeout(STREAM_CREATION_TIMEOUT, async {
        while expected.iter().any(|t| !got.contains_key(*t)) {
            let s = incoming.recv().await?;
            let kind = s.header("streamtype").unwrap_or("").to_owned();
            if !expected.contains(&kind.as_str()) || got.contains_key(&kind) {
                tracing::debug!(stream_type = %kind, "unexpected SPDY stream refused");
                sender.reset(s.id, spdy::frame::REFUSED_STREAM).await;
                continue;
            }
            got.insert(kind, s);
        }
        Some(())
    })
    .await;
    if !matches!(gathered, Ok(Some(()))) {
        tracing::debug!(expected = ?expected, got = got.len(), "SPDY client did not open its streams");
        sender.shutdown().await;
        return None;
    }
    let ids: Vec<u32> = got.values().map(|s| s.id).collect();
    let id_of = |t: &str| got.get(t).map(|s| s.id);
    let channels: HashMap<u8, u32> = [(STDOUT, "stdout"), (STDERR, "stderr"), (ERROR, "error")]
        .into_iter()
        .filter_map(|(ch, t)| id_of(t).map(|id| (ch, id)))
        .collect();
    let (in_tx, input) = mpsc::channel::<Input>(64);
    let stdin = got.remove("stdin");
    let resize_stream = got.remove("resize");
    let (size_tx, resize) = watch::channel(None);
    let reader = tokio::spawn(async move {
        // Streams opened later are refused (the receiver stays until the session ends).
        let _incoming = incoming;
        if let Some(mut r) = resize_stream {
            tokio::spawn(async move {
                let mut decoder = SizeDecoder::default();
                while let Some(b) = r.data.recv().await {
                    for size in decoder.feed(&b) {
                        size_tx.send_replace(Some(size));
                    }
                }
            });
        }
        match stdin {
            Some(mut s) => {
                while let Some(b) = s.data.recv().await {
                    if in_tx.send(Input::Data(b)).await.is_err() {
                        return;
                    }
                }
                let _ = in_tx.send(Input::Eof).await;
            }
            None => drop(in_tx),
        }
        std::future::pending::<()>().await;
    });
    let (out_tx, mut out_rx) = mpsc::channel::<Outgoing>(64);
    let writer = tokio::spawn(async move {
        while let Some(out) = out_rx.recv().await {
            match out {
                Outgoing::Data(ch, b) => {
                    if let Some(id) = channels.get(&ch)
                        && !sender.data(*id, &b).await
                    {
                        break;
                    }
                }
                Outgoing::Pong(_) => {}
                Outgoing::Close => break,
            }
        }
        for id in ids {
            sender.fin(id).await;
        }
        sender.shutdown().await;
        let _ = conn_writer.await;
    });
    Some(Session {
        out: out_tx,
        input,
        resize,
        writer,
        reader,
    })
}

async fn pump(mut from: impl AsyncRead + Unpin, channel: u8, out: mpsc::Sender<Outgoing>) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if out
                    .send(Outgoing::Data(channel, buf[..n].to_vec()))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    }
}

/// Runs `argv` in `instance`'s container, bridged to the client's `session`.
pub(crate) async fn exec(
    mut session: Session,
    instance: Instance,
    argv: Vec<String>,
    streams: Streams,
) {
    let out_tx = session.out.clone();
    let in_rx = std::mem::replace(&mut session.input, mpsc::channel(1).1);
    let init = *instance
        .init_pid
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let status = match init {
        None => error_status("the container's process is not running"),
        Some(pid) if streams.tty => {
            let resize = session.resize.clone();
            run_on_terminal(pid, &instance, &argv, streams, in_rx, resize, &out_tx).await
        }
        Some(pid) => run_piped(pid, &instance, &argv, streams, in_rx, &out_tx).await,
    };
    drop(out_tx);
    session.finish(status).await;
}

/// The exit code of a finished child (128 + the signal that killed it).
fn exit_code(status: &std::io::Result<std::process::ExitStatus>) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => s
            .code()
            .or_else(|| s.signal().map(|sig| 128 + sig))
            .unwrap_or(-1),
        Err(_) => -1,
    }
}

/// Runs `argv` with pipes: stdout and stderr on their own channels.
async fn run_piped(
    pid: u32,
    instance: &Instance,
    argv: &[String],
    streams: Streams,
    mut in_rx: mpsc::Receiver<Input>,
    out_tx: &mpsc::Sender<Outgoing>,
) -> Value {
    let mut cmd = sandbox::exec_command(pid, &instance.identity, argv, false);
    cmd.stdin(if streams.stdin {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped());
    cmd.stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Err(e) => return error_status(&format!("failed to exec in container: {e}")),
        Ok(child) => child,
    };
    let stdin_task = child.stdin.take().map(|mut pipe| {
        tokio::spawn(async move {
            while let Some(i) = in_rx.recv().await {
                match i {
                    Input::Data(b) => {
                        if pipe.write_all(&b).await.is_err() {
                            break;
                        }
                    }
                    Input::Eof => break,
                }
            }
        })
    });
    let out = child
        .stdout
        .take()
        .filter(|_| streams.stdout)
        .map(|s| tokio::spawn(pump(s, STDOUT, out_tx.clone())));
    let err = child
        .stderr
        .take()
        .filter(|_| streams.stderr)
        .map(|s| tokio::spawn(pump(s, STDERR, out_tx.clone())));
    let code = exit_code(&child.wait().await);
    for t in [out, err].into_iter().flatten() {
        let _ = t.await;
    }
    if let Some(t) = stdin_task {
        t.abort();
    }
    exit_status(argv, code)
}

/// Runs `argv` on a pseudo-terminal: its output (stdout and stderr merged, as a terminal
/// does) on stdout, the client's window sizes applied as they come.
async fn run_on_terminal(
    pid: u32,
    instance: &Instance,
    argv: &[String],
    streams: Streams,
    mut in_rx: mpsc::Receiver<Input>,
    mut resize: watch::Receiver<Option<Size>>,
    out_tx: &mpsc::Sender<Outgoing>,
) -> Value {
    let id = &instance.identity;
    let terminal = match pty::open(pid, id.uid, id.gid) {
        Ok(t) => t,
        Err(e) => return error_status(&format!("failed to open a terminal: {e}")),
    };
    let _ = tokio::time::timeout(FIRST_SIZE_WAIT, resize.wait_for(Option::is_some)).await;
    if let Some(size) = *resize.borrow_and_update()
        && let Err(e) = pty::resize(&terminal.master, size)
    {
        tracing::debug!(error = %e, "terminal resize failed");
    }
    let ends = (|| {
        Ok::<_, std::io::Error>((
            terminal.slave.try_clone()?,
            terminal.slave.try_clone()?,
            terminal.master.try_clone()?,
            terminal.master.try_clone()?,
        ))
    })();
    let (slave_in, slave_out, master_read, master_write) = match ends {
        Ok(e) => e,
        Err(e) => return error_status(&format!("failed to open a terminal: {e}")),
    };
    let mut cmd = sandbox::exec_command(pid, id, argv, true);
    cmd.stdin(Stdio::from(slave_in));
    cmd.stdout(Stdio::from(slave_out));
    cmd.stderr(Stdio::from(terminal.slave));
    let spawned = cmd.spawn();
    // The command's copies of the slave go with it: the master reads EIO once every
    // process of the terminal is gone.
    drop(cmd);
    let mut child = match spawned {
        Err(e) => return error_status(&format!("failed to exec in container: {e}")),
        Ok(child) => child,
    };
    let master = terminal.master;
    let out = tokio::spawn(pump(
        tokio::fs::File::from_std(master_read),
        STDOUT,
        out_tx.clone(),
    ));
    let stdin_task = streams.stdin.then(|| {
        let mut w = tokio::fs::File::from_std(master_write);
        tokio::spawn(async move {
            while let Some(i) = in_rx.recv().await {
                let bytes = match &i {
                    Input::Data(b) => &b[..],
                    Input::Eof => &[VEOF][..],
                };
                if w.write_all(bytes).await.is_err() || w.flush().await.is_err() {
                    break;
                }
                if matches!(i, Input::Eof) {
                    break;
                }
            }
        })
    });
    let resize_task = tokio::spawn(async move {
        while resize.changed().await.is_ok() {
            let size = *resize.borrow_and_update();
            if let Some(size) = size
                && let Err(e) = pty::resize(&master, size)
            {
                tracing::debug!(error = %e, "terminal resize failed");
            }
        }
    });
    let code = exit_code(&child.wait().await);
    let abort = out.abort_handle();
    if tokio::time::timeout(OUTPUT_DRAIN, out).await.is_err() {
        tracing::debug!("terminal still open after its command exited: output cut");
        abort.abort();
    }
    resize_task.abort();
    if let Some(t) = stdin_task {
        t.abort();
    }
    exit_status(argv, code)
}

/// Attaches the client's `session` to `instance`'s stdin and output until it ends.
pub(crate) async fn attach(mut session: Session, instance: Instance, streams: Streams) {
    let out_tx = session.out.clone();
    let mut in_rx = std::mem::replace(&mut session.input, mpsc::channel(1).1);
    let mut output = instance.output.subscribe();
    let mut done = instance.done.clone();
    let stdin = instance.stdin.clone().filter(|_| streams.stdin);
    // A command on a terminal takes the client's window sizes, the first one included.
    let resize_task = instance.terminal.clone().map(|master| {
        let mut resize = session.resize.clone();
        tokio::spawn(async move {
            loop {
                if let Some(size) = *resize.borrow_and_update()
                    && let Err(e) = pty::resize(&*master, size)
                {
                    tracing::debug!(error = %e, "terminal resize failed");
                }
                if resize.changed().await.is_err() {
                    break;
                }
            }
        })
    });
    let wanted = |channel: u8| {
        (channel == STDOUT && streams.stdout) || (channel == STDERR && streams.stderr)
    };
    let mut exited = false;
    loop {
        tokio::select! {
            got = output.recv() => match got {
                Ok((channel, data)) => {
                    if wanted(channel) && out_tx.send(Outgoing::Data(channel, data.to_vec())).await.is_err() {
                        break;
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => break,
            },
            input = in_rx.recv() => match (input, &stdin) {
                (Some(Input::Data(b)), Some(tx)) => { let _ = tx.send(Some(b)).await; }
                (Some(Input::Eof), Some(tx)) => { let _ = tx.send(None).await; }
                (Some(_), None) => {}
                (None, _) => break,
            },
            () = async { let _ = done.wait_for(|d| *d).await; } => { exited = true; break }
        }
    }
    // `done` is set only once the container's output is all published: what is still queued
    // is the end of it (a last line on stderr after stdout's), and the client gets it too.
    while exited && let Ok((channel, data)) = output.try_recv() {
        if wanted(channel)
            && out_tx
                .send(Outgoing::Data(channel, data.to_vec()))
                .await
                .is_err()
        {
            break;
        }
    }
    if let Some(t) = resize_task {
        t.abort();
    }
    drop(out_tx);
    session
        .finish(json!({"metadata": {}, "status": "Success"}))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_zero_exit_carries_its_code_as_kubectl_reads_it() {
        let argv = vec!["sh".to_owned(), "-c".to_owned(), "exit 3".to_owned()];
        let s = exit_status(&argv, 3);
        assert_eq!(s["reason"], "NonZeroExitCode");
        assert_eq!(s["details"]["causes"][0]["message"], "3");
        assert_eq!(exit_status(&argv, 0)["status"], "Success");
    }
}
