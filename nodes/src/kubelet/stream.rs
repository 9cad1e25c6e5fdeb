//! `exec` and `attach` sessions over the Kubernetes WebSocket stream protocols
//! (`v5.channel.k8s.io`, `v4.channel.k8s.io`): each binary message starts with its channel
//! (0 stdin, 1 stdout, 2 stderr, 3 error — the final `metav1.Status`, with the exit code as
//! an `ExitCode` cause —, 4 resize); in v5 a client closes stdin with `[255, 0]`.

use std::process::Stdio;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::ws::{self, Message};
use crate::process::registry::Instance;
use crate::process::sandbox;

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

/// Writes whatever the session sends, answering pings; ends with a close frame.
async fn writer<W: AsyncWrite + Unpin>(mut w: W, mut rx: mpsc::Receiver<Outgoing>) {
    while let Some(out) = rx.recv().await {
        let r = match out {
            Outgoing::Data(b) => ws::write_binary(&mut w, &b).await,
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

enum Outgoing {
    Data(Vec<u8>),
    Pong(Vec<u8>),
    Close,
}

/// What the client sent: stdin bytes, or the end of stdin.
enum Input {
    Data(Bytes),
    Eof,
}

/// Reads client messages until it closes; stdin goes to `stdin`.
async fn reader<R: AsyncRead + Unpin>(
    r: R,
    stdin: mpsc::Sender<Input>,
    out: mpsc::Sender<Outgoing>,
) {
    let mut r = ws::Reader::new(r);
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
                // The process runtime's terminals keep their size.
                RESIZE => {}
                _ => {}
            },
            Ok(Message::Close) | Err(_) => {
                let _ = stdin.send(Input::Eof).await;
                return;
            }
        }
    }
}

async fn pump(mut from: impl AsyncRead + Unpin, channel: u8, out: mpsc::Sender<Outgoing>) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if out
                    .send(Outgoing::Data(channel_message(channel, &buf[..n])))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    }
}

/// Runs `argv` in `instance`'s container, bridged to the WebSocket `io`.
pub(crate) async fn exec<IO>(io: IO, instance: Instance, argv: Vec<String>, streams: Streams)
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (r, w) = tokio::io::split(io);
    let (out_tx, out_rx) = mpsc::channel::<Outgoing>(64);
    let write_task = tokio::spawn(writer(w, out_rx));
    let (in_tx, mut in_rx) = mpsc::channel::<Input>(64);
    let read_task = tokio::spawn(reader(r, in_tx, out_tx.clone()));
    let init = *instance
        .init_pid
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let status = match init {
        None => error_status("the container's process is not running"),
        Some(pid) => {
            let run_argv = if streams.tty {
                // A terminal from util-linux `script` (the output is the pty's, with \r\n).
                let line = argv
                    .iter()
                    .map(|a| sandbox::quote(a))
                    .collect::<Vec<_>>()
                    .join(" ");
                vec![
                    "/usr/bin/script".to_owned(),
                    "-q".to_owned(),
                    "-f".to_owned(),
                    "-e".to_owned(),
                    "-c".to_owned(),
                    line,
                    "/dev/null".to_owned(),
                ]
            } else {
                argv.clone()
            };
            let mut cmd = sandbox::exec_command(pid, &instance.identity, &run_argv, false);
            if streams.tty {
                cmd.env("SHELL", "/bin/sh");
                cmd.env("TERM", "xterm");
            }
            cmd.stdin(if streams.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            });
            cmd.stdout(Stdio::piped());
            cmd.stderr(Stdio::piped());
            match cmd.spawn() {
                Err(e) => error_status(&format!("failed to exec in container: {e}")),
                Ok(mut child) => {
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
                        .filter(|_| streams.stdout || streams.tty)
                        .map(|s| tokio::spawn(pump(s, STDOUT, out_tx.clone())));
                    let err = child
                        .stderr
                        .take()
                        .filter(|_| streams.stderr || streams.tty)
                        .map(|s| {
                            tokio::spawn(pump(
                                s,
                                if streams.tty { STDOUT } else { STDERR },
                                out_tx.clone(),
                            ))
                        });
                    let code = match child.wait().await {
                        Ok(s) => {
                            use std::os::unix::process::ExitStatusExt;
                            s.code()
                                .or_else(|| s.signal().map(|sig| 128 + sig))
                                .unwrap_or(-1)
                        }
                        Err(_) => -1,
                    };
                    for t in [out, err].into_iter().flatten() {
                        let _ = t.await;
                    }
                    if let Some(t) = stdin_task {
                        t.abort();
                    }
                    exit_status(&argv, code)
                }
            }
        }
    };
    let _ = out_tx
        .send(Outgoing::Data(channel_message(
            ERROR,
            status.to_string().as_bytes(),
        )))
        .await;
    let _ = out_tx.send(Outgoing::Close).await;
    drop(out_tx);
    let _ = write_task.await;
    read_task.abort();
}

/// Attaches the WebSocket `io` to `instance`'s stdin and output until it ends.
pub(crate) async fn attach<IO>(io: IO, instance: Instance, streams: Streams)
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (r, w) = tokio::io::split(io);
    let (out_tx, out_rx) = mpsc::channel::<Outgoing>(64);
    let write_task = tokio::spawn(writer(w, out_rx));
    let (in_tx, mut in_rx) = mpsc::channel::<Input>(64);
    let read_task = tokio::spawn(reader(r, in_tx, out_tx.clone()));
    let mut output = instance.output.subscribe();
    let mut done = instance.done.clone();
    let stdin = instance.stdin.clone().filter(|_| streams.stdin);
    loop {
        tokio::select! {
            got = output.recv() => match got {
                Ok((channel, data)) => {
                    let wanted = (channel == STDOUT && streams.stdout) || (channel == STDERR && streams.stderr);
                    if wanted && out_tx.send(Outgoing::Data(channel_message(channel, &data))).await.is_err() {
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
            () = async { let _ = done.wait_for(|d| *d).await; } => break,
        }
    }
    let status = json!({"metadata": {}, "status": "Success"});
    let _ = out_tx
        .send(Outgoing::Data(channel_message(
            ERROR,
            status.to_string().as_bytes(),
        )))
        .await;
    let _ = out_tx.send(Outgoing::Close).await;
    drop(out_tx);
    let _ = write_task.await;
    read_task.abort();
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
