//! API-program tasks (S0): a task whose assignment carries a [`Program`] runs in the slave's
//! process, call by call, each on the best *available* local engine according to the
//! selection table (S0.5), instead of as a child process.
//!
//! Per call: parameter scale → bucket → the table's ranking (the nearest profiled bucket),
//! keeping the engines this node can run the API on; the first with a free unit runs it
//! (when none is free, the call waits for the first-ranked). Without a table row the ranking
//! is: plug-in engines, emulated engines faster than the CPU (fastest first), the CPU, the
//! rest. A plug-in that fails or times out falls back to the CPU kernel, recorded as such.
//! When the best local engine is busy, or a peer's engine kind is faster by more than the
//! forwarding margin, the call is offered to a peer ([`crate::forward`], S0.6); it comes
//! back as one record naming the peer's node and engine, or runs here if the peer refuses,
//! fails or times out.
//!
//! Call records are written next to the task's output files as
//! `task-<id>-<attempt>.calls.json` (after every call), and a line per call goes to the
//! `.out` log.

use crate::engine::{check, kernels, EngineSet, EngineUnit, Implementation};
use hetsched_common::program::{
    Api, ApiCall, CallRecord, Program, SelectionTable, PROGRAM_COMMAND, PROGRAM_ENV,
};
use hetsched_common::protocol::Assignment;
use hetsched_common::EngineKind;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// Exit code of a program whose assignment does not decode.
pub const EXIT_BAD_PROGRAM: i32 = 127;
/// Exit code of a program stopped between calls (as if by SIGTERM).
pub const EXIT_STOPPED: i32 = -15;

/// What program tasks need from the slave.
#[derive(Debug)]
pub struct ProgramRuntime {
    /// This node's engines.
    pub engines: Arc<EngineSet>,
    /// The selection table (replaced when the profiler finishes).
    pub table: Arc<RwLock<SelectionTable>>,
    /// This node's name (in call records).
    pub node: String,
    /// Deadline of one plug-in call.
    pub call_timeout: Duration,
    /// S0.6: forwards calls to peers with better or free engines (`None`: never).
    pub forwarder: Option<Arc<crate::forward::Forwarder>>,
    /// Check every plug-in result against the CPU kernel (`slave --check-results`): the
    /// record carries the check, and a result that fails it is replaced by the CPU's.
    pub check_results: bool,
}

/// The program an assignment carries, if it is a program task. `Err` when it claims to be
/// one but the program does not decode or validate.
pub fn carried(a: &Assignment) -> Option<Result<Program, String>> {
    if a.command.len() != 1 || a.command[0] != PROGRAM_COMMAND {
        return None;
    }
    let json = a.env.get(PROGRAM_ENV)?;
    Some(
        serde_json::from_str::<Program>(json)
            .map_err(|e| format!("the assignment's program does not decode: {e}"))
            .and_then(|p| p.validate().map(|()| p).map_err(|e| e.to_string())),
    )
}

/// Path of an attempt's call records.
pub fn calls_path(log_dir: &Path, task: u64, attempt: u32) -> PathBuf {
    log_dir.join(format!("task-{task}-{attempt}.calls.json"))
}

