//! Response content negotiation, as upstream's `negotiation.NegotiateOutputMediaType`.
//!
//! The `Accept` header is split into clauses the way `goautoneg.ParseAccept` does (sorted by
//! `q`, then concrete types before wildcards, otherwise in the client's order; q=0 clauses are
//! kept), and the first clause one of the server's media types (JSON, YAML, protobuf) matches
//! and whose parameters the endpoint allows wins:
//! - `as`/`g`/`v` ask for a conversion: `PartialObjectMetadata[List]` (any media type) or
//!   `Table` (JSON or YAML only) of `meta.k8s.io/v1` or `v1beta1`; any other conversion skips
//!   the clause;
//! - `stream` must be `watch` and the media type must have a stream form (not YAML);
//! - `sv` must be `v1`; `pretty=1` asks for indented JSON.
//!
//! Nothing matching is upstream's 406 `NotAcceptable`. A protobuf clause gives
//! [`Media::Protobuf`], which remembers whether a later clause accepts JSON: kinds without a
//! protobuf message are then answered in JSON, as upstream's per-type negotiation does.

use crate::error::ApiError;

/// The media types of built-in resources, as upstream's 406 message lists them.
const SUPPORTED: &str = "application/json, application/yaml, application/vnd.kubernetes.protobuf";
/// The streaming media types, as upstream's 406 for a watch lists them.
const SUPPORTED_STREAM: &str =
    "application/json;stream=watch, application/vnd.kubernetes.protobuf;stream=watch";

/// A response's serialization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Media {
    /// `application/json`.
    Json,
    /// `application/yaml`.
    Yaml,
    /// `application/vnd.kubernetes.protobuf` (see `codec::protobuf_encode`).
    Protobuf {
        /// A later clause accepts JSON: a kind without a protobuf message is answered in
        /// JSON instead of a 406.
        json_fallback: bool,
    },
}

/// The `meta.k8s.io` version a conversion asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaVersion {
    /// `meta.k8s.io/v1`.
    V1,
    /// `meta.k8s.io/v1beta1`.
    V1beta1,
}

impl MetaVersion {
    /// The `apiVersion` of objects in this version.
    pub fn api_version(self) -> &'static str {
        match self {
            MetaVersion::V1 => "meta.k8s.io/v1",
            MetaVersion::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

/// A conversion of the response object the client asked for (`as=…;g=meta.k8s.io;v=…`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Convert {
    /// Only the object's metadata.
    PartialObjectMetadata(MetaVersion),
    /// A list of metadata-only objects.
    PartialObjectMetadataList(MetaVersion),
    /// A server-side Table.
    Table(MetaVersion),
}

/// What a response should look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Output {
    /// The serialization.
    pub media: Media,
    /// Two-space indented JSON (`?pretty=true`, `pretty=1` in Accept, or a curl, Wget or
    /// browser user agent).
    pub pretty: bool,
    /// The requested conversion, if any.
    pub convert: Option<Convert>,
}

impl Output {
    /// Plain JSON as stored: nothing to re-encode.
    pub fn is_plain(&self) -> bool {
        self.media == Media::Json && !self.pretty && self.convert.is_none()
    }
}

/// One clause of an Accept header.
#[derive(Debug)]
struct Clause<'a> {
    kind: &'a str,
    sub: &'a str,
    q: f64,
    params: Vec<(&'a str, &'a str)>,
}

