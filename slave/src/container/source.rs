//! Reading a local image: an OCI image layout (`oci:DIR[:TAG]`, or one in a tar file,
//! `oci-archive:`) or `docker save`'s tar (`docker-archive:`) — its digest, its config (the
//! entrypoint, cmd, env, working directory and user a container starts with) and its layers
//! with the digest each must have. Every blob named is read by its digest, which is checked
//! (the manifest and config here, the layers when they are applied, [`super::unpack`]).

use super::unpack::file_digest;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What a container starts with, from the image's config (`config` object).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    /// `Entrypoint`.
    #[serde(default)]
    pub entrypoint: Vec<String>,
    /// `Cmd`.
    #[serde(default)]
    pub cmd: Vec<String>,
    /// `Env` (`KEY=VALUE`).
    #[serde(default)]
    pub env: Vec<String>,
    /// `WorkingDir` (empty: `/`).
    #[serde(default)]
    pub working_dir: String,
    /// `User` (empty: root).
    #[serde(default)]
    pub user: String,
}

/// One layer: its file and the digest the file must have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer {
    /// The layer's file.
    pub path: PathBuf,
    /// `sha256:HEX` of the file.
    pub digest: String,
}

/// A local image, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// Its digest: the manifest's (OCI) or the config's, the image id (docker).
    pub digest: String,
    /// Its config.
    pub config: ImageConfig,
    /// Its layers, lowest first.
    pub layers: Vec<Layer>,
}

/// Why an image could not be read: the step (`read`, `verify`) and what failed.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {message}")]
pub struct SourceError {
    /// `read` or `verify`.
    pub step: &'static str,
    /// What failed.
    pub message: String,
}

fn read_err(message: String) -> SourceError {
    SourceError {
        step: "read",
        message,
    }
}

#[derive(Deserialize)]
struct Descriptor {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    digest: String,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Deserialize)]
struct Platform {
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    os: String,
}

