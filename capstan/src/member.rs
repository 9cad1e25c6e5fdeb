//! `capstan member list|add|remove|update|promote`: etcdctl's `member` commands against any
//! member's client URL, with etcdctl's output so scripts written for it keep working.

use etcd_client::{Member, MemberAddOptions};

/// `capstan member …`.
#[derive(clap::Subcommand)]
pub(crate) enum MemberCommand {
    /// List the cluster's members (ID, status, name, peer URLs, client URLs, learner).
    List {
        /// Output format: `simple`, `table` or `json`.
        #[arg(short = 'w', long = "write-out", default_value = "simple")]
        write_out: String,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Add a member; prints the settings to start it with.
    Add {
        /// The new member's name (for the printed `ETCD_INITIAL_CLUSTER`).
        name: String,
        /// Its peer URLs (comma-separated).
        #[arg(long, value_delimiter = ',', required = true)]
        peer_urls: Vec<String>,
        /// Add it as a learner (promote it once it has caught up).
        #[arg(long)]
        learner: bool,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Remove a member by its hex id.
    Remove {
        /// Member id (hex, as `member list` shows it).
        id: String,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Change a member's peer URLs.
    Update {
        /// Member id (hex).
        id: String,
        /// New peer URLs (comma-separated).
        #[arg(long, value_delimiter = ',', required = true)]
        peer_urls: Vec<String>,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Promote a learner to a voting member.
    Promote {
        /// Member id (hex).
        id: String,
        #[command(flatten)]
        endpoints: Endpoints,
    },
}

/// `--endpoints`, as etcdctl takes it.
#[derive(clap::Args)]
pub(crate) struct Endpoints {
    /// Members to talk to (comma-separated client URLs); the first that answers is used.
    #[arg(long, value_delimiter = ',', default_value = "http://127.0.0.1:2379")]
    endpoints: Vec<String>,
    #[command(flatten)]
    tls: ClientTls,
}

/// etcdctl's TLS flags for `https://` endpoints (a store with `--client-cert-auth`).
#[derive(clap::Args, Clone, Default)]
pub(crate) struct ClientTls {
    /// CA bundle the members' certificates must chain to.
    #[arg(long)]
    cacert: Option<std::path::PathBuf>,
    /// Client certificate to present.
    #[arg(long)]
    cert: Option<std::path::PathBuf>,
    /// Its private key.
    #[arg(long)]
    key: Option<std::path::PathBuf>,
}

impl ClientTls {
    /// As the store's dialer takes them.
    pub(crate) fn dial(&self) -> store::transport::client_tls::DialTls {
        store::transport::client_tls::DialTls {
            ca_file: self.cacert.clone(),
            cert_file: self.cert.clone(),
            key_file: self.key.clone(),
        }
    }
}

fn parse_id(id: &str) -> anyhow::Result<u64> {
    u64::from_str_radix(id, 16)
        .map_err(|e| anyhow::anyhow!("bad member ID arg ({e}), expecting ID in Hex"))
}

fn status(m: &Member) -> &'static str {
    if m.name().is_empty() {
        "unstarted"
    } else {
        "started"
    }
}

/// Runs one `member` command.
pub(crate) async fn run(cmd: MemberCommand) -> anyhow::Result<()> {
    let (endpoints, tls) = match &cmd {
        MemberCommand::List { endpoints, .. }
        | MemberCommand::Add { endpoints, .. }
        | MemberCommand::Remove { endpoints, .. }
        | MemberCommand::Update { endpoints, .. }
        | MemberCommand::Promote { endpoints, .. } => {
            (endpoints.endpoints.clone(), endpoints.tls.dial())
        }
    };
    let mut client = store::remote::etcd_client(&endpoints, &tls).await?;
    match cmd {
        MemberCommand::List { write_out, .. } => {
            let resp = client.member_list().await?;
            print_list(resp.members(), &write_out);
        }
        MemberCommand::Add {
            name,
            peer_urls,
            learner,
            ..
        } => {
            let opts = learner.then(|| MemberAddOptions::new().with_is_learner());
            let resp = client.member_add(peer_urls.clone(), opts).await?;
            let cluster = resp.header().map_or(0, |h| h.cluster_id());
            let id = resp.member().map_or(0, Member::id);
            println!("Member {id:16x} added to cluster {cluster:16x}\n");
            // etcdctl prints the members of the add response; the Rust client does not
            // expose them, so they are listed once more.
            let list = client.member_list().await?;
            let initial: Vec<String> = list
                .members()
                .iter()
                .flat_map(|m| {
                    let n = if m.id() == id {
                        name.clone()
                    } else {
                        m.name().to_owned()
                    };
                    m.peer_urls()
                        .iter()
                        .map(move |u| format!("{n}={u}"))
                        .collect::<Vec<_>>()
                })
                .collect();
            println!("ETCD_NAME=\"{name}\"");
            println!("ETCD_INITIAL_CLUSTER=\"{}\"", initial.join(","));
            println!(
                "ETCD_INITIAL_ADVERTISE_PEER_URLS=\"{}\"",
                peer_urls.join(",")
            );
            println!("ETCD_INITIAL_CLUSTER_STATE=\"existing\"");
        }
        MemberCommand::Remove { id, .. } => {
            let id = parse_id(&id)?;
            let resp = client.member_remove(id).await?;
            let cluster = resp.header().map_or(0, |h| h.cluster_id());
            println!("Member {id:16x} removed from cluster {cluster:16x}");
        }
        MemberCommand::Update { id, peer_urls, .. } => {
            let id = parse_id(&id)?;
            let resp = client.member_update(id, peer_urls).await?;
            let cluster = resp.header().map_or(0, |h| h.cluster_id());
            println!("Member {id:16x} updated in cluster {cluster:16x}");
        }
        MemberCommand::Promote { id, .. } => {
            let id = parse_id(&id)?;
            let resp = client.member_promote(id).await?;
            let cluster = resp.header().map_or(0, |h| h.cluster_id());
            println!("Member {id:16x} promoted in cluster {cluster:16x}");
        }
    }
    Ok(())
}

fn print_list(members: &[Member], write_out: &str) {
    match write_out {
        "json" => {
            let items: Vec<String> = members
                .iter()
                .map(|m| {
                    let list = |v: &[String]| {
                        v.iter()
                            .map(|u| format!("\"{u}\""))
                            .collect::<Vec<_>>()
                            .join(",")
                    };
                    format!(
                        "{{\"ID\":{},\"name\":\"{}\",\"peerURLs\":[{}],\"clientURLs\":[{}]{}}}",
                        m.id(),
                        m.name(),
                        list(m.peer_urls()),
                        list(m.client_urls()),
                        if m.is_learner() {
                            ",\"isLearner\":true"
                        } else {
                            ""
                        }
                    )
                })
                .collect();
            println!("{{\"members\":[{}]}}", items.join(","));
        }
        "table" => {
            let head = [
                "ID",
                "STATUS",
                "NAME",
                "PEER ADDRS",
                "CLIENT ADDRS",
                "IS LEARNER",
            ]
            .map(str::to_owned);
            let rows: Vec<[String; 6]> = members.iter().map(row).collect();
            let widths: Vec<usize> = (0..6)
                .map(|i| {
                    rows.iter()
                        .map(|r| r[i].len())
                        .chain([head[i].len()])
                        .max()
                        .unwrap_or(0)
                        + 2
                })
                .collect();
            let line: String = widths
                .iter()
                .map(|w| format!("+{}", "-".repeat(*w)))
                .collect::<String>()
                + "+";
            let cells = |r: &[String; 6]| {
                r.iter()
                    .zip(&widths)
                    .map(|(c, w)| format!("|{c:^w$}"))
                    .collect::<String>()
                    + "|"
            };
            println!("{line}\n{}\n{line}", cells(&head));
            for r in &rows {
                println!("{}", cells(r));
            }
            println!("{line}");
        }
        _ => {
            for m in members {
                println!("{}", row(m).join(", "));
            }
        }
    }
}

fn row(m: &Member) -> [String; 6] {
    [
        format!("{:x}", m.id()),
        status(m).to_owned(),
        m.name().to_owned(),
        m.peer_urls().join(","),
        m.client_urls().join(","),
        m.is_learner().to_string(),
    ]
}
