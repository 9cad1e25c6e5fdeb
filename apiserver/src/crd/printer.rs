//! Server-side Tables for custom resources, as upstream's
//! `apiextensions-apiserver/pkg/registry/customresource/tableconvertor` prints them.
//!
//! A version's `additionalPrinterColumns` become the Table's columns after `Name`; each cell is
//! the first value the column's JSONPath finds in the object (client-go's `util/jsonpath`, with
//! missing keys allowed), converted to the column's type: `string` cells are printed as the
//! JSONPath printer prints a value (maps and lists as JSON, `<no value>` for `null`),
//! `integer`, `number` and `boolean` cells keep the JSON value when it has that type, `date`
//! cells are an age (`5m`, `3d2h`; `<invalid>` when the string is not RFC 3339). Anything else —
//! nothing found, a JSONPath error, a value of another type — is a `null` cell. A version
//! without columns gets upstream's default: `Age` from `.metadata.creationTimestamp`.
//!
//! The JSONPath dialect is client-go's: fields (`.spec.size`, `.a\.b` for a key with a dot),
//! `['key']`, indexes and slices (`[0]`, `[-1]`, `[1:3]`, `[::2]`, `[*]`), unions (`[0,2]`),
//! filters (`[?(@.type=="Ready")]`, `==`, `!=`, `<`, `<=`, `>`, `>=`, and existence
//! `[?(@.status)]`), wildcards (`.*`), recursive descent (`..name`), literal text between
//! `{…}` actions. `{range}`/`{end}` loops are parsed but evaluate to an error (a `null` cell):
//! a column only ever shows the first value found.

use std::borrow::Cow;

use jiff::Timestamp;
use serde_json::{Map, Value, json};

/// `ObjectMeta.name`'s description (the `Name` column's).
const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// `ObjectMeta.creationTimestamp`'s description (the default `Age` column's).
const CREATION_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// The printer columns served for `version` of a CRD (upstream's `GetColumnsForVersion` for
/// apiextensions.k8s.io/v1): the version's `additionalPrinterColumns`, or, when it has none
/// (or the version is not in `spec.versions`), the default `Age` column
/// (`.metadata.creationTimestamp`, type `date`). Returns a JSON array.
pub fn columns_for_version(crd: &Value, version: &str) -> Value {
    let columns = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .find(|v| v.get("name").and_then(Value::as_str) == Some(version))
        })
        .and_then(|v| v.get("additionalPrinterColumns"))
        .and_then(Value::as_array)
        .filter(|cols| !cols.is_empty());
    match columns {
        Some(cols) => Value::Array(cols.clone()),
        None => json!([{
            "name": "Age",
            "type": "date",
            "description": CREATION_DESCRIPTION,
            "jsonPath": ".metadata.creationTimestamp",
        }]),
    }
}

/// A custom resource version's table convertor (upstream's `tableconvertor.New`): the
/// `columnDefinitions` and one parsed JSONPath per column after `Name`.
#[derive(Debug, Clone)]
pub struct Printer {
    definitions: Vec<Value>,
    columns: Vec<(String, JsonPath)>,
    error: Option<String>,
}

impl Printer {
    /// Builds the convertor from a JSON array of `CustomResourceColumnDefinition`s (use
    /// [`columns_for_version`]). As upstream, a column whose JSONPath does not parse stops the
    /// building: the columns before it are kept and [`Printer::error`] says why.
    pub fn new(columns: &Value) -> Printer {
        let mut printer = Printer {
            definitions: vec![json!({
                "name": "Name",
                "type": "string",
                "format": "name",
                "description": NAME_DESCRIPTION,
                "priority": 0,
            })],
            columns: Vec::new(),
            error: None,
        };
        for col in columns.as_array().map(Vec::as_slice).unwrap_or_default() {
            let text = |key: &str| col.get(key).and_then(Value::as_str).unwrap_or("");
            let json_path = text("jsonPath");
            let Ok(path) = JsonPath::parse(&format!("{{{json_path}}}")) else {
                printer.error = Some(format!("unrecognized column definition {json_path:?}"));
                break;
            };
            let description = match text("description") {
                "" => {
                    format!("Custom resource definition column (in JSONPath format): {json_path}")
                }
                d => d.to_owned(),
            };
            printer.definitions.push(json!({
                "name": text("name"),
                "type": text("type"),
                "format": text("format"),
                "description": description,
                "priority": col.get("priority").and_then(Value::as_i64).unwrap_or(0),
            }));
            printer.columns.push((text("type").to_owned(), path));
        }
        printer
    }

    /// The Table's `columnDefinitions` (`name`, `type`, `format`, `description`, `priority`;
    /// kubectl shows the columns of priority > 0 only with `-o wide`).
    pub fn column_definitions(&self) -> &[Value] {
        &self.definitions
    }

    /// Why building stopped early (`unrecognized column definition ".bad["`), if it did.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// One row's cells for `obj`: its name, then one cell per column (see the module doc);
    /// `date` cells are ages measured against `now`.
    pub fn cells(&self, obj: &Map<String, Value>, now: Timestamp) -> Vec<Value> {
        let name = obj
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut cells = vec![Value::from(name)];
        for (kind, path) in &self.columns {
            let first = match path.find_results(obj) {
                Ok(results) => results
                    .into_iter()
                    .next()
                    .and_then(|r| r.into_iter().next()),
                Err(_) => None,
            };
            cells.push(match first {
                None => Value::Null,
                Some(v) => cell(kind, &v.value(), now),
            });
        }
        cells
    }
}