/// Reads an attempt's call records; `None` when there are none on this slave.
pub fn read_calls(log_dir: &Path, task: u64, attempt: u32) -> Option<Vec<CallRecord>> {
    let bytes = std::fs::read(calls_path(log_dir, task, attempt)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn write_calls(path: &Path, records: &[CallRecord]) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(
        &tmp,
        serde_json::to_vec(records).map_err(std::io::Error::other)?,
    )?;
    std::fs::rename(&tmp, path)
}

impl ProgramRuntime {
    /// The engines to try for `call`, best first, that can run its API here.
    pub fn ranking(&self, call: &ApiCall) -> Vec<EngineKind> {
        let can = |k: EngineKind| self.engines.implementation(k, call.api).is_some();
        let table = match self.table.read() {
            Ok(t) => t,
            Err(p) => p.into_inner(),
        };
        let mut out: Vec<EngineKind> = match table.lookup(call.api, call.bucket()) {
            Some(row) => row
                .ranked
                .iter()
                .map(|e| e.engine)
                .filter(|k| can(*k))
                .collect(),
            None => default_ranking(&self.engines, call.api),
        };
        drop(table);
        // The CPU runs every API: it ends every ranking that lacks it.
        if !out.contains(&EngineKind::Cpu) {
            out.push(EngineKind::Cpu);
        }
        out
    }

    /// `kind`'s time for `call` by this node's selection table, µs.
    fn local_time(&self, call: &ApiCall, kind: EngineKind) -> Option<u64> {
        let table = match self.table.read() {
            Ok(t) => t,
            Err(p) => p.into_inner(),
        };
        table
            .lookup(call.api, call.bucket())?
            .ranked
            .iter()
            .find(|e| e.engine == kind)
            .map(|e| e.time_us)
    }

    /// Runs one call: picks the engine (or a peer's, S0.6), runs it, falls back to the CPU
    /// when a plug-in fails and to the best local engine when forwarding fails.
    pub fn run_call(&self, index: u32, call: &ApiCall) -> CallRecord {
        self.run_call_as(index, call, None)
    }

    /// [`run_call`](Self::run_call) for a task holding a unit of `booked` (S0.2): the call
    /// runs on it when that kind implements its API, else on the best free local engine
    /// (S0.5); a peer may still take it under the forwarding rule.
    pub fn run_call_as(
        &self,
        index: u32,
        call: &ApiCall,
        booked: Option<EngineKind>,
    ) -> CallRecord {
        let booked = booked.filter(|k| self.engines.implementation(*k, call.api).is_some());
        let ranking = match booked {
            Some(k) => std::iter::once(k)
                .chain(self.ranking(call).into_iter().filter(|r| *r != k))
                .collect(),
            None => self.ranking(call),
        };
        let mut unit = match booked {
            Some(_) => None,
            None => ranking.iter().find_map(|k| self.engines.try_acquire(*k)),
        };
        let mut forward_error = None;
        if let Some(fwd) = &self.forwarder {
            let top = ranking[0];
            let top_free = booked.is_some() || unit.as_ref().is_some_and(|u| u.kind == top);
            let remote = fwd.remote_times(call);
            let local_us = self
                .local_time(call, top)
                .or_else(|| remote.get(&top).copied());
            let kinds = crate::forward::wanted_kinds(
                top,
                top_free,
                local_us,
                &remote,
                fwd.options().margin,
            );
            if !kinds.is_empty() {
                // The local unit is not held while the call is away.
                unit = None;
                // With the best local engine free, a peer is worth it only if its time plus
                // the forwarding cost beats the local time.
                let beat = if top_free { local_us } else { None };
                match fwd.forward(index, call, kinds, beat) {
                    crate::forward::Forwarded::Ran(record) => return record,
                    crate::forward::Forwarded::Local(why) => forward_error = why,
                }
                if booked.is_none() {
                    unit = ranking.iter().find_map(|k| self.engines.try_acquire(*k));
                }
            }
        }
        if let Some(k) = booked {
            // The task's own unit, held for its whole run.
            let mut record = self.execute_on(index, call, k, None);
            if record.error.is_none() {
                record.error = forward_error;
            }
            return record;
        }
        let unit = unit
            .or_else(|| self.engines.acquire(ranking[0]))
            .or_else(|| self.engines.acquire(EngineKind::Cpu));
        let mut record = self.execute(index, call, unit);
        if record.error.is_none() {
            record.error = forward_error;
        }
        record
    }

    /// Runs one call on the engine unit given (the CPU when none), falling back to the CPU
    /// kernel when a plug-in fails.
    pub fn execute(&self, index: u32, call: &ApiCall, unit: Option<EngineUnit<'_>>) -> CallRecord {
        let kind = unit.as_ref().map_or(EngineKind::Cpu, |u| u.kind);
        self.execute_on(index, call, kind, unit)
    }

    /// Runs one call on `kind`, whose unit the caller holds (`unit`, or one held for the
    /// whole task), falling back to the CPU kernel when a plug-in fails.
    fn execute_on(
        &self,
        index: u32,
        call: &ApiCall,
        kind: EngineKind,
        unit: Option<EngineUnit<'_>>,
    ) -> CallRecord {
        self.execute_full(index, call, kind, unit, None).0
    }

    /// A peer's forwarded call (S0.6): runs on the unit given, computing on the argument
    /// bytes the caller sent (of the length the call needs); returns the record and the
    /// result bytes to write back.
    pub fn execute_args(
        &self,
        call: &ApiCall,
        unit: Option<EngineUnit<'_>>,
        args: &[u8],
    ) -> (CallRecord, Vec<u8>) {
        let kind = unit.as_ref().map_or(EngineKind::Cpu, |u| u.kind);
        self.execute_full(0, call, kind, unit, Some(args))
    }

    /// The call on `kind`, on `args` when given (else generated from its seed): its record
    /// and output.
    fn execute_full(
        &self,
        index: u32,
        call: &ApiCall,
        kind: EngineKind,
        unit: Option<EngineUnit<'_>>,
        args: Option<&[u8]>,
    ) -> (CallRecord, Vec<u8>) {
        let compute = || match args {
            Some(a) => kernels::compute(call, a).unwrap_or_default(),
            None => kernels::run(call),
        };
        let imp = self
            .engines
            .implementation(kind, call.api)
            .cloned()
            .unwrap_or(Implementation::Cpu);
        let emulated_engine = self.engines.get(kind).is_some_and(|e| e.emulated);
        let mut record = CallRecord {
            index,
            api: call.api,
            engine: kind,
            node: self.node.clone(),
            duration_ms: 0.0,
            forwarded: false,
            emulated: false,
            digest: String::new(),
            scale_bytes: call.scale(),
            fallback_from: None,
            error: None,
            transfer: None,
            check: None,
        };
        let t0 = Instant::now();
        let output = match imp {
            Implementation::Cpu => {
                let out = compute();
                record.duration_ms = ms(t0.elapsed());
                out
            }
            Implementation::Emulated { speed } => {
                let out = compute();
                let cpu = t0.elapsed();
                let modelled = cpu.div_f64(speed);
                // The engine is held for the modelled time (never less than the real one).
                if let Some(rest) = modelled.checked_sub(t0.elapsed()) {
                    std::thread::sleep(rest);
                }
                record.duration_ms = ms(modelled);
                record.emulated = true;
                out
            }
            Implementation::Plugin { exec, mode } => {
                match self
                    .engines
                    .run_plugin(&exec, mode, call, self.call_timeout)
                {
                    Ok(out) => {
                        record.duration_ms = ms(t0.elapsed());
                        record.emulated = emulated_engine;
                        self.checked(&mut record, out, compute)
                    }
                    Err(why) => {
                        tracing::warn!(engine = %kind, api = %call.api, %why, "plug-in call failed; falling back to the CPU kernel");
                        drop(unit);
                        let _cpu = self.engines.acquire(EngineKind::Cpu);
                        let t1 = Instant::now();
                        let out = compute();
                        record.duration_ms = ms(t1.elapsed());
                        record.engine = EngineKind::Cpu;
                        record.emulated = false;
                        record.fallback_from = Some(kind);
                        record.error = Some(why);
                        out
                    }
                }
            }
        };
        record.digest = kernels::digest(&output);
        (record, output)
    }

    /// A plug-in's output `out`, checked against the CPU kernel's (`compute`) when
    /// `check_results` is on: a result that fails the check is replaced by the CPU's,
    /// recorded as a fallback.
    fn checked(
        &self,
        record: &mut CallRecord,
        out: Vec<u8>,
        compute: impl FnOnce() -> Vec<u8>,
    ) -> Vec<u8> {
        if !self.check_results {
            return out;
        }
        let reference = compute();
        let c = check::compare(record.api, &out, &reference);
        record.check = Some(c);
        if c.ok {
            return out;
        }
        tracing::warn!(engine = %record.engine, api = %record.api, rel_err = c.rel_err, "plug-in result fails its check; the CPU kernel's is used");
        record.fallback_from = Some(record.engine);
        record.engine = EngineKind::Cpu;
        record.emulated = false;
        record.error = Some(format!(
            "result check failed ({:?}, rel_err {:e})",
            c.kind, c.rel_err
        ));
        reference
    }

    /// Runs a whole program for an assignment; returns the records and the exit code
    /// (0, or [`EXIT_STOPPED`] when `stop` was set between calls).
    pub fn run(
        &self,
        a: &Assignment,
        program: &Program,
        log_dir: &Path,
        stop: &AtomicBool,
    ) -> (Vec<CallRecord>, i32) {
        let path = calls_path(log_dir, a.task.0, a.attempt);
        let (out_log, _) = crate::attempt::log_paths(log_dir, a);
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&out_log)
            .map_err(
                |e| tracing::warn!(path = %out_log.display(), error = %e, "cannot open task log"),
            )
            .ok();
        let mut records = Vec::with_capacity(program.calls.len());
        // S0.2: the unit the masters booked for this task, held for its whole run. A CPU
        // booking is the task's own cores: its calls keep the per-call choice of S0.5 (a
        // free accelerator may run one), as the CPU runs every API anyway.
        let held = a
            .engine
            .filter(|g| g.kind != EngineKind::Cpu)
            .and_then(|g| crate::engine::held::HeldUnits::wait_one(&self.engines, g.kind));
        let booked = held.as_ref().and(a.engine.map(|g| g.kind));
        for (i, call) in program.calls.iter().enumerate() {
            if stop.load(Ordering::SeqCst) {
                return (records, EXIT_STOPPED);
            }
            let r = self.run_call_as(i as u32, call, booked);
            metrics::counter!(
                "hetsched_slave_api_calls_total",
                "engine" => r.engine.to_string(),
                "fallback" => if r.fallback_from.is_some() { "true" } else { "false" }
            )
            .increment(1);
            if let Some(f) = out.as_mut() {
                let _ = writeln!(
                    f,
                    "call {} {} scale {} B on {}{}{}{} {:.3} ms digest {}",
                    r.index,
                    r.api,
                    r.scale_bytes,
                    r.engine,
                    if r.emulated { " (EMULATED)" } else { "" },
                    if r.forwarded {
                        format!(" of {} (forwarded)", r.node)
                    } else {
                        String::new()
                    },
                    r.fallback_from
                        .map(|k| format!(" (fallback from {k})"))
                        .unwrap_or_default(),
                    r.duration_ms,
                    r.digest
                );
            }
            records.push(r);
            if let Err(e) = write_calls(&path, &records) {
                tracing::warn!(path = %path.display(), error = %e, "cannot write call records");
            }
        }
        (records, 0)
    }
}

