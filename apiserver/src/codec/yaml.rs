//! YAML responses as upstream writes them: its YAML serializer turns the JSON into YAML with
//! `sigs.k8s.io/yaml.JSONToYAML`, i.e. go-yaml v2's encoder. This module follows that
//! encoder's rules on a JSON value:
//! - mapping keys in go-yaml's order (non-letters before letters, digit runs compared as
//!   numbers), block style, two-space indent, sequences in mappings not indented;
//! - empty mappings and sequences as `{}` / `[]`;
//! - strings plain unless they would read back as something else (`"true"`, `"1"`, `""`,
//!   timestamps, base-60 numbers) — then double-quoted — or plain is not allowed (indicators,
//!   leading/trailing spaces: single-quoted, or double-quoted with escapes for characters
//!   outside YAML's printable set); strings with line breaks as literal blocks (`|`, `|-`,
//!   `|+`);
//! - long plain and quoted scalars folded at spaces past column 80, continuation lines
//!   indented two more than their key;
//! - floats as Go's `strconv.FormatFloat(f, 'g', -1, 64)`.

use std::sync::LazyLock;

use serde_json::{Map, Number, Value};

/// go-yaml's preferred line width.
const BEST_WIDTH: usize = 80;
/// go-yaml's indent step.
const INDENT: usize = 2;

/// `value` as go-yaml v2 writes it (a document without `---`, ending with a newline).
pub fn to_yaml(value: &Value) -> String {
    let mut e = Emitter::default();
    match value {
        Value::Object(m) if !m.is_empty() => e.mapping(m, 0, false),
        Value::Array(a) if !a.is_empty() => e.sequence(a, 0, false),
        other => {
            e.inline_value(other, 0);
            e.newline();
        }
    }
    e.out
}

#[derive(Default)]
struct Emitter {
    out: String,
    column: usize,
}

/// How a string scalar is written.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

impl Emitter {
    fn push(&mut self, s: &str) {
        self.out.push_str(s);
        self.column += s.chars().count();
    }

    fn push_char(&mut self, c: char) {
        self.out.push(c);
        self.column += 1;
    }

    fn newline(&mut self) {
        self.out.push('\n');
        self.column = 0;
    }

    fn indent_to(&mut self, indent: usize) {
        for _ in 0..indent {
            self.out.push(' ');
        }
        self.column = indent;
    }

    /// A block mapping whose keys sit at column `indent`; `inline`: the first key continues
    /// the current line (after `- `).
    fn mapping(&mut self, m: &Map<String, Value>, indent: usize, inline: bool) {
        let mut keys: Vec<&String> = m.keys().collect();
        keys.sort_by(|a, b| key_order(a, b));
        for (i, key) in keys.into_iter().enumerate() {
            if i > 0 || !inline {
                self.indent_to(indent);
            }
            self.scalar(key, indent + INDENT, true);
            self.push_char(':');
            let value = &m[key];
            match value {
                Value::Object(o) if !o.is_empty() => {
                    self.newline();
                    self.mapping(o, indent + INDENT, false);
                }
                Value::Array(a) if !a.is_empty() => {
                    self.newline();
                    self.sequence(a, indent, false);
                }
                other => {
                    self.inline_value(other, indent + INDENT);
                    self.newline();
                }
            }
        }
    }

    /// A block sequence whose dashes sit at column `indent`.
    fn sequence(&mut self, a: &[Value], indent: usize, inline: bool) {
        for (i, item) in a.iter().enumerate() {
            if i > 0 || !inline {
                self.indent_to(indent);
            }
            self.push_char('-');
            match item {
                Value::Object(o) if !o.is_empty() => {
                    self.push_char(' ');
                    self.mapping(o, indent + INDENT, true);
                }
                Value::Array(inner) if !inner.is_empty() => {
                    self.push_char(' ');
                    self.sequence(inner, indent + INDENT, true);
                }
                other => {
                    self.inline_value(other, indent + INDENT);
                    self.newline();
                }
            }
        }
    }

