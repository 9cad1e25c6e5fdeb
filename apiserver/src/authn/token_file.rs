//! `--token-auth-file`: upstream's static token CSV, `token,user,uid[,"group1,group2"]`
//! (Go's `encoding/csv` with leading spaces trimmed; at least three columns per record; an
//! empty token is skipped; a later duplicate wins).

use std::collections::HashMap;

use crate::pipeline::UserInfo;

/// Splits one CSV line into fields (double quotes group, `""` is a literal quote).
fn fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut at_start = true;
    while let Some(c) = chars.next() {
        if quoted {
            if c == '"' {
                if chars.peek() == Some(&'"') {
                    chars.next();
                    cur.push('"');
                } else {
                    quoted = false;
                }
            } else {
                cur.push(c);
            }
            continue;
        }
        match c {
            ',' => {
                out.push(std::mem::take(&mut cur));
                at_start = true;
                continue;
            }
            ' ' | '\t' if at_start => continue,
            '"' if at_start => quoted = true,
            _ => cur.push(c),
        }
        at_start = false;
    }
    out.push(cur);
    out
}

/// Parses the file's text into token → user (groups as listed; `system:authenticated` is
/// added by the authenticator).
pub fn parse(path: &str, text: &str) -> Result<HashMap<String, UserInfo>, String> {
    let mut tokens = HashMap::new();
    let mut record = 0;
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let f = fields(line);
        if f.len() < 3 {
            return Err(format!(
                "token file '{path}' must have at least 3 columns (token, user name, user uid), found {}",
                f.len()
            ));
        }
        record += 1;
        if f[0].is_empty() {
            tracing::warn!(
                "empty token has been found in token file '{path}', record number '{record}'"
            );
            continue;
        }
        let groups = match f.get(3) {
            Some(g) => g.split(',').map(str::to_owned).collect(),
            None => Vec::new(),
        };
        if tokens.contains_key(&f[0]) {
            tracing::warn!(
                "duplicate token has been found in token file '{path}', record number '{record}'"
            );
        }
        tokens.insert(
            f[0].clone(),
            UserInfo {
                name: f[1].clone(),
                uid: f[2].clone(),
                groups,
                ..UserInfo::default()
            },
        );
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_upstream_csv() {
        let t = parse(
            "f",
            "secret1,alice,uid-a,\"dev,ops\"\n\n secret2, bob ,uid-b\n,empty,x\n",
        )
        .unwrap();
        let a = &t["secret1"];
        assert_eq!(a.name, "alice");
        assert_eq!(a.uid, "uid-a");
        assert_eq!(a.groups, vec!["dev", "ops"]);
        let b = &t["secret2"];
        assert_eq!(b.name, "bob ");
        assert!(b.groups.is_empty());
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn too_few_columns_is_an_error() {
        let err = parse("tokens.csv", "tok,alice\n").unwrap_err();
        assert_eq!(
            err,
            "token file 'tokens.csv' must have at least 3 columns (token, user name, user uid), found 2"
        );
    }
}