/// Ranking without a table row: plug-in engines, emulated ones faster than the CPU (fastest
/// first), the CPU, then the rest.
fn default_ranking(set: &EngineSet, api: Api) -> Vec<EngineKind> {
    let mut scored: Vec<(u8, i64, EngineKind)> = set
        .engines()
        .iter()
        .filter_map(|e| {
            let score = match e.apis.get(&api)? {
                Implementation::Plugin { .. } => (0, 0),
                Implementation::Emulated { speed } if *speed > 1.0 => {
                    (1, -((speed * 1000.0) as i64))
                }
                Implementation::Cpu => (2, 0),
                Implementation::Emulated { speed } => (3, -((speed * 1000.0) as i64)),
            };
            Some((score.0, score.1, e.kind))
        })
        .collect();
    scored.sort();
    scored.into_iter().map(|(_, _, k)| k).collect()
}

/// Milliseconds with microsecond resolution.
fn ms(d: Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EnginesFile;
    use hetsched_common::program::EngineTime;
    use hetsched_common::{Attempt, JobId, TaskId};
    use std::os::unix::fs::PermissionsExt;

    fn runtime(file: &str, gpus: u32, table: SelectionTable) -> ProgramRuntime {
        let f = EnginesFile::parse(file, "e.toml").expect("parses");
        ProgramRuntime {
            engines: Arc::new(EngineSet::new(&f, 2, gpus, true).expect("builds")),
            table: Arc::new(RwLock::new(table)),
            node: "n1".into(),
            call_timeout: Duration::from_secs(2),
            forwarder: None,
            check_results: false,
        }
    }

    fn assignment(task: u64, attempt: Attempt) -> Assignment {
        Assignment {
            task: TaskId(task),
            job: JobId(1),
            index: 0,
            attempt,
            command: vec![PROGRAM_COMMAND.into()],
            env: Default::default(),
            resources: Default::default(),
            gpus: Default::default(),
            queued: false,
            engine: None,
            job_name: String::new(),
            workdir: None,
            image: None,
            run_as: None,
            network: None,
        }
    }

    #[test]
    fn table_ranking_picks_the_engine_and_skips_busy_ones() {
        let mut table = SelectionTable::default();
        let call = ApiCall::new(Api::Gemm, 64, 1);
        for (engine, t) in [(EngineKind::Gpu, 10), (EngineKind::Cpu, 80)] {
            table.record(
                Api::Gemm,
                call.bucket(),
                EngineTime {
                    engine,
                    time_us: t,
                    emulated: engine == EngineKind::Gpu,
                },
            );
        }
        let rt = runtime(
            "[[engine]]\nkind = \"gpu\"\nemulated = true\nspeed = { gemm = 8.0 }\n",
            1,
            table,
        );
        let r = rt.run_call(0, &call);
        assert_eq!(r.engine, EngineKind::Gpu);
        assert!(r.emulated);
        assert_eq!(r.digest, kernels::digest(&kernels::run(&call)));
        // With the only GPU busy, the next best available engine runs it.
        let held = rt.engines.try_acquire(EngineKind::Gpu).expect("gpu");
        let r = rt.run_call(1, &call);
        assert_eq!(r.engine, EngineKind::Cpu);
        assert!(!r.emulated);
        drop(held);
        // sort has no GPU implementation: CPU.
        let r = rt.run_call(2, &ApiCall::new(Api::Sort, 1000, 1));
        assert_eq!(r.engine, EngineKind::Cpu);
    }

    #[test]
    fn a_booked_unit_runs_the_tasks_calls_and_no_one_elses() {
        use crate::engine::held::HeldUnits;
        let rt = runtime(
            "[[engine]]\nkind = \"gpu\"\nemulated = true\nspeed = { gemm = 8.0 }\n",
            1,
            SelectionTable::default(),
        );
        let gemm = ApiCall::new(Api::Gemm, 32, 1);
        // The task's GPU unit is held for its run: its gemm calls run there...
        let held = HeldUnits::wait_one(&rt.engines, EngineKind::Gpu).expect("a gpu");
        let r = rt.run_call_as(0, &gemm, Some(EngineKind::Gpu));
        assert_eq!((r.engine, r.emulated), (EngineKind::Gpu, true));
        // ...a call the GPU cannot run falls back to a free local engine (S0.5)...
        let r = rt.run_call_as(1, &ApiCall::new(Api::Sort, 100, 1), Some(EngineKind::Gpu));
        assert_eq!(r.engine, EngineKind::Cpu);
        // ...and another task's call never gets the booked GPU.
        let r = rt.run_call(2, &gemm);
        assert_eq!(r.engine, EngineKind::Cpu);
        drop(held);
        assert_eq!(rt.run_call(3, &gemm).engine, EngineKind::Gpu);
    }

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("write script");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        p
    }

    #[test]
    fn plugin_result_is_used_and_failure_falls_back_to_the_cpu() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A "DSP" whose sha256 plug-in echoes its request line; one that fails; one that hangs.
        let ok = script(dir.path(), "ok.sh", "cat");
        let bad = script(dir.path(), "bad.sh", "cat >/dev/null; exit 3");
        let slow = script(dir.path(), "slow.sh", "exec sleep 30");
        let file = |exec: &Path| {
            format!(
                "[[engine]]\nkind = \"dsp\"\ncount = 1\n[[plugin]]\napi = \"sha256\"\nengine = \"dsp\"\nexec = \"{}\"\n",
                exec.display()
            )
        };
        let call = ApiCall::new(Api::Sha256, 4096, 9);
        let cpu_digest = kernels::digest(&kernels::run(&call));

        let rt = runtime(&file(&ok), 0, SelectionTable::default());
        let r = rt.run_call(0, &call);
        assert_eq!(r.engine, EngineKind::Dsp, "no table: plug-in engines first");
        assert_eq!(r.fallback_from, None);
        let line = serde_json::json!({ "api": call.api, "args": call.args }).to_string() + "\n";
        assert_eq!(
            r.digest,
            kernels::digest(line.as_bytes()),
            "stdout is the result"
        );

        let rt = runtime(&file(&bad), 0, SelectionTable::default());
        let r = rt.run_call(0, &call);
        assert_eq!(r.engine, EngineKind::Cpu);
        assert_eq!(r.fallback_from, Some(EngineKind::Dsp));
        assert!(
            r.error.as_deref().is_some_and(|e| e.contains("failed")),
            "{r:?}"
        );
        assert_eq!(r.digest, cpu_digest);

        let mut rt = runtime(&file(&slow), 0, SelectionTable::default());
        rt.call_timeout = Duration::from_millis(300);
        let t0 = Instant::now();
        let r = rt.run_call(0, &call);
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
        assert_eq!(r.fallback_from, Some(EngineKind::Dsp));
        assert!(
            r.error.as_deref().is_some_and(|e| e.contains("timed out")),
            "{r:?}"
        );
        assert_eq!(r.digest, cpu_digest);
    }

    #[test]
    fn program_run_writes_records_and_stops_between_calls() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = runtime("", 0, SelectionTable::default());
        let program = Program {
            calls: vec![
                ApiCall::new(Api::Sort, 100, 1),
                ApiCall::new(Api::Compress, 1000, 1),
            ],
        };
        let a = assignment(7, 2);
        let (recs, code) = rt.run(&a, &program, dir.path(), &AtomicBool::new(false));
        assert_eq!(code, 0);
        assert_eq!(recs.len(), 2);
        let digests = |r: &[CallRecord]| r.iter().map(|c| c.digest.clone()).collect::<Vec<_>>();
        let back = read_calls(dir.path(), 7, 2).expect("records on disk");
        assert_eq!(digests(&back), digests(&recs));
        let log = std::fs::read_to_string(dir.path().join("task-7-2.out")).expect("log");
        assert_eq!(log.lines().count(), 2, "{log}");
        let (recs, code) = rt.run(&a, &program, dir.path(), &AtomicBool::new(true));
        assert_eq!((recs.len(), code), (0, EXIT_STOPPED));
    }

    #[test]
    fn carried_program_decodes_or_is_refused() {
        let mut a = assignment(1, 1);
        assert!(carried(&a).is_none(), "marker without a program");
        let p = Program {
            calls: vec![ApiCall::new(Api::Gemm, 4, 1)],
        };
        a.env
            .insert(PROGRAM_ENV.into(), serde_json::to_string(&p).expect("json"));
        assert_eq!(carried(&a), Some(Ok(p)));
        a.env.insert(PROGRAM_ENV.into(), "{".into());
        assert!(matches!(carried(&a), Some(Err(_))));
        a.command = vec!["true".into()];
        assert!(carried(&a).is_none(), "a command task is not a program");
    }
}
