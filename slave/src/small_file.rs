//! Reading the small files a task's start and end touch (cgroup counters, `/proc/PID/stat`,
//! an attempt's JSON records) in as few system calls as the kernel allows.
//!
//! `std::fs::read_to_string` first asks the file's size (a `statx`, and for some files an
//! `lseek`) to size its buffer. These files are a few hundred bytes, and cgroup and `/proc`
//! files report a size of 0 or 4096 whatever they hold, so the answer is no help: an open,
//! reads into a buffer that grows as needed, and a close are all it takes. At a thousand tasks
//! a second the agent read several such files per task (BENCHMARKS.md, issue 29).

use std::io::Read;
use std::path::Path;

/// The whole contents of the file at `path` (any size: the buffer grows).
pub fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::File::open(path)?;
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match f.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// [`read`] as text; an error when it is not UTF-8.
pub fn read_to_string(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read(path)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_std_reads_small_large_empty_and_missing() {
        let dir = tempfile::tempdir().expect("tempdir");
        for len in [0usize, 1, 1023, 1024, 1025, 70_000] {
            let p = dir.path().join(format!("f{len}"));
            let text: String = (0..len)
                .map(|i| char::from(b'a' + (i % 26) as u8))
                .collect();
            std::fs::write(&p, &text).expect("write");
            assert_eq!(read_to_string(&p).expect("read"), text, "{len} bytes");
            assert_eq!(read(&p).expect("read"), text.as_bytes());
        }
        let missing = read(&dir.path().join("missing")).expect_err("missing");
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
        let p = dir.path().join("bin");
        std::fs::write(&p, [0xff, 0xfe]).expect("write");
        assert_eq!(
            read_to_string(&p).expect_err("not text").kind(),
            std::io::ErrorKind::InvalidData
        );
        // A /proc file reports size 0 and still has contents.
        let stat = read_to_string(Path::new("/proc/self/stat")).expect("stat");
        assert!(stat.contains(')'), "{stat}");
    }
}
