//! The store on images made on the spot ([`super::super::fixture`]).

use super::*;
use crate::container::fixture::{self, Config, Entry};

fn files(marker: &str) -> Vec<Entry> {
    vec![
        Entry::Dir("etc".into()),
        Entry::File("etc/image-marker".into(), 0o644, marker.as_bytes().to_vec()),
        Entry::Link("etc/alias".into(), "image-marker".into()),
    ]
}

fn config() -> Config {
    Config {
        cmd: vec!["/bin/sh".into()],
        user: "1000".into(),
        ..Default::default()
    }
}

struct Setup {
    _tmp: tempfile::TempDir,
    images: PathBuf,
    store_root: PathBuf,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().expect("tempdir");
    let images = tmp.path().join("images");
    std::fs::create_dir_all(&images).expect("mkdir");
    fixture::write_oci_layout(&images.join("a"), "v1", &files("a"), &config()).expect("oci");
    fixture::write_docker_archive(&images.join("b.tar"), &files("b"), &config()).expect("docker");
    Setup {
        store_root: tmp.path().join("store"),
        images,
        _tmp: tmp,
    }
}

fn store(s: &Setup, cache: u64) -> ImageStore {
    ImageStore::open(s.store_root.clone(), std::slice::from_ref(&s.images), cache)
}

#[test]
fn oci_and_docker_images_unpack_once_with_their_config() {
    let s = setup();
    let st = store(&s, DEFAULT_CACHE_BYTES);
    let oci = format!("oci:{}:v1", s.images.join("a").display());
    let a = st.get(&oci).expect("oci image");
    assert_eq!(
        std::fs::read_to_string(a.rootfs.join("etc/alias")).expect("read"),
        "a"
    );
    assert_eq!(a.config.user, "1000");
    assert_eq!(a.config.cmd, ["/bin/sh"]);
    let again = st.get(&oci).expect("again");
    assert_eq!(again, a);
    let docker = format!("docker-archive:{}", s.images.join("b.tar").display());
    let b = st.get(&docker).expect("docker image");
    assert_eq!(
        std::fs::read_to_string(b.rootfs.join("etc/image-marker")).expect("read"),
        "b"
    );
    assert_eq!(st.unpacks(), 2, "each image once");
    let listed = st.list();
    assert_eq!(listed.len(), 2);
    assert!(listed
        .iter()
        .any(|l| l.reference == oci && l.digest == a.digest));
}

#[test]
fn concurrent_tasks_of_one_image_unpack_it_once() {
    let s = setup();
    let st = Arc::new(store(&s, DEFAULT_CACHE_BYTES));
    let oci = format!("oci:{}:v1", s.images.join("a").display());
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (st, r) = (Arc::clone(&st), oci.clone());
            std::thread::spawn(move || st.get(&r).expect("image").digest)
        })
        .collect();
    let digests: std::collections::BTreeSet<String> = threads
        .into_iter()
        .map(|t| t.join().expect("thread"))
        .collect();
    assert_eq!(digests.len(), 1);
    assert_eq!(st.unpacks(), 1);
}

#[test]
fn failures_name_the_image_and_the_step() {
    let s = setup();
    let st = store(&s, DEFAULT_CACHE_BYTES);
    let outside = st.get("oci:/etc").expect_err("not trusted");
    assert_eq!(outside.step, "trust", "{outside}");
    assert!(
        outside.to_string().starts_with("image oci:/etc: trust:"),
        "{outside}"
    );
    let missing = st
        .get(&format!("oci:{}:v1", s.images.join("none").display()))
        .expect_err("missing");
    assert_eq!(missing.step, "read", "{missing}");
    let untagged = st
        .get(&format!("oci:{}:v2", s.images.join("a").display()))
        .expect_err("no such tag");
    assert!(
        untagged.message.contains("no manifest tagged"),
        "{untagged}"
    );
    // A layer changed after the manifest was written.
    let layer =
        fixture::write_oci_layout(&s.images.join("c"), "v1", &files("c"), &config()).expect("oci");
    let blob = s
        .images
        .join("c/blobs/sha256")
        .join(layer.trim_start_matches("sha256:"));
    let mut bytes = std::fs::read(&blob).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&blob, bytes).expect("tamper");
    let e = st
        .get(&format!("oci:{}:v1", s.images.join("c").display()))
        .expect_err("tampered");
    assert_eq!(e.step, "verify", "{e}");
    assert!(e.message.contains("digest mismatch"), "{e}");
    let nobody = ImageStore::open(s.store_root.join("x"), &[], DEFAULT_CACHE_BYTES);
    let e = nobody.get("oci:/srv/x").expect_err("no trusted dirs");
    assert!(e.message.contains("--image-dir"), "{e}");
    // Nothing half-made is left behind.
    let left: Vec<_> = std::fs::read_dir(&s.store_root)
        .expect("read")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("tmp-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn the_least_recently_used_unheld_image_goes_and_leftovers_are_swept() {
    let s = setup();
    std::fs::create_dir_all(s.store_root.join("tmp-unpack-1-0/rootfs")).expect("leftover");
    // A bound smaller than two images: the second unpack evicts the first once released.
    let st = store(&s, 1);
    assert!(
        !s.store_root.join("tmp-unpack-1-0").exists(),
        "swept at open"
    );
    let a = st
        .get(&format!("oci:{}:v1", s.images.join("a").display()))
        .expect("a");
    let b_ref = format!("docker-archive:{}", s.images.join("b.tar").display());
    let b = st.get(&b_ref).expect("b");
    assert!(a.rootfs.exists(), "a is held: kept");
    st.release(&a.digest);
    st.release(&b.digest);
    let _b = st.get(&b_ref).expect("b again");
    let c = fixture::write_oci_layout(&s.images.join("c"), "v1", &files("c"), &config());
    c.expect("oci");
    let _c = st
        .get(&format!("oci:{}:v1", s.images.join("c").display()))
        .expect("c");
    assert!(
        !a.rootfs.exists(),
        "a, unheld and least recently used, evicted"
    );
    assert!(b.rootfs.exists(), "b is held");
}
