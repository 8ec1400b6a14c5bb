//! Reading instances: our JSON (with replicas) and the course problem's plain text
//! (docs/DESIGN.md §S2, "Decisions"). Parsing works on a string; reading the file is the CLI's job.
//!
//! **JSON** (unknown keys are errors):
//! ```json
//! { "cores_per_host": [4, 2], "transfer_speed": 125, "alpha": 0.05,
//!   "jobs": [ { "speed": 40, "blocks": [ { "size": 64, "replicas": [0, 1] } ] } ] }
//! ```
//! Sizes in MB, speeds in MB/s, host ids from 0.
//!
//! **Text**, one item per line, blank lines ignored, one replica per block:
//! ```text
//! jobs hosts transfer_speed alpha
//! cores of each host                     (hosts numbers)
//! blocks of each job                     (jobs numbers)
//! speed of each job                      (jobs numbers)
//! sizes of job 0's blocks … one line per job
//! host of job 0's blocks  … one line per job
//! ```
//! The course's own files write α before the transfer speed; since α < 1 and a transfer
//! speed below 1 MB/s is not a real network, a first line whose third value is below 1 and
//! fourth is not is read in that order. Its single-host files (task 1) give only
//! `jobs hosts alpha`: no transfer can happen there, so the speed is taken as infinite.
//!
//! The format is told by the first non-blank character: `{` is JSON, anything else text.

