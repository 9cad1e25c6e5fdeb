//! The `authorizer` CEL variable of admission expressions (upstream's
//! `k8s.io/apiserver/pkg/cel/library/authz.go`): authorization checks for the request's user
//! against the server's authorizer chain.
//!
//! - `authorizer.group('apps').resource('deployments').subresource('scale')
//!   .namespace('ns').name('web').check('update')`, `authorizer.path('/healthz').check('get')`;
//! - `authorizer.serviceAccount('ns', 'sa')`: the same checks for that service account;
//! - `authorizer.requestResource`: the request's own group, resource, subresource,
//!   namespace and name, ready for `.check(verb)`;
//! - a decision answers `allowed()`, `reason()`, `errored()` and `error()`.
//!
//! The values are CEL maps tagged with their type under an `@k8s` key; the checks ask the
//! authorizer the request was authorized by ([`crate::pipeline::Authorizer::decide`]: a
//! webhook authorizer answers from its cache), for the user set by [`with`] around the
//! evaluation.

// The `cel` crate's extractors hand function arguments over by value.
#![allow(clippy::needless_pass_by_value)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use kube_cel::cel::extractors::{Arguments, This};
use kube_cel::cel::objects::Key;
use kube_cel::cel::{Context, ExecutionError, ResolveResult, Value as Cel};

use crate::pipeline::{Authorizer, Decision, UserInfo};
use crate::request_info::RequestInfo;

/// The key naming a value's type.
const TAG: &str = "@k8s";

thread_local! {
    /// The authorizer and user of the evaluation running on this thread.
    static CURRENT: RefCell<Option<(Arc<dyn Authorizer>, UserInfo)>> = const { RefCell::new(None) };
}

/// Runs `f` (a synchronous evaluation) with `authorizer` answering checks for `user`.
pub fn with<T>(authorizer: Arc<dyn Authorizer>, user: &UserInfo, f: impl FnOnce() -> T) -> T {
    let previous = CURRENT.with(|c| c.replace(Some((authorizer, user.clone()))));
    let out = f();
    CURRENT.with(|c| *c.borrow_mut() = previous);
    out
}

impl std::fmt::Debug for crate::pipeline::AuthorizerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthorizerHandle")
    }
}

/// Registers the library's functions in `ctx`.
pub fn register(ctx: &mut Context<'_>) {
    ctx.add_function("path", path);
    ctx.add_function("group", group);
    ctx.add_function("resource", |This(this): This<Cel>, v: Arc<String>| {
        set(
            &this,
            "ResourceCheck",
            &["GroupCheck", "ResourceCheck"],
            "resource",
            &v,
        )
    });
    ctx.add_function("subresource", |This(this): This<Cel>, v: Arc<String>| {
        set(
            &this,
            "ResourceCheck",
            &["ResourceCheck"],
            "subresource",
            &v,
        )
    });
    ctx.add_function("namespace", |This(this): This<Cel>, v: Arc<String>| {
        set(&this, "ResourceCheck", &["ResourceCheck"], "namespace", &v)
    });
    ctx.add_function("name", |This(this): This<Cel>, v: Arc<String>| {
        set(&this, "ResourceCheck", &["ResourceCheck"], "name", &v)
    });
    ctx.add_function("serviceAccount", service_account);
    ctx.add_function("check", check);
    ctx.add_function("allowed", |This(this): This<Cel>| {
        decision_field(&this, "allowed")
    });
    ctx.add_function("reason", |This(this): This<Cel>| {
        decision_field(&this, "reason")
    });
    ctx.add_function("errored", |This(this): This<Cel>| {
        decision_field(&this, "errored")
    });
    ctx.add_function("error", |This(this): This<Cel>| {
        decision_field(&this, "error")
    });
}

fn key(k: &str) -> Key {
    Key::String(Arc::new(k.to_owned()))
}

fn string(s: &str) -> Cel {
    Cel::String(Arc::new(s.to_owned()))
}

/// The fields of a tagged value, if `v` is one of the types in `types`.
fn fields(v: &Cel, types: &[&str]) -> Option<HashMap<Key, Cel>> {
    let Cel::Map(m) = v else { return None };
    match m.map.get(&key(TAG)) {
        Some(Cel::String(t)) if types.contains(&t.as_str()) => Some((*m.map).clone()),
        _ => None,
    }
}

