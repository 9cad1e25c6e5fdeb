//! A container as host processes, with util-linux and namespaces (no container runtime):
//!
//! `unshare --mount --pid --fork --kill-child` starts a shell as PID 1 of a new PID
//! namespace in a private mount namespace. The shell mounts the container's root: an
//! overlay whose lower layer is the host's root filesystem (read-only to the container:
//! writes land in a tmpfs upper layer, lost when the container restarts, as an image's
//! writable layer), a fresh `/proc`, a minimal `/dev` (null, zero, full, random, urandom,
//! tty, a private devpts, shm), the termination-message file, and every volume bound at its
//! `mountPath` (resolved inside the container root, so a symlink never leads out of it).
//! It then `chroot`s into that root and `setpriv` drops to the container's user and groups
//! (root keeps only Docker's default capabilities), with `RLIMIT_NPROC` set on the script's
//! shell beforehand (see [`MAX_PROCESSES`]; `exec`s into a running container are not
//! limited), and `env -C` enters its working
//! directory and runs its command. Images are not pulled: the host's binaries are what
//! runs. The network is the host's (as `hostNetwork`).
//!
//! `exec` enters the same namespaces and root with `nsenter`. The node's own death (even
//! SIGKILL) kills every container it started (`setpriv --pdeathsig`, `unshare
//! --kill-child`).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::registry::Identity;

/// Docker's default capabilities, kept when a container runs as root.
const ROOT_CAPS: &str = "-all,+chown,+dac_override,+fowner,+fsetid,+kill,+setgid,+setuid,+setpcap,+net_bind_service,+net_raw,+sys_chroot,+mknod,+audit_write,+setfcap";
/// Size of a container's writable layer (tmpfs).
const SCRATCH_SIZE: &str = "512m";
/// `RLIMIT_NPROC` of every container process (its command and `exec`s), a fork-bomb
/// guard: past it `fork` fails with `EAGAIN`. The kernel counts it per real uid across
/// the host (all containers running as uid 65534 share it) and does not apply it to root.
pub(crate) const MAX_PROCESSES: u32 = 1024;

/// A volume bound into the container.
#[derive(Debug, Clone)]
pub(crate) struct Mount {
    /// Host path.
    pub(crate) source: PathBuf,
    /// Path inside the container.
    pub(crate) target: String,
    /// Bound read-only.
    pub(crate) read_only: bool,
}

/// Everything one container instance is started with.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    /// The instance's directory (scratch, rootfs, termination log).
    pub(crate) dir: PathBuf,
    /// Command and arguments.
    pub(crate) argv: Vec<String>,
    /// User, groups, environment, working directory.
    pub(crate) identity: Identity,
    /// Volumes.
    pub(crate) mounts: Vec<Mount>,
    /// `terminationMessagePath`.
    pub(crate) termination_path: String,
    /// Keep stdin open for attach.
    pub(crate) stdin: bool,
    /// Run the command on a terminal (`tty: true`): see [`TTY_READY`].
    pub(crate) tty: bool,
}

/// With [`Spec::tty`], the line the script prints on stdout once the container's devpts is
/// mounted; the kubelet then opens a terminal there and writes its number on the script's
/// stdin, and the script makes `/dev/pts/<number>` its stdin, stdout and stderr (so the
/// command's controlling terminal, through `setsid -c`).
pub(crate) const TTY_READY: &str = "capstan-tty-ready";

/// Single-quotes `s` for sh.
pub(crate) fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The host file the container's termination message is written to.
pub(crate) fn termination_file(dir: &Path) -> PathBuf {
    dir.join("termination-log")
}

fn privileges(id: &Identity) -> Vec<String> {
    let mut args = vec![
        "/usr/bin/setpriv".to_owned(),
        format!("--reuid={}", id.uid),
        format!("--regid={}", id.gid),
    ];
    if id.groups.is_empty() {
        args.push("--clear-groups".to_owned());
    } else {
        let g: Vec<String> = id.groups.iter().map(u32::to_string).collect();
        args.push(format!("--groups={}", g.join(",")));
    }
    if id.uid == 0 {
        args.push(format!("--bounding-set={ROOT_CAPS}"));
    }
    // Changing credentials clears the parent-death signal `unshare --kill-child` set: set
    // it again, so the process still dies with its parent.
    args.push("--pdeathsig=KILL".to_owned());
    args.push("--".to_owned());
    args
}

