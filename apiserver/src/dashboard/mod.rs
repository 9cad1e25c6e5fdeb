//! The web dashboard's static front end (`/dashboard/`): a hand-written page, script and
//! style sheet embedded in the binary, served without authentication because they hold no
//! data. Everything the page shows it reads from the ordinary API with the user's bearer token
//! (sent by the script in an `Authorization` header, never a cookie), so authentication, RBAC
//! and flow control decide exactly as for kubectl; there is no second authorization path.
//!
//! Each asset is served with a strong ETag (`If-None-Match` → 304), `Cache-Control: no-cache`
//! (revalidate every load: the names carry no hash), gzip when the client accepts it (the
//! `.gz` twins are compressed ahead of time by `gzip.sh` and checked in — no compression crate
//! is linked; a unit test keeps them equal to the sources), and a strict
//! Content-Security-Policy: scripts and styles only from this origin, no inline code, no
//! framing.

use std::sync::OnceLock;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{HeaderMap, HeaderValue, StatusCode, header};

/// The page's Content-Security-Policy.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; \
     base-uri 'none'; form-action 'none'";

/// One embedded file.
struct Asset {
    /// Path under `/dashboard/` (`""` is the page itself).
    path: &'static str,
    content_type: &'static str,
    raw: &'static [u8],
    gzip: &'static [u8],
}

/// Every file the dashboard serves.
const ASSETS: &[Asset] = &[
    Asset {
        path: "",
        content_type: "text/html; charset=utf-8",
        raw: include_bytes!("assets/index.html"),
        gzip: include_bytes!("assets/index.html.gz"),
    },
    Asset {
        path: "app.js",
        content_type: "text/javascript; charset=utf-8",
        raw: include_bytes!("assets/app.js"),
        gzip: include_bytes!("assets/app.js.gz"),
    },
    Asset {
        path: "style.css",
        content_type: "text/css; charset=utf-8",
        raw: include_bytes!("assets/style.css"),
        gzip: include_bytes!("assets/style.css.gz"),
    },
];

/// The routes of the dashboard: `/dashboard` redirects to `/dashboard/`, the files below it.
/// Merged in front of the API's authenticated pipeline by [`crate::server::router`].
pub fn routes() -> Router {
    Router::new()
        .route(
            "/dashboard",
            get(|| async {
                (
                    StatusCode::MOVED_PERMANENTLY,
                    [(header::LOCATION, "/dashboard/")],
                )
            }),
        )
        .route("/dashboard/", get(serve))
        .route("/dashboard/{*file}", get(serve))
}

/// Strong ETags of the assets, in [`ASSETS`] order (identity encoding; the gzip variant adds
/// `-gz`, being a different representation).
fn etags() -> &'static [String] {
    static ETAGS: OnceLock<Vec<String>> = OnceLock::new();
    ETAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| {
                let digest = ring::digest::digest(&ring::digest::SHA256, a.raw);
                let hex: String = digest.as_ref()[..12]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                format!("\"{hex}\"")
            })
            .collect()
    })
}

/// Whether `Accept-Encoding` admits gzip (a `gzip` or `*` coding whose q is not 0).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    value.split(',').any(|coding| {
        let mut parts = coding.split(';').map(str::trim);
        let name = parts.next().unwrap_or("");
        let q_zero = parts.any(|p| {
            p.strip_prefix("q=")
                .and_then(|q| q.trim().parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        (name.eq_ignore_ascii_case("gzip") || name == "*") && !q_zero
    })
}

/// Whether `If-None-Match` names `etag` (or is `*`); weak comparison, as RFC 9110 asks for
/// this header.
fn none_match(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == "*" || t == etag)
}

/// Headers every dashboard response carries.
fn security_headers(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
}

/// Serves one asset (GET and HEAD).
async fn serve(req: Request) -> Response {
    let path = req
        .uri()
        .path()
        .strip_prefix("/dashboard/")
        .unwrap_or_default();
    let Some(index) = ASSETS.iter().position(|a| a.path == path) else {
        let mut resp = (StatusCode::NOT_FOUND, "404 page not found\n").into_response();
        security_headers(resp.headers_mut());
        return resp;
    };
    let asset = &ASSETS[index];
    let gzip = accepts_gzip(req.headers());
    let etag = if gzip {
        format!("{}-gz\"", etags()[index].trim_end_matches('"'))
    } else {
        etags()[index].clone()
    };
    let mut resp = if none_match(req.headers(), &etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut resp = Response::new(Body::from(if gzip { asset.gzip } else { asset.raw }));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        );
        if gzip {
            resp.headers_mut()
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        resp
    };
    let headers = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, v);
    }
    headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    security_headers(headers);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn gzip_twins_match_their_sources() {
        // The .gz files are produced by gzip.sh; a stale one would serve old code to
        // browsers that accept gzip.
        for a in ASSETS {
            let mut child = std::process::Command::new("gzip")
                .arg("-dc")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("gzip on PATH");
            let mut stdin = child.stdin.take().unwrap();
            let data = a.gzip;
            let writer = std::thread::spawn(move || {
                use std::io::Write;
                stdin.write_all(data).unwrap();
            });
            let out = child.wait_with_output().unwrap();
            writer.join().unwrap();
            assert!(out.status.success());
            assert!(
                out.stdout == a.raw,
                "assets/{} .gz is stale: run apiserver/src/dashboard/gzip.sh",
                if a.path.is_empty() {
                    "index.html"
                } else {
                    a.path
                }
            );
        }
    }

    #[test]
    fn accept_encoding() {
        assert!(accepts_gzip(&headers(&[(
            header::ACCEPT_ENCODING,
            "gzip, deflate, br"
        )])));
        assert!(accepts_gzip(&headers(&[(
            header::ACCEPT_ENCODING,
            "br;q=1, GZIP;q=0.5"
        )])));
        assert!(accepts_gzip(&headers(&[(header::ACCEPT_ENCODING, "*")])));
        assert!(!accepts_gzip(&headers(&[(
            header::ACCEPT_ENCODING,
            "gzip;q=0"
        )])));
        assert!(!accepts_gzip(&headers(&[(
            header::ACCEPT_ENCODING,
            "br, identity"
        )])));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn if_none_match() {
        let h = headers(&[(header::IF_NONE_MATCH, "\"a\", W/\"b\"")]);
        assert!(none_match(&h, "\"a\""));
        assert!(none_match(&h, "\"b\""));
        assert!(!none_match(&h, "\"c\""));
        assert!(none_match(
            &headers(&[(header::IF_NONE_MATCH, "*")]),
            "\"c\""
        ));
    }
}