fn tagged(tag: &str, mut fields: HashMap<Key, Cel>) -> Cel {
    fields.insert(key(TAG), string(tag));
    Cel::Map(fields.into())
}

fn text(fields: &HashMap<Key, Cel>, k: &str) -> String {
    match fields.get(&key(k)) {
        Some(Cel::String(s)) => s.as_str().to_owned(),
        _ => String::new(),
    }
}

fn no_such_overload(func: &str) -> ExecutionError {
    ExecutionError::function_error(func, "no such overload")
}

/// The `authorizer` variable for a request on `info` (its `requestResource` filled in).
pub fn variable(info: &RequestInfo) -> Cel {
    let mut request = HashMap::new();
    for (k, v) in [
        ("group", &info.group),
        ("resource", &info.resource),
        ("subresource", &info.subresource),
        ("namespace", &info.namespace),
        ("name", &info.name),
    ] {
        request.insert(key(k), string(v));
    }
    let mut authz = HashMap::new();
    authz.insert(key("requestResource"), tagged("ResourceCheck", request));
    tagged("Authorizer", authz)
}

/// A check on another user than the request's: the service account's.
fn service_account(
    This(this): This<Cel>,
    namespace: Arc<String>,
    name: Arc<String>,
) -> ResolveResult {
    let mut f = fields(&this, &["Authorizer"]).ok_or_else(|| no_such_overload("serviceAccount"))?;
    f.insert(
        key("user"),
        string(&format!("system:serviceaccount:{namespace}:{name}")),
    );
    f.insert(
        key("groups"),
        Cel::List(Arc::new(vec![
            string("system:serviceaccounts"),
            string(&format!("system:serviceaccounts:{namespace}")),
            string("system:authenticated"),
        ])),
    );
    Ok(tagged("Authorizer", f))
}

/// The user fields an authorizer value carries along to its checks.
fn carry(from: &HashMap<Key, Cel>, to: &mut HashMap<Key, Cel>) {
    for k in ["user", "groups"] {
        if let Some(v) = from.get(&key(k)) {
            to.insert(key(k), v.clone());
        }
    }
}

fn path(This(this): This<Cel>, p: Arc<String>) -> ResolveResult {
    let f = fields(&this, &["Authorizer"]).ok_or_else(|| no_such_overload("path"))?;
    let mut check = HashMap::new();
    carry(&f, &mut check);
    check.insert(key("path"), string(&p));
    Ok(tagged("PathCheck", check))
}

fn group(This(this): This<Cel>, g: Arc<String>) -> ResolveResult {
    let f = fields(&this, &["Authorizer"]).ok_or_else(|| no_such_overload("group"))?;
    let mut check = HashMap::new();
    carry(&f, &mut check);
    check.insert(key("group"), string(&g));
    Ok(tagged("GroupCheck", check))
}

/// `this` (one of `from`) with `field` set, as a value of type `to`.
fn set(this: &Cel, to: &str, from: &[&str], field: &str, value: &str) -> ResolveResult {
    let mut f = fields(this, from).ok_or_else(|| no_such_overload(field))?;
    f.insert(key(field), string(value));
    Ok(tagged(to, f))
}

