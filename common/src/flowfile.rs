//! Flow files (issue 51): `hetsched submit-flow flow.toml`. Each `[[step]]` table is a job
//! spec file's keys ([`crate::jobfile`]) plus the step's name and what it follows:
//!
//! ```toml
//! [[step]]
//! name = "prep"
//! command = ["./prep.sh"]
//!
//! [[step]]
//! name = "train"
//! count = 4
//! command = ["./train.sh"]
//! needs = ["prep"]           # after prep succeeded; also needs_any, needs_fail
//! [step.resources]
//! gpus = 1
//!
//! [[step]]
//! name = "eval"
//! count = 4
//! command = ["./eval.sh"]
//! each = "train"             # task i after task i of train
//! ```
//!
//! Every error names the file, the line and column of the step (or of the key to blame)
//! and why: a bad job key as the spec file reports it, an unknown or duplicate step name,
//! and a cycle with its steps in order (`prep → train → prep`); see [`crate::flow::FlowError`].

use crate::flow::{FlowSpec, FlowStep};
use crate::jobfile::{line_col, JobFile, SpecFileError};
use crate::JobSpec;
use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

/// The keys of a step that are not a job's.
const STEP_KEYS: [&str; 5] = ["name", "needs", "needs_any", "needs_fail", "each"];

/// The document: steps, each a table of spanned values.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    #[serde(default)]
    step: Vec<BTreeMap<String, Spanned<toml::Value>>>,
}

/// A flow file as written.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowFile {
    /// The file as the user named it.
    pub file: String,
    /// Its steps, in the file's order.
    pub steps: Vec<StepFile>,
}

/// One `[[step]]` as written.
#[derive(Clone, Debug, PartialEq)]
pub struct StepFile {
    /// Its name.
    pub name: String,
    /// Steps it follows (`after`).
    pub needs: Vec<String>,
    /// `after_any`.
    pub needs_any: Vec<String>,
    /// `after_fail`.
    pub needs_fail: Vec<String>,
    /// `after_each`.
    pub each: Option<String>,
    /// The job keys, as a spec file holds them.
    pub job: JobFile,
    /// 1-based line and column of the step (its `name`, else its first key).
    pub at: (usize, usize),
}

/// Parses a flow file's text (TOML). `file` names it in errors.
pub fn parse_flow_file(file: &str, text: &str) -> Result<FlowFile, SpecFileError> {
    let error =
        |(line, column): (usize, usize), field: Option<String>, message: String| SpecFileError {
            file: file.to_string(),
            line,
            column,
            field,
            message,
        };
    let doc: Doc = toml::from_str(text).map_err(|e| {
        let at = e.span().map_or((0, 0), |s| line_col(text, s.start));
        error(at, None, e.message().trim().to_string())
    })?;
    let mut steps = Vec::with_capacity(doc.step.len());
    for (i, mut table) in doc.step.into_iter().enumerate() {
        let at_key = |t: &BTreeMap<String, Spanned<toml::Value>>, key: &str| {
            t.get(key).map(|v| line_col(text, v.span().start))
        };
        let at = at_key(&table, "name")
            .or_else(|| {
                table
                    .values()
                    .map(|v| v.span().start)
                    .min()
                    .map(|s| line_col(text, s))
            })
            .unwrap_or((0, 0));
        let mut names = |key: &str| -> Result<Vec<String>, SpecFileError> {
            let Some(v) = table.remove(key) else {
                return Ok(Vec::new());
            };
            let pos = line_col(text, v.span().start);
            let bad = || {
                let what = if key == "name" || key == "each" {
                    "a step name (a string)"
                } else {
                    "a list of step names"
                };
                error(
                    pos,
                    Some(format!("step[{i}].{key}")),
                    format!("must be {what}"),
                )
            };
            match v.into_inner() {
                toml::Value::String(s) if key == "name" || key == "each" => Ok(vec![s]),
                toml::Value::Array(a) if key != "name" && key != "each" => a
                    .into_iter()
                    .map(|n| match n {
                        toml::Value::String(s) => Ok(s),
                        _ => Err(bad()),
                    })
                    .collect(),
                _ => Err(bad()),
            }
        };
        let name = names("name")?.pop().unwrap_or_default();
        let needs = names("needs")?;
        let needs_any = names("needs_any")?;
        let needs_fail = names("needs_fail")?;
        let each = names("each")?.pop();
        let spans: BTreeMap<String, (usize, usize)> = table
            .iter()
            .map(|(k, v)| (k.clone(), line_col(text, v.span().start)))
            .collect();
        let rest: toml::Table = table
            .into_iter()
            .map(|(k, v)| (k, v.into_inner()))
            .collect();
        let job: JobFile =
            serde_path_to_error::deserialize(toml::Value::Table(rest)).map_err(|e| {
                let path = e.path().to_string();
                let first = path.split(['.', '[']).next().unwrap_or_default();
                let pos = spans.get(first).copied().unwrap_or(at);
                let field = (path != "." && !path.is_empty()).then_some(path);
                let message = e.inner().message().trim().to_string();
                let message = match message.strip_prefix("unknown field") {
                    Some(m) => format!("unknown field{m}; or a step key: {}", STEP_KEYS.join(", ")),
                    None => message,
                };
                error(pos, field.map(|f| format!("step[{i}].{f}")), message)
            })?;
        steps.push(StepFile {
            name,
            needs,
            needs_any,
            needs_fail,
            each,
            job,
            at,
        });
    }
    Ok(FlowFile {
        file: file.to_string(),
        steps,
    })
}