/// Columns and cells of a Table of `objects` printed with `columns` (a JSON array of
/// `CustomResourceColumnDefinition`s, see [`columns_for_version`]): the `columnDefinitions`
/// and each object's cells, in order, ages measured against `now`.
pub fn table_parts(
    columns: &Value,
    objects: &[Map<String, Value>],
    now: Timestamp,
) -> (Vec<Value>, Vec<Vec<Value>>) {
    let printer = Printer::new(columns);
    let rows = objects.iter().map(|o| printer.cells(o, now)).collect();
    (printer.definitions, rows)
}

/// `cellForJSONValue`, with `string` columns printed as the JSONPath printer does.
fn cell(kind: &str, value: &Value, now: Timestamp) -> Value {
    if kind == "string" {
        return Value::String(print_value(value));
    }
    match (kind, value) {
        ("integer", Value::Number(n)) => match n.as_i64() {
            Some(i) => Value::from(i),
            None => Value::from(n.as_f64().map_or(0, |f| f as i64)),
        },
        ("number", Value::Number(n)) => match n.as_i64() {
            Some(i) => Value::from(i),
            None => n.as_f64().map_or(Value::Null, float_cell),
        },
        ("boolean", Value::Bool(b)) => Value::Bool(*b),
        ("date", Value::String(s)) => Value::String(age_of(s, now)),
        _ => Value::Null,
    }
}

/// A float64 cell as Go's JSON encoder writes it: integral values without a fraction.
fn float_cell(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        Value::from(f as i64)
    } else {
        Value::from(f)
    }
}

/// A `date` cell: `metav1.Time`'s query-parameter parsing, then
/// `ConvertToHumanReadableDateType` (`<unknown>` for the zero time, `<invalid>` when the
/// string is not RFC 3339).
fn age_of(s: &str, now: Timestamp) -> String {
    if s.is_empty() || s == "null" {
        return "<unknown>".to_owned();
    }
    let Ok(t) = s.parse::<Timestamp>() else {
        return "<invalid>".to_owned();
    };
    if t.as_second() == GO_ZERO_TIME_SECONDS && t.subsec_nanosecond() == 0 {
        return "<unknown>".to_owned();
    }
    let nanos = (now.as_nanosecond() - t.as_nanosecond()).clamp(i64::MIN as i128, i64::MAX as i128);
    human_duration(nanos as i64)
}

/// Go's zero `time.Time` (0001-01-01T00:00:00Z) in Unix seconds.
const GO_ZERO_TIME_SECONDS: i64 = -62_135_596_800;

/// Go's `duration.HumanDuration`: about two significant figures (`5s`, `3m2s`, `12m`, `5h3m`,
/// `2d4h`, `400d`, `3y20d`); below −1s `<invalid>`.
fn human_duration(nanos: i64) -> String {
    let seconds = nanos / 1_000_000_000;
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    let pair = |big: i64, big_unit: &str, small: i64, small_unit: &str| {
        if small == 0 {
            format!("{big}{big_unit}")
        } else {
            format!("{big}{big_unit}{small}{small_unit}")
        }
    };
    let (minutes, hours) = (seconds / 60, seconds / 3600);
    let days = hours / 24;
    match () {
        _ if seconds < 120 => format!("{seconds}s"),
        _ if minutes < 10 => pair(minutes, "m", seconds % 60, "s"),
        _ if minutes < 180 => format!("{minutes}m"),
        _ if hours < 8 => pair(hours, "h", minutes % 60, "m"),
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 24 * 8 => pair(days, "d", hours % 24, "h"),
        _ if hours < 24 * 365 * 2 => format!("{days}d"),
        _ if hours < 24 * 365 * 8 => pair(days / 365, "y", days % 365, "d"),
        _ => format!("{}y", days / 365),
    }
}

/// A value as `JSONPath.PrintResults` prints it: strings bare, `null` as `<no value>`, numbers
/// and booleans as Go's `fmt.Fprint`, maps and lists as Go's `json.Marshal`.
fn print_value(v: &Value) -> String {
    match v {
        Value::Null => "<no value>".to_owned(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (None, Some(u), _) => u.to_string(),
            (None, None, Some(f)) => go_float_v(f),
            _ => n.to_string(),
        },
        Value::Array(_) | Value::Object(_) => {
            let mut out = String::new();
            go_json(v, &mut out);
            out
        }
    }
}

/// Go's `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`): the shortest digits, with
/// an exponent (`1.5e+06`, `1e-05`) when the decimal exponent is below −4 or at least 6.
fn go_float_v(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    let exp = exponent_of(f);
    if f != 0.0 && !(-4..6).contains(&exp) {
        go_exponent(f)
    } else {
        format!("{f}")
    }
}

/// The decimal exponent of `f` in scientific notation (`1234.5` → 3).
fn exponent_of(f: f64) -> i64 {
    let s = format!("{f:e}");
    s.split_once('e')
        .and_then(|(_, e)| e.parse().ok())
        .unwrap_or(0)
}

/// `f` in Go's `%e` shortest form: `1.5e+06`, `1e-07`.
fn go_exponent(f: f64) -> String {
    let s = format!("{f:e}");
    let (mantissa, exp) = s.split_once('e').unwrap_or((s.as_str(), "0"));
    let exp: i64 = exp.parse().unwrap_or(0);
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}

