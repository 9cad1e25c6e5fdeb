//! Structural defaulting (upstream's `schema/defaulting/algorithm.go`).

use serde_json::Value;

use super::Structural;

/// Applies the schema's `default`s to custom resource `obj`, as upstream does on create and
/// update (after pruning) and when reading from storage: in every object present, a property
/// that is missing, or `null` while not `nullable`, gets its default (a copy); then defaults
/// are applied inside every property, `additionalProperties` value and list item, where a
/// non-nullable `null` value or item is replaced by its schema's default. A default's own
/// content is defaulted too, as it is walked like any other value.
pub fn default(schema: &Structural, obj: &mut Value) {
    apply(obj, schema);
}

fn non_nullable_null(x: &Value, s: &Structural) -> bool {
    x.is_null() && !s.nullable
}

fn apply(x: &mut Value, s: &Structural) {
    match x {
        Value::Object(o) => {
            for (k, prop) in &s.properties {
                let Some(d) = &prop.default else { continue };
                match o.get(k) {
                    Some(v) if !non_nullable_null(v, prop) => {}
                    _ => {
                        o.insert(k.clone(), d.clone());
                    }
                }
            }
            for (k, v) in o.iter_mut() {
                if let Some(prop) = s.properties.get(k) {
                    apply(v, prop);
                } else if let Some(add) = s.additional_schema() {
                    if non_nullable_null(v, add) {
                        *v = add.default.clone().unwrap_or(Value::Null);
                    }
                    apply(v, add);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.items.as_deref() {
                for v in a {
                    if non_nullable_null(v, items) {
                        *v = items.default.clone().unwrap_or(Value::Null);
                    }
                    apply(v, items);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::Structural;
    use super::default;

    #[allow(clippy::needless_pass_by_value)]
    fn run(schema: Value, mut obj: Value) -> Value {
        default(&Structural::new(&schema), &mut obj);
        obj
    }

    #[test]
    fn defaults_apply_as_upstream() {
        let schema = json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "default": {}, "properties": {
                "replicas": {"type": "integer", "default": 1},
                "mode": {"type": "string", "default": "fast"},
                "opt": {"type": "string", "nullable": true, "default": "d"},
                "nested": {"type": "object", "properties": {
                    "x": {"type": "integer", "default": 7}}},
                "ports": {"type": "array", "items": {"type": "object", "default": {"port": 80},
                    "properties": {"protocol": {"type": "string", "default": "TCP"}}}},
                "env": {"type": "object", "additionalProperties": {"type": "object",
                    "properties": {"v": {"type": "string", "default": "on"}}}}
            }}}
        });
        let cases = [
            // A missing object with a default is created and its own properties defaulted.
            (
                json!({}),
                json!({"spec": {"replicas": 1, "mode": "fast", "opt": "d"}}),
            ),
            // Set values stay; a non-nullable null is defaulted; a nullable null stays null.
            (
                json!({"spec": {"replicas": 3, "mode": null, "opt": null}}),
                json!({"spec": {"replicas": 3, "mode": "fast", "opt": null}}),
            ),
            // Objects without a default are not created, but defaulted inside when present.
            (
                json!({"spec": {"nested": {}}}),
                json!({"spec": {"replicas": 1, "mode": "fast", "opt": "d", "nested": {"x": 7}}}),
            ),
            // Items: null items take the items' default, then are defaulted inside.
            (
                json!({"spec": {"ports": [{"port": 1}, null]}}),
                json!({"spec": {"replicas": 1, "mode": "fast", "opt": "d", "ports": [
                    {"port": 1, "protocol": "TCP"}, {"port": 80, "protocol": "TCP"}]}}),
            ),
            // additionalProperties values are defaulted.
            (
                json!({"spec": {"env": {"a": {}, "b": {"v": "off"}}}}),
                json!({"spec": {"replicas": 1, "mode": "fast", "opt": "d",
                    "env": {"a": {"v": "on"}, "b": {"v": "off"}}}}),
            ),
        ];
        for (obj, want) in cases {
            assert_eq!(run(schema.clone(), obj.clone()), want, "{obj}");
        }
    }
}