/// `check(verb)` of a path or resource check: the authorizer's decision.
fn check(This(this): This<Cel>, Arguments(args): Arguments) -> ResolveResult {
    let verb = match args.first() {
        Some(Cel::String(v)) if args.len() == 1 => v.as_str().to_owned(),
        _ => return Err(no_such_overload("check")),
    };
    let f =
        fields(&this, &["PathCheck", "ResourceCheck"]).ok_or_else(|| no_such_overload("check"))?;
    let info = if f.contains_key(&key("path")) {
        RequestInfo {
            is_resource: false,
            verb,
            path: text(&f, "path"),
            ..RequestInfo::default()
        }
    } else {
        RequestInfo {
            is_resource: true,
            verb,
            api_prefix: if text(&f, "group").is_empty() {
                "api"
            } else {
                "apis"
            }
            .to_owned(),
            group: text(&f, "group"),
            resource: text(&f, "resource"),
            subresource: text(&f, "subresource"),
            namespace: text(&f, "namespace"),
            name: text(&f, "name"),
            ..RequestInfo::default()
        }
    };
    let outcome = CURRENT.with(|c| {
        let current = c.borrow();
        let (authorizer, request_user) = current.as_ref()?;
        let user = match f.get(&key("user")) {
            Some(Cel::String(name)) => UserInfo {
                name: name.as_str().to_owned(),
                groups: match f.get(&key("groups")) {
                    Some(Cel::List(g)) => g
                        .iter()
                        .filter_map(|v| match v {
                            Cel::String(s) => Some(s.as_str().to_owned()),
                            _ => None,
                        })
                        .collect(),
                    _ => Vec::new(),
                },
                ..UserInfo::default()
            },
            _ => request_user.clone(),
        };
        Some(authorizer.decide(&user, &info))
    });
    let mut d = HashMap::new();
    match outcome {
        Some(o) => {
            d.insert(key("allowed"), Cel::Bool(o.decision == Decision::Allow));
            d.insert(key("reason"), string(&o.reason));
            d.insert(key("errored"), Cel::Bool(false));
            d.insert(key("error"), string(""));
        }
        None => {
            d.insert(key("allowed"), Cel::Bool(false));
            d.insert(key("reason"), string(""));
            d.insert(key("errored"), Cel::Bool(true));
            d.insert(key("error"), string("no authorizer for this evaluation"));
        }
    }
    Ok(tagged("Decision", d))
}

fn decision_field(this: &Cel, field: &str) -> ResolveResult {
    let f = fields(this, &["Decision"]).ok_or_else(|| no_such_overload(field))?;
    f.get(&key(field))
        .cloned()
        .ok_or_else(|| no_such_overload(field))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Outcome;
    use kube_cel::cel::Program;

    /// Allows `alice` to get deployments in `ns` and `/healthz`; nothing else.
    struct Fixed;

    impl Authorizer for Fixed {
        fn decide(&self, user: &UserInfo, info: &RequestInfo) -> Outcome {
            let allowed = (user.name == "alice"
                && info.is_resource
                && info.group == "apps"
                && info.resource == "deployments"
                && info.namespace == "ns"
                && info.verb == "get")
                || (!info.is_resource && info.path == "/healthz")
                || (user.name == "system:serviceaccount:ns:robot" && info.verb == "list");
            Outcome {
                decision: if allowed {
                    Decision::Allow
                } else {
                    Decision::NoOpinion
                },
                reason: if allowed {
                    "fixed".into()
                } else {
                    String::new()
                },
            }
        }
    }

    fn eval(expr: &str) -> Cel {
        let info = RequestInfo {
            is_resource: true,
            group: "apps".into(),
            resource: "deployments".into(),
            namespace: "ns".into(),
            name: "web".into(),
            ..RequestInfo::default()
        };
        let user = UserInfo {
            name: "alice".into(),
            ..UserInfo::default()
        };
        let mut ctx = super::super::cel_env::root().new_inner_scope();
        ctx.add_variable_from_value("authorizer", variable(&info));
        let p = Program::compile(expr).unwrap();
        with(Arc::new(Fixed), &user, || p.execute(&ctx)).unwrap()
    }

    #[test]
    fn checks_ask_the_authorizer_for_the_user() {
        assert_eq!(
            eval(
                "authorizer.group('apps').resource('deployments').namespace('ns').check('get').allowed()"
            ),
            Cel::Bool(true)
        );
        assert_eq!(
            eval(
                "authorizer.group('apps').resource('deployments').namespace('other').check('get').allowed()"
            ),
            Cel::Bool(false)
        );
        assert_eq!(
            eval("authorizer.requestResource.check('get').allowed()"),
            Cel::Bool(true)
        );
        assert_eq!(
            eval("authorizer.requestResource.check('delete').allowed()"),
            Cel::Bool(false)
        );
        assert_eq!(
            eval("authorizer.path('/healthz').check('get').reason()"),
            string("fixed")
        );
        assert_eq!(
            eval(
                "authorizer.serviceAccount('ns', 'robot').group('').resource('pods').check('list').allowed()"
            ),
            Cel::Bool(true)
        );
        assert_eq!(
            eval(
                "authorizer.group('apps').resource('deployments').namespace('ns').check('get').errored()"
            ),
            Cel::Bool(false)
        );
    }
}