/// Go's `json.Marshal` of a decoded JSON value: object keys sorted, `<`, `>`, `&`, U+2028 and
/// U+2029 escaped, floats in Go's form.
fn go_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => out.push_str(&i.to_string()),
            (None, Some(u), _) => out.push_str(&u.to_string()),
            (None, None, Some(f)) => out.push_str(&go_json_float(f)),
            _ => out.push_str(&n.to_string()),
        },
        Value::String(s) => go_json_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json_string(k, out);
                out.push(':');
                if let Some(v) = map.get(k) {
                    go_json(v, out);
                }
            }
            out.push('}');
        }
    }
}

/// A float64 as `encoding/json` writes it: plain unless below 1e-6 or at least 1e21, where
/// the exponent has no leading zero (`1e-07` → `1e-7`).
fn go_json_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = format!("{f:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((s.as_str(), "0"));
        let exp: i64 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{}", exp.abs())
    } else {
        format!("{f}")
    }
}

/// A string as `encoding/json` (with HTML escaping) writes it.
fn go_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

// ---------------------------------------------------------------------------------------------
// client-go's `util/jsonpath`.

/// A parsed JSONPath template (client-go's `jsonpath.Parse`), evaluated with missing keys
/// allowed (`AllowMissingKeys(true)`, as the table convertor sets it).
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    /// The top-level nodes: literal text and `{…}` actions ([`Node::List`]).
    root: Vec<Node>,
}

/// One node of a parsed template (client-go's `Node` types).
#[derive(Debug, Clone, PartialEq)]
enum Node {
    /// A list of nodes applied in sequence (an action, a filter side, a union member).
    List(Vec<Node>),
    /// Literal text (outside actions, or a quoted string inside one).
    Text(String),
    /// `.name`: a map key.
    Field(String),
    /// `[start:end:step]`, `[i]`, `[*]`.
    Array([Param; 3]),
    /// `[?(left op right)]`; `op` is `exists` for `[?(left)]`.
    Filter {
        left: Vec<Node>,
        right: Vec<Node>,
        op: String,
    },
    /// An integer literal.
    Int(i64),
    /// A float literal.
    Float(f64),
    /// `true` or `false`.
    Bool(bool),
    /// `.*`.
    Wildcard,
    /// `..`.
    Recursive,
    /// `[a,b]`.
    Union(Vec<Vec<Node>>),
    /// `range`, `end` or an unknown word.
    Identifier(String),
}

/// A slice parameter (client-go's `ParamsEntry`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Param {
    value: i64,
    known: bool,
    /// The end of `[i]`, derived from its start.
    derived: bool,
}

/// A value found while evaluating: a part of the object, or a literal of the template.
#[derive(Debug, Clone)]
pub enum Found<'a> {
    /// A value inside the object.
    Ref(&'a Value),
    /// The object itself.
    Root(&'a Map<String, Value>),
    /// A value made by the template (a literal, a byte of a string).
    Own(Value),
}

impl Found<'_> {
    /// The value found.
    pub fn value(&self) -> Cow<'_, Value> {
        match self {
            Found::Ref(v) => Cow::Borrowed(*v),
            Found::Root(m) => Cow::Owned(Value::Object((*m).clone())),
            Found::Own(v) => Cow::Borrowed(v),
        }
    }
}

impl<'a> Found<'a> {
    fn map(&self) -> Option<&'a Map<String, Value>> {
        match self {
            Found::Ref(Value::Object(m)) => Some(m),
            Found::Root(m) => Some(m),
            _ => None,
        }
    }

    fn array(&self) -> Option<&'a [Value]> {
        match self {
            Found::Ref(Value::Array(a)) => Some(a),
            _ => None,
        }
    }

    /// Go's `template.Indirect` says nil: a JSON `null`.
    fn is_nil(&self) -> bool {
        matches!(self, Found::Ref(Value::Null) | Found::Own(Value::Null))
    }

    /// The children `*` and `..` visit: map values, list items, a string's bytes.
    fn children(&self) -> Vec<Found<'a>> {
        if let Some(m) = self.map() {
            return m.values().map(Found::Ref).collect();
        }
        if let Some(a) = self.array() {
            return a.iter().map(Found::Ref).collect();
        }
        match self {
            Found::Ref(Value::String(s)) => s.bytes().map(|b| Found::Own(b.into())).collect(),
            Found::Own(Value::String(s)) => s.bytes().map(|b| Found::Own(b.into())).collect(),
            _ => Vec::new(),
        }
    }

    fn is_string(&self) -> bool {
        matches!(
            self,
            Found::Ref(Value::String(_)) | Found::Own(Value::String(_))
        )
    }
}

impl JsonPath {
    /// Parses a template such as `{.status.conditions[?(@.type=="Ready")].status}`; the error
    /// is client-go's parser message (`unclosed action`, `invalid array index x`, …).
    pub fn parse(text: &str) -> Result<JsonPath, String> {
        let mut p = Parser {
            input: text,
            pos: 0,
        };
        Ok(JsonPath {
            root: p.parse_text()?,
        })
    }

    /// Client-go's `FindResults`: one list of values per top-level node (a literal text, or
    /// an action's values). An error (an index out of range, a filter comparing values of
    /// different types, a `range`) fails the whole evaluation, as upstream.
    pub fn find_results<'a>(
        &self,
        obj: &'a Map<String, Value>,
    ) -> Result<Vec<Vec<Found<'a>>>, String> {
        let mut out = Vec::new();
        for node in &self.root {
            out.push(walk(vec![Found::Root(obj)], node)?);
        }
        Ok(out)
    }
}

