//! Container images as users name them (`submit --image REF`, `image = "..."` in spec files,
//! flow steps and the HTTP body; docs/guide/containers.md):
//!
//! | REF | what |
//! |---|---|
//! | `oci:DIR[:TAG]` | an OCI image layout directory (`skopeo copy`, `podman save --format oci-dir`) |
//! | `oci-archive:FILE.tar` | the same layout in a tar file |
//! | `docker-archive:FILE.tar` | what `docker save` makes |
//! | `docker://HOST/NAME:TAG` | pulled from an OCI registry over HTTPS |
//!
//! Paths are absolute: they are read on the slave, under the directories it trusts
//! (`slave --image-dir`), never on the submitting machine. This module only parses and checks
//! the text; the slave's image store reads what it names.

use std::fmt;

/// Longest image reference accepted, bytes.
pub const MAX_IMAGE_REF_LEN: usize = 4096;

/// A parsed image reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageRef {
    /// `oci:DIR[:TAG]`: an OCI image layout directory; `tag` picks the manifest annotated
    /// `org.opencontainers.image.ref.name` = TAG (`None`: the layout's only manifest).
    OciDir {
        /// The layout directory (absolute).
        dir: String,
        /// The tag, if given.
        tag: Option<String>,
    },
    /// `oci-archive:FILE`: an OCI layout in a tar file (absolute path).
    OciArchive(String),
    /// `docker-archive:FILE`: `docker save`'s tar file (absolute path).
    DockerArchive(String),
    /// `docker://HOST/NAME[:TAG]`: a registry's image.
    Registry {
        /// Registry host (with its port, if any).
        host: String,
        /// Repository name (`library/busybox`).
        name: String,
        /// Tag (`latest` when none is given) or digest (`sha256:...`).
        reference: String,
    },
}

/// Why a reference was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("image {reference:?}: {why}")]
pub struct ImageRefError {
    /// The reference as written (cut to a readable length).
    pub reference: String,
    /// Why.
    pub why: String,
}

fn check_path(kind: &str, p: &str) -> Result<(), String> {
    if p.is_empty() {
        return Err(format!("{kind}: no path"));
    }
    if !p.starts_with('/') {
        return Err(format!(
            "{kind}: the path must be absolute (it is read on the slave, under its --image-dir)"
        ));
    }
    if p.split('/').any(|c| c == "..") {
        return Err(format!("{kind}: the path must not contain `..`"));
    }
    Ok(())
}

fn check_tag(t: &str) -> Result<(), String> {
    let ok = !t.is_empty()
        && t.len() <= 128
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "tag {t:?} must be 1 to 128 of letters, digits, `_`, `.` and `-`"
        ))
    }
}

fn parse_registry(rest: &str) -> Result<ImageRef, String> {
    let (host, path) = rest
        .split_once('/')
        .ok_or("docker://: give HOST/NAME[:TAG] (the registry host is required)")?;
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    if !host_ok {
        return Err(format!(
            "docker://: registry host {host:?} is not a host name"
        ));
    }
    let (name, reference) = match path.split_once('@') {
        Some((n, d)) => {
            let hex = d.strip_prefix("sha256:").unwrap_or("");
            if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(format!("digest {d:?} is not sha256:<64 hex digits>"));
            }
            (n, d.to_string())
        }
        None => match path.rsplit_once(':') {
            Some((n, t)) if !t.contains('/') => {
                check_tag(t)?;
                (n, t.to_string())
            }
            _ => (path, "latest".to_string()),
        },
    };
    let name_ok = !name.is_empty()
        && name.split('/').all(|c| {
            !c.is_empty()
                && c.chars().all(|ch| {
                    ch.is_ascii_lowercase() || ch.is_ascii_digit() || matches!(ch, '.' | '_' | '-')
                })
        });
    if !name_ok {
        return Err(format!(
            "repository name {name:?} must be lowercase path components"
        ));
    }
    Ok(ImageRef::Registry {
        host: host.to_string(),
        name: name.to_string(),
        reference,
    })
}

