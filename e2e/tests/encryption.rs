//! Encryption at rest with `--encryption-provider-config`: Secrets written through stock
//! kubectl are stored as upstream's `k8s:enc:aesgcm:v1:<key>:` ciphertext (read back from the
//! server's own store with stock etcdctl, the server stopped), `kubectl get secret` is
//! unchanged, a restart with the same configuration reads them, secrets written before
//! encryption was on stay readable through `identity`, and a rotated key list decrypts with
//! the old key while writing with the new one. The same for `aescbc` and `secretbox`: a
//! secret written under aescbc is `k8s:enc:aescbc:v1:key1:` ciphertext; after a restart with
//! `[secretbox key2, aescbc key1]` it still reads, and rewritten with
//! `kubectl get secrets -o json | kubectl replace -f -` it is stored under secretbox.

use std::path::Path;

use base64::Engine as _;
use e2e::{ServerProcess, StoreProcess, etcdctl};

const KEY1: &str = "c2VjcmV0IGlzIHNlY3VyZSwgaXMgaXQ/IHllcyEhISE="; // 32 bytes
const KEY2: &str = "MTIzNDU2Nzg5MDEyMzQ1Ng=="; // 16 bytes

fn config(dir: &Path, name: &str, keys: &[(&str, &str)]) -> String {
    let keys: String = keys
        .iter()
        .map(|(n, s)| format!("      - name: {n}\n        secret: {s}\n"))
        .collect();
    let text = format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources:\n  - secrets\n  providers:\n  - aesgcm:\n      keys:\n{keys}  - identity: {{}}\n"
    );
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write config");
    path.to_str().unwrap_or_default().to_owned()
}

fn start(dir: &Path, config: Option<&str>) -> ServerProcess {
    let mut flags = Vec::new();
    if let Some(c) = config {
        flags.extend(["--encryption-provider-config", c]);
    }
    ServerProcess::start_with(&dir.join("data"), &flags).expect("server starts")
}

fn ok(s: &ServerProcess, args: &[&str]) -> String {
    let (ok, out, err) = s.kubectl(args).expect("kubectl runs");
    assert!(
        ok,
        "kubectl {args:?} failed: {err}\nserver log: {}",
        s.log()
    );
    out
}

fn create_secret(s: &ServerProcess, name: &str, value: &str) {
    ok(
        s,
        &[
            "create",
            "secret",
            "generic",
            name,
            &format!("--from-literal=password={value}"),
        ],
    );
}

/// The secret's `password`, decoded, as kubectl shows it.
fn password(s: &ServerProcess, name: &str) -> String {
    let b64 = ok(
        s,
        &["get", "secret", name, "-o", "jsonpath={.data.password}"],
    );
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .expect("base64 data");
    String::from_utf8(bytes).expect("utf-8")
}

/// The stored bytes of each secret, read with etcdctl from the (stopped) server's store.
fn stored(dir: &Path, names: &[&str]) -> Vec<Vec<u8>> {
    let store =
        StoreProcess::start(&dir.join("data/store"), &[]).expect("store on the server's data");
    names
        .iter()
        .map(|n| {
            let key = format!("/registry/core/secrets/default/{n}");
            let (done, out, err) =
                etcdctl(&store.endpoint, &["get", &key, "-w", "json"], None).expect("etcdctl");
            assert!(done, "{err}");
            let v: serde_json::Value = serde_json::from_str(&out).expect("etcdctl json");
            let value = v["kvs"][0]["value"]
                .as_str()
                .unwrap_or_else(|| panic!("{key}: {out}"));
            base64::engine::general_purpose::STANDARD
                .decode(value)
                .expect("base64 value")
        })
        .collect()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn secrets_are_aesgcm_ciphertext_at_rest_and_read_back_after_restart_and_rotation() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();

    // Before encryption: a plain secret.
    let s = start(d, None);
    create_secret(&s, "old", "plain-before-9f1");
    drop(s);

    // With aesgcm first: new secrets are encrypted, the old one still reads (identity).
    let c1 = config(d, "enc1.yaml", &[("key1", KEY1)]);
    let s = start(d, Some(&c1));
    create_secret(&s, "new", "cipher-after-7c2");
    ok(
        &s,
        &[
            "create",
            "configmap",
            "plain",
            "--from-literal=k=visible-cm-3e4",
        ],
    );
    assert_eq!(password(&s, "new"), "cipher-after-7c2");
    assert_eq!(password(&s, "old"), "plain-before-9f1");
    let listed = ok(&s, &["get", "secrets"]);
    assert!(listed.contains("new") && listed.contains("old"), "{listed}");
    drop(s);

    let bytes = stored(d, &["old", "new"]);
    assert!(
        contains(&bytes[0], "\"kind\":\"Secret\""),
        "old is plain JSON"
    );
    assert!(
        bytes[1].starts_with(b"k8s:enc:aesgcm:v1:key1:"),
        "{:?}",
        String::from_utf8_lossy(&bytes[1])
    );
    let encoded = base64::engine::general_purpose::STANDARD.encode("cipher-after-7c2");
    for plain in ["cipher-after-7c2", encoded.as_str(), "\"kind\"", "Secret"] {
        assert!(!contains(&bytes[1], plain), "{plain} in the stored bytes");
    }

    // A restart with the same configuration reads it back; kubectl sees no difference.
    let s = start(d, Some(&c1));
    assert_eq!(password(&s, "new"), "cipher-after-7c2");
    let shown = ok(&s, &["get", "secret", "new", "-o", "json"]);
    assert!(shown.contains("\"kind\": \"Secret\""), "{shown}");
    drop(s);

    // Rotation: key2 first, key1 still listed. Old ciphertext reads; writes use key2, and
    // rewriting the plain secret encrypts it.
    let c2 = config(d, "enc2.yaml", &[("key2", KEY2), ("key1", KEY1)]);
    let s = start(d, Some(&c2));
    assert_eq!(password(&s, "new"), "cipher-after-7c2");
    create_secret(&s, "newer", "rotated-5d6");
    ok(&s, &["annotate", "secret", "old", "rewritten=yes"]);
    assert_eq!(password(&s, "old"), "plain-before-9f1");
    drop(s);
    let bytes = stored(d, &["old", "new", "newer"]);
    assert!(bytes[0].starts_with(b"k8s:enc:aesgcm:v1:key2:"));
    assert!(bytes[1].starts_with(b"k8s:enc:aesgcm:v1:key1:"));
    assert!(bytes[2].starts_with(b"k8s:enc:aesgcm:v1:key2:"));

    // Without key1 the secret written with it cannot be read: an error, not garbage.
    let c3 = config(d, "enc3.yaml", &[("key2", KEY2)]);
    let s = start(d, Some(&c3));
    assert_eq!(password(&s, "newer"), "rotated-5d6");
    let (read, _, err) = s
        .kubectl(&["get", "secret", "new", "-o", "json"])
        .expect("kubectl runs");
    assert!(!read && err.contains("InternalError"), "{err}");
}