/// Splits an Accept header as `goautoneg.ParseAccept` does, in its order.
fn parse_accept(header: &str) -> Vec<Clause<'_>> {
    let mut out = Vec::new();
    for part in header.split(',') {
        let part = part.trim_matches(' ');
        let mut pieces = part.split(';');
        let range = pieces.next().unwrap_or("");
        let mut sp = range.split('/');
        let kind = sp.next().unwrap_or("").trim_matches(' ');
        let sub = match (sp.next(), sp.next()) {
            (None, _) if kind == "*" => "*",
            (Some(s), None) => s.trim_matches(' '),
            _ => continue,
        };
        let mut clause = Clause {
            kind,
            sub,
            q: 1.0,
            params: Vec::new(),
        };
        for param in pieces {
            let Some((k, v)) = param.split_once('=') else {
                continue;
            };
            let k = k.trim_matches(' ');
            if k == "q" {
                // Go's ParseFloat error leaves 0.
                clause.q = v.parse().unwrap_or(0.0);
            } else {
                clause.params.push((k, v.trim_matches(' ')));
            }
        }
        out.push(clause);
    }
    // Go's sort.Sort is an insertion sort for so few elements; its Less is not a strict
    // order, so the same insertion sort gives the same result.
    let less = |a: &Clause, b: &Clause| {
        a.q > b.q || (a.kind != "*" && b.kind == "*") || (a.sub != "*" && b.sub == "*")
    };
    for i in 1..out.len() {
        let mut j = i;
        while j > 0 && less(&out[j], &out[j - 1]) {
            out.swap(j, j - 1);
            j -= 1;
        }
    }
    out
}

/// The server's media types: (type, subtype, has a stream form).
const MEDIA: [(&str, &str, bool); 3] = [
    ("application", "json", true),
    ("application", "yaml", false),
    ("application", "vnd.kubernetes.protobuf", true),
];

/// Which conversions an endpoint allows.
#[derive(Debug, Clone, Copy)]
pub enum Restrictions {
    /// A resource endpoint (upstream's `RequestScope`); `custom`: a custom resource, whose
    /// plain answers are JSON or YAML only.
    Resource {
        /// Whether the resource is a custom resource.
        custom: bool,
    },
    /// Errors and discovery (upstream's `DefaultEndpointRestrictions`): no conversion, no
    /// server version.
    Default,
    /// Errors of a custom resource: as [`Restrictions::Default`], in the custom resource's
    /// media types (no protobuf), as upstream negotiates them with the CR's serializers.
    CustomDefault,
}

/// The options of one clause matched to one of the server's media types, or `None` when the
/// endpoint does not allow them (upstream's `acceptMediaTypeOptions`).
fn accept_options(
    clause: &Clause,
    media: (&str, &str, bool),
    restrictions: Restrictions,
) -> Option<(bool, Option<Convert>)> {
    let (mut kind, mut group, mut version) = (None, None, None);
    let mut pretty = false;
    for &(k, v) in &clause.params {
        match k {
            "as" => kind = Some(v),
            "g" => group = Some(v),
            "v" => version = Some(v),
            "stream" if !v.is_empty() && (!media.2 || v != "watch") => return None,
            "sv" if !v.is_empty() => match restrictions {
                Restrictions::Resource { .. } if v == "v1" => {}
                _ => return None,
            },
            "pretty" => pretty = v == "1",
            _ => {}
        }
    }
    let wants_convert = kind.is_some() || group.is_some() || version.is_some();
    if !wants_convert {
        let allowed = match restrictions {
            Restrictions::Resource { custom: true } | Restrictions::CustomDefault => {
                media.1 != "vnd.kubernetes.protobuf"
            }
            _ => true,
        };
        return allowed.then_some((pretty, None));
    }
    let Restrictions::Resource { .. } = restrictions else {
        return None;
    };
    if group != Some("meta.k8s.io") {
        return None;
    }
    let version = match version {
        Some("v1") => MetaVersion::V1,
        Some("v1beta1") => MetaVersion::V1beta1,
        _ => return None,
    };
    let convert = match kind.unwrap_or("") {
        "Table" if matches!(media.1, "json" | "yaml") => Convert::Table(version),
        "PartialObjectMetadata" => Convert::PartialObjectMetadata(version),
        "PartialObjectMetadataList" => Convert::PartialObjectMetadataList(version),
        _ => return None,
    };
    Some((pretty, Some(convert)))
}

