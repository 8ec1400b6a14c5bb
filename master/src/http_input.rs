//! What the HTTP API reads from a request before it asks the cluster anything: the submit
//! body, the drain body and the query strings. Pure functions over bytes and text, kept apart
//! from the handlers so the fuzz targets (`fuzz/`) drive exactly the code a request meets,
//! with no server. Every failure is an [`InputError`] naming the field at fault when one is
//! (docs/CONTRACT.md: HTTP 400 with the field's dotted path).

use hetsched_common::protocol::ListFilter;
use hetsched_common::{jobfile, Attempt, JobId, JobSpec};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use thiserror::Error;

/// A request the API refuses with 400.
#[derive(Clone, Debug, Error, PartialEq)]
#[error("{message}")]
pub struct InputError {
    /// What is wrong, for a person.
    pub message: String,
    /// The field or parameter at fault (`resources.cpus`, `job`, ...), when one is.
    pub field: Option<String>,
}

impl InputError {
    fn new(message: impl Into<String>, field: Option<String>) -> Self {
        Self {
            message: message.into(),
            field,
        }
    }
}

/// A `POST /v1/jobs` body, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct SubmitBody {
    /// The job, as `submit` would send it (`user` defaults to the caller's, `anonymous` on an insecure master).
    pub spec: JobSpec,
    /// The body's `allow_unplaceable`, the CLI's `submit --allow-unplaceable`.
    pub allow_unplaceable: bool,
}

/// Reads a `POST /v1/jobs` body: a job spec file's schema in JSON (README, "Job spec files").
pub fn submit_body(body: &[u8]) -> Result<SubmitBody, InputError> {
    let text = std::str::from_utf8(body)
        .map_err(|e| InputError::new(format!("the body is not UTF-8: {e}"), None))?;
    let file = jobfile::parse_job_file("request.json", text)
        .map_err(|e| located("job spec", Some((e.line, e.column)), e))?;
    // No user in the body: the caller's (its token's user; `anonymous` on an insecure
    // master), filled in by the master.
    let spec = file
        .to_spec("")
        .map_err(|e| InputError::new(format!("invalid job spec: {e}"), None))?;
    Ok(SubmitBody {
        spec,
        allow_unplaceable: file.allow_unplaceable,
    })
}

/// Reads a `POST /v1/flows` body: a flow file's schema in JSON, `{"step": [{"name":
/// "prep", "command": [...], "needs": [...]}, ...]}` (docs/guide/cli.md, "Flow files"),
/// checked whole as `submit-flow` checks the file; steps run commands, not programs.
pub fn flow_body(body: &[u8]) -> Result<hetsched_common::FlowSpec, InputError> {
    use hetsched_common::flowfile;
    let json: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| InputError::new(format!("flow body: {e}"), None))?;
    // The same reader as the file's: JSON's data model is TOML's (positions are the
    // rewritten text's, so only the field and the message are kept).
    let text =
        toml::to_string(&json).map_err(|e| InputError::new(format!("flow body: {e}"), None))?;
    let file =
        flowfile::parse_flow_file("request.toml", &text).map_err(|e| located("flow", None, e))?;
    // No user in the body: the caller's, filled in by the master.
    file.to_flow_with(|s| flowfile::step_spec(s, "", None))
        .map_err(|e| located("flow", None, e))
}

/// A spec file's error as a body's: `invalid WHAT at line L, column C, field F: why` (the
/// position only where it is the body's own).
fn located(what: &str, at: Option<(usize, usize)>, e: jobfile::SpecFileError) -> InputError {
    let at = at.map_or_else(String::new, |(l, c)| format!(" at line {l}, column {c}"));
    let field = e.field.clone();
    let named = field
        .as_deref()
        .map(|f| format!(", field {f}"))
        .unwrap_or_default();
    InputError::new(format!("invalid {what}{at}{named}: {}", e.message), field)
}

/// `POST /v1/nodes/{id}/drain`, optional body `{"deadline": "30s"}`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DrainBody {
    #[serde(default)]
    deadline: Option<String>,
}