/// The parser's state over the template text (byte positions).
struct Parser<'t> {
    input: &'t str,
    pos: usize,
}

/// `isTerminator`: what ends a field name or an identifier (`None` is the end of input).
fn is_terminator(c: Option<char>) -> bool {
    match c {
        None => true,
        Some(c) => matches!(
            c,
            ' ' | '\t' | '\r' | '\n' | '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}'
        ),
    }
}

impl Parser<'_> {
    fn rest(&self) -> &str {
        &self.input[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn next(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// `parseText`: literal text and `{…}` actions until the end of input.
    fn parse_text(&mut self) -> Result<Vec<Node>, String> {
        let mut root = Vec::new();
        loop {
            let Some(open) = self.rest().find('{') else {
                if !self.rest().is_empty() {
                    root.push(Node::Text(self.rest().to_owned()));
                }
                return Ok(root);
            };
            if open > 0 {
                root.push(Node::Text(self.rest()[..open].to_owned()));
            }
            self.pos += open + 1;
            root.push(Node::List(self.parse_action()?));
        }
    }

    /// `parseInsideAction` up to and including the closing `}`.
    fn parse_action(&mut self) -> Result<Vec<Node>, String> {
        let mut cur = Vec::new();
        loop {
            let rest = self.rest();
            if rest.starts_with('}') {
                self.pos += 1;
                return Ok(cur);
            }
            if rest.starts_with("[?(") {
                self.pos += 3;
                cur.push(self.parse_filter()?);
                continue;
            }
            if rest.starts_with("..") {
                if cur.last() == Some(&Node::Recursive) {
                    return Err("invalid multiple recursive descent".to_owned());
                }
                self.pos += 2;
                cur.push(Node::Recursive);
                if self.peek().is_some_and(|c| c == '_' || c.is_alphanumeric()) {
                    cur.push(self.parse_field());
                }
                continue;
            }
            let start = self.pos;
            match self.next() {
                None | Some('\r' | '\n') => return Err("unclosed action".to_owned()),
                Some(' ' | '@' | '$') => {}
                Some('[') => cur.push(self.parse_array()?),
                Some(q @ ('"' | '\'')) => cur.push(self.parse_quote(start, q)?),
                Some('.') => cur.push(self.parse_field()),
                Some(c) if c == '+' || c == '-' || c.is_numeric() => {
                    self.pos = start;
                    cur.push(self.parse_number()?);
                }
                Some(c) if c == '_' || c.is_alphanumeric() => {
                    self.pos = start;
                    cur.push(self.parse_identifier());
                }
                Some(c) => {
                    return Err(format!(
                        "unrecognized character in action: U+{:04X} '{c}'",
                        c as u32
                    ));
                }
            }
        }
    }

    /// `parseField`: a name up to the next unescaped terminator; backslashes removed.
    fn parse_field(&mut self) -> Node {
        let start = self.pos;
        loop {
            let c = self.peek();
            if c == Some('\\') {
                self.next();
                self.next();
            } else if is_terminator(c) {
                break;
            } else {
                self.next();
            }
        }
        let value = &self.input[start..self.pos];
        if value == "*" {
            Node::Wildcard
        } else {
            Node::Field(value.replace('\\', ""))
        }
    }

    /// `parseIdentifier`: `true`, `false`, `range`, `end`, …
    fn parse_identifier(&mut self) -> Node {
        let start = self.pos;
        while !is_terminator(self.peek()) {
            self.next();
        }
        match &self.input[start..self.pos] {
            "true" => Node::Bool(true),
            "false" => Node::Bool(false),
            word => Node::Identifier(word.to_owned()),
        }
    }

    /// `parseNumber`: a sign, then digits and dots.
    fn parse_number(&mut self) -> Result<Node, String> {
        let start = self.pos;
        if matches!(self.peek(), Some('+' | '-')) {
            self.next();
        }
        while self.peek().is_some_and(|c| c == '.' || c.is_numeric()) {
            self.next();
        }
        let value = &self.input[start..self.pos];
        if let Ok(i) = value.parse::<i64>() {
            return Ok(Node::Int(i));
        }
        match value.parse::<f64>() {
            Ok(f) => Ok(Node::Float(f)),
            Err(_) => Err(format!("cannot parse number {value}")),
        }
    }

    /// `parseArray`: after `[`, up to `]`: a union, a `'key'`, an index or a slice.
    fn parse_array(&mut self) -> Result<Node, String> {
        let start = self.pos;
        loop {
            match self.next() {
                None | Some('\n') => return Err("unterminated array".to_owned()),
                Some(']') => break,
                Some(_) => {}
            }
        }
        let mut text = &self.input[start..self.pos - 1];
        if text == "*" {
            text = ":";
        }
        let parts: Vec<&str> = text.split(',').collect();
        if parts.len() > 1 {
            let mut union = Vec::new();
            for part in parts {
                union.push(parse_sub(&format!("[{}]", part.trim_matches(' ')))?);
            }
            return Ok(Node::Union(union));
        }
        if text.len() >= 2 && text.starts_with('\'') && text.ends_with('\'') {
            let key = &text[1..text.len() - 1];
            if !key.contains('\'') {
                let nodes = parse_sub(&format!(".{key}"))?;
                return Ok(Node::List(nodes));
            }
        }
        parse_slice(text).map(Node::Array)
    }

    /// `parseFilter`: after `[?(`, up to `)]` outside quotes.
    fn parse_filter(&mut self) -> Result<Node, String> {
        let start = self.pos;
        let (mut begin, mut end, mut pair) = (false, false, '"');
        loop {
            let c = self.next();
            match c {
                None | Some('\n') => return Err("unterminated filter".to_owned()),
                Some(q @ ('"' | '\'')) => {
                    if !begin {
                        begin = true;
                        pair = q;
                        continue;
                    }
                    let escaped =
                        self.input.as_bytes().get(self.pos.wrapping_sub(2)) == Some(&b'\\');
                    if !escaped && q == pair {
                        end = true;
                    }
                }
                Some(')') if begin == end => break,
                Some(_) => {}
            }
        }
        if self.next() != Some(']') {
            return Err("unclosed array expect ]".to_owned());
        }
        let text = &self.input[start..self.pos - 2];
        match split_comparison(text) {
            None => Ok(Node::Filter {
                left: parse_sub(text)?,
                right: Vec::new(),
                op: "exists".to_owned(),
            }),
            Some((left, op, right)) => Ok(Node::Filter {
                left: parse_sub(left)?,
                right: parse_sub(right)?,
                op: op.to_owned(),
            }),
        }
    }

    /// `parseQuote`: a quoted string (the opening quote at `start`), unquoted.
    fn parse_quote(&mut self, start: usize, quote: char) -> Result<Node, String> {
        loop {
            match self.next() {
                None | Some('\n') => return Err("unterminated quoted string".to_owned()),
                Some(c)
                    if c == quote && self.input.as_bytes().get(self.pos - 2) != Some(&b'\\') =>
                {
                    break;
                }
                Some(_) => {}
            }
        }
        let value = &self.input[start..self.pos];
        unquote(value)
            .map(Node::Text)
            .ok_or_else(|| format!("unquote string {value} error invalid syntax"))
    }
}

/// `parseAction`: the nodes of one action `{text}` (a filter side, a union member, a key).
fn parse_sub(text: &str) -> Result<Vec<Node>, String> {
    let path = JsonPath::parse(&format!("{{{text}}}"))?;
    match path.root.into_iter().next() {
        Some(Node::List(nodes)) => Ok(nodes),
        _ => Ok(Vec::new()),
    }
}

/// `^([^!<>=]+)([!<>=]+)(.+?)$` on a filter's text: left side, operator, right side.
fn split_comparison(text: &str) -> Option<(&str, &str, &str)> {
    let is_op = |c: char| matches!(c, '!' | '<' | '>' | '=');
    let op_start = text.find(is_op)?;
    if op_start == 0 {
        return None;
    }
    let mut op_end = text[op_start..]
        .find(|c: char| !is_op(c))
        .map_or(text.len(), |i| op_start + i);
    if op_end == text.len() {
        // The right side needs a character: the operator gives back its last one.
        if op_end - op_start < 2 {
            return None;
        }
        op_end -= 1;
    }
    Some((&text[..op_start], &text[op_start..op_end], &text[op_end..]))
}

/// The slice operator `^(-?\d*)(:-?\d*)?(:-?\d*)?$` into client-go's three parameters.
fn parse_slice(text: &str) -> Result<[Param; 3], String> {
    let invalid = || format!("invalid array index {text}");
    let groups: Vec<&str> = text.split(':').collect();
    if groups.len() > 3 {
        return Err(invalid());
    }
    let well_formed = |g: &str| {
        let digits = g.strip_prefix('-').unwrap_or(g);
        digits.chars().all(|c| c.is_ascii_digit())
    };
    if !groups.iter().all(|g| well_formed(g)) {
        return Err(invalid());
    }
    let mut params = [Param::default(); 3];
    for i in 0..3 {
        match groups.get(i) {
            // Group present and non-empty (for i > 0, present means a ':' was written).
            Some(g) if !g.is_empty() => {
                params[i].known = true;
                params[i].value = g
                    .parse::<i64>()
                    .map_err(|_| format!("array index {g} is not a number"))?;
            }
            // `[i:]`, `[::k]`: an explicit but empty bound.
            Some(_) if i > 0 => params[i].known = false,
            // `[i]`: the end is the start plus one.
            None if i == 1 => {
                params[1] = Param {
                    value: params[0].value + 1,
                    known: true,
                    derived: true,
                };
            }
            _ => {}
        }
    }
    Ok(params)
}

/// Go's `strconv.Unquote`, also for single quotes (client-go's `UnquoteExtend`).
fn unquote(s: &str) -> Option<String> {
    let quote = s.chars().next()?;
    if s.len() < 2 || !s.ends_with(quote) || !matches!(quote, '"' | '\'') {
        return None;
    }
    let body = &s[1..s.len() - 1];
    let mut out = String::new();
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c == quote {
            return None;
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next()?;
        match e {
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\u{b}'),
            '\\' => out.push('\\'),
            '\'' | '"' if e == quote => out.push(e),
            'x' | 'u' | 'U' => {
                let n = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let hex: String = (0..n).filter_map(|_| chars.next()).collect();
                if hex.len() != n {
                    return None;
                }
                let code = u32::from_str_radix(&hex, 16).ok()?;
                out.push(char::from_u32(code)?);
            }
            '0'..='7' => {
                let mut code = e.to_digit(8)?;
                for _ in 0..2 {
                    code = code * 8 + chars.next()?.to_digit(8)?;
                }
                out.push(char::from_u32(code).filter(|_| code <= 255)?);
            }
            _ => return None,
        }
    }
    Some(out)
}

/// `walk`: one node applied to the current values.
fn walk<'a>(input: Vec<Found<'a>>, node: &Node) -> Result<Vec<Found<'a>>, String> {
    match node {
        Node::List(nodes) => eval_list(input, nodes),
        Node::Text(t) => Ok(vec![Found::Own(Value::String(t.clone()))]),
        Node::Int(i) => Ok(input.iter().map(|_| Found::Own(Value::from(*i))).collect()),
        Node::Float(f) => Ok(input.iter().map(|_| Found::Own(Value::from(*f))).collect()),
        Node::Bool(b) => Ok(input.iter().map(|_| Found::Own(Value::Bool(*b))).collect()),
        Node::Field(name) => Ok(input
            .iter()
            .filter_map(|v| v.map().and_then(|m| m.get(name.as_str())))
            .map(Found::Ref)
            .collect()),
        Node::Array(params) => eval_array(&input, params),
        Node::Filter { left, right, op } => eval_filter(&input, left, right, op),
        Node::Wildcard => Ok(input
            .iter()
            .filter(|v| !v.is_nil())
            .flat_map(Found::children)
            .collect()),
        Node::Recursive => Ok(eval_recursive(input)),
        Node::Union(members) => {
            let mut out = Vec::new();
            for member in members {
                out.extend(eval_list(input.clone(), member)?);
            }
            Ok(out)
        }
        Node::Identifier(word) => match word.as_str() {
            "range" | "end" => Err(format!("{word} is not supported in a printer column")),
            _ => Err(format!("unrecognized identifier {word}")),
        },
    }
}

