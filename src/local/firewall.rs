//! Real network faults between the namespaces of a [`ClusterNet`]: nftables rules inside
//! the namespaces (a table `inet hetsched-chaos` of two filter chains, `input` and
//! `output`) that drop what one process sends to, or gets from, other processes of the
//! cluster. The bridge's own address (the root namespace: the CLI, the chaos tool) is never
//! cut. Each rule carries a comment naming the fault (`net-partition-leader`); [`heal`]
//! deletes the table in every namespace.
//!
//! [`heal`]: ClusterNet::heal

use super::netns::{find_tool, run_tool, ClusterNet};
use super::LaunchError;

/// The nftables table the rules live in.
pub const TABLE: &str = "hetsched-chaos";

/// Which of a process's packets a cut drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutDirection {
    /// What it sends to the peers and what it gets from them.
    Both,
    /// Only what it sends to the peers (a one-way partition).
    Outbound,
}

impl ClusterNet {
    fn nft(&self, ns: &str, script: &str) -> Result<(), LaunchError> {
        let nft =
            find_tool("nft").ok_or_else(|| LaunchError::MissingTool { tool: "nft".into() })?;
        let nft = nft.display().to_string();
        run_tool(
            &self.ip,
            &["netns", "exec", ns, &nft, "-f", "-"],
            Some(script),
        )
    }

    /// Drops, inside process `node`'s namespace, its packets to (and with
    /// [`CutDirection::Both`] from) the processes `peers`; `label` (letters, digits and `-`)
    /// is the rules' comment. Rules add up until [`heal`](Self::heal).
    pub fn cut(
        &self,
        node: &str,
        peers: &[&str],
        direction: CutDirection,
        label: &str,
    ) -> Result<(), LaunchError> {
        let unknown = |name: &str| LaunchError::Net {
            command: format!("cut {node}"),
            detail: format!("no process {name} in the cluster's namespaces"),
        };
        let n = self.node(node).ok_or_else(|| unknown(node))?;
        let ips = peers
            .iter()
            .map(|p| {
                self.node(p)
                    .map(|x| x.ip.to_string())
                    .ok_or_else(|| unknown(p))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if ips.is_empty() {
            return Ok(());
        }
        let label: String = label
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        let set = ips.join(", ");
        let mut script = format!(
            "add table inet {TABLE}\n\
             add chain inet {TABLE} input {{ type filter hook input priority 0 ; policy accept ; }}\n\
             add chain inet {TABLE} output {{ type filter hook output priority 0 ; policy accept ; }}\n\
             add rule inet {TABLE} output ip daddr {{ {set} }} drop comment \"{label}\"\n"
        );
        if direction == CutDirection::Both {
            script.push_str(&format!(
                "add rule inet {TABLE} input ip saddr {{ {set} }} drop comment \"{label}\"\n"
            ));
        }
        self.nft(&n.ns, &script)
    }

    /// Removes every rule [`cut`](Self::cut) made, in every namespace; the first failure is
    /// returned after trying them all.
    pub fn heal(&self) -> Result<(), LaunchError> {
        let script = format!("add table inet {TABLE}\ndelete table inet {TABLE}\n");
        let mut first = Ok(());
        for n in &self.nodes {
            if let Err(e) = self.nft(&n.ns, &script) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}
