//! The runtime cost of admission CEL expressions, held to upstream's limits
//! (`k8s.io/apiserver/pkg/apis/cel/config.go`): an expression may cost at most
//! [`PER_CALL_LIMIT`] (cel-go cancels it: `operation cancelled: actual cost limit
//! exceeded`), and all the expressions of one policy evaluation together at most
//! [`POLICY_BUDGET`] (`validation failed due to running out of cost budget, no further
//! validation rules will be run`).
//!
//! The interpreter (`cel`) does not count, so the cost is measured before an expression
//! runs: one unit per node of its syntax tree, as cel-go charges one per evaluation step,
//! and for each macro loop (`all`, `exists`, `map`, `filter`, …) the cost of its condition
//! and step once per element of the range, evaluated in the same variables (nested loops
//! multiply). An expression without a loop costs its node count, known when it is compiled;
//! one with loops is walked with its ranges evaluated, and the walk stops as soon as the
//! limit is passed, so an expression that would run for seconds is refused in microseconds.
//! Short-circuits are not followed (the cost is an upper bound of cel-go's).

use std::sync::Arc;

use kube_cel::cel::common::ast::{EntryExpr, Expr, IdedExpr};
use kube_cel::cel::objects::Key;
use kube_cel::cel::{Context, Value as Cel};

/// Upstream's `PerCallLimit`: the cost one expression may reach.
pub const PER_CALL_LIMIT: u64 = 1_000_000;
/// Upstream's `RuntimeCELCostBudget`: the cost of one policy evaluation.
pub const POLICY_BUDGET: u64 = 10_000_000;

/// cel-go's error for an expression over [`PER_CALL_LIMIT`].
pub const CALL_LIMIT_ERROR: &str = "operation cancelled: actual cost limit exceeded";
/// Upstream's error when a policy's expressions together pass [`POLICY_BUDGET`].
pub const BUDGET_ERROR: &str =
    "validation failed due to running out of cost budget, no further validation rules will be run";

/// What is known of an expression's cost when it is compiled.
#[derive(Debug, Clone, Copy, Default)]
pub struct Static {
    /// Nodes of the syntax tree.
    pub nodes: u64,
    /// Whether it has a macro loop (then its cost depends on the values).
    pub loops: bool,
}

impl Static {
    /// The static cost of `e`.
    pub fn of(e: &IdedExpr) -> Static {
        let mut s = Static::default();
        count(&e.expr, &mut s);
        s
    }
}

fn count(e: &Expr, s: &mut Static) {
    s.nodes += 1;
    for child in children(e) {
        count(&child.expr, s);
    }
    if matches!(e, Expr::Comprehension(_)) {
        s.loops = true;
    }
}

/// The direct sub-expressions of `e`.
fn children(e: &Expr) -> Vec<&IdedExpr> {
    match e {
        Expr::Select(s) => vec![&s.operand],
        Expr::Call(c) => c.target.iter().map(|t| &**t).chain(&c.args).collect(),
        Expr::List(l) => l.elements.iter().collect(),
        Expr::Map(m) => m
            .entries
            .iter()
            .flat_map(|en| match &en.expr {
                EntryExpr::MapEntry(me) => vec![&me.key, &me.value],
                EntryExpr::StructField(sf) => vec![&sf.value],
            })
            .collect(),
        Expr::Struct(s) => s
            .entries
            .iter()
            .flat_map(|en| match &en.expr {
                EntryExpr::MapEntry(me) => vec![&me.key, &me.value],
                EntryExpr::StructField(sf) => vec![&sf.value],
            })
            .collect(),
        Expr::Comprehension(c) => vec![
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ],
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Vec::new(),
    }
}

/// The cost of running `e` in `scope`, counted up to `limit` (a result above `limit` means
/// "over"; the walk stops there).
pub fn runtime(e: &IdedExpr, scope: &Context<'_>, limit: u64) -> u64 {
    let mut spent = 0;
    walk(e, scope, limit, &mut spent);
    spent
}

fn walk(e: &IdedExpr, scope: &Context<'_>, limit: u64, spent: &mut u64) {
    if *spent > limit {
        return;
    }
    *spent += 1;
    let Expr::Comprehension(c) = &e.expr else {
        for child in children(&e.expr) {
            walk(child, scope, limit, spent);
        }
        return;
    };
    walk(&c.iter_range, scope, limit, spent);
    walk(&c.accu_init, scope, limit, spent);
    // A range that does not evaluate here (it reads the accumulator, or fails) is left to
    // the interpreter, which reports its error.
    let items: Vec<Cel> = match scope.resolve(&c.iter_range) {
        Ok(Cel::List(l)) => l.as_ref().clone(),
        Ok(Cel::Map(m)) => m.map.keys().map(key_value).collect(),
        _ => Vec::new(),
    };
    for item in items {
        if *spent > limit {
            return;
        }
        let mut inner = scope.new_inner_scope();
        inner.add_variable_from_value(c.iter_var.clone(), item);
        walk(&c.loop_cond, &inner, limit, spent);
        walk(&c.loop_step, &inner, limit, spent);
    }
    walk(&c.result, scope, limit, spent);
}

fn key_value(k: &Key) -> Cel {
    match k {
        Key::String(s) => Cel::String(Arc::clone(s)),
        Key::Int(i) => Cel::Int(*i),
        Key::Uint(u) => Cel::UInt(*u),
        Key::Bool(b) => Cel::Bool(*b),
    }
}

/// What is left of one policy evaluation's [`POLICY_BUDGET`].
#[derive(Debug)]
pub struct Budget(std::cell::Cell<u64>);

impl Default for Budget {
    fn default() -> Self {
        Budget(std::cell::Cell::new(POLICY_BUDGET))
    }
}

impl Budget {
    /// A budget of `units`.
    pub fn new(units: u64) -> Budget {
        Budget(std::cell::Cell::new(units))
    }

    /// Spends `cost`; `false` (and nothing left) when it does not fit.
    pub fn spend(&self, cost: u64) -> bool {
        let left = self.0.get();
        if cost > left {
            self.0.set(0);
            return false;
        }
        self.0.set(left - cost);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_cel::cel::Program;

    fn compile(s: &str) -> Program {
        Program::compile(s).unwrap()
    }

    #[test]
    fn loops_cost_per_element_and_nest() {
        let root = super::super::cel_env::root();
        let mut scope = root.new_inner_scope();
        let list: Vec<Cel> = (0..100).map(Cel::Int).collect();
        scope.add_variable_from_value("xs", Cel::List(Arc::new(list)));
        let flat = compile("1 + 2 == 3");
        let s = Static::of(flat.expression());
        assert!(!s.loops);
        assert_eq!(runtime(flat.expression(), &scope, PER_CALL_LIMIT), s.nodes);
        let one = compile("xs.all(x, x >= 0)");
        assert!(Static::of(one.expression()).loops);
        let single = runtime(one.expression(), &scope, PER_CALL_LIMIT);
        assert!((100..2_000).contains(&single), "{single}");
        let three = compile("xs.all(a, xs.all(b, xs.all(c, a + b + c >= 0)))");
        let cost = runtime(three.expression(), &scope, PER_CALL_LIMIT);
        // 10^6 innermost iterations: over the limit, and the walk stopped right there.
        assert!(
            cost > PER_CALL_LIMIT && cost < PER_CALL_LIMIT + 100,
            "{cost}"
        );
    }

    #[test]
    fn budgets_run_out() {
        let b = Budget::new(10);
        assert!(b.spend(6));
        assert!(!b.spend(6));
        assert!(!b.spend(1));
    }
}
