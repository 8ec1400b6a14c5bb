//! The plug-in contract (S0): the slave runs the plug-in's `exec` with one JSON line
//! `{"api": "...", "args": {...}}` on stdin; what it writes on stdout is the call's result;
//! exit 0 is success. A plug-in that fails, or outlives the call timeout (it is killed),
//! makes the caller fall back to the CPU kernel, recorded as such.

use hetsched_common::program::ApiCall;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Largest output kept from a plug-in (more is an error).
pub const MAX_OUTPUT: usize = 512 << 20;

/// Runs one call through the plug-in at `exec`; the output on success, else why not.
pub fn run(exec: &Path, call: &ApiCall, timeout: Duration) -> Result<Vec<u8>, String> {
    let line = serde_json::json!({ "api": call.api, "args": call.args }).to_string();
    let mut child = Command::new(exec)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start plug-in {}: {e}", exec.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A plug-in that does not read its input may close stdin early: not an error here.
        let _ = stdin.write_all(line.as_bytes());
        let _ = stdin.write_all(b"\n");
    }
    let mut stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.take(MAX_OUTPUT as u64 + 1).read_to_end(&mut out);
        }
        out
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = reader.join();
                return Err(format!(
                    "plug-in {} timed out after {timeout:?}",
                    exec.display()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(format!("cannot wait for plug-in {}: {e}", exec.display())),
        }
    };
    let out = reader
        .join()
        .map_err(|_| "plug-in output reader failed".to_string())?;
    if !status.success() {
        return Err(format!("plug-in {} failed: {status}", exec.display()));
    }
    if out.len() > MAX_OUTPUT {
        return Err(format!(
            "plug-in {} wrote more than {MAX_OUTPUT} bytes",
            exec.display()
        ));
    }
    Ok(out)
}