fn eval_list<'a>(input: Vec<Found<'a>>, nodes: &[Node]) -> Result<Vec<Found<'a>>, String> {
    nodes.iter().try_fold(input, walk)
}

/// `evalArray`: an index or a slice of each list.
fn eval_array<'a>(input: &[Found<'a>], params: &[Param; 3]) -> Result<Vec<Found<'a>>, String> {
    let mut out = Vec::new();
    for value in input {
        if value.is_nil() {
            continue;
        }
        let Some(items) = value.array() else {
            return Err(format!("{} is not array or slice", go_type(value)));
        };
        let len = items.len() as i64;
        let mut p = *params;
        if !p[0].known {
            p[0].value = 0;
        }
        if p[0].value < 0 {
            p[0].value += len;
        }
        if !p[1].known {
            p[1].value = len;
        }
        if p[1].value < 0 || (p[1].value == 0 && p[1].derived) {
            p[1].value += len;
        }
        if p[1].value == p[0].value {
            return Ok(out);
        }
        if p[0].value >= len || p[0].value < 0 {
            return Err(format!(
                "array index out of bounds: index {}, length {len}",
                p[0].value
            ));
        }
        if p[1].value > len || p[1].value < 0 {
            return Err(format!(
                "array index out of bounds: index {}, length {len}",
                p[1].value - 1
            ));
        }
        if p[0].value > p[1].value {
            return Err(format!(
                "starting index {} is greater than ending index {}",
                p[0].value, p[1].value
            ));
        }
        let step = if p[2].known {
            if p[2].value <= 0 {
                return Err("step must be > 0".to_owned());
            }
            p[2].value as usize
        } else {
            1
        };
        let slice = &items[p[0].value as usize..p[1].value as usize];
        out.extend(slice.iter().step_by(step).map(Found::Ref));
    }
    Ok(out)
}

