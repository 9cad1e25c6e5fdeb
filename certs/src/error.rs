//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong while creating, loading or writing PKI material.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading, writing, renaming or creating a file or directory failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done ("reading", "writing", "creating directory", …).
        action: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// rcgen refused to generate a key or to build or sign a certificate.
    #[error("generating {what}: {source}")]
    Generate {
        /// What was being generated ("CA certificate", "service-account key", …).
        what: &'static str,
        /// The underlying error.
        #[source]
        source: rcgen::Error,
    },
    /// A PEM or DER input is not a certificate or key we can use.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// What was being parsed (usually a file path or "client certificate").
        what: String,
        /// Why it was rejected.
        reason: String,
    },
    /// One half of a pair that must be created together exists and the other does not.
    ///
    /// Generating a new pair would silently replace the existing half (a CA key or a
    /// service-account key that other parties already trust), so this is left to an operator.
    #[error(
        "{} exists but {} does not; restore it or remove both to generate a new pair",
        present.display(),
        missing.display()
    )]
    IncompletePair {
        /// The file that exists.
        present: PathBuf,
        /// The file that is missing.
        missing: PathBuf,
    },
    /// A private key does not belong to the certificate it was loaded with.
    #[error("the private key in {} does not match the certificate in {}", key.display(), cert.display())]
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// A requested subject alternative name is neither an IP address nor a DNS name.
    #[error("invalid subject alternative name {0:?}: not an IP address or DNS name")]
    InvalidSan(String),
    /// A client certificate was requested for an empty user name.
    #[error("a client certificate needs a non-empty user name")]
    EmptyUserName,
    /// A client certificate's subject has no common name, so it names no user.
    #[error("the certificate subject has no common name (CN)")]
    NoCommonName,
}

/// This crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::Io`] for `path`.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        Error::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// An [`Error::Generate`] maker for `map_err`.
    pub(crate) fn generate(what: &'static str) -> impl FnOnce(rcgen::Error) -> Self {
        move |source| Error::Generate { what, source }
    }

    /// An [`Error::Invalid`] for `what`.
    // Takes `reason` by value so that `map_err(|e| Error::invalid(what, e))` reads naturally.
    #[allow(clippy::needless_pass_by_value)]
    pub(crate) fn invalid(what: impl Into<String>, reason: impl ToString) -> Self {
        Error::Invalid {
            what: what.into(),
            reason: reason.to_string(),
        }
    }
}
