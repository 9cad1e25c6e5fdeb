//! What admission's CEL expressions (ValidatingAdmissionPolicy, webhook `matchConditions`)
//! share: one root context with the Kubernetes libraries, built once per process, and the
//! conversion of request variables (`object`, `oldObject`, `request`, `params`,
//! `namespaceObject`) to CEL values limited to what the expressions read.
//!
//! Converting a whole object to CEL costs more than most expressions do, so each variable
//! is looked at in the compiled expressions: unused, it is bound to `null` without being
//! converted; read only through field selections (`object.metadata.name`,
//! `has(object.spec)`), only those top-level fields are converted; used in any other way
//! (`object == oldObject`, `object[k]`, a function argument), all of it.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use kube_cel::KubeCelExt as _;
use kube_cel::cel::common::ast::{EntryExpr, Expr};
use kube_cel::cel::objects::Key;
use kube_cel::cel::{Context, Program, Value as Cel};
use serde_json::{Map, Value};

use crate::crd::cel::plain_to_cel;

/// The root context: every function of the Kubernetes CEL libraries (the authorizer
/// library included, [`super::cel_authz`]), no variables.
pub fn root() -> &'static Context<'static> {
    static ROOT: LazyLock<Context<'static>> = LazyLock::new(|| {
        let mut ctx = Context::default().with_all();
        super::cel_authz::register(&mut ctx);
        ctx
    });
    &ROOT
}

/// How much of one variable (or of one of its fields) the expressions read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Needs {
    /// Not read.
    #[default]
    Nothing,
    /// Read only through these fields (each with what is read of it).
    Fields(BTreeMap<String, Needs>),
    /// Read as a whole.
    Whole,
}

impl Needs {
    /// What `programs` read of the variable `name`.
    pub fn of<'p>(name: &str, programs: impl IntoIterator<Item = &'p Program>) -> Needs {
        let mut needs = Needs::Nothing;
        for p in programs {
            visit(&p.expression().expr, &mut |var, path| {
                if var == name {
                    needs.add(path);
                }
            });
        }
        needs
    }

    /// Marks `path` (fields below this value) as read in full.
    fn add(&mut self, path: &[&str]) {
        let Some((first, rest)) = path.split_first() else {
            *self = Needs::Whole;
            return;
        };
        match self {
            Needs::Whole => {}
            Needs::Nothing => {
                let mut child = Needs::Nothing;
                child.add(rest);
                *self = Needs::Fields(BTreeMap::from([((*first).to_owned(), child)]));
            }
            Needs::Fields(fields) => fields.entry((*first).to_owned()).or_default().add(rest),
        }
    }

    /// Whether the variable is read at all.
    pub fn used(&self) -> bool {
        *self != Needs::Nothing
    }

    /// The CEL value of `value` (an object, or null) with what is read of it: `null` when
    /// unused.
    pub fn convert(&self, value: Option<&Map<String, Value>>) -> Cel {
        match value {
            Some(m) if self.used() => self.map(m),
            _ => Cel::Null,
        }
    }

    /// `m` with only the fields read.
    fn map(&self, m: &Map<String, Value>) -> Cel {
        let entry = |k: &String, v: Cel| (Key::String(Arc::new(k.clone())), v);
        let map: std::collections::HashMap<Key, Cel> = match self {
            Needs::Fields(fields) => m
                .iter()
                .filter_map(|(k, v)| Some(entry(k, fields.get(k)?.value(v))))
                .collect(),
            _ => m.iter().map(|(k, v)| entry(k, plain_to_cel(v))).collect(),
        };
        Cel::Map(map.into())
    }

    /// `v` with what is read of it (objects limited to the fields read).
    fn value(&self, v: &Value) -> Cel {
        match (self, v) {
            (Needs::Fields(_), Value::Object(m)) => self.map(m),
            _ => plain_to_cel(v),
        }
    }
}