/// A configuration whose `secrets` entry has the given provider list (YAML list items).
fn config_with(dir: &Path, name: &str, providers: &str) -> String {
    let text = format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources:\n  - secrets\n  providers:\n{providers}"
    );
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write config");
    path.to_str().unwrap_or_default().to_owned()
}

#[test]
fn aescbc_then_secretbox_rotation_with_kubectl_replace() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();

    let cbc = config_with(
        d,
        "cbc.yaml",
        &format!("  - aescbc:\n      keys:\n      - name: key1\n        secret: {KEY1}\n"),
    );
    let s = start(d, Some(&cbc));
    create_secret(&s, "cbc", "cbc-secret-4a8");
    assert_eq!(password(&s, "cbc"), "cbc-secret-4a8");
    drop(s);
    let bytes = stored(d, &["cbc"]);
    assert!(
        bytes[0].starts_with(b"k8s:enc:aescbc:v1:key1:"),
        "{:?}",
        String::from_utf8_lossy(&bytes[0])
    );
    let encoded = base64::engine::general_purpose::STANDARD.encode("cbc-secret-4a8");
    for plain in ["cbc-secret-4a8", encoded.as_str(), "\"kind\"", "Secret"] {
        assert!(!contains(&bytes[0], plain), "{plain} in the stored bytes");
    }
    // IV (16) + whole AES blocks after the prefix.
    let body = bytes[0].len() - b"k8s:enc:aescbc:v1:key1:".len();
    assert!(body >= 32 && body.is_multiple_of(16), "{body}");

    // Rotation: secretbox key2 encrypts, aescbc key1 still decrypts.
    let rotated = config_with(
        d,
        "rotated.yaml",
        &format!(
            "  - secretbox:\n      keys:\n      - name: key2\n        secret: {KEY1}\n  - aescbc:\n      keys:\n      - name: key1\n        secret: {KEY1}\n"
        ),
    );
    let s = start(d, Some(&rotated));
    assert_eq!(password(&s, "cbc"), "cbc-secret-4a8");
    create_secret(&s, "box", "box-secret-1b3");
    assert_eq!(password(&s, "box"), "box-secret-1b3");
    drop(s);
    let bytes = stored(d, &["cbc", "box"]);
    assert!(bytes[0].starts_with(b"k8s:enc:aescbc:v1:key1:"));
    assert!(
        bytes[1].starts_with(b"k8s:enc:secretbox:v1:key2:"),
        "{:?}",
        String::from_utf8_lossy(&bytes[1])
    );
    assert!(!contains(&bytes[1], "box-secret-1b3"));

    // Rewriting every secret (get -o json | replace -f -) moves the old one to secretbox.
    let s = start(d, Some(&rotated));
    let all = ok(&s, &["get", "secrets", "-o", "json"]);
    let file = d.join("secrets.json");
    std::fs::write(&file, all).expect("write secrets");
    let replaced = ok(&s, &["replace", "-f", file.to_str().unwrap_or_default()]);
    assert!(replaced.contains("secret/cbc replaced"), "{replaced}");
    assert_eq!(password(&s, "cbc"), "cbc-secret-4a8");
    drop(s);
    let bytes = stored(d, &["cbc", "box"]);
    assert!(
        bytes[0].starts_with(b"k8s:enc:secretbox:v1:key2:"),
        "{:?}",
        String::from_utf8_lossy(&bytes[0])
    );

    // Dropping key2 leaves the rewritten secret unreadable: an error, not garbage.
    let only_cbc = config_with(
        d,
        "only-cbc.yaml",
        &format!("  - aescbc:\n      keys:\n      - name: key1\n        secret: {KEY1}\n"),
    );
    let s = start(d, Some(&only_cbc));
    let (read, _, err) = s
        .kubectl(&["get", "secret", "cbc", "-o", "json"])
        .expect("kubectl runs");
    assert!(!read && err.contains("InternalError"), "{err}");
    drop(s);

    // A bad key size is refused at start-up with upstream's message.
    let bad = config_with(
        d,
        "bad.yaml",
        &format!("  - secretbox:\n      keys:\n      - name: k\n        secret: {KEY2}\n"),
    );
    let started =
        ServerProcess::start_with(&d.join("data"), &["--encryption-provider-config", &bad]);
    match started {
        Ok(s) => panic!("a 16-byte secretbox key must be refused; log: {}", s.log()),
        Err(e) => assert!(
            e.to_string()
                .contains("secret is not of the expected length, got 16, expected one of [32]"),
            "{e}"
        ),
    }
}
