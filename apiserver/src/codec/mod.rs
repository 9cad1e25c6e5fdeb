//! Request-body codecs other than JSON.
//!
//! kubectl sends `application/vnd.kubernetes.protobuf` bodies for its typed commands
//! (`create namespace|deployment|configmap|secret generic|serviceaccount|job`, `auth can-i`,
//! `auth whoami`, `create token`). [`decode_protobuf`] turns such a body into the JSON form of
//! the same object, so the rest of the server handles one representation only.
//!
//! The schema is upstream's own: the `generated.proto` files of `k8s.io/api` and
//! `k8s.io/apimachinery` under `apiserver/proto/`, compiled into a descriptor set by
//! `build.rs`. What the `.proto` files do not say about the JSON form (which zero values Go's
//! JSON encoding keeps, inlined structs, a few renamed fields) comes from
//! `apiserver/proto/json_fields.txt`, generated from the Go types.

mod protobuf;

pub use protobuf::decode_protobuf;

/// Media type of Kubernetes protobuf.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

#[cfg(test)]
mod tests;
