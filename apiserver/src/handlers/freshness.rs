//! Reads at a resourceVersion the server has not reached yet: like kube-apiserver's watch
//! cache, wait a little for the store to catch up (a client may have seen that revision from
//! another server, or be racing its own write), then answer 504 "Too large resource version".

use std::time::Duration;

use super::{Ctx, object};
use crate::error::{ApiError, Result};

/// How long a read waits for its resourceVersion (upstream's cacher blocks for 3 s).
const WAIT: Duration = Duration::from_secs(3);

/// Returns once the store's revision is at least `rv` (a resourceVersion query parameter;
/// empty and `"0"` need nothing), or fails with 504 after [`WAIT`].
pub(super) async fn wait_for(ctx: &Ctx, rv: &str) -> Result<()> {
    if rv.is_empty() || rv == "0" {
        return Ok(());
    }
    let requested = object::parse_rv(rv)?;
    if ctx.storage.current_revision() >= requested {
        return Ok(());
    }
    let mut revisions = ctx.storage.subscribe();
    let reached = tokio::time::timeout(WAIT, async {
        loop {
            if ctx.storage.current_revision() >= requested {
                return true;
            }
            if revisions.changed().await.is_err() {
                return false;
            }
        }
    })
    .await
    .unwrap_or(false);
    if reached {
        Ok(())
    } else {
        Err(ApiError::TooLargeResourceVersion {
            requested,
            current: ctx.storage.current_revision(),
        })
    }
}