#[derive(Deserialize)]
struct Index {
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct Manifest {
    config: Descriptor,
    layers: Vec<Descriptor>,
}

#[derive(Deserialize, Default)]
struct ConfigFile {
    #[serde(default)]
    config: Option<RawConfig>,
    #[serde(default)]
    rootfs: Option<RootFs>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct RawConfig {
    #[serde(default)]
    entrypoint: Option<Vec<String>>,
    #[serde(default)]
    cmd: Option<Vec<String>>,
    #[serde(default)]
    env: Option<Vec<String>>,
    #[serde(default)]
    working_dir: Option<String>,
    #[serde(default)]
    user: Option<String>,
}

#[derive(Deserialize)]
struct RootFs {
    #[serde(default)]
    diff_ids: Vec<String>,
}

const INDEX_TYPES: [&str; 2] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// The file of blob `digest` under an OCI layout `dir` (`sha256` only; the hex checked, so a
/// digest cannot name a path).
fn blob_path(dir: &Path, digest: &str) -> Result<PathBuf, SourceError> {
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.chars().all(|c| c.is_ascii_hexdigit()))
        .ok_or_else(|| read_err(format!("digest {digest:?} is not sha256:<64 hex digits>")))?;
    Ok(dir.join("blobs").join("sha256").join(hex))
}

/// Reads blob `digest` of `dir`, checking its digest.
fn read_blob(dir: &Path, digest: &str) -> Result<Vec<u8>, SourceError> {
    let p = blob_path(dir, digest)?;
    let got = file_digest(&p).map_err(|e| read_err(format!("blob {digest}: {e}")))?;
    if got != digest {
        return Err(SourceError {
            step: "verify",
            message: format!("blob {digest}: digest mismatch (the file's is {got})"),
        });
    }
    std::fs::read(&p).map_err(|e| read_err(format!("blob {digest}: {e}")))
}

fn json<T: serde::de::DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T, SourceError> {
    serde_json::from_slice(bytes).map_err(|e| read_err(format!("{what}: {e}")))
}

fn config_of(raw: Option<RawConfig>) -> ImageConfig {
    let c = raw.unwrap_or_default();
    ImageConfig {
        entrypoint: c.entrypoint.unwrap_or_default(),
        cmd: c.cmd.unwrap_or_default(),
        env: c.env.unwrap_or_default(),
        working_dir: c.working_dir.unwrap_or_default(),
        user: c.user.unwrap_or_default(),
    }
}

/// Reads the OCI layout `dir`, choosing the manifest tagged `tag` (else the only one).
pub fn read_oci_dir(dir: &Path, tag: Option<&str>) -> Result<Resolved, SourceError> {
    let index_file = dir.join("index.json");
    let bytes = std::fs::read(&index_file)
        .map_err(|e| read_err(format!("{}: {e}", index_file.display())))?;
    let index: Index = json("index.json", &bytes)?;
    let named = |d: &&Descriptor| {
        d.annotations
            .get("org.opencontainers.image.ref.name")
            .map(String::as_str)
            == tag
    };
    let desc = match tag {
        Some(t) => index.manifests.iter().find(named).ok_or_else(|| {
            read_err(format!(
                "no manifest tagged {t:?} in {}",
                index_file.display()
            ))
        })?,
        None if index.manifests.len() == 1 => &index.manifests[0],
        None => {
            return Err(read_err(format!(
                "{} holds {} manifests: name one with oci:DIR:TAG",
                index_file.display(),
                index.manifests.len()
            )))
        }
    };
    let mut digest = desc.digest.clone();
    let mut bytes = read_blob(dir, &digest)?;
    if INDEX_TYPES.contains(&desc.media_type.as_str()) {
        // A multi-platform image: this host's platform, else the first.
        let nested: Index = json("image index", &bytes)?;
        let arch = host_arch();
        let pick = nested
            .manifests
            .iter()
            .find(|m| {
                m.platform
                    .as_ref()
                    .is_some_and(|p| p.os == "linux" && p.architecture == arch)
            })
            .or(nested.manifests.first())
            .ok_or_else(|| read_err("an empty image index".into()))?;
        digest = pick.digest.clone();
        bytes = read_blob(dir, &digest)?;
    }
    let manifest: Manifest = json("manifest", &bytes)?;
    let config: ConfigFile = json("config", &read_blob(dir, &manifest.config.digest)?)?;
    let layers = manifest
        .layers
        .iter()
        .map(|l| {
            Ok(Layer {
                path: blob_path(dir, &l.digest)?,
                digest: l.digest.clone(),
            })
        })
        .collect::<Result<_, SourceError>>()?;
    Ok(Resolved {
        digest,
        config: config_of(config.config),
        layers,
    })
}

/// The OCI name of this host's architecture.
pub(crate) fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerManifest {
    config: String,
    layers: Vec<String>,
}

/// Reads `docker save`'s layout, extracted in `dir`: `manifest.json`'s config (whose file
/// name or blob path is its digest) and layers, each checked against the config's
/// `rootfs.diff_ids` (docker keeps layers uncompressed).
pub fn read_docker_dir(dir: &Path) -> Result<Resolved, SourceError> {
    let bytes = std::fs::read(dir.join("manifest.json"))
        .map_err(|e| read_err(format!("manifest.json: {e}")))?;
    let list: Vec<DockerManifest> = json("manifest.json", &bytes)?;
    let m = match &list[..] {
        [one] => one,
        _ => {
            return Err(read_err(format!(
                "manifest.json lists {} images; one is supported",
                list.len()
            )))
        }
    };
    let inside = |rel: &str| -> Result<PathBuf, SourceError> {
        let p = Path::new(rel);
        let ok = p
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        ok.then(|| dir.join(p))
            .ok_or_else(|| read_err(format!("manifest.json names {rel:?} outside the archive")))
    };
    let config_path = inside(&m.config)?;
    let stem = config_path
        .file_name()
        .map(|n| n.to_string_lossy().trim_end_matches(".json").to_string())
        .unwrap_or_default();
    let digest = format!("sha256:{stem}");
    let got = file_digest(&config_path).map_err(|e| read_err(format!("{}: {e}", m.config)))?;
    if got != digest {
        return Err(SourceError {
            step: "verify",
            message: format!("config {}: digest mismatch (the file's is {got})", m.config),
        });
    }
    let bytes = std::fs::read(&config_path).map_err(|e| read_err(e.to_string()))?;
    let config: ConfigFile = json("config", &bytes)?;
    let diff_ids = config.rootfs.map(|r| r.diff_ids).unwrap_or_default();
    if diff_ids.len() != m.layers.len() {
        return Err(read_err(format!(
            "{} layers but {} diff_ids in the config",
            m.layers.len(),
            diff_ids.len()
        )));
    }
    let layers = m
        .layers
        .iter()
        .zip(diff_ids)
        .map(|(l, d)| {
            Ok(Layer {
                path: inside(l)?,
                digest: d,
            })
        })
        .collect::<Result<_, SourceError>>()?;
    Ok(Resolved {
        digest,
        config: config_of(config.config),
        layers,
    })
}

/// Extracts an image archive (plain files and directories only; no path out of `dest`).
pub fn extract_archive(file: &Path, dest: &Path) -> Result<(), SourceError> {
    let f = std::fs::File::open(file).map_err(|e| read_err(format!("{}: {e}", file.display())))?;
    let mut a = tar::Archive::new(std::io::BufReader::new(f));
    let entries = a
        .entries()
        .map_err(|e| read_err(format!("{}: {e}", file.display())))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| read_err(format!("{}: {e}", file.display())))?;
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_dir()) {
            continue;
        }
        // `unpack_in` refuses paths that leave `dest`.
        let inside = entry
            .unpack_in(dest)
            .map_err(|e| read_err(format!("{}: {e}", file.display())))?;
        if !inside {
            return Err(read_err(format!(
                "{}: an entry's path leaves the archive",
                file.display()
            )));
        }
    }
    Ok(())
}