/// `evalRecursive`: every value that has children (maps, lists, non-empty strings), itself
/// first, depth first.
fn eval_recursive(input: Vec<Found<'_>>) -> Vec<Found<'_>> {
    let mut out = Vec::new();
    for value in input {
        if value.is_nil() {
            continue;
        }
        let children = value.children();
        if children.is_empty() {
            continue;
        }
        let string = value.is_string();
        out.push(value);
        if !string {
            out.extend(eval_recursive(children));
        }
    }
    out
}

/// `evalFilter`: the items of each list for which the comparison holds.
fn eval_filter<'a>(
    input: &[Found<'a>],
    left: &[Node],
    right: &[Node],
    op: &str,
) -> Result<Vec<Found<'a>>, String> {
    let mut out = Vec::new();
    for value in input {
        let Some(items) = value.array() else {
            return Err(format!(
                "{} is not array or slice and cannot be filtered",
                go_type(value)
            ));
        };
        for item in items {
            let lefts = eval_list(vec![Found::Ref(item)], left);
            if op == "exists" {
                if lefts.is_ok_and(|l| !l.is_empty()) {
                    out.push(Found::Ref(item));
                }
                continue;
            }
            let lefts = lefts?;
            let l = match lefts.as_slice() {
                [] => continue,
                [one] => one.value().into_owned(),
                _ => return Err("can only compare one element at a time".to_owned()),
            };
            let rights = eval_list(vec![Found::Ref(item)], right)?;
            let r = match rights.as_slice() {
                [] => continue,
                [one] => one.value().into_owned(),
                _ => return Err("can only compare one element at a time".to_owned()),
            };
            if compare(&l, &r, op)? {
                out.push(Found::Ref(item));
            }
        }
    }
    Ok(out)
}

/// A scalar as Go's template comparison functions see it.
#[derive(PartialEq, PartialOrd)]
enum Basic<'v> {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'v str),
}

