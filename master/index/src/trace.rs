//! The Alibaba GPU trace (`alibaba/clusterdata`, cluster-trace-gpu-v2023) as plain data: parsing
//! of the node and pod lists (by hand; no CSV crate), and the two event orders the
//! benchmark replays. Pure: the caller reads the files.

use hetsched_common::{GpuDevice, GpuRequest, NodeResources, ResourceRequest};

/// A line the parser refuses, with its 1-based line number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// The file has no header line.
    #[error("{file}: empty, expected a header line")]
    Empty {
        /// `node list` or `pod list`.
        file: &'static str,
    },
    /// The header lacks a column the parser needs.
    #[error("{file} line 1: no column {column:?} in the header")]
    MissingColumn {
        /// `node list` or `pod list`.
        file: &'static str,
        /// The column.
        column: &'static str,
    },
    /// A data line is malformed.
    #[error("{file} line {line}: {why}")]
    Line {
        /// `node list` or `pod list`.
        file: &'static str,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        why: String,
    },
}

/// One node of the node list: all of it is free at the start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceNode {
    /// `sn`.
    pub name: String,
    /// Capacity.
    pub resources: NodeResources,
}

/// One pod of the pod list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracePod {
    /// `name`.
    pub name: String,
    /// What it asks (`gpu_spec` becomes the accepted models).
    pub request: ResourceRequest,
    /// `creation_time`, seconds (0 when the list has no time columns).
    pub created: u64,
    /// `deletion_time`, seconds; `None` when empty or absent (never released).
    pub deleted: Option<u64>,
    /// `scheduled_time`, seconds; `None` when empty or absent.
    pub scheduled: Option<u64>,
}

/// A parsed pod list and which optional columns it had.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodList {
    /// The pods in file order.
    pub pods: Vec<TracePod>,
    /// Whether the list has `creation_time` (and so an arrival order and times).
    pub has_times: bool,
}

/// A CSV file split into a header map and data lines.
struct Table<'a> {
    file: &'static str,
    header: Vec<&'a str>,
    lines: Vec<(usize, Vec<&'a str>)>,
}

impl<'a> Table<'a> {
    fn parse(file: &'static str, text: &'a str) -> Result<Self, TraceError> {
        let mut it = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim_end_matches('\r')));
        let header = loop {
            match it.next() {
                None => return Err(TraceError::Empty { file }),
                Some((_, l)) if l.trim().is_empty() => continue,
                Some((_, l)) => break l.split(',').map(str::trim).collect::<Vec<_>>(),
            }
        };
        let lines = it
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(n, l)| (n, l.split(',').map(str::trim).collect()))
            .collect();
        Ok(Self {
            file,
            header,
            lines,
        })
    }

    fn optional_column(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| *h == name)
    }

    fn column(&self, name: &'static str) -> Result<usize, TraceError> {
        self.header
            .iter()
            .position(|h| *h == name)
            .ok_or(TraceError::MissingColumn {
                file: self.file,
                column: name,
            })
    }

    fn err(&self, line: usize, why: String) -> TraceError {
        TraceError::Line {
            file: self.file,
            line,
            why,
        }
    }

    fn field<'b>(
        &self,
        line: usize,
        fields: &'b [&'a str],
        col: usize,
    ) -> Result<&'b str, TraceError> {
        if fields.len() != self.header.len() {
            return Err(self.err(
                line,
                format!(
                    "{} fields, the header has {}",
                    fields.len(),
                    self.header.len()
                ),
            ));
        }
        Ok(fields[col])
    }

    fn number(&self, line: usize, fields: &[&str], col: usize) -> Result<u64, TraceError> {
        let f = self.field(line, fields, col)?;
        f.parse().map_err(|_| {
            self.err(
                line,
                format!(
                    "column {} ({}): {f:?} is not a non-negative integer",
                    col + 1,
                    self.header[col]
                ),
            )
        })
    }
}