impl FlowFile {
    /// The flow, each step's job made by `spec_of` (the CLI reads programs there),
    /// checked whole ([`FlowSpec::order`]); every error names the file and the step's line.
    pub fn to_flow_with(
        &self,
        mut spec_of: impl FnMut(&StepFile) -> Result<JobSpec, String>,
    ) -> Result<FlowSpec, SpecFileError> {
        let mut flow = FlowSpec::default();
        for s in &self.steps {
            let spec =
                spec_of(s).map_err(|why| self.error(s.at, format!("step {:?}: {why}", s.name)))?;
            flow.steps.push(FlowStep {
                name: s.name.clone(),
                spec,
                needs: s.needs.clone(),
                needs_any: s.needs_any.clone(),
                needs_fail: s.needs_fail.clone(),
                each: s.each.clone(),
            });
        }
        if let Err(e) = flow.order() {
            let at = e
                .step()
                .and_then(|i| self.steps.get(i))
                .map_or((0, 0), |s| s.at);
            return Err(self.error(at, e.to_string()));
        }
        Ok(flow)
    }

    /// [`to_flow_with`](Self::to_flow_with) where every step runs a command: the job keys
    /// made into a spec as a spec file's are, the step's name its job's name.
    pub fn to_flow(&self, default_user: &str) -> Result<FlowSpec, SpecFileError> {
        self.to_flow_with(|s| step_spec(s, default_user, None))
    }

    fn error(&self, (line, column): (usize, usize), message: String) -> SpecFileError {
        SpecFileError {
            file: self.file.clone(),
            line,
            column,
            field: None,
            message,
        }
    }
}

/// A step's job: its job keys made into a spec (with `program` when it runs one), named
/// after the step unless it names its job itself.
pub fn step_spec(
    s: &StepFile,
    default_user: &str,
    program: Option<crate::program::Program>,
) -> Result<JobSpec, String> {
    let mut job = s.job.clone();
    if job.name.is_none() {
        job.name = Some(s.name.clone());
    }
    let runs_image = job.image.is_some();
    if program.is_none() && !runs_image && job.command.as_ref().is_none_or(|c| c.is_empty()) {
        return Err(
            "no command: give `command = [...]`, `program = \"FILE\"` or `image = \"REF\"`".into(),
        );
    }
    // `after_mode = "any"` over step names alone: the names are resolved later, so the
    // check that it has dependencies waits for them.
    let mode = job.after_mode.take();
    let mut spec = job
        .to_spec_with(default_user, program)
        .map_err(|e| e.to_string())?;
    if let Some(m) = mode {
        spec.after_mode = m;
        let follows = !s.needs.is_empty()
            || !s.needs_any.is_empty()
            || !s.needs_fail.is_empty()
            || s.each.is_some();
        if !follows {
            spec.validate().map_err(|e| e.to_string())?;
        }
    }
    Ok(spec)
}

#[cfg(test)]
#[path = "flowfile_tests.rs"]
mod tests;