use super::model::{BatchJob, Block, Instance, InstanceError, MAX_TOTAL_CORES};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Why an input could not be read.
#[derive(Debug, Error)]
pub enum InputError {
    /// The JSON is malformed or does not fit the schema.
    #[error("JSON input, line {line}, column {column}: {message}")]
    Json {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What serde said.
        message: String,
    },
    /// A line of the text format is malformed.
    #[error("text input, line {line}: {message}")]
    Text {
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The text ends before everything was read.
    #[error("text input ends early (after line {line}): expected {expected}")]
    TextEnd {
        /// Last line read (0 for an empty input).
        line: usize,
        /// What was still expected.
        expected: String,
    },
    /// The values parse but are not a valid instance (the message is the instance error's).
    #[error(transparent)]
    Instance(#[from] InstanceError),
}

/// Reads an instance in either format.
pub fn parse(input: &str) -> Result<Instance, InputError> {
    // Editors on some systems start files with a byte-order mark.
    let input = input.strip_prefix('\u{feff}').unwrap_or(input);
    match input.trim_start().chars().next() {
        Some('{') => parse_json(input),
        _ => parse_text(input),
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonInstance {
    cores_per_host: Vec<usize>,
    transfer_speed: f64,
    alpha: f64,
    jobs: Vec<JsonJob>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonJob {
    speed: f64,
    blocks: Vec<JsonBlock>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonBlock {
    size: f64,
    replicas: Vec<usize>,
}

/// Reads our JSON format.
pub fn parse_json(input: &str) -> Result<Instance, InputError> {
    let raw: JsonInstance = serde_json::from_str(input).map_err(|e| {
        // serde_json's message ends with the position, which our error states already.
        let full = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        InputError::Json {
            line: e.line(),
            column: e.column(),
            message: full.strip_suffix(&suffix).unwrap_or(&full).to_string(),
        }
    })?;
    let jobs = raw
        .jobs
        .into_iter()
        .map(|j| BatchJob {
            speed: j.speed,
            blocks: j
                .blocks
                .into_iter()
                .map(|b| Block {
                    size: b.size,
                    replicas: b.replicas,
                })
                .collect(),
        })
        .collect();
    Ok(Instance::new(
        raw.cores_per_host,
        raw.transfer_speed,
        raw.alpha,
        jobs,
    )?)
}

/// Writes an instance in our JSON format (pretty, for sample files and the generator).
/// An infinite transfer speed (course task-1 files) has no JSON number; it is written as
/// the largest finite one, which makes transfers take no measurable time.
pub fn to_json(inst: &Instance) -> String {
    let raw = JsonInstance {
        cores_per_host: inst.cores_per_host().to_vec(),
        transfer_speed: if inst.transfer_speed().is_finite() {
            inst.transfer_speed()
        } else {
            f64::MAX
        },
        alpha: inst.alpha(),
        jobs: inst
            .jobs()
            .iter()
            .map(|j| JsonJob {
                speed: j.speed,
                blocks: j
                    .blocks
                    .iter()
                    .map(|b| JsonBlock {
                        size: b.size,
                        replicas: b.replicas.clone(),
                    })
                    .collect(),
            })
            .collect(),
    };
    // Plain structs of numbers and vectors always serialise.
    serde_json::to_string_pretty(&raw).unwrap_or_default()
}

/// The non-blank lines of a text input, with their 1-based numbers.
struct Lines<'a> {
    inner: std::iter::Peekable<std::iter::Enumerate<std::str::Lines<'a>>>,
    last: usize,
}

impl<'a> Lines<'a> {
    fn new(input: &'a str) -> Self {
        Self {
            inner: input.lines().enumerate().peekable(),
            last: 0,
        }
    }

    /// The next non-blank line as (line number, tokens).
    fn next(&mut self, expected: &str) -> Result<(usize, Vec<&'a str>), InputError> {
        for (i, text) in self.inner.by_ref() {
            let tokens: Vec<&str> = text.split_whitespace().collect();
            if !tokens.is_empty() {
                self.last = i + 1;
                return Ok((i + 1, tokens));
            }
        }
        Err(InputError::TextEnd {
            line: self.last,
            expected: expected.to_string(),
        })
    }

    /// The next non-blank line, which must have exactly `n` tokens.
    fn next_n(&mut self, n: usize, what: &str) -> Result<(usize, Vec<&'a str>), InputError> {
        let (line, tokens) = self.next(what)?;
        if tokens.len() != n {
            return Err(text_err(
                line,
                format!(
                    "expected {what} ({n} values), found {} values",
                    tokens.len()
                ),
            ));
        }
        Ok((line, tokens))
    }
}

fn text_err(line: usize, message: String) -> InputError {
    InputError::Text { line, message }
}

fn whole(line: usize, token: &str, what: &str) -> Result<usize, InputError> {
    token.parse().map_err(|_| {
        text_err(
            line,
            format!("{what} must be a whole number >= 0, found {token:?}"),
        )
    })
}

fn number(line: usize, token: &str, what: &str) -> Result<f64, InputError> {
    match token.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(text_err(
            line,
            format!("{what} must be a number, found {token:?}"),
        )),
    }
}

fn positive(line: usize, token: &str, what: &str) -> Result<f64, InputError> {
    let v = number(line, token, what)?;
    if v > 0.0 {
        Ok(v)
    } else {
        Err(text_err(line, format!("{what} must be > 0, found {token}")))
    }
}

/// Reads the course problem's plain-text format.
pub fn parse_text(input: &str) -> Result<Instance, InputError> {
    let mut lines = Lines::new(input);
    let (l, head) = lines.next("the first line: jobs hosts transfer_speed alpha")?;
    let (jobs, hosts, transfer_speed, alpha) = parse_header(l, &head)?;
    let cores = parse_cores(&mut lines, hosts)?;
    let job_list = parse_jobs(&mut lines, jobs, hosts)?;
    if let Some((i, _)) = lines.inner.find(|(_, t)| !t.trim().is_empty()) {
        return Err(text_err(
            i + 1,
            format!("unexpected extra line after the {jobs} lines of block hosts"),
        ));
    }
    Ok(Instance::new(cores, transfer_speed, alpha, job_list)?)
}

/// The first line: `jobs hosts transfer_speed alpha` (or `jobs hosts alpha` for one host).
fn parse_header(l: usize, head: &[&str]) -> Result<(usize, usize, f64, f64), InputError> {
    let [j, h, rest @ ..] = head else {
        return Err(header_count(l, head.len()));
    };
    if rest.len() != 1 && rest.len() != 2 {
        return Err(header_count(l, head.len()));
    }
    let jobs = whole(l, j, "the number of jobs")?;
    let hosts = whole(l, h, "the number of hosts")?;
    if jobs == 0 {
        return Err(text_err(l, "the number of jobs must be at least 1".into()));
    }
    if hosts == 0 {
        return Err(text_err(l, "the number of hosts must be at least 1".into()));
    }
    let (speed, alpha) = speed_and_alpha(l, hosts, rest)?;
    if speed <= 0.0 {
        return Err(text_err(
            l,
            format!("the transfer speed must be > 0, found {speed}"),
        ));
    }
    if !(0.0..1.0).contains(&alpha) {
        return Err(text_err(
            l,
            format!("alpha must be in [0, 1), found {alpha}"),
        ));
    }
    Ok((jobs, hosts, speed, alpha))
}

fn header_count(l: usize, found: usize) -> InputError {
    text_err(
        l,
        format!("expected 'jobs hosts transfer_speed alpha' (4 values), found {found} values"),
    )
}

/// The transfer speed and alpha of the first line: with three values, one host and no
/// transfers; with four, in either order (the course writes alpha first).
fn speed_and_alpha(l: usize, hosts: usize, rest: &[&str]) -> Result<(f64, f64), InputError> {
    if let [a] = rest {
        if hosts != 1 {
            return Err(text_err(
                l,
                format!(
                    "three values (jobs hosts alpha) give no transfer speed, which only \
                     a single host can do without; this file has {hosts} hosts"
                ),
            ));
        }
        return Ok((f64::INFINITY, number(l, a, "alpha")?));
    }
    let x = number(l, rest[0], "the transfer speed")?;
    let y = number(l, rest[1], "alpha")?;
    // Our order is (speed, alpha); the course writes (alpha, speed).
    Ok(if (0.0..1.0).contains(&x) && y >= 1.0 {
        (y, x)
    } else {
        (x, y)
    })
}

/// The line of each host's cores.
fn parse_cores(lines: &mut Lines<'_>, hosts: usize) -> Result<Vec<usize>, InputError> {
    let (l, toks) = lines.next_n(hosts, "the cores of each host")?;
    let cores = toks
        .iter()
        .map(|t| whole(l, t, "a host's core count"))
        .collect::<Result<Vec<_>, _>>()?;
    if cores.iter().all(|&c| c == 0) {
        return Err(text_err(l, "the hosts have no cores at all".into()));
    }
    if cores.iter().fold(0usize, |a, &c| a.saturating_add(c)) > MAX_TOTAL_CORES {
        return Err(text_err(
            l,
            format!("the hosts have more than {MAX_TOTAL_CORES} cores in all"),
        ));
    }
    Ok(cores)
}

/// The jobs: block counts, speeds, then each job's block sizes, then each job's block hosts.
fn parse_jobs(
    lines: &mut Lines<'_>,
    jobs: usize,
    hosts: usize,
) -> Result<Vec<BatchJob>, InputError> {
    let (l, toks) = lines.next_n(jobs, "the number of blocks of each job")?;
    let counts = toks
        .iter()
        .map(|t| match whole(l, t, "a job's block count")? {
            0 => Err(text_err(l, "every job needs at least one block".into())),
            n => Ok(n),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (l, toks) = lines.next_n(jobs, "the speed of each job")?;
    let speeds = toks
        .iter()
        .map(|t| positive(l, t, "a job's speed"))
        .collect::<Result<Vec<_>, _>>()?;
    let mut sizes = Vec::with_capacity(jobs);
    for (j, &n) in counts.iter().enumerate() {
        let (l, toks) = lines.next_n(n, &format!("the block sizes of job {j}"))?;
        sizes.push(
            toks.iter()
                .map(|t| positive(l, t, "a block size"))
                .collect::<Result<Vec<_>, _>>()?,
        );
    }
    let mut job_list = Vec::with_capacity(jobs);
    for (j, (&n, sizes)) in counts.iter().zip(sizes).enumerate() {
        let (l, toks) = lines.next_n(n, &format!("the block hosts of job {j}"))?;
        let mut blocks = Vec::with_capacity(n);
        for (t, size) in toks.iter().zip(sizes) {
            let host = whole(l, t, "a block's host id")?;
            if host >= hosts {
                return Err(text_err(
                    l,
                    format!("host id {host} does not exist ({hosts} hosts, ids from 0)"),
                ));
            }
            blocks.push(Block {
                size,
                replicas: vec![host],
            });
        }
        job_list.push(BatchJob {
            speed: speeds[j],
            blocks,
        });
    }
    Ok(job_list)
}