/// Whether the request asks for pretty output outside the Accept header: `pretty` in the
/// query (parsed as Go's `ParseBool`, anything else false) decides when given; otherwise a
/// user agent starting with `curl`, `Wget` or `Mozilla/5.0` (upstream's `isPrettyPrint`).
pub fn pretty_by_request(query: Option<&str>, user_agent: &str) -> bool {
    if let Some(q) = query.filter(|q| q.contains("pretty")) {
        let value = q.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == "pretty").then_some(v)
        });
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            return matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True");
        }
    }
    ["curl", "Wget", "Mozilla/5.0"]
        .iter()
        .any(|p| user_agent.starts_with(p))
}

/// Negotiates a response for `accept`; `pretty` is [`pretty_by_request`]'s answer. `None`:
/// nothing acceptable (a 406 for a resource request; errors are then written as indented
/// JSON, as upstream's `WriteRawJSON`).
pub fn negotiate(accept: &str, pretty: bool, restrictions: Restrictions) -> Option<Output> {
    negotiate_media(accept, pretty, restrictions, false)
}

fn negotiate_media(
    accept: &str,
    pretty: bool,
    restrictions: Restrictions,
    stream: bool,
) -> Option<Output> {
    if accept.is_empty() {
        return Some(Output {
            media: Media::Json,
            pretty,
            convert: None,
        });
    }
    let mut protobuf: Option<Output> = None;
    for clause in parse_accept(accept) {
        for media in MEDIA {
            let matches = (clause.kind == media.0 && (clause.sub == media.1 || clause.sub == "*"))
                || (clause.kind == "*" && clause.sub == "*");
            if !matches {
                continue;
            }
            let Some((pretty_param, convert)) = accept_options(&clause, media, restrictions) else {
                continue;
            };
            if stream && !media.2 {
                // Upstream picks the media type first and then finds it has no stream form.
                protobuf?;
                break;
            }
            let out = Output {
                media: match media.1 {
                    "yaml" => Media::Yaml,
                    "json" => Media::Json,
                    _ => Media::Protobuf {
                        json_fallback: false,
                    },
                },
                pretty: (pretty || pretty_param) && media.1 == "json",
                convert,
            };
            match (protobuf, out.media) {
                // The first acceptable clause is protobuf: look on for a JSON one (the
                // answer for kinds without a protobuf message).
                (None, Media::Protobuf { .. }) => {
                    protobuf = Some(out);
                    break;
                }
                (None, _) => return Some(out),
                (Some(p), Media::Json) if p.convert == out.convert => {
                    return Some(Output {
                        media: Media::Protobuf {
                            json_fallback: true,
                        },
                        ..p
                    });
                }
                (Some(_), _) => break,
            }
        }
    }
    protobuf
}

/// Negotiates a resource request's response; a 406 when nothing is acceptable.
pub fn negotiate_resource(
    accept: &str,
    pretty: bool,
    custom: bool,
    watch: bool,
) -> Result<Output, ApiError> {
    let restrictions = Restrictions::Resource { custom };
    let out = negotiate(accept, pretty, restrictions).ok_or_else(|| not_acceptable(SUPPORTED))?;
    if watch {
        // A watch's events are never indented.
        let mut out = negotiate_media(accept, false, restrictions, true)
            .ok_or_else(|| not_acceptable(SUPPORTED_STREAM))?;
        out.pretty = false;
        return Ok(out);
    }
    Ok(out)
}

/// Upstream's `NotAcceptable` for an Accept header none of `supported` satisfies.
fn not_acceptable(supported: &str) -> ApiError {
    not_acceptable_message(format!(
        "only the following media types are accepted: {supported}"
    ))
}

