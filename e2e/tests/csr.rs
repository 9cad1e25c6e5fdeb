//! CertificateSigningRequests on the whole control plane, with stock kubectl: a key and a
//! PKCS#10 request made in the test (rcgen, no openssl) are posted with `kubectl create`;
//! the server records the requester; `kubectl certificate approve` goes through the
//! `approval` subresource; the controller manager's `csrsigning` signs with the cluster CA
//! for `expirationSeconds`; the certificate then authenticates kubectl as the request's
//! CN/O (`kubectl auth whoami`). Also: upstream's create validation (legacy signer,
//! short expiration, bad PEM), deny + approve refused as mutually exclusive, a signer that
//! refuses the request (`Failed`/`SignerValidationFailure`), and the `approve` permission on
//! the signer that the approval subresource demands.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use e2e::ServerProcess;
use e2e::cli::{cluster, json, ok, wait_for};
use serde_json::Value;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// A fresh key and a PEM certificate request for `cn` in organizations `orgs`.
fn key_and_request(cn: &str, orgs: &[&str]) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    // rcgen keeps one value per attribute type: a second organization goes in under the
    // same OID spelled as a custom type (two O attributes, as openssl writes them).
    for (i, o) in orgs.iter().enumerate() {
        let ty = if i == 0 {
            rcgen::DnType::OrganizationName
        } else {
            rcgen::DnType::CustomDnType(vec![2, 5, 4, 10])
        };
        params.distinguished_name.push(ty, *o);
    }
    let req = params.serialize_request(&key).expect("csr");
    (key.serialize_pem(), req.pem().expect("pem"))
}

/// A CSR manifest.
fn manifest(
    name: &str,
    request_pem: &str,
    signer: &str,
    usages: &[&str],
    expiry: Option<i64>,
) -> String {
    let usages: Vec<String> = usages.iter().map(|u| format!("  - {u}\n")).collect();
    let expiry = expiry.map_or_else(String::new, |e| format!("  expirationSeconds: {e}\n"));
    format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: {name}\nspec:\n  request: {}\n  signerName: {signer}\n{expiry}  usages:\n{}",
        B64.encode(request_pem),
        usages.concat()
    )
}

fn create(s: &ServerProcess, yaml: &str) -> (bool, String, String) {
    s.kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(yaml))
        .expect("kubectl runs")
}

fn csr(s: &ServerProcess, name: &str) -> Value {
    json(s, &["get", "csr", name, "-o", "json"])
}