fn basic(v: &Value) -> Result<Basic<'_>, String> {
    match v {
        Value::Bool(b) => Ok(Basic::Bool(*b)),
        Value::String(s) => Ok(Basic::Str(s)),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(Basic::Int(i)),
            (None, Some(f)) => Ok(Basic::Float(f)),
            _ => Err("invalid type for comparison".to_owned()),
        },
        _ => Err("invalid type for comparison".to_owned()),
    }
}

/// Go's `template.Equal`, `Less`, … on two scalars of the same kind.
fn compare(l: &Value, r: &Value, op: &str) -> Result<bool, String> {
    let (l, r) = (basic(l)?, basic(r)?);
    if std::mem::discriminant(&l) != std::mem::discriminant(&r) {
        return Err("incompatible types for comparison".to_owned());
    }
    let ordered = || {
        if matches!(l, Basic::Bool(_)) {
            Err("invalid type for comparison".to_owned())
        } else {
            Ok(())
        }
    };
    Ok(match op {
        "==" => l == r,
        "!=" => l != r,
        "<" => {
            ordered()?;
            l < r
        }
        "<=" => {
            ordered()?;
            l <= r
        }
        ">" => {
            ordered()?;
            l > r
        }
        ">=" => {
            ordered()?;
            l >= r
        }
        _ => return Err(format!("unrecognized filter operator {op}")),
    })
}