/// A 406 `NotAcceptable` Status with `message`.
pub fn not_acceptable_message(message: String) -> ApiError {
    ApiError::Status {
        code: 406,
        reason: "NotAcceptable".into(),
        message,
        details: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RES: Restrictions = Restrictions::Resource { custom: false };

    fn out(media: Media, pretty: bool, convert: Option<Convert>) -> Option<Output> {
        Some(Output {
            media,
            pretty,
            convert,
        })
    }

    #[test]
    fn kubectl_and_client_headers() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(
            negotiate(kubectl, false, RES),
            out(Media::Json, false, Some(Convert::Table(MetaVersion::V1)))
        );
        let kube_rs = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        assert_eq!(
            negotiate(kube_rs, false, RES),
            out(
                Media::Json,
                false,
                Some(Convert::PartialObjectMetadataList(MetaVersion::V1))
            )
        );
        let client_go = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(
            negotiate(client_go, false, RES),
            out(
                Media::Protobuf {
                    json_fallback: true
                },
                false,
                Some(Convert::PartialObjectMetadata(MetaVersion::V1))
            )
        );
        assert_eq!(
            negotiate("application/vnd.kubernetes.protobuf", true, RES),
            out(
                Media::Protobuf {
                    json_fallback: false
                },
                false,
                None
            )
        );
        // kubectl's protobuf-first Accept.
        assert_eq!(
            negotiate(
                "application/vnd.kubernetes.protobuf,application/json",
                false,
                RES
            ),
            out(
                Media::Protobuf {
                    json_fallback: true
                },
                false,
                None
            )
        );
        // Custom resources have no protobuf form: the JSON clause.
        assert_eq!(
            negotiate(
                "application/vnd.kubernetes.protobuf,application/json",
                false,
                Restrictions::Resource { custom: true }
            ),
            out(Media::Json, false, None)
        );
        assert!(
            negotiate_resource("application/vnd.kubernetes.protobuf", false, true, false).is_err()
        );
        // Watches: the stream form.
        assert_eq!(
            negotiate_resource(
                "application/vnd.kubernetes.protobuf;stream=watch,application/json;stream=watch",
                false,
                false,
                true
            )
            .unwrap()
            .media,
            Media::Protobuf {
                json_fallback: true
            }
        );
        assert_eq!(
            negotiate("application/yaml", true, RES),
            out(Media::Yaml, false, None)
        );
        assert_eq!(negotiate("", true, RES), out(Media::Json, true, None));
        assert_eq!(
            negotiate(
                "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
                false,
                RES
            ),
            out(Media::Json, false, None)
        );
        assert_eq!(
            negotiate("application/json;pretty=1", false, RES),
            out(Media::Json, true, None)
        );
    }

    #[test]
    fn unsupported_conversions_are_not_acceptable() {
        for accept in [
            "application/json;as=Foo;g=meta.k8s.io;v=v1",
            "application/json;as=Table",
            "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1",
            "text/plain",
        ] {
            let err = negotiate_resource(accept, false, false, false).unwrap_err();
            assert_eq!(err.code().as_u16(), 406, "{accept}");
        }
        let err = negotiate_resource("application/yaml", false, false, true).unwrap_err();
        assert!(err.to_string().contains("stream=watch"), "{err}");
        // A custom resource's errors are never protobuf.
        assert_eq!(
            negotiate(
                "application/vnd.kubernetes.protobuf,application/json",
                false,
                Restrictions::CustomDefault
            ),
            out(Media::Json, false, None)
        );
        assert_eq!(
            negotiate(
                "application/vnd.kubernetes.protobuf",
                false,
                Restrictions::CustomDefault
            ),
            None
        );
        // Errors: no conversion allowed.
        assert_eq!(
            negotiate(
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
                false,
                Restrictions::Default
            ),
            None
        );
    }

    #[test]
    fn pretty_from_query_or_user_agent() {
        assert!(pretty_by_request(Some("pretty=true"), ""));
        assert!(!pretty_by_request(Some("pretty=false"), "curl/8.0"));
        assert!(pretty_by_request(Some("pretty="), "curl/8.0"));
        assert!(pretty_by_request(None, "Mozilla/5.0 (X11)"));
        assert!(pretty_by_request(None, "Wget/1.21"));
        assert!(!pretty_by_request(None, "kubectl/v1.33.0"));
    }
}
