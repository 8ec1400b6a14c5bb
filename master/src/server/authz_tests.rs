//! The authorization decisions, against an applied state: no sockets, no runtime.

use super::*;
use crate::server::test_state::{spec, TestState, AT_MS};
use hetsched_common::protocol::{ListFilter, SlaveRequest, TokenRole};
use hetsched_common::ClientRequestId;

fn peer(secured: bool, identity: Option<Identity>, token: Option<String>) -> Peer {
    Peer {
        addr: "127.0.0.1:1".parse().expect("address"),
        identity,
        secured,
        token,
        link: None,
    }
}

fn user(name: &str) -> Caller {
    Caller::Known {
        name: name.into(),
        level: Level::User,
    }
}

fn submit_as(user: &str) -> ClientRequest {
    ClientRequest::Submit {
        request: ClientRequestId(1),
        spec: spec(user, 1, 1),
        allow_unplaceable: false,
    }
}

#[test]
fn an_insecure_master_trusts_everyone_and_a_secured_one_wants_credentials() {
    let t = TestState::new();
    let cache = TokenCache::default();
    let a = Authz::new(&t.state, &cache, AT_MS);
    assert_eq!(a.caller(&peer(false, None, None)), Ok(Caller::Trusted));
    let e = a
        .caller(&peer(true, None, None))
        .expect_err("no credentials");
    assert_eq!(e.kind, ErrorKind::Unauthenticated, "exit 3, HTTP 401");
    let root = Identity {
        role: Role::Client,
        name: ROOT_USER.into(),
    };
    assert_eq!(
        a.caller(&peer(true, Some(root), None)),
        Ok(Caller::Known {
            name: "root".into(),
            level: Level::Admin
        })
    );
    let slave = Identity {
        role: Role::Slave,
        name: "s1".into(),
    };
    assert_eq!(a.caller(&peer(true, Some(slave), None)), Ok(user("s1")));
}

#[test]
fn a_token_decides_the_caller_and_a_bad_one_is_unauthenticated() {
    let mut t = TestState::new();
    let token = t.token("alice", TokenRole::Operator, None);
    let expired = t.token("bob", TokenRole::User, Some(AT_MS));
    let cache = TokenCache::default();
    let a = Authz::new(&t.state, &cache, AT_MS + 100);
    let slave = Identity {
        role: Role::Slave,
        name: "s1".into(),
    };
    let alice = Caller::Known {
        name: "alice".into(),
        level: Level::Operator,
    };
    // Over the certificate's identity, twice (the second from the cache).
    for _ in 0..2 {
        let p = peer(true, Some(slave.clone()), Some(token.clone()));
        assert_eq!(a.caller(&p), Ok(alice.clone()));
    }
    assert_eq!(cache.lock().map(|c| c.len()).unwrap_or(0), 1);
    let (accessor, _) = hetsched_common::tokens::parse(&token).expect("a token");
    let wrong = format!("hst.{accessor}.{}", "0".repeat(64));
    for bad in [wrong.as_str(), "not-a-token", expired.as_str()] {
        let e = a.token_caller(bad).expect_err(bad);
        assert_eq!(e.kind, ErrorKind::Unauthenticated, "{bad}");
    }
}

#[test]
fn a_user_acts_only_on_its_own_jobs_and_an_operator_on_all() {
    let mut t = TestState::new();
    let (job, tasks) = t.job("alice", 1);
    let cache = TokenCache::default();
    let a = Authz::new(&t.state, &cache, AT_MS);
    let cancel = ClientRequest::Cancel {
        request: ClientRequestId(2),
        job,
    };
    let logs = ClientRequest::Explain { task: tasks[0] };
    assert_eq!(a.authorize(&user("alice"), &cancel), Ok(()));
    assert_eq!(a.authorize(&user("alice"), &logs), Ok(()));
    for req in [&cancel, &logs] {
        let e = a.authorize(&user("bob"), req).expect_err("another's job");
        assert_eq!(e.kind, ErrorKind::PermissionDenied, "exit 3, HTTP 403");
        assert!(
            e.message.contains("may act only on its own jobs"),
            "{}",
            e.message
        );
    }
    let operator = Caller::Known {
        name: "bob".into(),
        level: Level::Operator,
    };
    assert_eq!(a.authorize(&operator, &cancel), Ok(()));
    // An unknown job is not refused here: the handler answers "not found".
    let unknown = ClientRequest::Cancel {
        request: ClientRequestId(3),
        job: JobId(999),
    };
    assert_eq!(a.authorize(&user("bob"), &unknown), Ok(()));
    // Another user's listing is refused; an unnamed one is scoped to the caller's.
    let mut others = ClientRequest::Jobs {
        stale: false,
        filter: ListFilter {
            user: Some("alice".into()),
            ..Default::default()
        },
    };
    assert!(a.authorize(&user("bob"), &others).is_err());
    let mut mine = ClientRequest::Jobs {
        stale: false,
        filter: ListFilter::default(),
    };
    scope_request(&user("bob"), &mut mine);
    assert_eq!(a.authorize(&user("bob"), &mine), Ok(()));
    scope_request(&operator, &mut others);
    assert_eq!(a.authorize(&operator, &others), Ok(()));
}

