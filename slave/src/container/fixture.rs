//! Small images made on the spot, for tests and benchmarks: an OCI image layout directory
//! (one gzip layer) and `docker save`'s tar of the same files, from a list of entries — what
//! the container tests build from a static busybox (Debian's `busybox-static`).

use sha2::{Digest, Sha256};
use std::path::Path;

/// One file of a test image.
#[derive(Clone, Debug)]
pub enum Entry {
    /// A directory.
    Dir(String),
    /// A file with its mode and contents.
    File(String, u32, Vec<u8>),
    /// A symbolic link and its target.
    Link(String, String),
}

/// What the image's config says.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `Cmd`.
    pub cmd: Vec<String>,
    /// `Env`.
    pub env: Vec<String>,
    /// `User`.
    pub user: String,
    /// `WorkingDir`.
    pub working_dir: String,
}

fn sha(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// The layer's tar (uncompressed).
pub fn layer_tar(entries: &[Entry]) -> std::io::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        match e {
            Entry::Dir(p) => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_size(0);
                b.append_data(&mut h, p, std::io::empty())?;
            }
            Entry::File(p, mode, data) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(*mode);
                h.set_size(data.len() as u64);
                b.append_data(&mut h, p, &data[..])?;
            }
            Entry::Link(p, target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                b.append_link(&mut h, p, target)?;
            }
        }
    }
    b.into_inner()
}

fn config_json(c: &Config, diff_id: &str) -> Vec<u8> {
    serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": c.entrypoint, "Cmd": c.cmd, "Env": c.env,
            "User": c.user, "WorkingDir": c.working_dir
        },
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{diff_id}")]}
    })
    .to_string()
    .into_bytes()
}

/// Writes an OCI image layout of `entries` under `dir` (tagged `tag`); returns the digest
/// of its one layer blob (`sha256:HEX`, for tests that tamper with it).
pub fn write_oci_layout(
    dir: &Path,
    tag: &str,
    entries: &[Entry],
    c: &Config,
) -> std::io::Result<String> {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs)?;
    let tar = layer_tar(entries)?;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &tar)?;
    let layer = gz.finish()?;
    let layer_hex = sha(&layer);
    std::fs::write(blobs.join(&layer_hex), &layer)?;
    let config = config_json(c, &sha(&tar));
    let config_hex = sha(&config);
    std::fs::write(blobs.join(&config_hex), &config)?;
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": format!("sha256:{config_hex}"), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": format!("sha256:{layer_hex}"), "size": layer.len()}]
    })
    .to_string()
    .into_bytes();
    let manifest_hex = sha(&manifest);
    std::fs::write(blobs.join(&manifest_hex), &manifest)?;
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": format!("sha256:{manifest_hex}"), "size": manifest.len(),
                       "annotations": {"org.opencontainers.image.ref.name": tag}}]
    });
    std::fs::write(dir.join("index.json"), index.to_string())?;
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#)?;
    Ok(format!("sha256:{layer_hex}"))
}

/// Writes `docker save`'s tar of `entries` to `file`.
pub fn write_docker_archive(file: &Path, entries: &[Entry], c: &Config) -> std::io::Result<()> {
    let tar = layer_tar(entries)?;
    let diff = sha(&tar);
    let config = config_json(c, &diff);
    let config_name = format!("{}.json", sha(&config));
    let manifest = serde_json::json!([{
        "Config": config_name, "RepoTags": ["test:latest"], "Layers": [format!("{diff}/layer.tar")]
    }])
    .to_string();
    let mut b = tar::Builder::new(std::fs::File::create(file)?);
    let mut add = |name: &str, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, name, data)
    };
    add(&config_name, &config)?;
    add(&format!("{diff}/layer.tar"), &tar)?;
    add("manifest.json", manifest.as_bytes())?;
    b.into_inner()?.sync_all()
}

/// The entries of a busybox image: `/bin/busybox` (the static binary at `busybox`), `/bin/sh`
/// and the applets named in `applets` linked to it, `/etc/passwd` and `/etc/group` with user
/// `app` (uid 1000), a marker file `/etc/image-marker` holding `marker`, and `/tmp`.
pub fn busybox_entries(
    busybox: &Path,
    applets: &[&str],
    marker: &str,
) -> std::io::Result<Vec<Entry>> {
    let bin = std::fs::read(busybox)?;
    let mut e = vec![
        Entry::Dir("bin".into()),
        Entry::Dir("etc".into()),
        Entry::Dir("tmp".into()),
        Entry::Dir("proc".into()),
        Entry::Dir("dev".into()),
        Entry::Dir("sys".into()),
        Entry::File("bin/busybox".into(), 0o755, bin),
        Entry::File(
            "etc/passwd".into(),
            0o644,
            b"root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/tmp:/bin/sh\n".to_vec(),
        ),
        Entry::File(
            "etc/group".into(),
            0o644,
            b"root:x:0:\napp:x:1000:\n".to_vec(),
        ),
        Entry::File("etc/image-marker".into(), 0o644, marker.as_bytes().to_vec()),
    ];
    for a in std::iter::once(&"sh").chain(applets) {
        e.push(Entry::Link(format!("bin/{a}"), "busybox".into()));
    }
    Ok(e)
}
