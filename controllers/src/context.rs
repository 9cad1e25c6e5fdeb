//! What every controller loop gets: its API client and identity.

/// Shared handles for one controller loop.
#[derive(Clone)]
pub struct Context {
    /// The client this controller talks to the API server with.
    pub client: kube::Client,
    /// The controller's name as `--controllers` spells it (e.g. `replicaset`).
    pub name: &'static str,
}
