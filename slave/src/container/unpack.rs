//! Applying one image layer to a root filesystem, safely: the layer file's digest checked
//! first, gzip or zstd or plain tar by its first bytes, whiteouts applied (`.wh.NAME` removes
//! NAME, `.wh..wh..opq` empties the directory of what lower layers put there), every path
//! resolved inside the root (`..` and symbolic links are followed as the container would see
//! them, never out of the root), no device nodes or FIFOs made (they are skipped and counted).

use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufReader, Read};
use std::path::{Component, Path, PathBuf};

/// Why a layer could not be applied: the step (`verify`, `unpack`) and what went wrong.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {message}")]
pub struct LayerError {
    /// `verify` or `unpack`.
    pub step: &'static str,
    /// What went wrong, naming the layer or the path.
    pub message: String,
}

fn unpack_err(message: String) -> LayerError {
    LayerError {
        step: "unpack",
        message,
    }
}

/// The `sha256:HEX` digest of a file's bytes.
pub fn file_digest(path: &Path) -> std::io::Result<String> {
    let mut f = BufReader::with_capacity(1 << 20, std::fs::File::open(path)?);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(format!("sha256:{:x}", h.finalize()))
}

/// What applying a layer did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Entries written (files, directories, links).
    pub entries: u64,
    /// Device nodes and FIFOs skipped.
    pub skipped_devices: u64,
}

/// Checks `layer` against `digest` (`sha256:HEX`), then applies it to `root`.
pub fn apply_layer(root: &Path, layer: &Path, digest: &str) -> Result<Applied, LayerError> {
    let got = file_digest(layer).map_err(|e| LayerError {
        step: "verify",
        message: format!("cannot read layer {}: {e}", layer.display()),
    })?;
    if got != digest {
        return Err(LayerError {
            step: "verify",
            message: format!("layer {digest}: digest mismatch (the file's is {got})"),
        });
    }
    let file = std::fs::File::open(layer)
        .map_err(|e| unpack_err(format!("cannot open layer {digest}: {e}")))?;
    let mut r = BufReader::new(file);
    let magic = {
        use std::io::BufRead;
        let b = r
            .fill_buf()
            .map_err(|e| unpack_err(format!("layer {digest}: {e}")))?;
        b.get(..4).map(<[u8]>::to_vec).unwrap_or_default()
    };
    let reader: Box<dyn Read> = if magic.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::GzDecoder::new(r))
    } else if magic == [0x28, 0xb5, 0x2f, 0xfd] {
        Box::new(
            zstd::stream::read::Decoder::with_buffer(r)
                .map_err(|e| unpack_err(format!("layer {digest}: zstd: {e}")))?,
        )
    } else {
        Box::new(r)
    };
    apply_tar(root, reader).map_err(|e| unpack_err(format!("layer {digest}: {e}")))
}

/// A tar entry's path as components inside the root; `..` refused (a path escaping the
/// root), `.` and a leading `/` dropped.
fn clean(path: &Path) -> Result<Vec<OsString>, String> {
    let mut out = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => out.push(p.to_os_string()),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir => {
                return Err(format!("path {} escapes the root", path.display()))
            }
            Component::Prefix(_) => {
                return Err(format!("path {} is not a Unix path", path.display()))
            }
        }
    }
    Ok(out)
}

/// The directory `parts` names inside `root`, resolved as the container sees it: symbolic
/// links followed (an absolute target from the root), `..` stopping at the root, missing
/// directories made. Never a path outside `root`.
pub fn resolve_dir(root: &Path, parts: &[OsString]) -> Result<PathBuf, String> {
    let mut cur = root.to_path_buf();
    let mut todo: VecDeque<OsString> = parts.iter().cloned().collect();
    let mut hops = 0;
    while let Some(p) = todo.pop_front() {
        if p == ".." {
            if cur != root {
                cur.pop();
            }
            continue;
        }
        if p == "." || p.is_empty() {
            continue;
        }
        let next = cur.join(&p);
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                if hops > 40 {
                    return Err(format!("too many symbolic links under {}", next.display()));
                }
                let target = std::fs::read_link(&next).map_err(|e| e.to_string())?;
                if target.is_absolute() {
                    cur = root.to_path_buf();
                }
                for c in target.components().rev() {
                    match c {
                        Component::Normal(n) => todo.push_front(n.to_os_string()),
                        Component::ParentDir => todo.push_front("..".into()),
                        _ => {}
                    }
                }
            }
            Ok(m) if m.is_dir() => cur = next,
            Ok(_) => return Err(format!("{} is not a directory", next.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir(&next).map_err(|e| format!("{}: {e}", next.display()))?;
                cur = next;
            }
            Err(e) => return Err(format!("{}: {e}", next.display())),
        }
    }
    Ok(cur)
}