impl ImageRef {
    /// Parses and checks `s`.
    pub fn parse(s: &str) -> Result<Self, ImageRefError> {
        let err = |why: String| ImageRefError {
            reference: s.chars().take(200).collect(),
            why,
        };
        if s.len() > MAX_IMAGE_REF_LEN {
            return Err(err(format!("longer than {MAX_IMAGE_REF_LEN} bytes")));
        }
        if s.chars().any(char::is_control) {
            return Err(err("contains a control character".into()));
        }
        let parsed = if let Some(rest) = s.strip_prefix("docker://") {
            parse_registry(rest)
        } else if let Some(p) = s.strip_prefix("oci-archive:") {
            check_path("oci-archive", p).map(|()| ImageRef::OciArchive(p.into()))
        } else if let Some(p) = s.strip_prefix("docker-archive:") {
            check_path("docker-archive", p).map(|()| ImageRef::DockerArchive(p.into()))
        } else if let Some(rest) = s.strip_prefix("oci:") {
            // A tag is what follows the last `:` after the last `/`.
            let (dir, tag) = match rest.rsplit_once(':') {
                Some((d, t)) if !t.contains('/') => (d, Some(t)),
                _ => (rest, None),
            };
            check_path("oci", dir)
                .and_then(|()| tag.map_or(Ok(()), check_tag))
                .map(|()| ImageRef::OciDir {
                    dir: match dir.trim_end_matches('/') {
                        "" => "/".to_string(),
                        d => d.to_string(),
                    },
                    tag: tag.map(str::to_string),
                })
        } else {
            Err(
                "unknown kind: give oci:DIR[:TAG], oci-archive:FILE, docker-archive:FILE \
                 or docker://HOST/NAME[:TAG]"
                    .into(),
            )
        };
        parsed.map_err(err)
    }

    /// The local file or directory it names (`None` for a registry's image).
    pub fn path(&self) -> Option<&str> {
        match self {
            ImageRef::OciDir { dir, .. } => Some(dir),
            ImageRef::OciArchive(p) | ImageRef::DockerArchive(p) => Some(p),
            ImageRef::Registry { .. } => None,
        }
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageRef::OciDir { dir, tag: None } => write!(f, "oci:{dir}"),
            ImageRef::OciDir { dir, tag: Some(t) } => write!(f, "oci:{dir}:{t}"),
            ImageRef::OciArchive(p) => write!(f, "oci-archive:{p}"),
            ImageRef::DockerArchive(p) => write!(f, "docker-archive:{p}"),
            ImageRef::Registry {
                host,
                name,
                reference,
            } => {
                let sep = if reference.starts_with("sha256:") {
                    '@'
                } else {
                    ':'
                };
                write!(f, "docker://{host}/{name}{sep}{reference}")
            }
        }
    }
}

impl std::str::FromStr for ImageRef {
    type Err = ImageRefError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// A size as `slave --image-cache` takes it: a whole number with a binary unit (`20GiB`,
/// `512MiB`, `1TiB`, `64KiB`) or plain bytes.
pub fn parse_size_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?}: give a whole number with a unit, e.g. 20GiB"))?;
    let shift = match unit.trim() {
        "" | "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        "TiB" => 40,
        u => return Err(format!("{s:?}: unknown unit {u:?} (B, KiB, MiB, GiB, TiB)")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(parse_size_bytes("20GiB"), Ok(20 << 30));
        assert_eq!(parse_size_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size_bytes("4096"), Ok(4096));
        assert!(parse_size_bytes("20GB")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_size_bytes("lots").is_err());
        assert!(parse_size_bytes("99999999TiB")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn every_kind_parses_and_prints_back() {
        for (s, back) in [
            ("oci:/srv/images/bb", "oci:/srv/images/bb"),
            ("oci:/srv/images/bb:v1", "oci:/srv/images/bb:v1"),
            ("oci:/srv/images/bb/", "oci:/srv/images/bb"),
            ("oci-archive:/srv/bb.tar", "oci-archive:/srv/bb.tar"),
            ("docker-archive:/srv/bb.tar", "docker-archive:/srv/bb.tar"),
            (
                "docker://localhost:5000/lib/bb",
                "docker://localhost:5000/lib/bb:latest",
            ),
            (
                "docker://reg.example/bb:1.36",
                "docker://reg.example/bb:1.36",
            ),
        ] {
            let r = ImageRef::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(r.to_string(), back, "{s}");
            assert_eq!(ImageRef::parse(back), Ok(r), "{back} parses to the same");
        }
        let d = format!("docker://r.io/x@sha256:{}", "a".repeat(64));
        assert_eq!(ImageRef::parse(&d).expect("digest").to_string(), d);
        assert_eq!(
            ImageRef::parse("oci:/a/b:t").expect("tag"),
            ImageRef::OciDir {
                dir: "/a/b".into(),
                tag: Some("t".into())
            }
        );
    }

    #[test]
    fn bad_references_say_why() {
        for (s, why) in [
            ("busybox", "unknown kind"),
            ("oci:images/bb", "absolute"),
            ("oci:/srv/../etc", "`..`"),
            ("oci-archive:", "no path"),
            ("docker://busybox", "registry host is required"),
            ("docker://r.io/Upper:1", "lowercase"),
            ("docker://r.io/x:bad tag", "tag"),
            ("docker://r.io/x@sha256:12", "digest"),
            ("oci:/a\n", "control character"),
        ] {
            let e = ImageRef::parse(s).expect_err(s);
            assert!(e.to_string().contains(why), "{s}: {e}");
        }
        assert!(ImageRef::parse(&format!("oci:/{}", "a".repeat(5000))).is_err());
    }
}