/// Parses `openb_node_list_all_node.csv` (`sn,cpu_milli,memory_mib,gpu,model`).
pub fn parse_nodes(text: &str) -> Result<Vec<TraceNode>, TraceError> {
    let t = Table::parse("node list", text)?;
    let (sn, cpu, mem, gpu, model) = (
        t.column("sn")?,
        t.column("cpu_milli")?,
        t.column("memory_mib")?,
        t.column("gpu")?,
        t.column("model")?,
    );
    let mut out = Vec::with_capacity(t.lines.len());
    for (line, f) in &t.lines {
        let count = t.number(*line, f, gpu)?;
        let model = t.field(*line, f, model)?;
        if count > 0 && model.is_empty() {
            return Err(t.err(*line, format!("{count} GPUs but no model")));
        }
        if count > 64 {
            return Err(t.err(*line, format!("{count} GPUs on one node is implausible")));
        }
        out.push(TraceNode {
            name: t.field(*line, f, sn)?.to_string(),
            resources: NodeResources {
                cpu_milli: t.number(*line, f, cpu)?,
                mem_mib: t.number(*line, f, mem)?,
                gpus: (0..count)
                    .map(|_| GpuDevice {
                        model: model.to_string(),
                        free_milli: hetsched_common::GPU_MILLI_PER_DEVICE,
                        emulated: false,
                    })
                    .collect(),
                ..NodeResources::default()
            },
        });
    }
    Ok(out)
}

/// Parses `openb_pod_list_default.csv`
/// (`name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,…,creation_time,deletion_time,…`);
/// see [`parse_pod_list`] for which columns are optional.
pub fn parse_pods(text: &str) -> Result<Vec<TracePod>, TraceError> {
    parse_pod_list(text).map(|l| l.pods)
}

/// Parses any published variant of the pod list: the columns `name, cpu_milli, memory_mib,
/// num_gpu, gpu_milli` in any order are required; `gpu_spec` (accepted models, `A|B`),
/// `creation_time`, `deletion_time` and `scheduled_time` are used when present, and any
/// other column is ignored.
pub fn parse_pod_list(text: &str) -> Result<PodList, TraceError> {
    let t = Table::parse("pod list", text)?;
    let (name, cpu, mem, ngpu, milli) = (
        t.column("name")?,
        t.column("cpu_milli")?,
        t.column("memory_mib")?,
        t.column("num_gpu")?,
        t.column("gpu_milli")?,
    );
    let spec = t.optional_column("gpu_spec");
    let created = t.optional_column("creation_time");
    let deleted = t.optional_column("deletion_time");
    let scheduled = t.optional_column("scheduled_time");
    let optional_time = |line: usize, f: &[&str], col: Option<usize>| -> Result<_, TraceError> {
        match col {
            Some(c) if !t.field(line, f, c)?.is_empty() => Ok(Some(t.number(line, f, c)?)),
            _ => Ok(None),
        }
    };
    let mut out = Vec::with_capacity(t.lines.len());
    for (line, f) in &t.lines {
        let line = *line;
        let count = t.number(line, f, ngpu)?;
        let gpu_milli = t.number(line, f, milli)?;
        let count = u32::try_from(count)
            .map_err(|_| t.err(line, format!("column {} (num_gpu): too large", ngpu + 1)))?;
        let gpu_milli = u32::try_from(gpu_milli)
            .map_err(|_| t.err(line, format!("column {} (gpu_milli): too large", milli + 1)))?;
        let models = match spec {
            Some(c) => t
                .field(line, f, c)?
                .split('|')
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .map(String::from)
                .collect(),
            None => Vec::new(),
        };
        let gpu = if count == 0 {
            GpuRequest::none()
        } else {
            GpuRequest {
                count,
                milli: gpu_milli,
                models,
            }
        };
        let request = ResourceRequest {
            cpu_milli: t.number(line, f, cpu)?,
            mem_mib: t.number(line, f, mem)?,
            gpu,
            ..ResourceRequest::default()
        };
        request.validate().map_err(|e| {
            t.err(
                line,
                format!(
                    "columns {}-{} (num_gpu, gpu_milli): {e}",
                    ngpu + 1,
                    milli + 1
                ),
            )
        })?;
        out.push(TracePod {
            name: t.field(line, f, name)?.to_string(),
            request,
            created: optional_time(line, f, created)?.unwrap_or(0),
            deleted: optional_time(line, f, deleted)?,
            scheduled: optional_time(line, f, scheduled)?,
        });
    }
    Ok(PodList {
        pods: out,
        has_times: created.is_some(),
    })
}