/// Removes whatever is at `p` (file, link or directory tree); nothing there is fine.
fn remove_any(p: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

const WHITEOUT: &str = ".wh.";
const OPAQUE: &str = ".wh..wh..opq";

/// Applies a tar stream to `root`.
fn apply_tar(root: &Path, reader: impl Read) -> Result<Applied, String> {
    let mut archive = tar::Archive::new(reader);
    let as_root = super::is_root();
    archive.set_preserve_permissions(true);
    archive.set_preserve_ownerships(as_root);
    archive.set_unpack_xattrs(false);
    archive.set_overwrite(true);
    let mut done = Applied::default();
    for entry in archive.entries().map_err(|e| e.to_string())? {
        let mut entry = entry.map_err(|e| e.to_string())?;
        let path = entry.path().map_err(|e| e.to_string())?.into_owned();
        let mut parts = clean(&path)?;
        let Some(name) = parts.pop() else {
            continue;
        };
        let parent = resolve_dir(root, &parts)?;
        let name_s = name.to_string_lossy();
        if name_s == OPAQUE {
            for e in std::fs::read_dir(&parent)
                .map_err(|e| e.to_string())?
                .flatten()
            {
                remove_any(&e.path()).map_err(|e| e.to_string())?;
            }
            continue;
        }
        if let Some(hidden) = name_s.strip_prefix(WHITEOUT) {
            remove_any(&parent.join(hidden)).map_err(|e| e.to_string())?;
            continue;
        }
        let target = parent.join(&name);
        let kind = entry.header().entry_type();
        use tar::EntryType as T;
        match kind {
            T::Char | T::Block | T::Fifo => {
                done.skipped_devices += 1;
                continue;
            }
            T::Directory => {
                if std::fs::symlink_metadata(&target).is_ok_and(|m| !m.is_dir()) {
                    remove_any(&target).map_err(|e| e.to_string())?;
                }
            }
            T::Regular | T::Continuous | T::Symlink | T::Link | T::GNUSparse => {
                remove_any(&target).map_err(|e| e.to_string())?;
            }
            // Headers with no file of their own (PAX, GNU long names are read by the crate).
            _ => continue,
        }
        if kind == T::Link {
            let link = entry
                .link_name()
                .map_err(|e| e.to_string())?
                .ok_or("a hard link without a target")?
                .into_owned();
            let mut lparts = clean(&link)?;
            let lname = lparts.pop().ok_or("a hard link to the root")?;
            let src = resolve_dir(root, &lparts)?.join(lname);
            std::fs::hard_link(&src, &target)
                .map_err(|e| format!("hard link {} → {}: {e}", path.display(), link.display()))?;
        } else {
            entry
                .unpack(&target)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        done.entries += 1;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar of `(path, kind, data or link target)`.
    fn tar_of(entries: &[(&str, tar::EntryType, &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(if *kind == tar::EntryType::Directory {
                0o755
            } else {
                0o644
            });
            h.set_uid(0);
            h.set_gid(0);
            let body: &[u8] = match kind {
                tar::EntryType::Regular => data.as_bytes(),
                _ => &[],
            };
            h.set_size(body.len() as u64);
            if matches!(kind, tar::EntryType::Symlink | tar::EntryType::Link) {
                h.set_link_name(data).expect("link");
            }
            // Paths with `..` are refused by `append_data`: written raw, as a hostile
            // archive would be.
            let name = h.as_old_mut();
            name.name[..path.len()].copy_from_slice(path.as_bytes());
            h.set_cksum();
            b.append(&h, body).expect("append");
        }
        b.into_inner().expect("tar")
    }

    fn layer_file(dir: &Path, name: &str, bytes: &[u8]) -> (PathBuf, String) {
        let p = dir.join(name);
        std::fs::write(&p, bytes).expect("write");
        let d = file_digest(&p).expect("digest");
        (p, d)
    }

    use tar::EntryType as T;

    #[test]
    fn layers_apply_in_order_with_whiteouts_gzip_and_zstd() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("rootfs");
        std::fs::create_dir(&root).expect("mkdir");
        let base = tar_of(&[
            ("etc/", T::Directory, ""),
            ("etc/marker", T::Regular, "base"),
            ("etc/gone", T::Regular, "x"),
            ("opt/", T::Directory, ""),
            ("opt/old", T::Regular, "x"),
            ("bin", T::Symlink, "usr/bin"),
            ("usr/bin/", T::Directory, ""),
        ]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &base).expect("gzip");
        let (l1, d1) = layer_file(tmp.path(), "l1", &gz.finish().expect("gzip"));
        let top = tar_of(&[
            ("etc/.wh.gone", T::Regular, ""),
            ("opt/.wh..wh..opq", T::Regular, ""),
            ("opt/new", T::Regular, "y"),
            ("bin/tool", T::Regular, "through the link"),
            ("etc/hard", T::Link, "etc/marker"),
            ("dev/null", T::Char, ""),
        ]);
        let zst = zstd::encode_all(&top[..], 1).expect("zstd");
        let (l2, d2) = layer_file(tmp.path(), "l2", &zst);
        apply_layer(&root, &l1, &d1).expect("layer 1");
        let done = apply_layer(&root, &l2, &d2).expect("layer 2");
        assert_eq!(done.skipped_devices, 1);
        let read = |p: &str| std::fs::read_to_string(root.join(p)).ok();
        assert_eq!(read("etc/marker").as_deref(), Some("base"));
        assert_eq!(read("etc/hard").as_deref(), Some("base"));
        assert!(!root.join("etc/gone").exists(), "whiteout");
        assert!(!root.join("opt/old").exists(), "opaque directory");
        assert_eq!(read("opt/new").as_deref(), Some("y"));
        assert_eq!(read("usr/bin/tool").as_deref(), Some("through the link"));
        assert!(!root.join("dev/null").exists(), "no device nodes");
    }

    #[test]
    fn nothing_escapes_the_root() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("rootfs");
        std::fs::create_dir(&root).expect("mkdir");
        // `..` in a path is refused.
        let (l, d) = layer_file(tmp.path(), "dots", &tar_of(&[("../evil", T::Regular, "x")]));
        let e = apply_layer(&root, &l, &d).expect_err("refused");
        assert!(e.to_string().contains("escapes the root"), "{e}");
        assert!(!tmp.path().join("evil").exists());
        // A link pointing out of the root is followed inside it.
        let (l, d) = layer_file(
            tmp.path(),
            "links",
            &tar_of(&[
                ("up", T::Symlink, "../../.."),
                ("abs", T::Symlink, "/"),
                ("up/out", T::Regular, "1"),
                ("abs/out2", T::Regular, "2"),
            ]),
        );
        apply_layer(&root, &l, &d).expect("applied inside");
        assert!(root.join("out").exists() && root.join("out2").exists());
        assert!(!tmp.path().join("out").exists());
        let listed: Vec<_> = std::fs::read_dir(tmp.path())
            .expect("read")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!listed.iter().any(|n| n.starts_with("out")), "{listed:?}");
    }

    #[test]
    fn a_tampered_layer_fails_verification() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (l, d) = layer_file(tmp.path(), "l", &tar_of(&[("a", T::Regular, "x")]));
        std::fs::write(&l, tar_of(&[("a", T::Regular, "y")])).expect("tamper");
        let e = apply_layer(tmp.path(), &l, &d).expect_err("mismatch");
        assert_eq!(e.step, "verify");
        assert!(e.message.contains("digest mismatch"), "{e}");
    }
}
