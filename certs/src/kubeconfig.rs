//! Kubeconfig files: one cluster, one user with an embedded client certificate, one context.
//!
//! The shape is fixed, so the YAML is written by hand; every string value is emitted
//! double-quoted with YAML escapes, so user names with `:`, `#`, quotes or non-ASCII text stay
//! intact. The result reads with stock `kubectl` and client libraries.

use std::fmt::Write as _;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::error::Result;
use crate::layout::{PRIVATE_MODE, write_if_changed};

/// Name of the cluster entry in every kubeconfig Capstan writes.
pub const CLUSTER_NAME: &str = "capstan";

/// Everything a kubeconfig holds. PEM fields are embedded base64-encoded, as the
/// `*-data` fields require.
#[derive(Clone, Copy)]
pub struct Kubeconfig<'a> {
    /// The API server URL, e.g. `https://127.0.0.1:6443`.
    pub server_url: &'a str,
    /// The cluster CA certificate, PEM.
    pub ca_cert_pem: &'a str,
    /// The user entry's name (usually the certificate's CN).
    pub user: &'a str,
    /// The client certificate, PEM.
    pub client_cert_pem: &'a str,
    /// The client private key, PEM.
    pub client_key_pem: &'a str,
}

impl std::fmt::Debug for Kubeconfig<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubeconfig")
            .field("server_url", &self.server_url)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl Kubeconfig<'_> {
    /// The context name: `<user>@capstan`, kubeadm's convention.
    pub fn context_name(&self) -> String {
        format!("{}@{CLUSTER_NAME}", self.user)
    }

    /// The kubeconfig as YAML (`apiVersion: v1`, `kind: Config`, the current context set).
    pub fn to_yaml(&self) -> String {
        let context = self.context_name();
        let mut y = String::new();
        // `write!` into a String cannot fail.
        let _ = write!(
            y,
            "apiVersion: v1\n\
             kind: Config\n\
             clusters:\n\
             - name: {cluster}\n  \
               cluster:\n    \
                 server: {server}\n    \
                 certificate-authority-data: {ca}\n\
             users:\n\
             - name: {user}\n  \
               user:\n    \
                 client-certificate-data: {cert}\n    \
                 client-key-data: {key}\n\
             contexts:\n\
             - name: {context}\n  \
               context:\n    \
                 cluster: {cluster}\n    \
                 user: {user}\n\
             current-context: {context}\n\
             preferences: {{}}\n",
            cluster = quote(CLUSTER_NAME),
            server = quote(self.server_url),
            ca = quote(&STANDARD.encode(self.ca_cert_pem)),
            user = quote(self.user),
            cert = quote(&STANDARD.encode(self.client_cert_pem)),
            key = quote(&STANDARD.encode(self.client_key_pem)),
            context = quote(&context),
        );
        y
    }

    /// Writes [`to_yaml`](Self::to_yaml) to `path` atomically with mode 0600 (it holds a
    /// private key). A file that already holds exactly this text is left untouched.
    pub fn write(&self, path: &Path) -> Result<()> {
        write_if_changed(path, self.to_yaml().as_bytes(), PRIVATE_MODE).map(|_| ())
    }
}

/// `s` as a YAML double-quoted scalar.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            // C0 and C1 controls, DEL, and the characters YAML treats as line breaks.
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}') => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    fn sample<'a>(user: &'a str, server: &'a str) -> Kubeconfig<'a> {
        Kubeconfig {
            server_url: server,
            ca_cert_pem: "-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----\n",
            user,
            client_cert_pem: "-----BEGIN CERTIFICATE-----\nQ0VSVA==\n-----END CERTIFICATE-----\n",
            client_key_pem: "-----BEGIN PRIVATE KEY-----\nS0VZ\n-----END PRIVATE KEY-----\n",
        }
    }

    /// Runs `kubectl config view` on `path` with a jsonpath; `None` if kubectl is missing.
    fn kubectl_view(path: &Path, jsonpath: &str) -> Option<String> {
        let out = Command::new("kubectl")
            .args(["config", "view", "--raw", "--kubeconfig"])
            .arg(path)
            .args(["-o", &format!("jsonpath={jsonpath}")])
            .env_remove("KUBECONFIG")
            .output();
        match out {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                eprintln!("kubectl not on PATH; skipping the kubectl check");
                None
            }
            Err(e) => panic!("running kubectl: {e}"),
            Ok(out) => {
                assert!(
                    out.status.success(),
                    "kubectl: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                Some(String::from_utf8(out.stdout).unwrap())
            }
        }
    }

    #[test]
    fn yaml_has_the_fixed_shape_with_base64_data() {
        let kc = sample("kubernetes-admin", "https://127.0.0.1:6443");
        let y = kc.to_yaml();
        assert!(y.starts_with("apiVersion: v1\nkind: Config\nclusters:\n- name: \"capstan\"\n"));
        assert!(y.contains("    server: \"https://127.0.0.1:6443\"\n"));
        assert!(y.contains("current-context: \"kubernetes-admin@capstan\"\n"));
        let field = |name: &str| {
            let line = y
                .lines()
                .find(|l| l.trim_start().starts_with(name))
                .unwrap();
            let value = line.split_once(": ").unwrap().1.trim_matches('"');
            String::from_utf8(STANDARD.decode(value).unwrap()).unwrap()
        };
        assert_eq!(field("certificate-authority-data:"), kc.ca_cert_pem);
        assert_eq!(field("client-certificate-data:"), kc.client_cert_pem);
        assert_eq!(field("client-key-data:"), kc.client_key_pem);
    }

    #[test]
    fn quote_escapes_what_yaml_needs() {
        assert_eq!(quote("plain"), "\"plain\"");
        assert_eq!(quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(quote("x\ny\u{7}"), "\"x\\ny\\u0007\"");
        assert_eq!(quote("ünï: #x"), "\"ünï: #x\"");
    }

    #[test]
    fn kubectl_reads_server_user_and_context_back() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("kubeconfig");
        let user = "weird \"user\": #1 \\ ünï";
        let kc = sample(user, "https://10.0.0.1:6443");
        kc.write(&path).unwrap();

        let Some(server) = kubectl_view(&path, "{.clusters[0].cluster.server}") else {
            return;
        };
        assert_eq!(server, "https://10.0.0.1:6443");
        assert_eq!(kubectl_view(&path, "{.users[0].name}").unwrap(), user);
        assert_eq!(
            kubectl_view(&path, "{.current-context}").unwrap(),
            kc.context_name()
        );
        assert_eq!(
            kubectl_view(&path, "{.users[0].user.client-key-data}").unwrap(),
            STANDARD.encode(kc.client_key_pem)
        );
    }
}
