//! S0 — the slave's processing engines (docs/DESIGN.md §S0): declaration
//! (`slave --engines FILE`), the implementations of each API per engine kind, and local
//! availability.
//!
//! - [`kernels`] — the built-in CPU kernels (real computation, deterministic data);
//! - [`plugin`] — an external executable implementing one API on one engine kind;
//! - [`profile`] — the profiler that builds the selection table (S0.5);
//! - this module — the engines file, the [`EngineSet`] (what can run where) and its pool
//!   of free units.
//!
//! The CPU engine is always there (count = the node's CPUs). An **emulated** engine computes
//! with the CPU kernel and holds the engine for the modelled time (CPU time / speed);
//! everything it produces is labelled emulated.

pub mod check;
pub mod held;
pub mod kernels;
pub mod plugin;
pub mod profile;

use hetsched_common::program::{toml_error, Api, EngineDecl};
use hetsched_common::EngineKind;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// Errors of the engines file.
#[derive(Debug, thiserror::Error)]
#[error("engines file {0}")]
pub struct EngineConfigError(pub String);

/// One `[[engine]]` of the engines file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineEntry {
    /// Kind (`cpu` is implicit and may not be declared).
    pub kind: EngineKind,
    /// Units (not for `gpu`: its devices come from `--gpus` or NVML).
    #[serde(default)]
    pub count: Option<u32>,
    /// Required when the devices are emulated.
    #[serde(default)]
    pub emulated: bool,
    /// Emulated only: how much faster than the CPU kernel, per API.
    #[serde(default)]
    pub speed: BTreeMap<Api, f64>,
}

/// One `[[plugin]]`: a real implementation of one API on one engine kind.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginEntry {
    /// API.
    pub api: Api,
    /// Engine kind (declared in the same file).
    pub engine: EngineKind,
    /// Executable.
    pub exec: PathBuf,
    /// `once` (a process per call, the default) or `server` (one process serving calls).
    #[serde(default)]
    pub mode: plugin::PluginMode,
}

/// The engines file as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnginesFile {
    /// `[[engine]]` tables.
    #[serde(default)]
    pub engine: Vec<EngineEntry>,
    /// `[[plugin]]` tables.
    #[serde(default)]
    pub plugin: Vec<PluginEntry>,
}

impl EnginesFile {
    /// Parses the file's text; errors name the file, line and column.
    pub fn parse(text: &str, origin: &str) -> Result<Self, EngineConfigError> {
        toml::from_str(text).map_err(|e| EngineConfigError(toml_error(origin, text, &e)))
    }

    /// Reads and parses a file.
    pub fn read(path: &Path) -> Result<Self, EngineConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| EngineConfigError(format!("{}: cannot read: {e}", path.display())))?;
        Self::parse(&text, &path.display().to_string())
    }
}

/// How one API runs on one engine kind.
#[derive(Clone, Debug, PartialEq)]
pub enum Implementation {
    /// The built-in CPU kernel.
    Cpu,
    /// The CPU kernel with a modelled time of CPU time / `speed`.
    Emulated {
        /// Speed-up over the CPU kernel.
        speed: f64,
    },
    /// An external executable.
    Plugin {
        /// Its path.
        exec: PathBuf,
        /// Per call or long-lived.
        mode: plugin::PluginMode,
    },
}

/// One engine kind on this node.
#[derive(Clone, Debug, PartialEq)]
pub struct Engine {
    /// Kind.
    pub kind: EngineKind,
    /// Units.
    pub count: u32,
    /// Emulated.
    pub emulated: bool,
    /// Implementations by API (the CPU has every API).
    pub apis: BTreeMap<Api, Implementation>,
}

/// This node's engines: what runs where, and how many units of each are free.
#[derive(Debug)]
pub struct EngineSet {
    engines: Vec<Engine>,
    free: Mutex<BTreeMap<EngineKind, u32>>,
    freed: Condvar,
    /// Calls blocked in [`EngineSet::acquire`], by kind (reported to the leader, S0.6).
    waiting: Mutex<BTreeMap<EngineKind, u32>>,
    /// The running server plug-ins.
    servers: plugin::Servers,
}