    /// A scalar or empty collection after `key:` or `-` (a space first); `indent`: where
    /// continuation lines start.
    fn inline_value(&mut self, v: &Value, indent: usize) {
        let sep = |e: &mut Emitter| {
            if e.column > 0 {
                e.push_char(' ');
            }
        };
        match v {
            Value::Null => {
                sep(self);
                self.push("null");
            }
            Value::Bool(b) => {
                sep(self);
                self.push(if *b { "true" } else { "false" });
            }
            Value::Number(n) => {
                sep(self);
                self.push(&number(n));
            }
            Value::String(s) => self.scalar(s, indent, false),
            Value::Object(_) => {
                sep(self);
                self.push("{}");
            }
            Value::Array(_) => {
                sep(self);
                self.push("[]");
            }
        }
    }

    /// A string scalar; `key`: a mapping key (no folding, no block styles).
    fn scalar(&mut self, s: &str, indent: usize, key: bool) {
        let style = style(s, key);
        if !key && self.column > 0 {
            self.push_char(' ');
        }
        match style {
            Style::Plain => self.folded(s, indent, !key, None),
            Style::Single => {
                self.push_char('\'');
                self.folded(s, indent, !key, Some('\''));
                self.push_char('\'');
            }
            Style::Double => self.double_quoted(s, indent, !key),
            Style::Literal => self.literal(s, indent),
        }
    }

    /// Plain or single-quoted text, folded at a space once past the line width.
    fn folded(&mut self, s: &str, indent: usize, breaks: bool, quote: Option<char>) {
        let chars: Vec<char> = s.chars().collect();
        let mut spaces = false;
        for (i, &c) in chars.iter().enumerate() {
            if c == ' ' {
                let inner = quote.is_none() || (i != 0 && i != chars.len() - 1);
                let next_space = chars.get(i + 1) == Some(&' ');
                if breaks && !spaces && self.column > BEST_WIDTH && inner && !next_space {
                    self.newline();
                    self.indent_to(indent);
                } else {
                    self.push_char(' ');
                }
                spaces = true;
            } else {
                if Some(c) == quote {
                    self.push_char(c);
                }
                self.push_char(c);
                spaces = false;
            }
        }
    }

    fn double_quoted(&mut self, s: &str, indent: usize, breaks: bool) {
        self.push_char('"');
        let chars: Vec<char> = s.chars().collect();
        let mut spaces = false;
        for (i, &c) in chars.iter().enumerate() {
            if !printable(c) || c == '\u{FEFF}' || is_break(c) || c == '"' || c == '\\' {
                self.push_char('\\');
                match c {
                    '\0' => self.push_char('0'),
                    '\u{7}' => self.push_char('a'),
                    '\u{8}' => self.push_char('b'),
                    '\t' => self.push_char('t'),
                    '\n' => self.push_char('n'),
                    '\u{b}' => self.push_char('v'),
                    '\u{c}' => self.push_char('f'),
                    '\r' => self.push_char('r'),
                    '\u{1b}' => self.push_char('e'),
                    '"' => self.push_char('"'),
                    '\\' => self.push_char('\\'),
                    '\u{85}' => self.push_char('N'),
                    '\u{a0}' => self.push_char('_'),
                    '\u{2028}' => self.push_char('L'),
                    '\u{2029}' => self.push_char('P'),
                    c if (c as u32) <= 0xFF => self.push(&format!("x{:02X}", c as u32)),
                    c if (c as u32) <= 0xFFFF => self.push(&format!("u{:04X}", c as u32)),
                    c => self.push(&format!("U{:08X}", c as u32)),
                }
                spaces = false;
            } else if c == ' ' {
                if breaks && !spaces && self.column > BEST_WIDTH && i > 0 && i < chars.len() - 1 {
                    self.newline();
                    self.indent_to(indent);
                    if chars.get(i + 1) == Some(&' ') {
                        self.push_char('\\');
                    }
                } else {
                    self.push_char(' ');
                }
                spaces = true;
            } else {
                self.push_char(c);
                spaces = false;
            }
        }
        self.push_char('"');
    }