/// A kubeconfig for the admin kubeconfig's cluster with a client certificate and key.
fn kubeconfig_with_cert(s: &ServerProcess, dir: &Path, cert_pem: &[u8], key_pem: &str) -> PathBuf {
    let admin: Value = serde_json::from_str(&ok(s, &["config", "view", "--raw", "-o", "json"]))
        .expect("config json");
    let ca = admin["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .expect("ca data");
    let path = dir.join("alice.kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\nusers:\n- name: alice\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: alice\ncurrent-context: c\n",
        s.url,
        B64.encode(cert_pem),
        B64.encode(key_pem)
    );
    std::fs::write(&path, text).expect("write kubeconfig");
    path
}

#[test]
fn approved_csr_gives_a_certificate_kubectl_authenticates_with() {
    let (dir, s) = cluster();
    let (key, request) = key_and_request("alice", &["dev", "qa"]);
    ok(&s, &["api-resources", "--api-group=certificates.k8s.io"]);
    let (made, _, err) = create(
        &s,
        &manifest(
            "alice",
            &request,
            "kubernetes.io/kube-apiserver-client",
            &["client auth"],
            Some(3600),
        ),
    );
    assert!(made, "{err}");
    let created = csr(&s, "alice");
    // The requester is recorded by the server, whatever the client sent.
    assert_eq!(created["spec"]["username"], "kubernetes-admin");
    assert!(
        created["spec"]["groups"]
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g == "system:masters")),
        "{created}"
    );
    assert_eq!(created["status"], serde_json::json!({}));
    // Pending until approved: the signer does not sign unapproved requests.
    let table = ok(&s, &["get", "csr", "alice"]);
    assert!(table.contains("Pending"), "{table}");

    let out = ok(&s, &["certificate", "approve", "alice"]);
    assert!(out.contains("approved"), "{out}");
    let cert = wait_for(&s, 30, "the signer to issue alice's certificate", || {
        let c = csr(&s, "alice");
        c["status"]["certificate"]
            .as_str()
            .map(|b| B64.decode(b).expect("base64 certificate"))
    });
    let signed = csr(&s, "alice");
    let approved = &signed["status"]["conditions"][0];
    assert_eq!(approved["type"], "Approved");
    assert_eq!(approved["reason"], "KubectlApprove");
    assert!(approved["lastUpdateTime"].is_string() && approved["lastTransitionTime"].is_string());
    let table = ok(&s, &["get", "csr", "alice"]);
    assert!(table.contains("Approved,Issued"), "{table}");
    // Each write is recorded under its subresource, as upstream's field manager does.
    let managed = json(
        &s,
        &["get", "csr", "alice", "-o", "json", "--show-managed-fields"],
    );
    let entries = managed["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let approval = entries
        .iter()
        .find(|e| e["subresource"] == "approval")
        .unwrap_or_else(|| panic!("no approval entry: {entries:?}"));
    assert_eq!(approval["manager"], "kubectl");
    assert!(
        approval["fieldsV1"]["f:status"]["f:conditions"].is_object(),
        "{approval}"
    );
    assert!(
        entries.iter().any(|e| e["subresource"] == "status"),
        "{entries:?}"
    );

    let alice = kubeconfig_with_cert(&s, dir.path(), &cert, &key);
    let (who_ok, who, err) = s
        .kubectl_as(&alice, &["auth", "whoami", "-o", "json"], None)
        .expect("kubectl");
    assert!(who_ok, "{err}\n{}", e2e::cli::tail(&s.log()));
    let who: Value = serde_json::from_str(&who).expect("whoami json");
    assert_eq!(who["status"]["userInfo"]["username"], "alice");
    let groups = who["status"]["userInfo"]["groups"].clone();
    assert_eq!(
        groups,
        serde_json::json!(["dev", "qa", "system:authenticated"])
    );

    // Approving again changes nothing; a certificate once issued cannot be replaced.
    ok(&s, &["certificate", "approve", "alice"]);
    let patch = format!(
        r#"{{"status":{{"certificate":"{}"}}}}"#,
        B64.encode("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    );
    let (replaced, _, err) = s
        .kubectl(&[
            "patch",
            "csr",
            "alice",
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ])
        .expect("kubectl");
    assert!(!replaced);
    assert!(
        err.contains(
            "status.certificate: Forbidden: updates may not modify existing certificate content"
        ) || err.contains("status.certificate: Invalid value"),
        "{err}"
    );
}

#[test]
fn csr_validation_denial_and_signer_refusals() {
    let (dir, s) = cluster();
    let (_, request) = key_and_request("bob", &["dev"]);

    // Upstream's create validation.
    let (made, _, err) = create(
        &s,
        &manifest(
            "legacy",
            &request,
            "kubernetes.io/legacy-unknown",
            &["client auth"],
            None,
        ),
    );
    assert!(!made);
    assert!(
        err.contains("spec.signerName: Invalid value: \"kubernetes.io/legacy-unknown\": the legacy signerName is not allowed via this API version"),
        "{err}"
    );
    let (made, _, err) = create(
        &s,
        &manifest(
            "short",
            &request,
            "kubernetes.io/kube-apiserver-client",
            &["client auth"],
            Some(60),
        ),
    );
    assert!(!made);
    assert!(
        err.contains("spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 600 seconds (10 minutes)"),
        "{err}"
    );
    let (made, _, err) = create(
        &s,
        &manifest(
            "garbage",
            "not a pem",
            "example.com/signer",
            &["client auth"],
            None,
        ),
    );
    assert!(!made);
    assert!(
        err.contains("PEM block type must be CERTIFICATE REQUEST"),
        "{err}"
    );

    // Denied, then approved: Approved and Denied exclude each other.
    let (made, _, err) = create(
        &s,
        &manifest(
            "denied",
            &request,
            "kubernetes.io/kube-apiserver-client",
            &["client auth"],
            None,
        ),
    );
    assert!(made, "{err}");
    ok(&s, &["certificate", "deny", "denied"]);
    // kubectl itself will not approve a denied request: PUT the approval directly.
    let mut both = csr(&s, "denied");
    if let Some(conditions) = both["status"]["conditions"].as_array_mut() {
        conditions
            .push(serde_json::json!({"type": "Approved", "status": "True", "reason": "Test"}));
    }
    let file = dir.path().join("both.json");
    std::fs::write(&file, both.to_string()).expect("write");
    let (approved, _, err) = s
        .kubectl(&[
            "replace",
            "--raw",
            "/apis/certificates.k8s.io/v1/certificatesigningrequests/denied/approval",
            "-f",
            file.to_str().unwrap_or_default(),
        ])
        .expect("kubectl");
    assert!(!approved);
    assert!(
        err.contains("Approved and Denied conditions are mutually exclusive"),
        "{err}"
    );
    let denied = csr(&s, "denied");
    assert_eq!(denied["status"]["conditions"][0]["type"], "Denied");
    assert!(denied["status"]["certificate"].is_null());

    // The kubelet client signer refuses a subject that is not a node's.
    let (made, _, err) = create(
        &s,
        &manifest(
            "not-a-node",
            &request,
            "kubernetes.io/kube-apiserver-client-kubelet",
            &["digital signature", "client auth"],
            None,
        ),
    );
    assert!(made, "{err}");
    ok(&s, &["certificate", "approve", "not-a-node"]);
    let failed = wait_for(&s, 30, "the signer to mark not-a-node Failed", || {
        let c = csr(&s, "not-a-node");
        c["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Failed").cloned())
    });
    assert_eq!(failed["reason"], "SignerValidationFailure");
    assert_eq!(
        failed["message"],
        "subject organization is not system:nodes"
    );
    assert!(csr(&s, "not-a-node")["status"]["certificate"].is_null());
    // A node's own request is signed by the same signer.
    let (_, node_request) = key_and_request("system:node:n1", &["system:nodes"]);
    let (made, _, err) = create(
        &s,
        &manifest(
            "node-n1",
            &node_request,
            "kubernetes.io/kube-apiserver-client-kubelet",
            &["digital signature", "client auth"],
            None,
        ),
    );
    assert!(made, "{err}");
    ok(&s, &["certificate", "approve", "node-n1"]);
    wait_for(&s, 30, "node-n1's certificate", || {
        csr(&s, "node-n1")["status"]["certificate"]
            .as_str()
            .map(str::to_owned)
    });

    // Approving needs `approve` on the signer, not only the subresource.
    let (made, _, err) = create(
        &s,
        &manifest(
            "pending",
            &request,
            "kubernetes.io/kube-apiserver-client",
            &["client auth"],
            None,
        ),
    );
    assert!(made, "{err}");
    let carol = dir.path().join("carol.kubeconfig");
    let (written, _, err) = s
        .capstan(&[
            "kubeconfig",
            "--data-dir",
            s.data_dir.to_str().unwrap_or_default(),
            "--user",
            "carol",
            "--server",
            &s.url,
            "--out",
            carol.to_str().unwrap_or_default(),
        ])
        .expect("capstan kubeconfig");
    assert!(written, "{err}");
    ok(
        &s,
        &[
            "create",
            "clusterrole",
            "csr-approver",
            "--verb=get,list,update",
            "--resource=certificatesigningrequests,certificatesigningrequests/approval",
        ],
    );
    ok(
        &s,
        &[
            "create",
            "clusterrolebinding",
            "carol-csr",
            "--clusterrole=csr-approver",
            "--user=carol",
        ],
    );
    let (approved, _, err) = s
        .kubectl_as(&carol, &["certificate", "approve", "pending"], None)
        .expect("kubectl");
    assert!(!approved);
    assert!(
        err.contains("certificatesigningrequests.certificates.k8s.io \"pending\" is forbidden: user not permitted to approve requests with signerName \"kubernetes.io/kube-apiserver-client\""),
        "{err}"
    );
    // `signers` is no served resource: the role is written as YAML.
    e2e::cli::apply(
        &s,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: client-signer-approver\nrules:\n- apiGroups: [certificates.k8s.io]\n  resources: [signers]\n  verbs: [approve]\n  resourceNames: [\"kubernetes.io/*\"]\n",
    );
    ok(
        &s,
        &[
            "create",
            "clusterrolebinding",
            "carol-signer",
            "--clusterrole=client-signer-approver",
            "--user=carol",
        ],
    );
    let (approved, _, err) = s
        .kubectl_as(&carol, &["certificate", "approve", "pending"], None)
        .expect("kubectl");
    assert!(approved, "{err}");
}

/// A user kubeconfig made by `capstan kubeconfig`.
fn user(s: &ServerProcess, dir: &Path, name: &str, groups: &[&str]) -> PathBuf {
    let path = dir.join(format!("{}.kubeconfig", name.replace(':', "-")));
    let mut args = vec![
        "kubeconfig",
        "--data-dir",
        s.data_dir.to_str().unwrap_or_default(),
        "--user",
        name,
        "--server",
        &s.url,
        "--out",
        path.to_str().unwrap_or_default(),
    ];
    for g in groups {
        args.extend(["--group", g]);
    }
    let (written, _, err) = s.capstan(&args).expect("capstan kubeconfig");
    assert!(written, "{err}");
    path
}

/// `csrapproving`: a node's own client certificate request is approved after a
/// SubjectAccessReview for `certificatesigningrequests/selfnodeclient` (granted to
/// `system:nodes`, as kubeadm binds it) and then signed; a node client request from someone
/// allowed neither `selfnodeclient` nor `nodeclient` stays pending.
#[test]
fn node_client_requests_are_auto_approved() {
    let (dir, s) = cluster();
    ok(
        &s,
        &[
            "create",
            "clusterrolebinding",
            "node-autoapprove-rotation",
            "--clusterrole=system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            "--group=system:nodes",
        ],
    );
    ok(
        &s,
        &[
            "create",
            "clusterrole",
            "csr-creator",
            "--verb=create,get",
            "--resource=certificatesigningrequests",
        ],
    );
    ok(
        &s,
        &[
            "create",
            "clusterrolebinding",
            "dave-csr",
            "--clusterrole=csr-creator",
            "--user=dave",
        ],
    );
    let usages = ["digital signature", "client auth"];

    let dave = user(&s, dir.path(), "dave", &[]);
    let (_, request) = key_and_request("system:node:n8", &["system:nodes"]);
    let (made, _, err) = s
        .kubectl_as(
            &dave,
            &["create", "-f", "-"],
            Some(&manifest(
                "dave-n8",
                &request,
                "kubernetes.io/kube-apiserver-client-kubelet",
                &usages,
                None,
            )),
        )
        .expect("kubectl");
    assert!(made, "{err}");

    let node = user(&s, dir.path(), "system:node:n9", &["system:nodes"]);
    let (_, request) = key_and_request("system:node:n9", &["system:nodes"]);
    let (made, _, err) = s
        .kubectl_as(
            &node,
            &["create", "-f", "-"],
            Some(&manifest(
                "node-n9",
                &request,
                "kubernetes.io/kube-apiserver-client-kubelet",
                &usages,
                None,
            )),
        )
        .expect("kubectl");
    assert!(made, "{err}");
    wait_for(&s, 30, "node-n9's certificate", || {
        csr(&s, "node-n9")["status"]["certificate"]
            .as_str()
            .map(str::to_owned)
    });
    let approved = &csr(&s, "node-n9")["status"]["conditions"][0];
    assert_eq!(approved["type"], "Approved");
    assert_eq!(approved["reason"], "AutoApproved");
    assert_eq!(
        approved["message"],
        "Auto approving self kubelet client certificate after SubjectAccessReview."
    );
    let pending = csr(&s, "dave-n8");
    assert!(pending["status"]["conditions"].is_null(), "{pending}");
    assert!(ok(&s, &["get", "csr", "dave-n8"]).contains("Pending"));
}

/// The same flow from kube-rs: create, `patch_approval` (the `approval` subresource), read
/// the issued certificate, then authenticate a kube-rs client with it (SelfSubjectReview).
#[tokio::test(flavor = "multi_thread")]
async fn kube_rs_creates_approves_and_authenticates() {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
    use kube::api::{Api, Patch, PatchParams, PostParams};
    use kube::config::{KubeConfigOptions, Kubeconfig};

    let (dir, s) = cluster();
    let config = |path: &Path| {
        let kc = Kubeconfig::read_from(path).expect("kubeconfig");
        async move {
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .expect("config")
        }
    };
    let admin = kube::Client::try_from(config(&s.kubeconfig).await).expect("client");
    let csrs: Api<CertificateSigningRequest> = Api::all(admin);
    let (key, request) = key_and_request("frank", &["ops"]);
    let csr: CertificateSigningRequest = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "frank"},
        "spec": {
            "request": B64.encode(&request),
            "signerName": "kubernetes.io/kube-apiserver-client",
            "expirationSeconds": 7200,
            "usages": ["client auth"],
        }
    }))
    .expect("csr");
    let created = csrs
        .create(&PostParams::default(), &csr)
        .await
        .expect("create");
    assert_eq!(created.spec.username.as_deref(), Some("kubernetes-admin"));
    let approval = serde_json::json!({"status": {"conditions": [{
        "type": "Approved", "status": "True", "reason": "KubeRs", "message": "approved by kube-rs"}]}});
    let approved = csrs
        .patch_approval("frank", &PatchParams::default(), &Patch::Merge(&approval))
        .await
        .expect("approve");
    let condition = &approved
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()[0];
    assert_eq!(condition.reason.as_deref(), Some("KubeRs"));
    assert!(condition.last_update_time.is_some());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let cert = loop {
        let got = csrs.get_approval("frank").await.expect("get");
        if let Some(c) = got.status.and_then(|s| s.certificate) {
            break c.0;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no certificate issued"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let frank = kubeconfig_with_cert(&s, dir.path(), &cert, &key);
    let client = kube::Client::try_from(config(&frank).await).expect("client");
    let review: SelfSubjectReview = serde_json::from_value(serde_json::json!({})).expect("review");
    let me = Api::<SelfSubjectReview>::all(client)
        .create(&PostParams::default(), &review)
        .await
        .expect("self subject review");
    let user = me.status.and_then(|s| s.user_info).expect("user info");
    assert_eq!(user.username.as_deref(), Some("frank"));
    assert_eq!(
        user.groups,
        Some(vec!["ops".to_owned(), "system:authenticated".to_owned()])
    );
}