/// Calls `f(variable, path)` for each use of an identifier in `e`: `path` is the chain of
/// field selections made on it (`object.metadata.name`: `["metadata", "name"]`), empty when
/// it is used in any other way.
fn visit(e: &Expr, f: &mut impl FnMut(&str, &[&str])) {
    match e {
        Expr::Ident(n) => f(n, &[]),
        Expr::Select(s) => {
            let mut path = vec![s.field.as_str()];
            let mut operand = &s.operand.expr;
            while let Expr::Select(inner) = operand {
                path.push(inner.field.as_str());
                operand = &inner.operand.expr;
            }
            match operand {
                Expr::Ident(n) => {
                    path.reverse();
                    f(n, &path);
                }
                other => visit(other, f),
            }
        }
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                visit(&t.expr, f);
            }
            for a in &c.args {
                visit(&a.expr, f);
            }
        }
        Expr::List(l) => {
            for x in &l.elements {
                visit(&x.expr, f);
            }
        }
        Expr::Map(m) => {
            for en in &m.entries {
                match &en.expr {
                    EntryExpr::MapEntry(me) => {
                        visit(&me.key.expr, f);
                        visit(&me.value.expr, f);
                    }
                    EntryExpr::StructField(sf) => visit(&sf.value.expr, f),
                }
            }
        }
        Expr::Struct(s) => {
            for en in &s.entries {
                match &en.expr {
                    EntryExpr::MapEntry(me) => {
                        visit(&me.key.expr, f);
                        visit(&me.value.expr, f);
                    }
                    EntryExpr::StructField(sf) => visit(&sf.value.expr, f),
                }
            }
        }
        Expr::Comprehension(c) => {
            for x in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                visit(&x.expr, f);
            }
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn needs(name: &str, sources: &[&str]) -> Needs {
        let programs: Vec<Program> = sources
            .iter()
            .map(|s| Program::compile(s).unwrap())
            .collect();
        Needs::of(name, &programs)
    }

    #[test]
    fn selections_limit_what_is_converted() {
        let n = needs(
            "object",
            &[
                "object.metadata.name.size() > 0",
                "has(object.spec) && object.spec.replicas < 5",
            ],
        );
        let obj = json!({"metadata": {"name": "p", "managedFields": [{}]},
            "spec": {"replicas": 1, "x": 2}, "status": {}});
        let Cel::Map(m) = n.convert(obj.as_object()) else {
            panic!("not a map")
        };
        assert_eq!(m.map.len(), 2);
        let Some(Cel::Map(meta)) = m.map.get(&Key::String(Arc::new("metadata".into()))) else {
            panic!("no metadata")
        };
        assert_eq!(meta.map.len(), 1);
        let Some(Cel::Map(spec)) = m.map.get(&Key::String(Arc::new("spec".into()))) else {
            panic!("no spec")
        };
        assert_eq!(spec.map.len(), 2);
        // Unused: null, not converted.
        assert_eq!(
            needs("oldObject", &["object.x"]).convert(obj.as_object()),
            Cel::Null
        );
        // Any other use needs the whole object.
        assert_eq!(needs("object", &["object == oldObject"]), Needs::Whole);
        assert_eq!(needs("object", &["object['spec'] != null"]), Needs::Whole);
        assert_eq!(
            needs("object", &["[1].all(x, object.spec.y == x)"]),
            Needs::Fields(BTreeMap::from([(
                "spec".to_owned(),
                Needs::Fields(BTreeMap::from([("y".to_owned(), Needs::Whole)]))
            )]))
        );
        let prog =
            Program::compile("object.metadata.name == 'p' && object.spec.replicas == 1").unwrap();
        let mut ctx = root().new_inner_scope();
        ctx.add_variable_from_value("object", n.convert(obj.as_object()));
        assert_eq!(prog.execute(&ctx).unwrap(), Cel::Bool(true));
    }
}
