//! The on-disk PKI layout, and how files in it are read and written.
//!
//! [`PkiPaths`] documents the layout; [`write_atomic`] is how every file in it is written.

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Mode of files that hold a private key.
pub(crate) const PRIVATE_MODE: u32 = 0o600;
/// Mode of files that hold only public material.
pub(crate) const PUBLIC_MODE: u32 = 0o644;
/// Mode of the `pki/` directory.
const PKI_DIR_MODE: u32 = 0o700;

/// The paths of every PKI file under one data directory.
///
/// Every component finds its certificates and keys through this type; no other code spells
/// these file names. Under a data directory `<dir>`:
///
/// ```text
/// <dir>/
/// ├── admin.kubeconfig     kubeconfig for user kubernetes-admin (group system:masters)   0600
/// └── pki/                                                                               0700
///     ├── ca.crt           cluster CA certificate (PEM), CN=capstan-ca, 10 years          0644
///     ├── ca.key           cluster CA private key (PKCS#8 PEM)                            0600
///     ├── apiserver.crt    API server serving certificate (PEM), 1 year                   0644
///     ├── apiserver.key    its private key (PKCS#8 PEM)                                   0600
///     ├── admin.crt        client certificate CN=kubernetes-admin, O=system:masters       0644
///     ├── admin.key        its private key (PKCS#8 PEM)                                   0600
///     ├── sa.key           service-account token signing key, ECDSA P-256 (PKCS#8 PEM)    0600
///     └── sa.pub           its public key (SubjectPublicKeyInfo PEM)                      0644
/// ```
///
/// Keys are ECDSA P-256. Every file is replaced atomically: written to a temporary file in the
/// same directory, flushed to disk, renamed over the old name, and the directory synced, so a
/// crash leaves either the old file or the new one, never a torn one. Files holding private
/// keys (including kubeconfigs, which embed one) are created with mode 0600.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PkiPaths {
    /// The data directory everything lives under.
    pub dir: PathBuf,
    /// `<dir>/pki`: certificates and keys.
    pub pki_dir: PathBuf,
    /// `<dir>/pki/ca.crt`: the cluster CA certificate.
    pub ca_cert: PathBuf,
    /// `<dir>/pki/ca.key`: the cluster CA private key.
    pub ca_key: PathBuf,
    /// `<dir>/pki/apiserver.crt`: the API server's serving certificate.
    pub apiserver_cert: PathBuf,
    /// `<dir>/pki/apiserver.key`: the API server's serving key.
    pub apiserver_key: PathBuf,
    /// `<dir>/pki/admin.crt`: the admin client certificate.
    pub admin_cert: PathBuf,
    /// `<dir>/pki/admin.key`: the admin client key.
    pub admin_key: PathBuf,
    /// `<dir>/pki/sa.key`: the service-account token signing key.
    pub sa_key: PathBuf,
    /// `<dir>/pki/sa.pub`: the service-account token verification key.
    pub sa_pub: PathBuf,
    /// `<dir>/admin.kubeconfig`: kubeconfig for the admin user.
    pub admin_kubeconfig: PathBuf,
}

impl PkiPaths {
    /// The layout under `dir`. Touches nothing on disk.
    pub fn new(dir: &Path) -> Self {
        let pki_dir = dir.join("pki");
        PkiPaths {
            dir: dir.to_path_buf(),
            ca_cert: pki_dir.join("ca.crt"),
            ca_key: pki_dir.join("ca.key"),
            apiserver_cert: pki_dir.join("apiserver.crt"),
            apiserver_key: pki_dir.join("apiserver.key"),
            admin_cert: pki_dir.join("admin.crt"),
            admin_key: pki_dir.join("admin.key"),
            sa_key: pki_dir.join("sa.key"),
            sa_pub: pki_dir.join("sa.pub"),
            admin_kubeconfig: dir.join("admin.kubeconfig"),
            pki_dir,
        }
    }

    /// Creates `dir` and `dir/pki` (the latter with mode 0700) if they are missing.
    pub fn create_dirs(&self) -> Result<()> {
        fs::create_dir_all(&self.dir).map_err(|e| Error::io("creating directory", &self.dir, e))?;
        match DirBuilder::new().mode(PKI_DIR_MODE).create(&self.pki_dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists && self.pki_dir.is_dir() => Ok(()),
            Err(e) => Err(Error::io("creating directory", &self.pki_dir, e)),
        }
    }
}

