//! The slave's image store: images unpacked once, by digest, under `DATA/containers/images`,
//! shared read-only by every task of the image.
//!
//! ```text
//! DATA/containers/images/<hex>/rootfs/      the unpacked layers
//! DATA/containers/images/<hex>/image.json   its config, the reference, its size; its mtime
//!                                           is when a task last took it (least recently used)
//! DATA/containers/images/tmp-<hex>-<pid>-<n>/  an unpack under way, renamed when complete
//! ```
//!
//! - Paths are read only under the directories the slave trusts (`slave --image-dir`).
//! - An unpack happens once however many tasks of the image arrive together: the tasks of
//!   one reference wait on one lock, and the second finds the image unpacked.
//! - A half-made image is never used: the unpack writes a temporary directory and renames it
//!   when complete; what a crash left (`tmp-*`) is swept when the store opens.
//! - Bounded by `--image-cache` bytes: after an unpack the least recently used images no task
//!   holds are removed until the store fits.

use super::source::{self, ImageConfig, Resolved};
use super::unpack;
use hetsched_common::image::ImageRef;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Default bound of the store, bytes (`--image-cache 20GiB`).
pub const DEFAULT_CACHE_BYTES: u64 = 20 << 30;

/// Why a task's image is not there: the image, the step (`trust`, `read`, `verify`,
/// `unpack`, `pull`) and what failed. Its text is the task's `reason_detail`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("image {image}: {step}: {message}")]
pub struct ImageError {
    /// The reference as the job gave it.
    pub image: String,
    /// The step that failed.
    pub step: &'static str,
    /// What failed.
    pub message: String,
}

/// An unpacked image a task holds (release it with [`ImageStore::release`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// Its digest.
    pub digest: String,
    /// Its root filesystem (read-only to tasks).
    pub rootfs: PathBuf,
    /// What a container of it starts with.
    pub config: ImageConfig,
}

/// `image.json` of an unpacked image.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Record {
    reference: String,
    digest: String,
    size_bytes: u64,
    config: ImageConfig,
}

/// One image as `nodes --json` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The reference it was first asked by.
    pub reference: String,
    /// Its digest.
    pub digest: String,
    /// Its unpacked size, bytes.
    pub size_bytes: u64,
}

/// The store.
#[derive(Debug)]
pub struct ImageStore {
    root: PathBuf,
    trusted: Vec<PathBuf>,
    cache_bytes: u64,
    /// Per reference, the lock its tasks take in turn (single flight).
    locks: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// Tasks holding each image (by digest): never evicted while held.
    held: Mutex<HashMap<String, u32>>,
    /// Unpacks done since start (what the tests count).
    unpacks: AtomicU64,
    seq: AtomicU64,
    /// How `docker://` images are pulled (or why they cannot be).
    registry: Result<super::registry::Registry, String>,
}

impl ImageStore {
    /// Opens the store under `root` (`DATA/containers/images`), trusting `image_dirs`,
    /// bounded by `cache_bytes`; sweeps what an interrupted unpack left.
    pub fn open(root: PathBuf, image_dirs: &[PathBuf], cache_bytes: u64) -> Self {
        if let Err(e) = std::fs::create_dir_all(&root) {
            tracing::warn!(dir = %root.display(), error = %e, "cannot make the image store");
        }
        if let Ok(rd) = std::fs::read_dir(&root) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with("tmp-") {
                    tracing::info!(dir = %e.path().display(), "removing an interrupted unpack");
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let trusted = image_dirs
            .iter()
            .filter_map(|d| match std::fs::canonicalize(d) {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::warn!(dir = %d.display(), error = %e, "--image-dir not usable");
                    None
                }
            })
            .collect();
        Self {
            root,
            trusted,
            cache_bytes,
            locks: Mutex::default(),
            held: Mutex::default(),
            unpacks: AtomicU64::new(0),
            seq: AtomicU64::new(0),
            registry: super::registry::Registry::new(None, None).map_err(|e| e.0),
        }
    }

    /// The store with these registry settings (`--registry-ca`, `--registry-auth`).
    pub fn with_registry(mut self, registry: Result<super::registry::Registry, String>) -> Self {
        self.registry = registry;
        self
    }

    /// Unpacks done since the store opened.
    pub fn unpacks(&self) -> u64 {
        self.unpacks.load(Ordering::Relaxed)
    }

