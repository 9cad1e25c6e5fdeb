//! Watch service: one task per client stream, owning that stream's watchers.
//!
//! Watchers pull: each remembers the next revision it needs and reads the state machine's
//! history from there whenever the store's revision moves. A client that reads slowly only
//! delays its own stream; when it catches up it continues from history, so no event is
//! lost — unless history was compacted past it, in which case it gets etcd's compaction
//! response (`compact_revision` set, canceled).

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::Shared;
use crate::error::StoreError;
use crate::mvcc::KeyRange;
use crate::pb;

/// Events read from history per pull.
const PULL_EVENTS: usize = 1000;
/// A response is closed once its events carry this many bytes of keys and values.
const RESPONSE_BYTES: usize = 1024 * 1024;
/// Watch ids are assigned from 0 unless the client picks one (etcd's `AutoWatchID`).
const AUTO_WATCH_ID: i64 = 0;
/// `watch_id` of a progress response that concerns every watcher of the stream.
const ALL_WATCHERS: i64 = -1;
const FILTER_NOPUT: i32 = 0;
const FILTER_NODELETE: i32 = 1;
const EVENT_PUT: i32 = 0;

/// The Watch gRPC service.
pub struct WatchService {
    shared: Arc<Shared>,
}

impl WatchService {
    /// A Watch service over the shared member state.
    pub fn new(shared: Arc<Shared>) -> Self {
        WatchService { shared }
    }
}

struct Watcher {
    range: KeyRange,
    next: i64,
    prev_kv: bool,
    no_put: bool,
    no_delete: bool,
    progress_notify: bool,
}

type Outbox = mpsc::Sender<Result<pb::PbWatchResponse, Status>>;

/// One client stream's state.
struct WatchStream {
    shared: Arc<Shared>,
    watchers: BTreeMap<i64, Watcher>,
    next_id: i64,
    out: Outbox,
}

#[tonic::async_trait]
impl pb::PbWatchService for WatchService {
    type WatchStream = ReceiverStream<Result<pb::PbWatchResponse, Status>>;