    /// A literal block scalar (`|`), its lines at `indent`.
    fn literal(&mut self, s: &str, indent: usize) {
        self.push_char('|');
        if s.starts_with([' ', '\n']) {
            self.push(&INDENT.to_string());
        }
        let body = match s.strip_suffix('\n') {
            None => {
                self.push_char('-');
                s
            }
            Some(rest) if rest.is_empty() || rest.ends_with('\n') => {
                self.push_char('+');
                rest
            }
            Some(rest) => rest,
        };
        for line in body.split('\n') {
            self.newline();
            if !line.is_empty() {
                self.indent_to(indent);
                self.push(line);
            }
        }
    }
}

/// go-yaml's `is_printable` (YAML's printable set, unicode output).
fn printable(c: char) -> bool {
    let u = c as u32;
    u == 0x0A
        || (0x20..=0x7E).contains(&u)
        || (0xA0..=0xD7FF).contains(&u)
        || ((0xE000..=0xFFFD).contains(&u) && u != 0xFEFF)
}

fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// What go-yaml's analysis of a scalar allows.
struct Analysis {
    block_plain: bool,
    single_quoted: bool,
    block: bool,
}

/// go-yaml's `yaml_emitter_analyze_scalar` (block context).
fn analyze(s: &str) -> Analysis {
    if s.is_empty() {
        return Analysis {
            block_plain: true,
            single_quoted: true,
            block: false,
        };
    }
    let chars: Vec<char> = s.chars().collect();
    let mut block_indicators = s.starts_with("---") || s.starts_with("...");
    let (mut line_breaks, mut special) = (false, false);
    let (mut leading_space, mut leading_break) = (false, false);
    let (mut trailing_space, mut trailing_break) = (false, false);
    let (mut break_space, mut space_break) = (false, false);
    let (mut previous_space, mut previous_break) = (false, false);
    let mut preceded_by_whitespace = true;
    let blank = |c: Option<&char>| c.is_none_or(|c| matches!(c, ' ' | '\t'));
    for (i, &c) in chars.iter().enumerate() {
        let followed_by_whitespace = blank(chars.get(i + 1));
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => block_indicators = true,
                '?' | ':' | '-' if followed_by_whitespace => block_indicators = true,
                _ => {}
            }
        } else {
            match c {
                ':' if followed_by_whitespace => block_indicators = true,
                '#' if preceded_by_whitespace => block_indicators = true,
                _ => {}
            }
        }
        if !printable(c) {
            special = true;
        }
        let last = i + 1 == chars.len();
        if c == ' ' {
            leading_space |= i == 0;
            trailing_space |= last;
            break_space |= previous_break;
            previous_space = true;
            previous_break = false;
        } else if is_break(c) {
            line_breaks = true;
            leading_break |= i == 0;
            trailing_break |= last;
            space_break |= previous_space;
            previous_space = false;
            previous_break = true;
        } else {
            previous_space = false;
            previous_break = false;
        }
        preceded_by_whitespace = matches!(c, ' ' | '\t' | '\0') || is_break(c);
    }
    let mut a = Analysis {
        block_plain: true,
        single_quoted: true,
        block: true,
    };
    if leading_space || leading_break || trailing_space || trailing_break {
        a.block_plain = false;
    }
    if trailing_space {
        a.block = false;
    }
    if break_space {
        a.block_plain = false;
        a.single_quoted = false;
    }
    if space_break || special {
        a = Analysis {
            block_plain: false,
            single_quoted: false,
            block: false,
        };
    }
    if line_breaks || block_indicators {
        a.block_plain = false;
    }
    a
}

/// The style go-yaml's `stringv` asks for, as its emitter then settles it.
fn style(s: &str, key: bool) -> Style {
    let a = analyze(s);
    let requested = if s.contains('\n') {
        Style::Literal
    } else if !resolves_to_non_string(s) && !BASE60.is_match(s) {
        Style::Plain
    } else {
        Style::Double
    };
    let mut style = requested;
    if style == Style::Literal && (!a.block || key) {
        style = Style::Double;
    }
    if style == Style::Plain && (!a.block_plain || (s.is_empty() && key)) {
        style = Style::Single;
    }
    if style == Style::Single && !a.single_quoted {
        style = Style::Double;
    }
    style
}

