//! PodSecurity levels, versions and the namespace labels that choose them (upstream's
//! `k8s.io/pod-security-admission/api`).

use std::collections::BTreeMap;
use std::fmt;

use crate::error::FieldError;

/// Label prefix of the PodSecurity namespace labels.
pub const LABEL_PREFIX: &str = "pod-security.kubernetes.io/";

/// A Pod Security Standards level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    /// No restrictions.
    Privileged,
    /// Prevents known privilege escalations.
    Baseline,
    /// Current pod hardening best practice.
    Restricted,
}

impl Level {
    /// Upstream's `ParseLevel`.
    pub fn parse(s: &str) -> Result<Level, String> {
        match s {
            "privileged" => Ok(Level::Privileged),
            "baseline" => Ok(Level::Baseline),
            "restricted" => Ok(Level::Restricted),
            _ => Err("must be one of privileged, baseline, restricted".to_owned()),
        }
    }

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// A policy version: `latest` or `v1.<minor>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// The newest checks.
    Latest,
    /// The checks as of Kubernetes v1.`minor`.
    Minor(u32),
}

impl Version {
    /// Upstream's `ParseVersion`.
    pub fn parse(s: &str) -> Result<Version, String> {
        let err = || "must be \"latest\" or \"v1.x\"".to_owned();
        if s == "latest" {
            return Ok(Version::Latest);
        }
        let minor = s.strip_prefix("v1.").ok_or_else(err)?;
        let canonical = minor == "0" || (!minor.starts_with('0') && !minor.is_empty());
        if !canonical || !minor.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err());
        }
        minor.parse().map(Version::Minor).map_err(|_| err())
    }

    /// Whether checks introduced in v1.`minor` apply at this version.
    pub fn at_least(self, minor: u32) -> bool {
        match self {
            Version::Latest => true,
            Version::Minor(m) => m >= minor,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Latest => f.write_str("latest"),
            Version::Minor(m) => write!(f, "v1.{m}"),
        }
    }
}

/// A level at a version, shown as `restricted:latest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LevelVersion {
    /// The level.
    pub level: Level,
    /// The version.
    pub version: Version,
}

impl fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.level.as_str(), self.version)
    }
}

/// The three modes' levels for a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Violations are refused.
    pub enforce: LevelVersion,
    /// Violations are recorded in the audit event.
    pub audit: LevelVersion,
    /// Violations are returned as warnings.
    pub warn: LevelVersion,
}

/// Upstream's default policy (no admission configuration): privileged:latest throughout.
pub const DEFAULT_POLICY: Policy = Policy {
    enforce: PRIVILEGED_LATEST,
    audit: PRIVILEGED_LATEST,
    warn: PRIVILEGED_LATEST,
};

const PRIVILEGED_LATEST: LevelVersion = LevelVersion {
    level: Level::Privileged,
    version: Version::Latest,
};

/// Upstream's `PolicyToEvaluate`: the policy the namespace labels choose, and the label
/// errors (`metadata.labels[...]` invalid values). Unparseable enforce labels fall back
/// to `restricted`/`latest`, unparseable audit and warn levels to `privileged`; without a
/// warn label, warn follows a stricter enforce level.
pub fn policy_from_labels(labels: &BTreeMap<String, String>) -> (Policy, Vec<FieldError>) {
    let mut p = DEFAULT_POLICY;
    let mut errs = Vec::new();
    let mut err = |label: &str, value: &str, why: String| {
        errs.push(FieldError {
            reason: "FieldValueInvalid",
            field: format!("metadata.labels[{LABEL_PREFIX}{label}]"),
            message: format!("Invalid value: {value:?}: {why}"),
        });
    };
    let get = |k: &str| labels.get(&format!("{LABEL_PREFIX}{k}"));
    let modes: [(&str, &mut LevelVersion, Level); 3] = [
        ("enforce", &mut p.enforce, Level::Restricted),
        ("audit", &mut p.audit, Level::Privileged),
        ("warn", &mut p.warn, Level::Privileged),
    ];
    let mut has_level = [false; 3];
    for (i, (mode, lv, fallback)) in modes.into_iter().enumerate() {
        if let Some(v) = get(mode) {
            has_level[i] = Level::parse(v).is_ok() || mode == "warn";
            lv.level = Level::parse(v).unwrap_or_else(|why| {
                err(mode, v, why);
                fallback
            });
        }
        let version_label = format!("{mode}-version");
        if let Some(v) = get(&version_label) {
            lv.version = Version::parse(v).unwrap_or_else(|why| {
                err(&version_label, v, why);
                Version::Latest
            });
        }
    }
    // Warn defaults to an explicitly set, stricter enforce level.
    let [has_enforce, _, has_warn] = has_level;
    if !has_warn && has_enforce && p.enforce.level > p.warn.level {
        p.warn.level = p.enforce.level;
        if get("warn-version").is_none() {
            p.warn.version = p.enforce.version;
        }
    }
    (p, errs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (format!("{LABEL_PREFIX}{k}"), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn versions_parse_as_upstream() {
        assert_eq!(Version::parse("latest"), Ok(Version::Latest));
        assert_eq!(Version::parse("v1.0"), Ok(Version::Minor(0)));
        assert_eq!(Version::parse("v1.33"), Ok(Version::Minor(33)));
        for bad in ["v1.01", "v2.0", "1.20", "v1.", "v1.x", "Latest"] {
            assert_eq!(
                Version::parse(bad),
                Err("must be \"latest\" or \"v1.x\"".to_owned()),
                "{bad}"
            );
        }
    }

    #[test]
    fn labels_choose_the_policy() {
        let (p, errs) = policy_from_labels(&labels(&[
            ("enforce", "baseline"),
            ("enforce-version", "v1.25"),
            ("warn", "restricted"),
        ]));
        assert!(errs.is_empty());
        assert_eq!(p.enforce.to_string(), "baseline:v1.25");
        assert_eq!(p.warn.to_string(), "restricted:latest");
        assert_eq!(p.audit.to_string(), "privileged:latest");
        let (p, _) = policy_from_labels(&labels(&[("enforce", "restricted")]));
        assert_eq!(p.warn.to_string(), "restricted:latest");
        let (p, errs) = policy_from_labels(&labels(&[("enforce", "bogus"), ("warn", "nope")]));
        assert_eq!(p.enforce.level, Level::Restricted);
        assert_eq!(p.warn.level, Level::Privileged);
        assert_eq!(errs.len(), 2);
        assert_eq!(
            errs[0].field,
            "metadata.labels[pod-security.kubernetes.io/enforce]"
        );
        assert_eq!(
            errs[0].message,
            "Invalid value: \"bogus\": must be one of privileged, baseline, restricted"
        );
    }
}