impl EngineSet {
    /// Builds the set from the engines file. `cpus` is the node's CPU count; `gpus` its GPU
    /// devices (from `--gpus` or NVML) and whether they are emulated.
    pub fn new(
        file: &EnginesFile,
        cpus: u32,
        gpus: u32,
        gpus_emulated: bool,
    ) -> Result<Self, EngineConfigError> {
        let bad = |why: String| Err(EngineConfigError(why));
        let mut engines = vec![Engine {
            kind: EngineKind::Cpu,
            count: cpus.max(1),
            emulated: false,
            apis: Api::ALL
                .into_iter()
                .map(|a| (a, Implementation::Cpu))
                .collect(),
        }];
        for e in &file.engine {
            let count = match e.kind {
                EngineKind::Cpu => {
                    return bad(
                        "kind \"cpu\" is always there (count = the node's CPUs); do not declare it"
                            .into(),
                    )
                }
                EngineKind::Gpu => {
                    if e.count.is_some() {
                        return bad(
                            "kind \"gpu\" takes no count: its devices come from --gpus or NVML"
                                .into(),
                        );
                    }
                    if gpus == 0 {
                        return bad(
                            "kind \"gpu\" is declared but this node has no GPUs (--gpus N)".into(),
                        );
                    }
                    if gpus_emulated && !e.emulated {
                        return bad("this node's GPUs are emulated: declare the gpu engine with emulated = true".into());
                    }
                    gpus
                }
                k => match e.count {
                    Some(n) if n >= 1 => n,
                    _ => return bad(format!("kind \"{k}\" needs count = N (N ≥ 1)")),
                },
            };
            if engines.iter().any(|x| x.kind == e.kind) {
                return bad(format!("kind \"{}\" is declared twice", e.kind));
            }
            if !e.emulated && !e.speed.is_empty() {
                return bad(format!(
                    "kind \"{}\": speed applies to emulated engines only",
                    e.kind
                ));
            }
            let mut apis = BTreeMap::new();
            for (api, s) in &e.speed {
                if !(s.is_finite() && *s > 0.0) {
                    return bad(format!(
                        "kind \"{}\": speed of {api} must be a positive number",
                        e.kind
                    ));
                }
                apis.insert(*api, Implementation::Emulated { speed: *s });
            }
            engines.push(Engine {
                kind: e.kind,
                count,
                emulated: e.emulated,
                apis,
            });
        }
        for p in &file.plugin {
            let Some(engine) = engines.iter_mut().find(|x| x.kind == p.engine) else {
                return bad(format!(
                    "plugin for {} on \"{}\": that engine is not declared",
                    p.api, p.engine
                ));
            };
            if engine.kind == EngineKind::Cpu {
                return bad(
                    "plugins implement non-CPU engines; the CPU runs the built-in kernels".into(),
                );
            }
            if p.exec.as_os_str().is_empty() {
                return bad(format!(
                    "plugin for {} on \"{}\": empty exec",
                    p.api, p.engine
                ));
            }
            // A real implementation wins over an emulated speed for the same API.
            engine.apis.insert(
                p.api,
                Implementation::Plugin {
                    exec: p.exec.clone(),
                    mode: p.mode,
                },
            );
        }
        for e in &engines {
            if e.apis.is_empty() {
                tracing::warn!(engine = %e.kind, "engine has neither plug-ins nor speeds: no API can run on it");
            }
        }
        let free = engines.iter().map(|e| (e.kind, e.count)).collect();
        Ok(Self {
            engines,
            free: Mutex::new(free),
            freed: Condvar::new(),
            waiting: Mutex::default(),
            servers: plugin::Servers::new(plugin::DEFAULT_PLUGIN_IDLE),
        })
    }

    /// A CPU-only set.
    pub fn cpu_only(cpus: u32) -> Self {
        let cpu = Engine {
            kind: EngineKind::Cpu,
            count: cpus.max(1),
            emulated: false,
            apis: Api::ALL
                .into_iter()
                .map(|a| (a, Implementation::Cpu))
                .collect(),
        };
        Self {
            free: Mutex::new(BTreeMap::from([(EngineKind::Cpu, cpu.count)])),
            engines: vec![cpu],
            freed: Condvar::new(),
            waiting: Mutex::default(),
            servers: plugin::Servers::new(plugin::DEFAULT_PLUGIN_IDLE),
        }
    }

    /// Server plug-ins stop after `idle` without calls (`slave --plugin-idle`).
    pub fn with_plugin_idle(mut self, idle: Duration) -> Self {
        self.servers = plugin::Servers::new(idle);
        self
    }