    /// The image `reference` names, unpacked (once) and held for a task until
    /// [`release`](Self::release). Blocking: run it off the agent's loop.
    pub fn get(&self, reference: &str) -> Result<Image, ImageError> {
        let fail = |step: &'static str, message: String| ImageError {
            image: reference.to_string(),
            step,
            message,
        };
        let parsed = ImageRef::parse(reference).map_err(|e| fail("read", e.why))?;
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(locks.entry(reference.to_string()).or_default())
        };
        let _one = lock.lock().unwrap_or_else(|p| p.into_inner());
        let scratch = self.scratch_dir("src");
        let resolved = self.resolve(&parsed, &scratch);
        let result =
            resolved.and_then(|r| self.unpacked(reference, r).map_err(|(s, m)| fail(s, m)));
        let _ = std::fs::remove_dir_all(&scratch);
        let image = result?;
        *self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(image.digest.clone())
            .or_default() += 1;
        Ok(image)
    }

    /// A task no longer holds the image `digest`.
    pub fn release(&self, digest: &str) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(digest) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(digest);
            }
        }
    }

    /// A fresh temporary directory name under the store (`tmp-...`, swept at start).
    fn scratch_dir(&self, what: &str) -> PathBuf {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        self.root
            .join(format!("tmp-{what}-{}-{n}", std::process::id()))
    }

    /// The path `p` if it is under a trusted directory.
    fn trusted_path(&self, reference: &str, p: &str) -> Result<PathBuf, ImageError> {
        let fail = |message: String| ImageError {
            image: reference.to_string(),
            step: "trust",
            message,
        };
        if self.trusted.is_empty() {
            return Err(fail(
                "this slave trusts no image directory (slave --image-dir DIR)".into(),
            ));
        }
        let real = std::fs::canonicalize(p).map_err(|e| ImageError {
            image: reference.to_string(),
            step: "read",
            message: format!("{p}: {e}"),
        })?;
        if self.trusted.iter().any(|t| real.starts_with(t)) {
            Ok(real)
        } else {
            Err(fail(format!(
                "{p} is not under a directory this slave trusts (--image-dir)"
            )))
        }
    }

    /// Reads the image's manifest and config (archives extracted into `scratch`).
    fn resolve(&self, r: &ImageRef, scratch: &Path) -> Result<Resolved, ImageError> {
        let reference = r.to_string();
        let wrap = |e: source::SourceError| ImageError {
            image: reference.clone(),
            step: e.step,
            message: e.message,
        };
        match r {
            ImageRef::OciDir { dir, tag } => {
                let dir = self.trusted_path(&reference, dir)?;
                source::read_oci_dir(&dir, tag.as_deref()).map_err(wrap)
            }
            ImageRef::OciArchive(f) | ImageRef::DockerArchive(f) => {
                let file = self.trusted_path(&reference, f)?;
                std::fs::create_dir_all(scratch).map_err(|e| ImageError {
                    image: reference.clone(),
                    step: "read",
                    message: format!("{}: {e}", scratch.display()),
                })?;
                source::extract_archive(&file, scratch).map_err(wrap)?;
                if matches!(r, ImageRef::OciArchive(_)) {
                    source::read_oci_dir(scratch, None).map_err(wrap)
                } else {
                    source::read_docker_dir(scratch).map_err(wrap)
                }
            }
            ImageRef::Registry {
                host,
                name,
                reference: at,
            } => {
                let pull_err = |message: String| ImageError {
                    image: reference.clone(),
                    step: "pull",
                    message,
                };
                let reg = self.registry.as_ref().map_err(|e| pull_err(e.clone()))?;
                let have = |digest: &str| self.image_dir(digest).join("image.json").exists();
                reg.pull(host, name, at, scratch, &have)
                    .map_err(|e| pull_err(e.0))?;
                source::read_oci_dir(scratch, None).map_err(wrap)
            }
        }
    }

    fn image_dir(&self, digest: &str) -> PathBuf {
        self.root
            .join(digest.strip_prefix("sha256:").unwrap_or(digest))
    }

    /// The unpacked image of `r`: the store's, or unpacked now (then the store is trimmed).
    fn unpacked(&self, reference: &str, r: Resolved) -> Result<Image, (&'static str, String)> {
        let dir = self.image_dir(&r.digest);
        let record_file = dir.join("image.json");
        if let Ok(bytes) = std::fs::read(&record_file) {
            if let Ok(rec) = serde_json::from_slice::<Record>(&bytes) {
                touch(&record_file);
                return Ok(Image {
                    digest: rec.digest,
                    rootfs: dir.join("rootfs"),
                    config: rec.config,
                });
            }
        }
        let tmp = self.scratch_dir("unpack");
        let made = self.unpack_into(&tmp, reference, &r);
        if let Err(e) = made {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
        match std::fs::rename(&tmp, &dir) {
            Ok(()) => {}
            // Another reference of the same digest finished first: use that one.
            Err(_) if record_file.exists() => {
                let _ = std::fs::remove_dir_all(&tmp);
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(("unpack", format!("{}: {e}", dir.display())));
            }
        }
        self.unpacks.fetch_add(1, Ordering::Relaxed);
        tracing::info!(image = reference, digest = %r.digest, "image unpacked");
        self.trim(&r.digest);
        Ok(Image {
            digest: r.digest,
            rootfs: dir.join("rootfs"),
            config: r.config,
        })
    }

    /// Applies every layer into `tmp/rootfs` and writes `tmp/image.json`.
    fn unpack_into(
        &self,
        tmp: &Path,
        reference: &str,
        r: &Resolved,
    ) -> Result<(), (&'static str, String)> {
        let rootfs = tmp.join("rootfs");
        std::fs::create_dir_all(&rootfs)
            .map_err(|e| ("unpack", format!("{}: {e}", rootfs.display())))?;
        for l in &r.layers {
            unpack::apply_layer(&rootfs, &l.path, &l.digest).map_err(|e| (e.step, e.message))?;
        }
        let rec = Record {
            reference: reference.to_string(),
            digest: r.digest.clone(),
            size_bytes: tree_bytes(&rootfs),
            config: r.config.clone(),
        };
        let bytes = serde_json::to_vec(&rec).map_err(|e| ("unpack", e.to_string()))?;
        std::fs::write(tmp.join("image.json"), bytes).map_err(|e| ("unpack", e.to_string()))
    }

    /// The images unpacked, least recently used first, with their `image.json` mtime.
    fn records(&self) -> Vec<(std::time::SystemTime, PathBuf, Record)> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
        {
            let f = e.path().join("image.json");
            let Ok(meta) = std::fs::metadata(&f) else {
                continue;
            };
            let Some(rec) = std::fs::read(&f)
                .ok()
                .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
            else {
                continue;
            };
            v.push((
                meta.modified().unwrap_or(std::time::UNIX_EPOCH),
                e.path(),
                rec,
            ));
        }
        v.sort_by_key(|(t, _, _)| *t);
        v
    }

    /// Removes the least recently used images no task holds (never `keep`) until the store
    /// fits its bound.
    fn trim(&self, keep: &str) {
        let records = self.records();
        let mut total: u64 = records.iter().map(|(_, _, r)| r.size_bytes).sum();
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for (_, dir, rec) in records {
            if total <= self.cache_bytes {
                break;
            }
            if rec.digest == keep || held.contains_key(&rec.digest) {
                continue;
            }
            // Renamed first, so a half-removed image is never taken for a whole one.
            let gone = self.scratch_dir("evict");
            if std::fs::rename(&dir, &gone).is_ok() {
                let _ = std::fs::remove_dir_all(&gone);
                total = total.saturating_sub(rec.size_bytes);
                tracing::info!(image = %rec.reference, digest = %rec.digest, "image evicted (--image-cache)");
            }
        }
    }

    /// The images unpacked as heartbeats carry them (`nodes --json` `"images"`).
    pub fn images(&self) -> Vec<hetsched_common::protocol::ImageInfo> {
        self.list()
            .into_iter()
            .map(|l| hetsched_common::protocol::ImageInfo {
                reference: l.reference,
                digest: l.digest,
                size_mib: l.size_bytes.div_ceil(1 << 20),
            })
            .collect()
    }

    /// The images unpacked (for `nodes --json`).
    pub fn list(&self) -> Vec<Listed> {
        self.records()
            .into_iter()
            .map(|(_, _, r)| Listed {
                reference: r.reference,
                digest: r.digest,
                size_bytes: r.size_bytes,
            })
            .collect()
    }
}

/// Sets `f`'s mtime to now: the image was used.
fn touch(f: &Path) {
    if let Ok(file) = std::fs::File::options().append(true).open(f) {
        let _ = file.set_modified(std::time::SystemTime::now());
    }
}

/// Bytes of the regular files under `dir` (links not followed).
fn tree_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => todo.push(e.path()),
                Ok(t) if t.is_file() => total += e.metadata().map_or(0, |m| m.len()),
                _ => {}
            }
        }
    }
    total
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
