//! `explain TASK`: why a task waits — its reason, every node's verdict, what preemption
//! could free and its place in its queue (docs/CONTRACT.md, "Waiting reasons").

use super::call::{block_on, call, short};
use crate::cmd::table;
use anyhow::anyhow;
use hetsched_common::protocol::{ClientRequest, ClientResponse};
use std::collections::BTreeMap;

/// Arguments of `hetsched explain`.
#[derive(clap::Args, Debug)]
pub struct ExplainArgs {
    /// The task (`17` or `task-17`).
    #[arg(value_name = "TASK")]
    pub task: String,
    /// Print one JSON line: {"task", "waiting", "nodes": [{"node", "name", "verdict",
    /// "detail"}], "preemption", "queue_position", "dependencies": [{"kind", "job",
    /// "state", "status"}]}.
    #[arg(long)]
    pub json: bool,
}

/// `explain`.
pub fn explain(masters: &[String], a: ExplainArgs) -> anyhow::Result<()> {
    let task = crate::cmd::programs::parse_task(&a.task)?;
    let e = match block_on(call(masters, ClientRequest::Explain { task }, false))?? {
        ClientResponse::Explain(e) => e,
        other => return Err(anyhow!("unexpected answer: {}", short(&other))),
    };
    if a.json {
        return crate::cmd::print_json(&e);
    }
    println!("task:       task-{} ({})", e.task.get(), e.state);
    match &e.waiting {
        Some(w) => println!("waiting:    {} — {}", w.reason, w.detail),
        None => println!("waiting:    no"),
    }
    if let Some(p) = e.queue_position {
        println!("queue:      position {p}");
    }
    // Issue 51: each job it follows, its state, and whether that dependency is met.
    for d in &e.dependencies {
        println!(
            "depends:    {} {} ({}) — {}",
            d.kind, d.job, d.state, d.status
        );
    }
    let mut by: BTreeMap<&str, usize> = BTreeMap::new();
    for n in &e.nodes {
        *by.entry(n.verdict.as_str()).or_insert(0) += 1;
    }
    let counts: Vec<String> = by.iter().map(|(v, n)| format!("{n} {v}")).collect();
    println!(
        "nodes:      {}/{} fit ({})",
        by.get("fits").copied().unwrap_or(0),
        e.nodes.len(),
        counts.join(", ")
    );
    let pre = if e.preemption.possible {
        "possible"
    } else {
        "no"
    };
    println!("preemption: {pre} — {}", e.preemption.detail);
    let mut t = table::new(&["NODE", "NAME", "VERDICT", "DETAIL"]);
    for n in e.nodes {
        t.add_row(vec![n.node.to_string(), n.name, n.verdict, n.detail]);
    }
    table::print(&t)
}
