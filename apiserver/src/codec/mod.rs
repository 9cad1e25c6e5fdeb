//! Codecs: request bodies other than JSON, and the encoding of responses.
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
//!
//! Responses: [`negotiate`] reads the Accept header (and `?pretty`, the user agent) as
//! upstream's content negotiation does; [`respond::finish`] applies the result to what a
//! handler wrote — metadata-only forms ([`partial`]), YAML ([`yaml`]), indented JSON, and
//! Kubernetes protobuf ([`protobuf_encode`], byte for byte as Go writes it, watches included).

pub mod go_json;
pub mod negotiate;
pub mod ordered;
pub mod partial;
mod protobuf;
pub mod protobuf_encode;
pub mod respond;
pub mod yaml;

pub use protobuf::decode_protobuf;

/// Media type of Kubernetes protobuf.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

#[cfg(test)]
mod tests;

/// Response extension marking a body that is streamed as it is written (a cached LIST) and
/// already ends with Go's newline: when plain JSON was asked for it passes [`respond::finish`]
/// untouched instead of being gathered into one buffer.
#[derive(Debug, Clone, Copy)]
pub struct Streamed;