/// The setup script run as PID 1 of the new namespaces (see the module doc).
fn script(spec: &Spec) -> String {
    let dir = spec.dir.to_string_lossy();
    let root = format!("{dir}/rootfs");
    let q = |s: &str| quote(s);
    let mut s = String::new();
    s.push_str("set -e\nunset IFS\n__p=$PATH\nPATH=/usr/sbin:/usr/bin:/sbin:/bin\n");
    s.push_str(&format!("R={}\n", q(&root)));
    s.push_str(&format!(
        "mount -t tmpfs -o size={SCRATCH_SIZE},mode=755 capstan-scratch {}\n",
        q(&format!("{dir}/scratch"))
    ));
    s.push_str(&format!(
        "mkdir -p {0}/upper {0}/work\n",
        q(&format!("{dir}/scratch"))
    ));
    s.push_str(&format!(
        "mount -t overlay capstan-root -o lowerdir=/,upperdir={0}/upper,workdir={0}/work \"$R\"\n",
        q(&format!("{dir}/scratch"))
    ));
    s.push_str(
        "mount -t proc proc \"$R/proc\"\n\
         mount -t tmpfs -o mode=755,nosuid capstan-dev \"$R/dev\"\n\
         for d in null zero full random urandom tty; do : > \"$R/dev/$d\"; mount --bind \"/dev/$d\" \"$R/dev/$d\"; done\n\
         mkdir -p \"$R/dev/pts\" \"$R/dev/shm\"\n\
         mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts \"$R/dev/pts\"\n\
         ln -s pts/ptmx \"$R/dev/ptmx\"\n\
         mount -t tmpfs -o mode=1777,nosuid,nodev shm \"$R/dev/shm\"\n\
         ln -s /proc/self/fd \"$R/dev/fd\"; ln -s /proc/self/fd/0 \"$R/dev/stdin\"; ln -s /proc/self/fd/1 \"$R/dev/stdout\"; ln -s /proc/self/fd/2 \"$R/dev/stderr\"\n",
    );
    if spec.tty {
        s.push_str(&format!(
            "echo {TTY_READY}\nread -r __n\ncase $__n in ''|*[!0-9]*) exit 1;; esac\nexec 0<>\"$R/dev/pts/$__n\" 1>&0 2>&0\n"
        ));
    }
    // A bind at a path resolved inside the container root: $1 source, $2 target, $3 "dir"
    // or "file", $4 "ro" or "rw".
    s.push_str(
        "bindin() {\n\
         t=$(chroot \"$R\" realpath -m -- \"$2\")\n\
         if [ \"$3\" = dir ]; then chroot \"$R\" mkdir -p -- \"$t\"; else chroot \"$R\" mkdir -p -- \"$(dirname -- \"$t\")\"; [ -e \"$R$t\" ] || : > \"$R$t\"; fi\n\
         mount --bind \"$1\" \"$R$t\"\n\
         if [ \"$4\" = ro ]; then mount -o remount,bind,ro \"$R$t\"; fi\n\
         }\n",
    );
    s.push_str(&format!(
        "bindin {} {} file rw\n",
        q(&termination_file(&spec.dir).to_string_lossy()),
        q(&spec.termination_path)
    ));
    for m in &spec.mounts {
        let kind = if m.source.is_dir() { "dir" } else { "file" };
        s.push_str(&format!(
            "bindin {} {} {kind} {}\n",
            q(&m.source.to_string_lossy()),
            q(&m.target),
            if m.read_only { "ro" } else { "rw" }
        ));
    }
    let wd = &spec.identity.workdir;
    s.push_str(&format!("chroot \"$R\" mkdir -p -- {}\n", q(wd)));
    // The fork-bomb guard, set on this shell (as root, exempt) and inherited through the
    // `exec` below by the container's command once `setpriv` has dropped to its user — not a
    // wrapper process in the chain, which the kubelet's signals must reach directly.
    s.push_str(&format!(
        "/usr/bin/prlimit --pid $$ --nproc={MAX_PROCESSES}\n"
    ));
    s.push_str("PATH=$__p\nunset __p __n R t\n");
    let mut exec = vec![
        "exec".to_owned(),
        "/usr/sbin/chroot".to_owned(),
        "\"$R\"".to_owned(),
    ];
    // `$R` was unset above: use the literal root.
    exec[2] = q(&root);
    if spec.tty {
        // A new session whose controlling terminal is the pty on stdin.
        exec.extend(["/usr/bin/setsid".to_owned(), "-c".to_owned()]);
    }
    exec.extend(privileges(&spec.identity).iter().map(|a| q(a)));
    exec.extend([
        "/usr/bin/env".to_owned(),
        "-C".to_owned(),
        q(wd),
        "--".to_owned(),
        "\"$@\"".to_owned(),
    ]);
    s.push_str(&exec.join(" "));
    s.push('\n');
    s
}