/// Reads a drain body (empty or whitespace = no deadline): the deadline in milliseconds.
pub fn drain_body(body: &[u8]) -> Result<Option<u64>, InputError> {
    let b: DrainBody = if body.iter().all(u8::is_ascii_whitespace) {
        DrainBody::default()
    } else {
        serde_json::from_slice(body)
            .map_err(|e| InputError::new(format!("drain body: {e}"), None))?
    };
    b.deadline
        .as_deref()
        .map(jobfile::parse_duration_ms)
        .transpose()
        .map_err(|e| InputError::new(format!("deadline: {e}"), Some("deadline".into())))
}

/// Reads a query string (without the `?`) into `T`; an absent query is the empty string.
pub fn query<T: DeserializeOwned>(raw: &str) -> Result<T, InputError> {
    serde_urlencoded::from_str(raw).map_err(|e| {
        // The words axum's own extractor used, so answers did not change.
        InputError::new(format!("Failed to deserialize query string: {e}"), None)
    })
}

/// Parses an id the way the CLI does, naming `what` on failure.
pub fn id<T: std::str::FromStr<Err = hetsched_common::Error>>(
    what: &str,
    s: &str,
) -> Result<T, InputError> {
    s.parse::<T>()
        .map_err(|e| InputError::new(format!("{what}: {e}"), Some(what.to_string())))
}

/// Query of the listings (`GET /v1/jobs`, `GET /v1/tasks`), as the CLI's filter flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only this job.
    #[serde(default)]
    pub job: Option<String>,
    /// Only this state.
    #[serde(default)]
    pub state: Option<String>,
    /// Only this user's.
    #[serde(default)]
    pub user: Option<String>,
    /// At most this many.
    #[serde(default)]
    pub limit: Option<u32>,
    /// Only tasks waiting for this reason (jobs: with such a task).
    #[serde(default)]
    pub reason: Option<String>,
    /// Accept an answer from this master's applied state without a quorum check.
    #[serde(default)]
    pub stale: bool,
}

impl ListQuery {
    /// The filter the request carries.
    pub fn filter(&self) -> Result<ListFilter, InputError> {
        Ok(ListFilter {
            job: self
                .job
                .as_deref()
                .map(|j| id::<JobId>("job", j))
                .transpose()?,
            state: self.state.clone(),
            user: self.user.clone(),
            limit: self.limit,
            reason: self.reason.clone(),
        })
    }
}

/// Query of the reads that only choose staleness (`/v1/nodes`, `/v1/status`, `/v1/members`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaleQuery {
    /// Accept an answer from this master's applied state without a quorum check.
    #[serde(default)]
    pub stale: bool,
}

/// Query of `GET /v1/jobs/{id}/wait` (issue 55).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitQuery {
    /// Longest wait, a duration (`30s`, the default; at most `10m`).
    #[serde(default)]
    pub timeout: Option<String>,
}

impl WaitQuery {
    /// The wait in ms.
    pub fn timeout_ms(&self) -> Result<u64, InputError> {
        let Some(t) = &self.timeout else {
            return Ok(30_000);
        };
        match hetsched_common::jobfile::parse_duration_ms(t) {
            Ok(ms) if ms <= 600_000 => Ok(ms),
            Ok(_) => Err(InputError::new(
                format!("timeout {t:?} is over 10m"),
                Some("timeout".into()),
            )),
            Err(e) => Err(InputError::new(
                format!("timeout {t:?}: {e}"),
                Some("timeout".into()),
            )),
        }
    }
}

/// Query of `GET /v1/events` (issue 55).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// The log index of the last event seen (default: now; `Last-Event-ID` also counts).
    #[serde(default)]
    pub since: Option<u64>,
}

/// Query of `GET /v1/tasks/{id}/logs`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// `stdout` (default) or `stderr`.
    #[serde(default)]
    pub stream: Option<String>,
    /// Which attempt (default: the latest).
    #[serde(default)]
    pub attempt: Option<Attempt>,
    /// Keep the response open and send output as it comes until the task ends.
    #[serde(default)]
    pub follow: bool,
}

