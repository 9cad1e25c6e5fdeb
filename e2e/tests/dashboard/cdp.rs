//! A small Chrome DevTools Protocol client for the dashboard test: starts Debian's headless
//! `chromium` with `--remote-debugging-port=0`, reads the DevTools URL it prints on stderr,
//! and speaks CDP's JSON messages over a blocking WebSocket (RFC 6455 client side: masked
//! text frames out, unmasked frames in, pings answered). One browser connection carries
//! every page through flattened target sessions (`Target.attachToTarget`, `flatten: true`).
//!
//! Hand-written rather than a crate: chromiumoxide and headless_chrome pull in a large
//! async stack (and minutes of build on 2 cores) for the five commands the test sends; the
//! kubelet's WebSocket (nodes/src/kubelet/ws.rs) is the server side, async, and crate-private.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine;
use serde_json::{Value, json};

/// A running headless Chromium and the WebSocket to its browser target.
pub(crate) struct Browser {
    child: Child,
    ws: WebSocket,
    next_id: u64,
    _profile: tempfile::TempDir,
}

/// One page (tab), driven through its flattened session.
pub(crate) struct Page {
    /// The CDP session id of the page.
    pub(crate) session: String,
}

impl Browser {
    /// Starts `chromium` headless with a throw-away profile and connects to it.
    pub(crate) fn launch() -> Result<Self> {
        let profile = tempfile::tempdir()?;
        let mut child = Command::new("chromium")
            .args([
                "--headless=new",
                "--no-sandbox",
                "--ignore-certificate-errors",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--window-size=1400,900",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("spawning chromium (Debian package `chromium`; scripts/test-deps.sh)")?;
        let stderr = child.stderr.take().context("chromium stderr")?;
        let (tx, rx) = std::sync::mpsc::channel();
        // Read stderr to the end on a thread (a full pipe would block the browser).
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !sent && let Some(url) = line.strip_prefix("DevTools listening on ") {
                    let _ = tx.send(url.trim().to_owned());
                    sent = true;
                }
            }
        });
        let url = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(url) => url,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("chromium printed no DevTools URL within 30 s");
            }
        };
        let ws = WebSocket::connect(&url)?;
        Ok(Browser {
            child,
            ws,
            next_id: 0,
            _profile: profile,
        })
    }

    /// Sends one command (to the browser, or to a page's session) and returns its result;
    /// events read meanwhile are dropped.
    pub(crate) fn call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method });
        msg["params"] = params;
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws.send_text(&msg.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if Instant::now() > deadline {
                bail!("no answer to {method} within 60 s");
            }
            let text = self.ws.read_text()?;
            let v: Value = serde_json::from_str(&text)?;
            if v.get("id").and_then(Value::as_u64) == Some(id) {
                if let Some(err) = v.get("error") {
                    bail!("{method}: {err}");
                }
                return Ok(v.get("result").cloned().unwrap_or(Value::Null));
            }
        }
    }

    /// Opens a new tab at `url` (its own sessionStorage) and attaches to it.
    pub(crate) fn new_page(&mut self, url: &str) -> Result<Page> {
        let target = self.call(None, "Target.createTarget", json!({ "url": "about:blank" }))?;
        let target = target["targetId"]
            .as_str()
            .ok_or_else(|| anyhow!("no targetId"))?
            .to_owned();
        let attached = self.call(
            None,
            "Target.attachToTarget",
            json!({ "targetId": target, "flatten": true }),
        )?;
        let session = attached["sessionId"]
            .as_str()
            .ok_or_else(|| anyhow!("no sessionId"))?
            .to_owned();
        let page = Page { session };
        self.call(Some(&page.session), "Page.enable", json!({}))?;
        self.call(Some(&page.session), "Runtime.enable", json!({}))?;
        self.call(
            Some(&page.session),
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": 1400, "height": 900, "deviceScaleFactor": 1, "mobile": false }),
        )?;
        self.call(Some(&page.session), "Page.navigate", json!({ "url": url }))?;
        Ok(page)
    }

    /// Evaluates `expression` in the page (promises awaited) and returns its value.
    pub(crate) fn eval(&mut self, page: &Page, expression: &str) -> Result<Value> {
        let r = self.call(
            Some(&page.session),
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        )?;
        if let Some(ex) = r.get("exceptionDetails") {
            bail!("evaluating {expression}: {ex}");
        }
        Ok(r["result"]["value"].clone())
    }

    /// Polls `expression` until it is `true`, or fails after `limit` with `what` and the
    /// page's text.
    pub(crate) fn wait_for(
        &mut self,
        page: &Page,
        expression: &str,
        limit: Duration,
        what: &str,
    ) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            // Errors while the page loads (no document yet) count as "not yet".
            if let Ok(Value::Bool(true)) = self.eval(page, expression) {
                return Ok(());
            }
            if Instant::now() > deadline {
                let text = self
                    .eval(page, "document.body ? document.body.innerText : ''")
                    .unwrap_or_default();
                bail!("{what}: not seen within {limit:?}; page text:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Saves a PNG screenshot of the page to `path`.
    pub(crate) fn screenshot(&mut self, page: &Page, path: &Path) -> Result<()> {
        let r = self.call(
            Some(&page.session),
            "Page.captureScreenshot",
            json!({ "format": "png" }),
        )?;
        let data = r["data"]
            .as_str()
            .ok_or_else(|| anyhow!("no screenshot data"))?;
        let png = base64::engine::general_purpose::STANDARD.decode(data)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, png)?;
        Ok(())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking WebSocket client connection (`ws://` only: DevTools listens on loopback).
struct WebSocket {
    stream: TcpStream,
}

impl WebSocket {
    fn connect(url: &str) -> Result<Self> {
        let rest = url
            .strip_prefix("ws://")
            .ok_or_else(|| anyhow!("not a ws:// URL: {url}"))?;
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let mut stream = TcpStream::connect(authority)?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        let key = base64::engine::general_purpose::STANDARD.encode(nonce());
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )?;
        // The answer's head, byte by byte so no frame bytes are consumed.
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            stream.read_exact(&mut b)?;
            head.push(b[0]);
            if head.len() > 16 * 1024 {
                bail!("WebSocket handshake answer too long");
            }
        }
        let head = String::from_utf8_lossy(&head);
        if !head.starts_with("HTTP/1.1 101") {
            bail!("WebSocket handshake refused: {head}");
        }
        Ok(WebSocket { stream })
    }

    fn send_frame(&mut self, opcode: u8, payload: &[u8]) -> Result<()> {
        let mut frame = vec![0x80 | opcode];
        let len = payload.len();
        if len < 126 {
            frame.push(0x80 | len as u8);
        } else if len <= 0xffff {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            frame.push(0x80 | 127);
            frame.extend_from_slice(&(len as u64).to_be_bytes());
        }
        let mask: [u8; 4] = nonce()[..4].try_into().unwrap_or([1, 2, 3, 4]);
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.stream.write_all(&frame)?;
        Ok(())
    }

    fn send_text(&mut self, text: &str) -> Result<()> {
        self.send_frame(0x1, text.as_bytes())
    }

    /// The next text message (fragments joined; pings answered; a close is an error).
    fn read_text(&mut self) -> Result<String> {
        let mut message = Vec::new();
        loop {
            let mut head = [0u8; 2];
            self.stream.read_exact(&mut head)?;
            let fin = head[0] & 0x80 != 0;
            let opcode = head[0] & 0x0f;
            let mut len = u64::from(head[1] & 0x7f);
            if len == 126 {
                let mut b = [0u8; 2];
                self.stream.read_exact(&mut b)?;
                len = u64::from(u16::from_be_bytes(b));
            } else if len == 127 {
                let mut b = [0u8; 8];
                self.stream.read_exact(&mut b)?;
                len = u64::from_be_bytes(b);
            }
            if len > 256 * 1024 * 1024 {
                bail!("WebSocket frame too large ({len} bytes)");
            }
            let mut mask = None;
            if head[1] & 0x80 != 0 {
                let mut m = [0u8; 4];
                self.stream.read_exact(&mut m)?;
                mask = Some(m);
            }
            let mut payload = vec![0u8; len as usize];
            self.stream.read_exact(&mut payload)?;
            if let Some(m) = mask {
                for (i, b) in payload.iter_mut().enumerate() {
                    *b ^= m[i % 4];
                }
            }
            match opcode {
                0x8 => bail!("DevTools closed the WebSocket"),
                0x9 => self.send_frame(0xA, &payload)?,
                0xA => {}
                _ => {
                    message.extend_from_slice(&payload);
                    if fin {
                        return Ok(String::from_utf8(message)?);
                    }
                }
            }
        }
    }
}

/// 16 bytes that differ between calls (handshake key, frame masks; not a secret here).
fn nonce() -> [u8; 16] {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let c = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&t.to_le_bytes());
    out[8..].copy_from_slice(&(c ^ u64::from(std::process::id())).to_le_bytes());
    out
}