/// The command that starts the container instance `spec` (stdio piped).
pub(crate) fn command(spec: &Spec) -> tokio::process::Command {
    // `setpriv --pdeathsig KILL` makes `unshare` die with the node's process (even by
    // SIGKILL), and `--kill-child` takes the container's first process, so its whole PID
    // namespace, with it: no container outlives its node.
    let mut cmd = tokio::process::Command::new("/usr/bin/setpriv");
    cmd.args([
        "--pdeathsig",
        "KILL",
        "--",
        "/usr/bin/unshare",
        "--mount",
        "--pid",
        "--fork",
        "--propagation",
        "private",
        "--kill-child",
        "/bin/sh",
        "-c",
    ]);
    cmd.arg(script(spec));
    cmd.arg("capstan-init");
    cmd.args(&spec.argv);
    cmd.env_clear();
    cmd.envs(spec.identity.env.iter().map(|(k, v)| (k, v)));
    cmd.stdin(if spec.stdin || spec.tty {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped());
    cmd.stderr(Stdio::piped());
    cmd.kill_on_drop(true);
    cmd
}

/// The command that runs `argv` inside the container whose first process is `init_pid`,
/// as `id` (exec).
pub(crate) fn exec_command(
    init_pid: u32,
    id: &Identity,
    argv: &[String],
    tty: bool,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("/usr/bin/nsenter");
    cmd.arg("-t").arg(init_pid.to_string());
    cmd.args(["-m", "-p", "-r", "-w", "--"]);
    if tty {
        // A new session whose controlling terminal is the pty on stdin.
        cmd.args(["/usr/bin/setsid", "-c"]);
    }
    cmd.args(privileges(id));
    cmd.args(argv);
    cmd.env_clear();
    cmd.envs(id.env.iter().map(|(k, v)| (k, v)));
    if tty && !id.env.iter().any(|(k, _)| k == "TERM") {
        cmd.env("TERM", "xterm");
    }
    cmd.kill_on_drop(true);
    cmd
}

/// The PID of the first process inside the namespaces `unshare` (`pid`) created.
pub(crate) async fn init_pid(pid: u32) -> Option<u32> {
    for _ in 0..200 {
        let path = format!("/proc/{pid}/task/{pid}/children");
        match tokio::fs::read_to_string(&path).await {
            Ok(s) => {
                if let Some(child) = s.split_whitespace().next().and_then(|c| c.parse().ok()) {
                    return Some(child);
                }
            }
            Err(_) => return None,
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    None
}

/// Sends `signal` (e.g. `TERM`, `KILL`) to `pid`.
pub(crate) async fn signal(pid: u32, signal: &str) {
    let status = tokio::process::Command::new("/bin/kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    if let Err(e) = status {
        tracing::debug!(pid, error = %e, "kill failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(quote("a'b"), "'a'\\''b'");
    }

    #[test]
    fn the_script_binds_volumes_and_drops_privileges() {
        let spec = Spec {
            dir: PathBuf::from("/x/c"),
            argv: vec!["sh".into()],
            identity: Identity {
                uid: 1000,
                gid: 1000,
                groups: vec![],
                env: vec![],
                workdir: "/w".into(),
            },
            mounts: vec![Mount {
                source: PathBuf::from("/x/v"),
                target: "/data".into(),
                read_only: true,
            }],
            termination_path: "/dev/termination-log".into(),
            stdin: false,
            tty: false,
        };
        let s = script(&spec);
        assert!(s.contains("bindin '/x/v' '/data' file ro"));
        assert!(s.contains("'--reuid=1000'"));
        assert!(s.contains("/usr/bin/prlimit --pid $$ --nproc=1024\n"));
        assert!(s.contains("exec /usr/sbin/chroot '/x/c/rootfs'"));
        assert!(!s.contains(TTY_READY));
        let s = script(&Spec { tty: true, ..spec });
        let ready = s.find(TTY_READY).expect("handshake");
        assert!(ready > s.find("mount -t devpts").expect("devpts"));
        assert!(s.contains("exec 0<>\"$R/dev/pts/$__n\" 1>&0 2>&0\n"));
        assert!(s.contains("exec /usr/sbin/chroot '/x/c/rootfs' /usr/bin/setsid -c "));
    }
}
