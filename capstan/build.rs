//! Release builds of `capstan` place the functions an idle and a lightly used server run
//! next to each other (issue 26).
//!
//! Why: the kernel maps a binary's code into a process in 64 KiB windows around each page
//! it executes, so functions scattered through 41 MB of text made an idle `capstan server`
//! keep ≈ 30 MB of it resident although the code it ran is ≈ 13 MB. `link-order.txt` lists
//! those functions (mangled names, the ones an idle server runs first, then those of common
//! kubectl commands and kbench's create/get/list/watch load), recorded with callgrind by
//! `scripts/link-order.sh`; the linker (rustc's bundled LLD, the default for
//! x86_64-unknown-linux-gnu since Rust 1.90) lays them out first, in that order. Names the
//! current code no longer has are skipped silently, so a stale list only costs memory:
//! regenerate it after large changes. Debug builds are left alone.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=link-order.txt");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CAPSTAN_NO_LINK_ORDER");
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let target = std::env::var("TARGET").unwrap_or_default();
    if !release
        || target != "x86_64-unknown-linux-gnu"
        || std::env::var_os("CAPSTAN_NO_LINK_ORDER").is_some()
        || std::env::var_os("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_some()
        || std::env::var("CARGO_ENCODED_RUSTFLAGS").is_ok_and(|f| f.contains("link"))
        || !rustc_links_with_lld()
    {
        return;
    }
    let Ok(dir) = std::env::var("CARGO_MANIFEST_DIR") else {
        return;
    };
    let list = Path::new(&dir).join("link-order.txt");
    if !list.is_file() {
        return;
    }
    println!(
        "cargo:rustc-link-arg-bin=capstan=-Wl,--symbol-ordering-file={}",
        list.display()
    );
    println!("cargo:rustc-link-arg-bin=capstan=-Wl,--no-warn-symbol-ordering");
}

/// Whether this rustc links x86_64 Linux binaries with its bundled LLD by default (1.90+),
/// the linker that understands `--symbol-ordering-file`.
fn rustc_links_with_lld() -> bool {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let Ok(out) = Command::new(rustc).arg("-vV").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(release) = text.lines().find_map(|l| l.strip_prefix("release: ")) else {
        return false;
    };
    let mut parts = release.split(['.', '-']);
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (major, minor) >= (1, 90)
}
