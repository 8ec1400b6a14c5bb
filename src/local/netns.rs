//! Network namespaces for a local cluster (`ClusterSpec::netns`): one namespace per master
//! and slave, each with its own address on one private /24 bridge in the root namespace, so
//! that processes talk over real (virtual) links that the chaos tool can cut with nftables
//! rules (`super::firewall`), and the CLI in the root namespace still reaches every process
//! through the bridge's own address.
//!
//! Every name this module makes starts with `hs-<pid>` (the launcher's process id):
//! namespaces `hs-<pid>-<seq>-<process>`, the bridge `hs-<pid>-<seq>`, the host ends of the
//! veth pairs `hs-<pid>v<n>`. [`ClusterNet`] removes what it made when it is torn down or
//! dropped; what a launcher that crashed left behind is removed by [`sweep_leftovers`], which
//! every [`ClusterNet::create`] runs first (names whose pid no longer runs).
//!
//! Addresses: `10.213.K.0/24` with `K` the first of 1..=254 (from a seeded start) that no
//! interface address and no route of /16 or longer on this machine touches; the bridge is
//! `10.213.K.1`, the processes `10.213.K.10` on. A lock file in the temp dir keeps two
//! launchers from taking the same `K`.

use super::LaunchError;
use nix::sys::signal::Signal;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The prefix of every namespace and link this module makes.
pub const PREFIX: &str = "hs-";

/// The first two octets of the bridges' /24s.
const NET: [u8; 2] = [10, 213];

/// The host index of the first process on a bridge (`10.213.K.10`).
const FIRST_HOST: usize = 10;

/// Clusters made by this process (the `seq` in bridge and namespace names).
static CLUSTERS: AtomicU32 = AtomicU32::new(0);
/// Veth pairs made by this process (the `n` in `hs-<pid>v<n>`).
static VETHS: AtomicU32 = AtomicU32::new(0);

/// One process's namespace.
#[derive(Clone, Debug)]
pub struct NsNode {
    /// The process (`master-1`, `slave-2`).
    pub name: String,
    /// Its namespace (`hs-<pid>-<seq>-master-1`).
    pub ns: String,
    /// Its address on the bridge.
    pub ip: Ipv4Addr,
    /// The host end of its veth pair (in the root namespace, a port of the bridge).
    pub veth: String,
}

/// The namespaces, veth pairs and bridge of one cluster. Dropping it removes them all
/// (killing whatever still runs inside).
#[derive(Debug)]
pub struct ClusterNet {
    /// The bridge (root namespace).
    pub bridge: String,
    /// The bridge's address: where the root namespace's traffic to the processes comes from.
    pub host_ip: Ipv4Addr,
    /// One namespace per process, in the order given to [`create`](Self::create).
    pub nodes: Vec<NsNode>,
    pub(super) ip: PathBuf,
    torn_down: bool,
}

/// A tool by name: on `PATH`, or in the system directories (`ip` and `nft` live in
/// `/usr/sbin`, not always on a user's `PATH`).
pub fn find_tool(tool: &str) -> Option<PathBuf> {
    let path_dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let system = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from);
    path_dirs
        .into_iter()
        .chain(system)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Whether this process runs as root (effective uid 0: the owner of `/proc/self`).
pub fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

/// Checks that namespaces can be made here: root, and each of `tools` (`ip`; the chaos tool
/// also `nft`) found. The first thing missing is the error.
pub fn check_available(tools: &[&str]) -> Result<(), LaunchError> {
    if !is_root() {
        return Err(LaunchError::NotRoot);
    }
    for tool in tools {
        if find_tool(tool).is_none() {
            return Err(LaunchError::MissingTool {
                tool: (*tool).to_string(),
            });
        }
    }
    Ok(())
}