impl LogsQuery {
    /// Whether the request reads standard error (else standard output).
    pub fn stderr(&self) -> Result<bool, InputError> {
        match self.stream.as_deref() {
            None | Some("stdout") => Ok(false),
            Some("stderr") => Ok(true),
            Some(other) => Err(InputError::new(
                format!("stream {other:?} is neither stdout nor stderr"),
                Some("stream".into()),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submit_body_names_the_field() {
        let e = submit_body(br#"{"command":["true"],"resources":{"cpus":-1}}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("resources.cpus"), "{e}");
        let ok = submit_body(br#"{"command":["true"]}"#).expect("valid");
        assert_eq!(ok.spec.user, "", "left to the master to fill in");
        assert!(!ok.allow_unplaceable);
        // Issue 52: a container job, its command the image's own.
        let ok = submit_body(br#"{"image":"oci:/srv/bb:v1","run_as":"1000","network":"none"}"#)
            .expect("valid");
        assert_eq!(ok.spec.image.as_deref(), Some("oci:/srv/bb:v1"));
        assert_eq!(ok.spec.network.as_deref(), Some("none"));
        let e = submit_body(br#"{"image":"bb","command":["true"]}"#).unwrap_err();
        assert!(e.message.contains("unknown kind"), "{e}");
        assert_eq!(e.field.as_deref(), Some("image"), "{e}");
    }

    #[test]
    fn flow_body_reads_steps_and_refuses_a_cycle() {
        let body = br#"{"step": [
            {"name": "prep", "command": ["true"]},
            {"name": "train", "count": 2, "command": ["true"], "needs": ["prep"],
             "resources": {"cpus": 2}}]}"#;
        let f = flow_body(body).expect("valid");
        assert_eq!(f.steps[1].needs, ["prep"]);
        assert_eq!(f.steps[1].spec.resources.cpu_milli, 2000);
        assert_eq!(f.steps[0].spec.user, "", "left to the master to fill in");
        let e = flow_body(
            br#"{"step": [{"name": "a", "command": ["true"], "needs": ["b"]},
                          {"name": "b", "command": ["true"], "needs": ["a"]}]}"#,
        )
        .unwrap_err();
        assert!(e.message.contains("cycle: a → b → a"), "{e}");
        let e = flow_body(
            br#"{"step": [{"name": "a", "command": ["true"], "resources": {"cpus": -1}}]}"#,
        )
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("step[0].resources.cpus"), "{e}");
    }

    #[test]
    fn submit_body_carries_the_workflow_keys() {
        let body = br#"{"command":["true"],"count":2,"after":[3,4],"after_any":[5],
            "after_fail":[6],"after_each":7,"after_mode":"any","singleton":true,
            "max_running":2}"#;
        let s = submit_body(body).expect("valid").spec;
        assert_eq!(s.after, [JobId(3), JobId(4)]);
        assert_eq!(
            (s.after_any, s.after_fail),
            (vec![JobId(5)], vec![JobId(6)])
        );
        assert_eq!(s.after_each, Some(JobId(7)));
        assert_eq!(s.after_mode, hetsched_common::AfterMode::Any);
        assert_eq!((s.singleton, s.max_running), (true, Some(2)));
        let e = submit_body(br#"{"command":["true"],"max_running":0}"#).unwrap_err();
        assert!(e.message.contains("max_running"), "{e}");
        let e = submit_body(br#"{"command":["true"],"after_mode":"some"}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("after_mode"), "{e}");
    }

    #[test]
    fn queries_parse_and_refuse() {
        let q: ListQuery = query("job=3&stale=true").expect("valid");
        assert!(q.stale);
        assert_eq!(q.filter().expect("id").job, Some(JobId(3)));
        assert!(query::<ListQuery>("nope=1").is_err());
        let bad = query::<ListQuery>("job=x")
            .expect("parses")
            .filter()
            .unwrap_err();
        assert_eq!(bad.field.as_deref(), Some("job"));
        let l: LogsQuery = query("stream=stdin").expect("parses");
        assert_eq!(l.stderr().unwrap_err().field.as_deref(), Some("stream"));
    }

    #[test]
    fn drain_body_reads_the_deadline() {
        assert_eq!(drain_body(b"  ").expect("empty"), None);
        assert_eq!(
            drain_body(br#"{"deadline":"2s"}"#).expect("valid"),
            Some(2000)
        );
        let e = drain_body(br#"{"deadline":"soon"}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("deadline"));
    }
}