    /// The server plug-ins.
    pub fn servers(&self) -> &plugin::Servers {
        &self.servers
    }

    /// Runs `call` on the plug-in `exec` in `mode`: its output, else why not.
    pub fn run_plugin(
        &self,
        exec: &Path,
        mode: plugin::PluginMode,
        call: &hetsched_common::program::ApiCall,
        timeout: Duration,
    ) -> Result<Vec<u8>, String> {
        match mode {
            plugin::PluginMode::Once => plugin::run(exec, call, timeout),
            plugin::PluginMode::Server => self.servers.call(exec, call, timeout),
        }
    }

    /// The engines, CPU first.
    pub fn engines(&self) -> &[Engine] {
        &self.engines
    }

    /// The engine of `kind`, if this node has it.
    pub fn get(&self, kind: EngineKind) -> Option<&Engine> {
        self.engines.iter().find(|e| e.kind == kind)
    }

    /// How `api` runs on `kind`, if it can.
    pub fn implementation(&self, kind: EngineKind, api: Api) -> Option<&Implementation> {
        self.get(kind).and_then(|e| e.apis.get(&api))
    }

    /// The engines as declared to the masters.
    pub fn decls(&self) -> Vec<EngineDecl> {
        self.engines
            .iter()
            .map(|e| EngineDecl {
                kind: e.kind,
                count: e.count,
                emulated: e.emulated,
            })
            .collect()
    }

    /// Counts of the kinds other than CPU and GPU (the node's `engines` resource).
    pub fn other_counts(&self) -> BTreeMap<EngineKind, u32> {
        self.engines
            .iter()
            .filter(|e| !matches!(e.kind, EngineKind::Cpu | EngineKind::Gpu))
            .map(|e| (e.kind, e.count))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<EngineKind, u32>> {
        match self.free.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Takes one unit of `kind` if one is free now.
    pub fn try_acquire(&self, kind: EngineKind) -> Option<EngineUnit<'_>> {
        let mut free = self.lock();
        match free.get_mut(&kind) {
            Some(n) if *n > 0 => {
                *n -= 1;
                Some(EngineUnit { set: self, kind })
            }
            _ => None,
        }
    }

    /// Takes one unit of `kind`, waiting until one is free (`None` if the node has none).
    pub fn acquire(&self, kind: EngineKind) -> Option<EngineUnit<'_>> {
        if let Some(u) = self.try_acquire(kind) {
            return Some(u);
        }
        self.count_waiting(kind, true);
        let unit = self.acquire_waiting(kind);
        self.count_waiting(kind, false);
        unit
    }

    fn count_waiting(&self, kind: EngineKind, add: bool) {
        let mut w = match self.waiting.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let n = w.entry(kind).or_insert(0);
        *n = if add { *n + 1 } else { n.saturating_sub(1) };
    }

    fn acquire_waiting(&self, kind: EngineKind) -> Option<EngineUnit<'_>> {
        let mut free = self.lock();
        loop {
            match free.get_mut(&kind) {
                None => return None,
                Some(n) if *n > 0 => {
                    *n -= 1;
                    return Some(EngineUnit { set: self, kind });
                }
                Some(_) => {
                    free = match self.freed.wait(free) {
                        Ok(g) => g,
                        Err(p) => p.into_inner(),
                    }
                }
            }
        }
    }

    /// Free units of `kind` now.
    pub fn free(&self, kind: EngineKind) -> u32 {
        self.lock().get(&kind).copied().unwrap_or(0)
    }

    /// Every kind's units, free units and waiting calls now (heartbeats carry it, S0.6).
    pub fn loads(&self) -> Vec<hetsched_common::protocol::EngineLoad> {
        let free = self.lock().clone();
        let waiting = match self.waiting.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        };
        self.engines
            .iter()
            .map(|e| hetsched_common::protocol::EngineLoad {
                kind: e.kind,
                count: e.count,
                free: free.get(&e.kind).copied().unwrap_or(0),
                waiting: waiting.get(&e.kind).copied().unwrap_or(0),
            })
            .collect()
    }
}

/// One held unit of an engine; given back when dropped.
#[derive(Debug)]
pub struct EngineUnit<'a> {
    set: &'a EngineSet,
    /// Kind.
    pub kind: EngineKind,
}