    async fn watch(
        &self,
        request: Request<Streaming<pb::PbWatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        self.shared.refuse_learner()?;
        let (tx, rx) = mpsc::channel(64);
        let stream = WatchStream {
            shared: Arc::clone(&self.shared),
            watchers: BTreeMap::new(),
            next_id: 0,
            out: tx,
        };
        tokio::spawn(stream.run(request.into_inner()));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

impl WatchStream {
    async fn run(mut self, mut inbound: Streaming<pb::PbWatchRequest>) {
        let mut revisions = self.shared.node.subscribe();
        let mut progress = tokio::time::interval(self.shared.progress_notify_interval);
        progress.tick().await;
        loop {
            let open = tokio::select! {
                msg = inbound.message() => match msg {
                    Ok(Some(req)) => self.handle(req).await,
                    Ok(None) | Err(_) => false,
                },
                changed = revisions.changed() => changed.is_ok(),
                _ = progress.tick() => self.notify_progress(false).await,
            };
            if !open || !self.pump().await {
                return;
            }
        }
    }

    async fn send(&self, resp: pb::PbWatchResponse) -> bool {
        self.out.send(Ok(resp)).await.is_ok()
    }

    fn header(&self) -> Option<pb::PbResponseHeader> {
        Some(
            self.shared
                .header(self.shared.node.mvcc().current_revision()),
        )
    }

    /// Handles one client request; `false` when the client is gone.
    async fn handle(&mut self, req: pb::PbWatchRequest) -> bool {
        use pb::PbWatchRequestUnion as U;
        match req.request_union {
            Some(U::CreateRequest(c)) => {
                let header = self.header();
                let mut id = c.watch_id;
                if id == AUTO_WATCH_ID {
                    while self.watchers.contains_key(&self.next_id) {
                        self.next_id += 1;
                    }
                    id = self.next_id;
                    self.next_id += 1;
                } else if self.watchers.contains_key(&id) || id < 0 {
                    return self
                        .send(pb::PbWatchResponse {
                            header,
                            watch_id: id,
                            created: true,
                            canceled: true,
                            cancel_reason: "etcdserver: duplicate watch ID".into(),
                            ..Default::default()
                        })
                        .await;
                }
                let current = self.shared.node.mvcc().current_revision();
                let watcher = Watcher {
                    range: KeyRange::new(&c.key, &c.range_end),
                    next: if c.start_revision <= 0 {
                        current + 1
                    } else {
                        c.start_revision
                    },
                    prev_kv: c.prev_kv,
                    no_put: c.filters.contains(&FILTER_NOPUT),
                    no_delete: c.filters.contains(&FILTER_NODELETE),
                    progress_notify: c.progress_notify,
                };
                self.watchers.insert(id, watcher);
                self.send(pb::PbWatchResponse {
                    header,
                    watch_id: id,
                    created: true,
                    ..Default::default()
                })
                .await
            }
            Some(U::CancelRequest(c)) => {
                if self.watchers.remove(&c.watch_id).is_some() {
                    let header = self.header();
                    return self
                        .send(pb::PbWatchResponse {
                            header,
                            watch_id: c.watch_id,
                            canceled: true,
                            ..Default::default()
                        })
                        .await;
                }
                true
            }
            Some(U::ProgressRequest(_)) => {
                // Answer only once every watcher has been sent everything up to the
                // revision we report.
                self.pump().await && self.notify_progress(true).await
            }
            None => true,
        }
    }

    /// Progress notification: on request, one response for the whole stream; on the timer,
    /// one per idle watcher that asked for them.
    async fn notify_progress(&self, requested: bool) -> bool {
        let header = self.header();
        if requested {
            return self
                .send(pb::PbWatchResponse {
                    header,
                    watch_id: ALL_WATCHERS,
                    ..Default::default()
                })
                .await;
        }
        let current = header.as_ref().map_or(0, |h| h.revision);
        for (id, w) in &self.watchers {
            if w.progress_notify && w.next > current {
                let resp = pb::PbWatchResponse {
                    header,
                    watch_id: *id,
                    ..Default::default()
                };
                if !self.send(resp).await {
                    return false;
                }
            }
        }
        true
    }

    /// Brings every watcher up to the current revision; `false` when the client is gone.
    async fn pump(&mut self) -> bool {
        let ids: Vec<i64> = self.watchers.keys().copied().collect();
        for id in ids {
            while let Some(w) = self.watchers.get(&id) {
                let (no_put, no_delete) = (w.no_put, w.no_delete);
                let pulled = {
                    let mvcc = self.shared.node.mvcc();
                    if w.next > mvcc.current_revision() {
                        break;
                    }
                    mvcc.events(w.next, &w.range, w.prev_kv, PULL_EVENTS)
                        .map(|(events, next)| (events, next, mvcc.current_revision()))
                        .map_err(|e| (e, mvcc.compacted_revision(), mvcc.current_revision()))
                };
                match pulled {
                    Ok((events, next, current)) => {
                        let events: Vec<pb::PbEvent> = events
                            .into_iter()
                            .map(|e| e.event)
                            .filter(|e| {
                                if e.r#type == EVENT_PUT {
                                    !no_put
                                } else {
                                    !no_delete
                                }
                            })
                            .collect();
                        if let Some(w) = self.watchers.get_mut(&id) {
                            w.next = next;
                        }
                        for chunk in chunks(events) {
                            let resp = pb::PbWatchResponse {
                                header: Some(self.shared.header(current)),
                                watch_id: id,
                                events: chunk,
                                ..Default::default()
                            };
                            if !self.send(resp).await {
                                return false;
                            }
                        }
                    }
                    Err((err, compacted, current)) => {
                        self.watchers.remove(&id);
                        let resp = pb::PbWatchResponse {
                            header: Some(self.shared.header(current)),
                            watch_id: id,
                            canceled: true,
                            compact_revision: if matches!(err, StoreError::Compacted) {
                                compacted
                            } else {
                                0
                            },
                            cancel_reason: err.to_string(),
                            ..Default::default()
                        };
                        if !self.send(resp).await {
                            return false;
                        }
                        break;
                    }
                }
            }
        }
        true
    }
}

/// Splits events into responses of about [`RESPONSE_BYTES`] each.
fn chunks(events: Vec<pb::PbEvent>) -> Vec<Vec<pb::PbEvent>> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    let mut bytes = 0;
    for e in events {
        let size = e.kv.as_ref().map_or(0, |kv| kv.key.len() + kv.value.len())
            + e.prev_kv
                .as_ref()
                .map_or(0, |kv| kv.key.len() + kv.value.len());
        if !cur.is_empty() && bytes + size > RESPONSE_BYTES {
            out.push(std::mem::take(&mut cur));
            bytes = 0;
        }
        bytes += size;
        cur.push(e);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}