static BASE60: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")
        .unwrap_or_else(|_| regex::Regex::new("$^").unwrap_or_else(|_| unreachable!()))
});
static YAML_FLOAT: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
        .unwrap_or_else(|_| regex::Regex::new("$^").unwrap_or_else(|_| unreachable!()))
});
static TIMESTAMP: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(
        r"^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt][0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2}(?:\.[0-9]+)?(?:Z|[-+][0-9]{2}:[0-9]{2})|\x20[0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2}(?:\.[0-9]+)?)?$",
    )
    .unwrap_or_else(|_| regex::Regex::new("$^").unwrap_or_else(|_| unreachable!()))
});

/// Whether go-yaml's `resolve` reads the plain scalar `s` as something other than a string
/// (null, bool, int, float, timestamp, merge key).
fn resolves_to_non_string(s: &str) -> bool {
    const SPECIAL: [&str; 37] = [
        "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON", "n", "N", "no",
        "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF", "", "~", "null", "Null",
        "NULL", ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "<<",
    ];
    if SPECIAL.contains(&s) || matches!(s, "-.inf" | "-.Inf" | "-.INF") {
        return true;
    }
    match s.as_bytes()[0] {
        b'.' => YAML_FLOAT.is_match(s),
        b'+' | b'-' | b'0'..=b'9' => {
            if TIMESTAMP.is_match(s) {
                return true;
            }
            let plain = s.replace('_', "");
            go_int(&plain) || YAML_FLOAT.is_match(&plain)
        }
        _ => false,
    }
}

/// Whether Go's `strconv.ParseInt(s, 0, 64)` (or `ParseUint`) accepts `s` (range aside).
fn go_int(s: &str) -> bool {
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let digits =
        |rest: &str, radix: u32| !rest.is_empty() && rest.chars().all(|c| c.is_digit(radix));
    let lower = unsigned.to_ascii_lowercase();
    if let Some(rest) = lower.strip_prefix("0x") {
        digits(rest, 16)
    } else if let Some(rest) = lower.strip_prefix("0b") {
        digits(rest, 2)
    } else if let Some(rest) = lower.strip_prefix("0o") {
        digits(rest, 8)
    } else if unsigned.len() > 1 && unsigned.starts_with('0') {
        digits(&unsigned[1..], 8)
    } else {
        digits(unsigned, 10)
    }
}