impl Drop for EngineUnit<'_> {
    fn drop(&mut self) {
        self.set.give_back(self.kind);
    }
}

impl EngineSet {
    /// One unit of `kind` back in the pool.
    fn give_back(&self, kind: EngineKind) {
        let mut free = self.lock();
        if let Some(n) = free.get_mut(&kind) {
            *n += 1;
        }
        drop(free);
        self.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
[[engine]]
kind = "gpu"
emulated = true
speed = { gemm = 8.0, sort = 2.0 }
[[engine]]
kind = "npu"
count = 2
emulated = true
speed = { gemm = 4.0 }
[[plugin]]
api = "gemm"
engine = "gpu"
exec = "/opt/kernels/gemm-cuda"
"#;

    #[test]
    fn sample_file_builds_the_engines() {
        let f = EnginesFile::parse(SAMPLE, "e.toml").expect("parses");
        let set = EngineSet::new(&f, 4, 2, true).expect("builds");
        assert_eq!(set.get(EngineKind::Cpu).map(|e| e.count), Some(4));
        assert_eq!(set.get(EngineKind::Gpu).map(|e| e.count), Some(2));
        assert_eq!(set.get(EngineKind::Npu).map(|e| e.count), Some(2));
        assert!(matches!(
            set.implementation(EngineKind::Gpu, Api::Gemm),
            Some(Implementation::Plugin { .. })
        ));
        assert_eq!(
            set.implementation(EngineKind::Gpu, Api::Sort),
            Some(&Implementation::Emulated { speed: 2.0 })
        );
        assert_eq!(set.implementation(EngineKind::Npu, Api::Sha256), None);
        assert_eq!(set.other_counts(), BTreeMap::from([(EngineKind::Npu, 2)]));
    }

    #[test]
    fn bad_files_are_refused_clearly() {
        let build = |text: &str, gpus: u32| {
            EnginesFile::parse(text, "e.toml")
                .and_then(|f| EngineSet::new(&f, 2, gpus, true))
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let e = build("[[engine]]\nkind = \"tpu\"\n", 0).unwrap_err();
        assert!(e.contains("e.toml:2:"), "{e}");
        let e = build("[[engine]]\nkind = \"gpu\"\nemulated = true\n", 0).unwrap_err();
        assert!(e.contains("no GPUs"), "{e}");
        let e = build("[[engine]]\nkind = \"gpu\"\n", 1).unwrap_err();
        assert!(e.contains("emulated = true"), "{e}");
        let e = build(
            "[[engine]]\nkind = \"gpu\"\ncount = 2\nemulated = true\n",
            1,
        )
        .unwrap_err();
        assert!(e.contains("no count"), "{e}");
        let e = build("[[engine]]\nkind = \"npu\"\n", 0).unwrap_err();
        assert!(e.contains("count"), "{e}");
        let e = build(
            "[[engine]]\nkind = \"npu\"\ncount = 1\nspeed = { gemm = 2.0 }\n",
            0,
        )
        .unwrap_err();
        assert!(e.contains("emulated engines only"), "{e}");
        let e = build(
            "[[engine]]\nkind = \"npu\"\ncount = 1\nemulated = true\nspeed = { gemm = -1.0 }\n",
            0,
        )
        .unwrap_err();
        assert!(e.contains("positive"), "{e}");
        let e = build(
            "[[plugin]]\napi = \"gemm\"\nengine = \"dsp\"\nexec = \"/x\"\n",
            0,
        )
        .unwrap_err();
        assert!(e.contains("not declared"), "{e}");
    }

    #[test]
    fn units_are_taken_and_given_back() {
        let f = EnginesFile::parse(
            "[[engine]]\nkind = \"npu\"\ncount = 1\nemulated = true\nspeed = { gemm = 2.0 }\n",
            "e.toml",
        )
        .expect("parses");
        let set = EngineSet::new(&f, 1, 0, false).expect("builds");
        let u = set.try_acquire(EngineKind::Npu).expect("one free");
        assert!(set.try_acquire(EngineKind::Npu).is_none());
        assert_eq!(set.free(EngineKind::Npu), 0);
        drop(u);
        assert_eq!(set.free(EngineKind::Npu), 1);
        assert!(set.acquire(EngineKind::Gpu).is_none(), "no such engine");
        assert!(set.acquire(EngineKind::Npu).is_some());
    }
}
