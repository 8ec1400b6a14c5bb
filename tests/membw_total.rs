//! S3.6 on by default: a slave started with default flags measures its node's memory
//! bandwidth (a real triad), reports it in `nodes --json`, and a restart on the same data
//! directory reuses it without measuring again.

mod support;

use std::time::Duration;
use support::*;

fn membw(c: &Cluster) -> Option<(u64, String)> {
    let nodes = c.json(&["nodes"])?;
    let n = nodes.as_array()?.first()?.clone();
    (n["state"] == "up").then_some(())?;
    Some((
        n["membw_total_mbps"].as_u64()?,
        n["membw_total_source"].as_str()?.to_string(),
    ))
}

#[test]
fn a_default_slave_measures_its_memory_bandwidth_once_and_reuses_it() {
    let c = Cluster::start("membw", 1, 0, 2);
    c.wait_leader(Duration::from_secs(30));
    let data = c.dir.path().join("slave-data");
    let mut args = c.slave_args("s1", &data, 2);
    args.push("--no-profile".into());
    let first = start_proc("s1", args.clone(), c.dir.path());
    let (mbps, source) = wait_for("the measured total", Duration::from_secs(60), || membw(&c));
    assert!(mbps > 0, "{mbps}");
    assert_eq!(source, "triad", "no resctrl here: the triad's own rate");
    assert!(
        first
            .log_text()
            .contains("measured the node's memory bandwidth"),
        "{}",
        first.log_text()
    );
    assert!(data.join("membw-total.json").is_file());
    drop(first);
    let again = start_proc("s1-restarted", args, c.dir.path());
    wait_for(
        "the restarted slave's reuse",
        Duration::from_secs(60),
        || {
            again
                .log_text()
                .contains("reusing the measured memory bandwidth")
                .then_some(())
        },
    );
    let log = again.log_text();
    assert!(
        !log.contains("measured the node's memory bandwidth"),
        "measured again: {log}"
    );
    let (back, _) = wait_for("the node up again", Duration::from_secs(60), || membw(&c));
    assert_eq!(back, mbps, "the same total after the restart");
}