/// The Go type of a decoded JSON value, for error messages.
fn go_type(v: &Found<'_>) -> &'static str {
    match &*v.value() {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    fn now() -> Timestamp {
        "2025-01-01T12:00:00Z".parse().unwrap()
    }

    fn widget() -> Map<String, Value> {
        obj(json!({
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {
                "name": "w1",
                "creationTimestamp": "2025-01-01T11:55:00Z",
                "labels": {"app": "web", "app.kubernetes.io/name": "shop"},
            },
            "spec": {
                "size": 3,
                "ratio": 1.5,
                "enabled": true,
                "tags": ["a", "b", "c"],
                "nested": {"z": 1, "a": "<x>"},
                "empty": null,
            },
            "status": {
                "conditions": [
                    {"type": "Synced", "status": "False", "count": 2},
                    {"type": "Ready", "status": "True", "count": 5},
                ],
                "seen": "2025-01-01T09:00:00Z",
            },
        }))
    }

    /// The first value a template finds in [`widget`], printed as a string cell.
    fn first(template: &str) -> Option<String> {
        let path = JsonPath::parse(template).unwrap();
        let w = widget();
        let results = path.find_results(&w).ok()?;
        let v = results.into_iter().next()?.into_iter().next()?;
        Some(print_value(&v.value()))
    }

    #[test]
    fn jsonpath_finds_what_kubectl_finds() {
        let cases: &[(&str, Option<&str>)] = &[
            ("{.spec.size}", Some("3")),
            ("{.spec.ratio}", Some("1.5")),
            ("{.spec.enabled}", Some("true")),
            ("{.spec.tags[0]}", Some("a")),
            ("{.spec.tags[-1]}", Some("c")),
            ("{.spec.tags[1:]}", Some("b")),
            ("{.spec.tags[::2]}", Some("a")),
            ("{.spec.tags[*]}", Some("a")),
            ("{.spec.tags[2,0]}", Some("c")),
            ("{.spec.tags}", Some(r#"["a","b","c"]"#)),
            ("{.spec.nested}", Some(r#"{"a":"\u003cx\u003e","z":1}"#)),
            ("{.spec.empty}", Some("<no value>")),
            (
                r#"{.status.conditions[?(@.type=="Ready")].status}"#,
                Some("True"),
            ),
            (
                r#"{.status.conditions[?(@.type == 'Ready')].count}"#,
                Some("5"),
            ),
            ("{.status.conditions[?(@.count>2)].type}", Some("Ready")),
            ("{.status.conditions[?(@.count)].type}", Some("Synced")),
            ("{.metadata.labels['app']}", Some("web")),
            (
                "{.metadata.labels.app\\.kubernetes\\.io/name}",
                Some("shop"),
            ),
            ("{..type}", Some("Synced")),
            ("{$.metadata.name}", Some("w1")),
            // Missing keys are allowed: nothing found.
            ("{.spec.missing.deeper}", None),
            // Errors fail the evaluation: out of range, type mismatch in a filter.
            ("{.spec.tags[5]}", None),
            ("{.status.conditions[?(@.count==\"5\")].type}", None),
            ("{.spec.size[0]}", None),
        ];
        for (template, want) in cases {
            assert_eq!(first(template).as_deref(), *want, "{template}");
        }
    }

    #[test]
    fn jsonpath_parse_errors_are_client_go_s() {
        let cases = [
            ("{.spec", "unclosed action"),
            ("{.spec[0}", "unterminated array"),
            ("{.spec[x]}", "invalid array index x"),
            ("{.a[?(@.b==1}", "unterminated filter"),
            ("{..a..b}", ""),
            ("{.a{.b}}", "unrecognized character in action: U+007B '{'"),
            ("{\"abc}", "unterminated quoted string"),
        ];
        for (template, want) in cases {
            let got = JsonPath::parse(template);
            if want.is_empty() {
                assert!(got.is_ok(), "{template}: {got:?}");
            } else {
                assert_eq!(got.err().as_deref(), Some(want), "{template}");
            }
        }
        assert_eq!(
            JsonPath::parse("{....a}").err().as_deref(),
            Some("invalid multiple recursive descent")
        );
    }

    #[test]
    fn cells_follow_each_column_type() {
        let columns = json!([
            {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
            {"name": "Ratio", "type": "number", "jsonPath": ".spec.ratio"},
            {"name": "SizeAsNumber", "type": "number", "jsonPath": ".spec.size"},
            {"name": "RatioAsInt", "type": "integer", "jsonPath": ".spec.ratio"},
            {"name": "On", "type": "boolean", "jsonPath": ".spec.enabled"},
            {"name": "NotBool", "type": "boolean", "jsonPath": ".spec.size"},
            {"name": "Ready", "type": "string",
             "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
            {"name": "SizeText", "type": "string", "jsonPath": ".spec.size"},
            {"name": "Seen", "type": "date", "jsonPath": ".status.seen"},
            {"name": "BadDate", "type": "date", "jsonPath": ".metadata.name"},
            {"name": "Missing", "type": "string", "jsonPath": ".spec.nothing"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]);
        let (defs, rows) = table_parts(&columns, &[widget()], now());
        assert_eq!(defs.len(), 13);
        assert_eq!(
            rows[0],
            vec![
                json!("w1"),
                json!(3),
                json!(1.5),
                json!(3),
                json!(1),
                json!(true),
                Value::Null,
                json!("True"),
                json!("3"),
                json!("3h"),
                json!("<invalid>"),
                Value::Null,
                json!("5m"),
            ]
        );
    }

    #[test]
    fn column_definitions_carry_priority_format_and_default_description() {
        let columns = json!([
            {"name": "Size", "type": "integer", "format": "int32", "priority": 1,
             "jsonPath": ".spec.size"},
            {"name": "Phase", "type": "string", "description": "The phase.",
             "jsonPath": ".status.phase"},
        ]);
        let p = Printer::new(&columns);
        assert_eq!(p.error(), None);
        let defs = p.column_definitions();
        assert_eq!(defs[0]["name"], "Name");
        assert_eq!(defs[0]["format"], "name");
        assert_eq!(
            defs[1],
            json!({"name": "Size", "type": "integer", "format": "int32", "priority": 1,
                   "description": "Custom resource definition column (in JSONPath format): .spec.size"})
        );
        assert_eq!(defs[2]["description"], "The phase.");
        assert_eq!(defs[2]["priority"], 0);
    }

    #[test]
    fn an_unparsable_column_keeps_the_columns_before_it() {
        let columns = json!([
            {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
            {"name": "Bad", "type": "string", "jsonPath": ".spec[x]"},
            {"name": "After", "type": "string", "jsonPath": ".spec.after"},
        ]);
        let p = Printer::new(&columns);
        assert_eq!(p.column_definitions().len(), 2);
        assert_eq!(
            p.error(),
            Some("unrecognized column definition \".spec[x]\"")
        );
        assert_eq!(p.cells(&widget(), now()), vec![json!("w1"), json!(3)]);
    }

    #[test]
    fn a_version_without_columns_gets_age() {
        let crd = json!({"spec": {"versions": [
            {"name": "v1", "additionalPrinterColumns": []},
            {"name": "v2", "additionalPrinterColumns": [
                {"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]},
        ]}});
        let v1 = columns_for_version(&crd, "v1");
        assert_eq!(v1[0]["name"], "Age");
        assert_eq!(v1[0]["type"], "date");
        assert_eq!(v1[0]["jsonPath"], ".metadata.creationTimestamp");
        assert_eq!(columns_for_version(&crd, "v2")[0]["name"], "Size");
        let (defs, rows) = table_parts(&v1, &[widget()], now());
        assert_eq!(defs[1]["name"], "Age");
        assert_eq!(defs[1]["description"], CREATION_DESCRIPTION);
        assert_eq!(rows[0], vec![json!("w1"), json!("5m")]);
        // No creationTimestamp: nothing found, a null cell.
        let bare = obj(json!({"metadata": {"name": "x"}}));
        assert_eq!(table_parts(&v1, &[bare], now()).1[0][1], Value::Null);
    }

    #[test]
    fn dates_print_as_ages() {
        let n = now();
        assert_eq!(age_of("2025-01-01T11:59:30Z", n), "30s");
        assert_eq!(age_of("2025-01-01T11:57:00Z", n), "3m");
        assert_eq!(age_of("2025-01-01T11:56:58Z", n), "3m2s");
        assert_eq!(age_of("2025-01-01T07:30:00Z", n), "4h30m");
        assert_eq!(age_of("2024-12-29T10:00:00Z", n), "3d2h");
        assert_eq!(age_of("2022-01-01T12:00:00Z", n), "3y1d");
        assert_eq!(age_of("2025-01-01T12:00:10Z", n), "<invalid>");
        assert_eq!(age_of("", n), "<unknown>");
        assert_eq!(age_of("0001-01-01T00:00:00Z", n), "<unknown>");
        assert_eq!(age_of("yesterday", n), "<invalid>");
    }

    #[test]
    fn floats_print_as_go_prints_them() {
        assert_eq!(go_float_v(1.5), "1.5");
        assert_eq!(go_float_v(123456.5), "123456.5");
        assert_eq!(go_float_v(1234567.5), "1.2345675e+06");
        assert_eq!(go_float_v(0.0001), "0.0001");
        assert_eq!(go_float_v(0.00001), "1e-05");
        assert_eq!(go_json_float(1e21), "1e+21");
        assert_eq!(go_json_float(0.5), "0.5");
        assert_eq!(go_json_float(1e-7), "1e-7");
    }
}
