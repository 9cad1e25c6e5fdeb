//! Compiles the Kubernetes API's protobuf schema (`proto/`, the upstream `generated.proto`
//! files) into a binary `FileDescriptorSet` that `codec::protobuf` loads at run time to
//! decode `application/vnd.kubernetes.protobuf` request bodies.

use std::path::{Path, PathBuf};

fn main() {
    let root = Path::new("proto");
    println!("cargo:rerun-if-changed=proto");
    let mut files = Vec::new();
    if let Err(e) = collect(root, &mut files) {
        eprintln!("error: reading {}: {e}", root.display());
        std::process::exit(1);
    }
    files.sort();
    let relative: Vec<PathBuf> = files
        .iter()
        .filter_map(|f| f.strip_prefix(root).ok().map(Path::to_path_buf))
        .collect();
    let encoded = match protox::Compiler::new([root]).and_then(|mut c| {
        c.include_source_info(false).include_imports(true);
        c.open_files(&relative)?;
        Ok(c.encode_file_descriptor_set())
    }) {
        Ok(bytes) => bytes,
        Err(e) => {
            eprintln!("error: compiling the Kubernetes protobuf schema: {e:?}");
            std::process::exit(1);
        }
    };
    let out = match std::env::var_os("OUT_DIR") {
        Some(dir) => PathBuf::from(dir).join("k8s_descriptors.bin"),
        None => {
            eprintln!("error: OUT_DIR is not set");
            std::process::exit(1);
        }
    };
    if let Err(e) = std::fs::write(&out, encoded) {
        eprintln!("error: writing {}: {e}", out.display());
        std::process::exit(1);
    }
}

/// Every `.proto` file under `dir`.
fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "proto") {
            out.push(path);
        }
    }
    Ok(())
}
