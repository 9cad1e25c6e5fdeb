//! Revisions: `main` is the store-wide revision of one atomic change set (it is Kubernetes'
//! `resourceVersion`); `sub` orders the changes inside that set (a transaction writing three
//! keys produces sub 0, 1 and 2 of one main revision).

/// A position in the store's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Revision {
    /// Store-wide revision of the change set.
    pub main: i64,
    /// Index of the change inside its change set.
    pub sub: i64,
}

impl Revision {
    /// The revision `main`, sub `sub`.
    pub fn new(main: i64, sub: i64) -> Self {
        Revision { main, sub }
    }
}
