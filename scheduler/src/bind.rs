//! The scheduler's writes: `POST pods/<name>/binding`, `PATCH pods/<name>/status` with the
//! PodScheduled condition and `nominatedNodeName`, the victims' DisruptionTarget condition
//! and deletion, and `events.k8s.io` events (`Scheduled`, `FailedScheduling`, `Preempted`).

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::json;

use crate::cache::PodInfo;

/// Everything needed to talk to the API server.
#[derive(Clone)]
pub struct Writer {
    client: kube::Client,
    reporter: Reporter,
    /// For warnings, which repeat per pod and become series.
    recorder: Recorder,
}

/// A reference to a pod for events.
pub fn pod_ref(namespace: &str, name: &str, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        uid: (!uid.is_empty()).then(|| uid.to_owned()),
        ..Default::default()
    }
}

impl Writer {
    /// A writer reporting events as `scheduler_name` from `instance`.
    pub fn new(client: kube::Client, scheduler_name: &str, instance: &str) -> Writer {
        let reporter = Reporter {
            controller: scheduler_name.into(),
            instance: Some(instance.into()),
        };
        let recorder = Recorder::new(client.clone(), reporter.clone());
        Writer {
            client,
            reporter,
            recorder,
        }
    }

    /// The client, for PreBind's volume writes.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Binds the pod to `node`.
    pub async fn bind(&self, ns: &str, name: &str, uid: &str, node: &str) -> kube::Result<()> {
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                uid: (!uid.is_empty()).then(|| uid.to_owned()),
                ..Default::default()
            },
            target: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.into()),
                ..Default::default()
            },
        };
        self.pods(ns)
            .create_subresource::<_, serde_json::Value>(
                "binding",
                name,
                &PostParams::default(),
                &binding,
            )
            .await?;
        Ok(())
    }

    /// Records an event about a pod.
    pub async fn event(
        &self,
        pod: &ObjectReference,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        // A `Scheduled` event happens once per pod: it goes through a recorder of its own,
        // since kube's Recorder sweeps its whole series cache on every publish (thousands of
        // entries while a large Deployment is scheduled).
        let result = if warning {
            self.recorder.publish(&ev, pod).await
        } else {
            Recorder::new(self.client.clone(), self.reporter.clone())
                .publish(&ev, pod)
                .await
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, reason, "failed to record event");
        }
    }

    /// Sets `PodScheduled=False` (reason Unschedulable, `message`) and, when given,
    /// `nominatedNodeName`; skipped when the pod already says exactly that.
    pub async fn mark_unschedulable(
        &self,
        pod: &Pod,
        message: &str,
        nominated: Option<&str>,
    ) -> kube::Result<()> {
        let status = pod.status.as_ref();
        let current = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
        let same_condition = current.is_some_and(|c| {
            c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
                && c.message.as_deref() == Some(message)
        });
        let cur_nominated = status.and_then(|s| s.nominated_node_name.as_deref());
        if same_condition && nominated.is_none_or(|n| cur_nominated == Some(n)) {
            return Ok(());
        }
        let mut st = json!({
            "conditions": [{
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastProbeTime": null,
                "lastTransitionTime": Timestamp::now().round(k8s_openapi::jiff::Unit::Second).unwrap_or(Timestamp::now()).to_string(),
            }]
        });
        if let Some(n) = nominated {
            st["nominatedNodeName"] = json!(n);
        }
        let name = pod.metadata.name.as_deref().unwrap_or("");
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        self.pods(ns)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Strategic(json!({ "status": st })),
            )
            .await?;
        Ok(())
    }

    /// Evicts one preemption victim: the DisruptionTarget condition, then deletion, then the
    /// `Preempted` event.
    pub async fn preempt_victim(
        &self,
        victim: &PodInfo,
        scheduler_name: &str,
        preemptor_uid: &str,
        node: &str,
    ) -> kube::Result<()> {
        let api = self.pods(&victim.namespace);
        let cond = json!({"status": {"conditions": [{
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": format!("{scheduler_name}: preempting to accommodate a higher priority pod"),
            "lastTransitionTime": Timestamp::now().round(k8s_openapi::jiff::Unit::Second).unwrap_or(Timestamp::now()).to_string(),
        }]}});
        match api
            .patch_status(
                &victim.name,
                &PatchParams::default(),
                &Patch::Strategic(cond),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(e) => return Err(e),
        }
        match api.delete(&victim.name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(e) => return Err(e),
        }
        self.event(
            &pod_ref(&victim.namespace, &victim.name, &victim.uid),
            false,
            "Preempted",
            "Preempting",
            format!("Preempted by pod {preemptor_uid} on node {node}"),
        )
        .await;
        Ok(())
    }
}