/// A JSON number as go-yaml writes the value `yaml.Unmarshal` gave for it: integers as
/// they are, other numbers as Go floats.
fn number(n: &Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    go_float(n.as_f64().unwrap_or(0.0))
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 64)`: shortest digits, exponent form when the
/// exponent is below -4 or at least 6.
fn go_float(f: f64) -> String {
    if f.is_nan() {
        return ".nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { ".inf" } else { "-.inf" }.into();
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    format!("{f}")
}

/// go-yaml v2's map key order (`keyList.Less`): letters compare as runes, non-letters sort
/// before letters, digit runs compare by value.
fn key_order(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let ar: Vec<char> = a.chars().collect();
    let br: Vec<char> = b.chars().collect();
    let less = |ar: &[char], br: &[char]| -> bool {
        let mut i = 0;
        while i < ar.len() && i < br.len() {
            if ar[i] == br[i] {
                i += 1;
                continue;
            }
            let al = ar[i].is_alphabetic();
            let bl = br[i].is_alphabetic();
            if al && bl {
                return ar[i] < br[i];
            }
            if al || bl {
                return bl;
            }
            let (mut an, mut bn) = (0i64, 0i64);
            if ar[i] == '0' || br[i] == '0' {
                let mut j = i;
                while j > 0 && ar[j - 1].is_ascii_digit() {
                    j -= 1;
                    if ar[j] != '0' {
                        an = 1;
                        bn = 1;
                        break;
                    }
                }
            }
            let mut ai = i;
            while ai < ar.len() && ar[ai].is_ascii_digit() {
                an = an
                    .wrapping_mul(10)
                    .wrapping_add(i64::from(ar[ai] as u8 - b'0'));
                ai += 1;
            }
            let mut bi = i;
            while bi < br.len() && br[bi].is_ascii_digit() {
                bn = bn
                    .wrapping_mul(10)
                    .wrapping_add(i64::from(br[bi] as u8 - b'0'));
                bi += 1;
            }
            if an != bn {
                return an < bn;
            }
            if ai != bi {
                return ai < bi;
            }
            return ar[i] < br[i];
        }
        ar.len() < br.len()
    };
    if less(&ar, &br) {
        Ordering::Less
    } else if less(&br, &ar) {
        Ordering::Greater
    } else {
        Ordering::Equal
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_object_as_kubectl_shows_it() {
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web",
                "creationTimestamp": "2024-01-02T03:04:05Z",
                "labels": {"app": "web", "tier": "1"},
                "annotations": {"note": "line one\nline two\n", "empty": ""},
                "finalizers": [],
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
            },
            "spec": {
                "containers": [{"name": "c", "image": "nginx:1.25", "args": ["-c", "a: b", "yes"],
                    "ports": [{"containerPort": 80}]}],
                "hostNetwork": false,
                "priority": 0,
                "overhead": null
            }
        });
        let want = "\
apiVersion: v1
kind: Pod
metadata:
  annotations:
    empty: \"\"
    note: |
      line one
      line two
  creationTimestamp: \"2024-01-02T03:04:05Z\"
  finalizers: []
  labels:
    app: web
    tier: \"1\"
  managedFields:
  - fieldsV1:
      f:spec: {}
    manager: kubectl
  name: web
spec:
  containers:
  - args:
    - -c
    - 'a: b'
    - \"yes\"
    image: nginx:1.25
    name: c
    ports:
    - containerPort: 80
  hostNetwork: false
  overhead: null
  priority: 0
";
        assert_eq!(to_yaml(&pod), want);
    }

    #[test]
    fn scalar_styles() {
        for (s, want) in [
            ("plain text", "plain text"),
            ("", "\"\""),
            ("true", "\"true\""),
            ("1.5", "\"1.5\""),
            ("0x1F", "\"0x1F\""),
            ("08", "\"08\""),
            ("1:20", "\"1:20\""),
            ("2024-01-01", "\"2024-01-01\""),
            (" lead", "' lead'"),
            ("trail ", "'trail '"),
            ("#x", "'#x'"),
            ("- x", "'- x'"),
            ("a #b", "'a #b'"),
            ("it's: x", "'it''s: x'"),
            ("tab\there", "\"tab\\there\""),
            ("no\n", "|\n  no"),
            ("a\nb", "|-\n  a\n  b"),
            ("café", "café"),
            ("😀", "\"\\U0001F600\""),
            ("*", "'*'"),
            ("a,b[c]", "a,b[c]"),
        ] {
            let got = to_yaml(&json!({ "k": s }));
            assert_eq!(got, format!("k: {want}\n"), "{s:?}");
        }
    }

    #[test]
    fn long_strings_fold_at_spaces_past_the_width() {
        let words = "word ".repeat(30);
        let s = words.trim_end();
        let got = to_yaml(&json!({ "message": s }));
        let lines: Vec<&str> = got.lines().collect();
        assert!(lines.len() > 1, "{got}");
        assert!(lines[1].starts_with("  word"), "{got}");
        assert_eq!(got.replace("\n  ", " "), format!("message: {s}\n"));
    }

    #[test]
    fn go_yaml_key_order() {
        let mut keys = vec!["b", "a10", "a9", "A", "_x", "a-b", "ab"];
        keys.sort_by(|a, b| key_order(a, b));
        assert_eq!(keys, vec!["_x", "A", "a-b", "a9", "a10", "ab", "b"]);
    }

    #[test]
    fn numbers_and_empty_documents() {
        assert_eq!(
            to_yaml(&json!({"f": 0.5, "i": 3, "big": 1e21})),
            "big: 1e+21\nf: 0.5\ni: 3\n"
        );
        assert_eq!(to_yaml(&json!({})), "{}\n");
        assert_eq!(
            to_yaml(&json!([[1, 2], {"a": 1}])),
            "- - 1\n  - 2\n- a: 1\n"
        );
    }
}