/// Runs `prog args`; its stderr is the error when it fails.
pub(super) fn run_tool(prog: &Path, args: &[&str], stdin: Option<&str>) -> Result<(), LaunchError> {
    use std::io::Write;
    use std::process::Stdio;
    let command = || {
        let name = prog.file_name().map_or_else(
            || prog.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        format!("{name} {}", args.join(" "))
    };
    let mut child = Command::new(prog)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| LaunchError::Net {
            command: command(),
            detail: e.to_string(),
        })?;
    if let (Some(text), Some(mut input)) = (stdin, child.stdin.take()) {
        let _ = input.write_all(text.as_bytes());
    }
    let out = child.wait_with_output().map_err(|e| LaunchError::Net {
        command: command(),
        detail: e.to_string(),
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(LaunchError::Net {
            command: command(),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// `prog args`'s stdout ("" when it fails).
fn tool_output(prog: &Path, args: &[&str]) -> String {
    Command::new(prog)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Whether process `pid` runs (exists and is not a zombie).
fn alive(pid: u32) -> bool {
    i32::try_from(pid)
        .ok()
        .and_then(hetsched_common::procstat::ProcStat::read)
        .is_some_and(|s| !s.has_ended())
}

/// The launcher pid in one of this module's names (`hs-<pid>-…`, `hs-<pid>v<n>`).
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// SIGKILLs every process in namespace `ns`.
fn kill_inside(ip: &Path, ns: &str) {
    for pid in tool_output(ip, &["netns", "pids", ns])
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// The names of the namespaces on this machine.
fn namespaces(ip: &Path) -> Vec<String> {
    tool_output(ip, &["netns", "list"])
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// The names of the links of the root namespace.
fn links(ip: &Path) -> Vec<String> {
    // `12: hs-123v3@if2: <BROADCAST,...`
    tool_output(ip, &["-o", "link", "show"])
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .collect()
}

/// Namespaces and links (`hs-<pid>…`) whose launcher `pid` runs no more: killed what runs
/// inside, then removed. Returns the names removed.
pub fn sweep_leftovers() -> Vec<String> {
    let Some(ip) = find_tool("ip") else {
        return Vec::new();
    };
    let stale = |name: &str| owner_pid(name).is_some_and(|pid| !alive(pid));
    let mut removed = Vec::new();
    for ns in namespaces(&ip).into_iter().filter(|n| stale(n)) {
        kill_inside(&ip, &ns);
        if run_tool(&ip, &["netns", "del", &ns], None).is_ok() {
            removed.push(ns);
        }
    }
    for link in links(&ip).into_iter().filter(|n| stale(n)) {
        // A veth's host end goes with its namespace: it may be gone by now.
        if run_tool(&ip, &["link", "del", &link], None).is_ok() {
            removed.push(link);
        }
    }
    removed
}

/// Every name (namespace or root-namespace link) of this module's, left by launcher `pid`
/// or by any launcher (`None`): what tests check is gone.
pub fn names_of(pid: Option<u32>) -> Vec<String> {
    let Some(ip) = find_tool("ip") else {
        return Vec::new();
    };
    namespaces(&ip)
        .into_iter()
        .chain(links(&ip))
        .filter(|n| owner_pid(n).is_some_and(|p| pid.is_none_or(|want| p == want)))
        .collect()
}

/// Holds the launchers' lock file (the temp dir's `hetsched-netns.lock`) while alive.
struct Lock(#[allow(dead_code)] nix::fcntl::Flock<std::fs::File>);

impl Lock {
    fn take() -> Result<Self, LaunchError> {
        let path = std::env::temp_dir().join("hetsched-netns.lock");
        let io = |source| LaunchError::Io {
            path: path.display().to_string(),
            source,
        };
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io)?;
        nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
            .map(Self)
            .map_err(|(_, errno)| io(errno.into()))
    }
}

/// Whether `10.213.k.0/24` is free: no interface address in it, no route of /16 or longer
/// overlapping it.
fn subnet_free(k: u8, addrs: &str, routes: &str) -> bool {
    let ours = u32::from(Ipv4Addr::new(NET[0], NET[1], k, 0));
    let overlaps = |net: u32, len: u32| {
        let l = len.min(24);
        let mask = if l == 0 { 0 } else { u32::MAX << (32 - l) };
        net & mask == ours & mask
    };
    let cidr = |s: &str| -> Option<(u32, u32)> {
        let (a, len) = s.split_once('/').unwrap_or((s, "32"));
        Some((u32::from(a.parse::<Ipv4Addr>().ok()?), len.parse().ok()?))
    };
    // `ip -o -4 addr show`: `2: eth0    inet 192.0.2.2/24 brd ...`
    let addr_clash = addrs
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "inet")
        .filter_map(|w| cidr(w[1]))
        .any(|(a, _)| overlaps(a, 24));
    // `ip -4 route show`: `10.213.0.0/16 dev x ...` (`default` and broad routes pass).
    let route_clash = routes
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(cidr)
        .any(|(net, len)| len >= 16 && overlaps(net, len));
    !addr_clash && !route_clash
}

impl ClusterNet {
    /// Makes one namespace per name in `names` (`master-1`, …), each with a veth pair on a
    /// fresh bridge, after sweeping leftovers of crashed launchers. On an error everything
    /// made so far is removed.
    pub fn create(names: &[String]) -> Result<Self, LaunchError> {
        check_available(&["ip"])?;
        let ip = find_tool("ip").ok_or_else(|| LaunchError::MissingTool { tool: "ip".into() })?;
        if names.len() > 240 {
            return Err(LaunchError::NoSubnet);
        }
        let pid = std::process::id();
        let seq = CLUSTERS.fetch_add(1, Ordering::Relaxed) % 1000;
        let lock = Lock::take()?;
        sweep_leftovers();
        let addrs = tool_output(&ip, &["-o", "-4", "addr", "show"]);
        let routes = tool_output(&ip, &["-4", "route", "show"]);
        let start = (pid as usize + seq as usize * 37) % 254;
        let k = (0..254)
            .map(|i| ((start + i) % 254 + 1) as u8)
            .find(|k| subnet_free(*k, &addrs, &routes))
            .ok_or(LaunchError::NoSubnet)?;
        let mut net = ClusterNet {
            bridge: format!("{PREFIX}{pid}-{seq}"),
            host_ip: Ipv4Addr::new(NET[0], NET[1], k, 1),
            nodes: Vec::new(),
            ip,
            torn_down: false,
        };
        // From here on, dropping `net` removes what was made.
        let bridge = net.bridge.clone();
        net.ip(&["link", "add", &bridge, "type", "bridge"])?;
        net.ip(&[
            "addr",
            "add",
            &format!("{}/24", net.host_ip),
            "dev",
            &bridge,
        ])?;
        net.ip(&["link", "set", &bridge, "up"])?;
        // The bridge's address claims the /24: other launchers may go on.
        drop(lock);
        for (i, name) in names.iter().enumerate() {
            let node = NsNode {
                name: name.clone(),
                ns: format!("{PREFIX}{pid}-{seq}-{name}"),
                ip: Ipv4Addr::new(NET[0], NET[1], k, (FIRST_HOST + i) as u8),
                veth: format!(
                    "{PREFIX}{pid}v{}",
                    VETHS.fetch_add(1, Ordering::Relaxed) % 10_000
                ),
            };
            net.nodes.push(node.clone());
            let (ns, veth) = (node.ns.as_str(), node.veth.as_str());
            net.ip(&["netns", "add", ns])?;
            net.ip(&[
                "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns,
            ])?;
            net.ip(&["link", "set", veth, "master", &bridge, "up"])?;
            let addr = format!("{}/24", node.ip);
            net.ip(&["-n", ns, "addr", "add", &addr, "dev", "eth0"])?;
            net.ip(&["-n", ns, "link", "set", "eth0", "up"])?;
            net.ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    fn ip(&self, args: &[&str]) -> Result<(), LaunchError> {
        run_tool(&self.ip, args, None)
    }

    /// The namespace of process `name`.
    pub fn node(&self, name: &str) -> Option<&NsNode> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The file of process `name`'s namespace (`/var/run/netns/NS`, where `ip netns add`
    /// puts it), which a child enters (`LocalProc::spawn_in`).
    pub fn ns_path(&self, name: &str) -> Option<PathBuf> {
        self.node(name)
            .map(|n| Path::new("/var/run/netns").join(&n.ns))
    }

    /// Removes every namespace (killing what still runs inside), veth pair and the bridge.
    /// Idempotent; failures are logged.
    pub fn teardown(&mut self) {
        if self.torn_down {
            return;
        }
        self.torn_down = true;
        for n in &self.nodes {
            kill_inside(&self.ip, &n.ns);
        }
        for n in &self.nodes {
            // Deleting one end of a veth pair deletes both.
            let _ = self.ip(&["link", "del", &n.veth]);
            if let Err(e) = self.ip(&["netns", "del", &n.ns]) {
                tracing::warn!("{e}");
            }
        }
        if let Err(e) = self.ip(&["link", "del", &self.bridge]) {
            tracing::warn!("{e}");
        }
    }
}

impl Drop for ClusterNet {
    fn drop(&mut self) {
        self.teardown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_their_launchers_pid() {
        assert_eq!(owner_pid("hs-1234-0-master-1"), Some(1234));
        assert_eq!(owner_pid("hs-1234v17"), Some(1234));
        assert_eq!(owner_pid("hs-x"), None);
        assert_eq!(owner_pid("eth0"), None);
    }

    #[test]
    fn a_subnet_is_free_unless_an_address_or_a_narrow_route_touches_it() {
        let addrs = "2: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\n\
                     9: hs-1-0    inet 10.213.7.1/24 scope global hs-1-0\n";
        let routes = "default via 192.0.2.1 dev eth0\n10.0.0.0/8 dev tun0\n\
                      10.213.9.128/25 dev x\n";
        assert!(subnet_free(8, addrs, routes));
        assert!(!subnet_free(7, addrs, routes), "an address in it");
        assert!(!subnet_free(9, addrs, routes), "a route inside it");
        assert!(
            !subnet_free(3, addrs, "10.213.0.0/16 dev y\n"),
            "a /16 over it"
        );
    }
}