/// Reads `path` as UTF-8 text; `Ok(None)` if it does not exist.
pub(crate) fn read_if_exists(path: &Path) -> Result<Option<String>> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("reading", path, e)),
    }
}

/// Replaces `path` with `contents` atomically; the new file has permission bits `mode`.
///
/// The parent directory must exist. On error the old file (if any) is untouched and the
/// temporary file is removed.
pub(crate) fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);

    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| {
        Error::io(
            "writing",
            path,
            std::io::Error::new(ErrorKind::InvalidInput, "no file name"),
        )
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(
        ".tmp.{}.{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = parent.join(tmp_name);

    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .map_err(|e| Error::io("creating", &tmp, e))?;
        file.write_all(contents)
            .map_err(|e| Error::io("writing", &tmp, e))?;
        file.sync_all().map_err(|e| Error::io("syncing", &tmp, e))?;
        drop(file);
        fs::rename(&tmp, path).map_err(|e| Error::io("renaming into place", path, e))
    })();
    if result.is_err() {
        // Best effort: the error being returned is the interesting one.
        let _ = fs::remove_file(&tmp);
        return result;
    }
    // Make the rename itself durable.
    fs::File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(|e| Error::io("syncing directory", parent, e))
}

/// Like [`write_atomic`], but leaves the file alone (not even its mtime changes) when it
/// already holds exactly `contents`. Returns whether it wrote.
pub(crate) fn write_if_changed(path: &Path, contents: &[u8], mode: u32) -> Result<bool> {
    match fs::read(path) {
        Ok(old) if old == contents => Ok(false),
        Ok(_) => write_atomic(path, contents, mode).map(|()| true),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            write_atomic(path, contents, mode).map(|()| true)
        }
        Err(e) => Err(Error::io("reading", path, e)),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode_of(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn layout_puts_files_under_pki_and_kubeconfig_at_top() {
        let p = PkiPaths::new(Path::new("/data"));
        assert_eq!(p.ca_cert, Path::new("/data/pki/ca.crt"));
        assert_eq!(p.ca_key, Path::new("/data/pki/ca.key"));
        assert_eq!(p.apiserver_cert, Path::new("/data/pki/apiserver.crt"));
        assert_eq!(p.apiserver_key, Path::new("/data/pki/apiserver.key"));
        assert_eq!(p.admin_cert, Path::new("/data/pki/admin.crt"));
        assert_eq!(p.admin_key, Path::new("/data/pki/admin.key"));
        assert_eq!(p.sa_key, Path::new("/data/pki/sa.key"));
        assert_eq!(p.sa_pub, Path::new("/data/pki/sa.pub"));
        assert_eq!(p.admin_kubeconfig, Path::new("/data/admin.kubeconfig"));
    }

    #[test]
    fn create_dirs_makes_private_pki_dir_and_is_repeatable() {
        let tmp = tempfile::tempdir().unwrap();
        let p = PkiPaths::new(&tmp.path().join("data"));
        p.create_dirs().unwrap();
        p.create_dirs().unwrap();
        assert_eq!(mode_of(&p.pki_dir), 0o700);
    }

    #[test]
    fn write_atomic_replaces_contents_sets_mode_and_leaves_no_temp_files() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("secret.key");
        fs::write(&path, "old").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();

        write_atomic(&path, b"new", PRIVATE_MODE).unwrap();

        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert_eq!(mode_of(&path), 0o600);
        let names: Vec<_> = fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("secret.key")]);
    }

    #[test]
    fn write_atomic_into_missing_directory_fails_without_leftovers() {
        let tmp = tempfile::tempdir().unwrap();
        let err = write_atomic(&tmp.path().join("nope/file"), b"x", PUBLIC_MODE).unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err}");
        assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    #[test]
    fn write_if_changed_skips_identical_contents() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        assert!(write_if_changed(&path, b"a", PUBLIC_MODE).unwrap());
        assert!(!write_if_changed(&path, b"a", PUBLIC_MODE).unwrap());
        assert!(write_if_changed(&path, b"b", PUBLIC_MODE).unwrap());
        assert_eq!(fs::read(&path).unwrap(), b"b");
    }

    #[test]
    fn read_if_exists_distinguishes_missing_from_present() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        assert_eq!(read_if_exists(&path).unwrap(), None);
        fs::write(&path, "x").unwrap();
        assert_eq!(read_if_exists(&path).unwrap().as_deref(), Some("x"));
    }
}
