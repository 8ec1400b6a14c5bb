//! Tests of the handle: its auto traits, and configurations refused before anything starts.

use super::*;
use std::collections::BTreeMap;

struct Nop;
impl StateMachine for Nop {
    type Output = ();
    fn apply(&mut self, _: u64, _: &[u8]) {}
    fn snapshot(&self) -> Vec<u8> {
        Vec::new()
    }
    fn restore(&mut self, _: &[u8]) -> Result<(), String> {
        Ok(())
    }
}

#[test]
fn handle_is_clone_send_sync() {
    fn check<T: Clone + Send + Sync + 'static>() {}
    check::<Consensus<Nop>>();
}

#[test]
fn bad_configs_are_refused() {
    let peers: BTreeMap<u64, String> = [(1, "127.0.0.1:1".to_string())].into();
    let dir = std::env::temp_dir().join("hetsched-consensus-never-created");
    let mut cfg = RaftConfig::new(0, peers.clone(), &dir);
    assert!(matches!(validate(&cfg), Err(Error::Config(_))));
    cfg.id = 2;
    assert!(
        matches!(validate(&cfg), Err(Error::Config(_))),
        "not a peer"
    );
    cfg.id = 1;
    assert!(validate(&cfg).is_ok());
    cfg.heartbeat_ticks = cfg.election_ticks;
    assert!(matches!(validate(&cfg), Err(Error::Config(_))));
    let cfg = RaftConfig::new(1, peers, &dir);
    // Outside an actix System.
    assert!(matches!(Consensus::start(cfg, Nop), Err(Error::Config(_))));
}