#[test]
fn submits_are_scoped_to_the_caller_and_levels_gate_the_rest() {
    let t = TestState::new();
    let cache = TokenCache::default();
    let a = Authz::new(&t.state, &cache, AT_MS);
    let mut unnamed = submit_as("");
    scope_request(&user("carol"), &mut unnamed);
    let ClientRequest::Submit { spec, .. } = &unnamed else {
        panic!("still a submit");
    };
    assert_eq!(spec.user, "carol");
    let mut anonymous = submit_as("");
    scope_request(&Caller::Trusted, &mut anonymous);
    assert!(matches!(&anonymous, ClientRequest::Submit { spec, .. } if spec.user == "anonymous"));
    assert_eq!(a.authorize(&user("carol"), &unnamed), Ok(()));
    let e = a
        .authorize(&user("carol"), &submit_as("dave"))
        .expect_err("as another user");
    assert!(
        e.message.contains("may submit only as itself"),
        "{}",
        e.message
    );
    let drain = ClientRequest::Drain {
        request: ClientRequestId(4),
        node: "n1".into(),
        deadline_after_ms: None,
    };
    let e = a
        .authorize(&user("carol"), &drain)
        .expect_err("a user drains");
    assert_eq!(
        e.message,
        "permission denied: drain needs the operator role; carol has user"
    );
    let operator = Caller::Known {
        name: "op".into(),
        level: Level::Operator,
    };
    assert_eq!(a.authorize(&operator, &drain), Ok(()));
    let tokens = ClientRequest::Tokens;
    assert!(a.authorize(&operator, &tokens).is_err(), "admins only");
    assert_eq!(a.authorize(&Caller::Trusted, &tokens), Ok(()));
    assert_eq!(a.authorize(&user("carol"), &ClientRequest::Usage), Ok(()));
}

#[test]
fn a_slave_certificate_speaks_only_for_its_own_node() {
    let mut t = TestState::new();
    let n1 = t.node(1, "s1", 2);
    let n2 = t.node(2, "s2", 2);
    let cache = TokenCache::default();
    let a = Authz::new(&t.state, &cache, AT_MS);
    let s1 = peer(
        true,
        Some(Identity {
            role: Role::Slave,
            name: "s1".into(),
        }),
        None,
    );
    let steal = |node| SlaveRequest::StealRequest { node };
    assert_eq!(a.check_slave_name(&s1, &steal(n1)), Ok(()));
    let e = a.check_slave_name(&s1, &steal(n2)).expect_err("node s2");
    assert_eq!(e.kind, ErrorKind::PermissionDenied);
    // Insecure: names are not checked.
    let plain = peer(false, None, None);
    assert_eq!(a.check_slave_name(&plain, &steal(n2)), Ok(()));
}

#[test]
fn an_idempotency_key_is_bound_to_the_user_it_submits_as() {
    let key = ClientRequestId::from_key("sweep-1").expect("key");
    let keyed = |user: &str| ClientRequest::Submit {
        request: key,
        spec: spec(user, 1, 1),
        allow_unplaceable: false,
    };
    let bound = |mut r: ClientRequest| {
        bind_idempotency_key(&mut r);
        match r {
            ClientRequest::Submit { request, .. } => request,
            other => panic!("{other:?}"),
        }
    };
    let alice = bound(keyed("alice"));
    assert!(alice.is_keyed());
    assert_eq!(
        alice,
        bound(keyed("alice")),
        "a retry names the same request"
    );
    assert_ne!(
        alice,
        bound(keyed("bob")),
        "another user's equal key is another request"
    );
    assert_eq!(
        bound(submit_as("alice")),
        ClientRequestId(1),
        "automatic ids pass"
    );
    // Another write's key is bound to what it names.
    let cancel = |job: u64| {
        let mut r = ClientRequest::Cancel {
            request: key,
            job: JobId(job),
        };
        bind_idempotency_key(&mut r);
        match r {
            ClientRequest::Cancel { request, .. } => request,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(cancel(3), cancel(3));
    assert_ne!(cancel(3), cancel(4), "one key on two jobs is two requests");
    assert_ne!(cancel(3), alice);
}

#[test]
fn a_user_reads_its_own_accounting_and_an_operator_everyones() {
    use hetsched_common::protocol::{HistoryFilter, UsageBy};
    let t = TestState::new();
    let cache = TokenCache::default();
    let a = Authz::new(&t.state, &cache, AT_MS);
    let history = |user: Option<&str>| ClientRequest::AccountingHistory {
        filter: HistoryFilter {
            user: user.map(str::to_string),
            ..Default::default()
        },
        stale: false,
    };
    // Unnamed: narrowed to the caller's own.
    let mut mine = history(None);
    scope_request(&user("bob"), &mut mine);
    assert_eq!(mine, history(Some("bob")));
    assert_eq!(a.authorize(&user("bob"), &mine), Ok(()));
    assert!(a.authorize(&user("bob"), &history(Some("carol"))).is_err());
    let mut usage = ClientRequest::AccountingUsage {
        since_ms: 0,
        by: UsageBy::User,
        user: None,
        stale: false,
    };
    scope_request(&user("bob"), &mut usage);
    assert!(matches!(&usage, ClientRequest::AccountingUsage { user: Some(u), .. } if u == "bob"));
    let operator = Caller::Known {
        name: "op".into(),
        level: Level::Operator,
    };
    let mut all = history(None);
    scope_request(&operator, &mut all);
    assert_eq!(all, history(None), "an operator's stays unnarrowed");
    assert_eq!(a.authorize(&operator, &history(Some("carol"))), Ok(()));
}