/// One step of a replay; the number is an index into the pod list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceEvent {
    /// Place the pod.
    Place(usize),
    /// Release the pod (a no-op when it was not placed).
    Release(usize),
}

/// Pods in (creation_time, name) order.
pub fn arrival_order(pods: &[TracePod]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..pods.len()).collect();
    order.sort_by(|a, b| {
        (pods[*a].created, &pods[*a].name).cmp(&(pods[*b].created, &pods[*b].name))
    });
    order
}

/// The replay: placements in arrival order, each pod released at its deletion time,
/// releases before placements at equal times. A pod deleted no later than it was created
/// is released right after its own placement (else its release would precede it).
pub fn replay_order(pods: &[TracePod]) -> Vec<TraceEvent> {
    // (time, releases first, arrival rank, place before its own instant release, event)
    let mut ev: Vec<(u64, u8, usize, u8, TraceEvent)> = Vec::with_capacity(pods.len() * 2);
    for (rank, i) in arrival_order(pods).into_iter().enumerate() {
        let p = &pods[i];
        ev.push((p.created, 1, rank, 0, TraceEvent::Place(i)));
        match p.deleted {
            Some(d) if d > p.created => ev.push((d, 0, rank, 0, TraceEvent::Release(i))),
            Some(_) => ev.push((p.created, 1, rank, 1, TraceEvent::Release(i))),
            None => {}
        }
    }
    ev.sort_by_key(|e| (e.0, e.1, e.2, e.3));
    ev.into_iter().map(|e| e.4).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str =
        "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,262144,0,\nn1,96000,393216,8,G2\n";
    const PODS: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
        p1,1000,100,1,460,,LS,Running,10,20,10\n\
        p0,1000,100,2,1000,V100M16|V100M32,LS,Running,10,12,10\n\
        p2,1000,100,0,0,,BE,Failed,12,12,12\n";

    #[test]
    fn parses_nodes_and_pods() {
        let n = parse_nodes(NODES).unwrap();
        assert_eq!(n.len(), 2);
        assert_eq!(n[1].resources.gpus.len(), 8);
        let p = parse_pods(PODS).unwrap();
        assert_eq!(p[0].request.gpu, GpuRequest::fraction(460));
        assert_eq!(p[1].request.gpu.models, vec!["V100M16", "V100M32"]);
        assert!(p[2].request.gpu.is_none());
    }

    #[test]
    fn replay_orders_by_time_releases_first() {
        let p = parse_pods(PODS).unwrap();
        use TraceEvent::*;
        // t10: p0 then p1 (name order); t12: release p0, then p2 placed and released at once.
        assert_eq!(
            replay_order(&p),
            vec![
                Place(1),
                Place(0),
                Release(1),
                Place(2),
                Release(2),
                Release(0)
            ]
        );
        assert_eq!(arrival_order(&p), vec![1, 0, 2]);
    }

    #[test]
    fn bad_lines_name_their_line_number() {
        let bad = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,262144,0,\nn1,lots,1,0,\n";
        assert_eq!(
            parse_nodes(bad).unwrap_err().to_string(),
            "node list line 3: column 2 (cpu_milli): \"lots\" is not a non-negative integer"
        );
        let short = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000\n";
        assert!(matches!(
            parse_nodes(short),
            Err(TraceError::Line { line: 2, .. })
        ));
        assert!(matches!(
            parse_nodes("sn,cpu_milli\n"),
            Err(TraceError::MissingColumn {
                column: "memory_mib",
                ..
            })
        ));
        assert_eq!(
            parse_nodes(""),
            Err(TraceError::Empty { file: "node list" })
        );
        let frac = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\nx,1,1,2,500,,0,1\n";
        assert!(matches!(
            parse_pods(frac),
            Err(TraceError::Line { line: 2, .. })
        ));
    }
}
