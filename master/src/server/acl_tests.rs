//! The token requests' decisions: what is refused before proposing, the command built
//! (no secret in it), the answers to each outcome.

use super::*;
use crate::server::test_state::{TestState, AT_MS};

fn generated() -> Generated {
    hetsched_common::tokens::generate().expect("random source")
}

#[test]
fn a_token_is_proposed_without_its_secret_and_answered_with_it() {
    let g = generated();
    let secret_token = g.token.clone();
    let t = Acl::create(g, "alice".into(), TokenRole::User, Some(60_000), AT_MS).expect("valid");
    let Command::CreateToken { token, bootstrap } = &t.command else {
        panic!("not a CreateToken: {:?}", t.command);
    };
    assert!(!bootstrap);
    assert_eq!(
        (token.user.as_str(), token.role, token.expires_ms),
        ("alice", TokenRole::User, Some(AT_MS + 60_000))
    );
    let (_, secret) = hetsched_common::tokens::parse(&secret_token).expect("a token");
    assert!(
        !format!("{:?}", t.command).contains(secret),
        "no secret in the log"
    );
    match t.answer(Outcome::Ignored("created".into())) {
        Ok(ClientResponse::Token(n)) => assert_eq!(n.token, secret_token),
        o => panic!("not answered with the token: {o:?}"),
    }
}

#[test]
fn bad_users_and_ttls_are_invalid_and_a_second_bootstrap_is_denied() {
    for user in ["", "two words", &"x".repeat(129)] {
        let e = Acl::create(generated(), user.into(), TokenRole::User, None, AT_MS)
            .expect_err("bad user");
        assert_eq!(e.kind, ErrorKind::Invalid, "exit 2: {user:?}");
    }
    let e = Acl::create(generated(), "a".into(), TokenRole::User, Some(0), AT_MS)
        .expect_err("zero ttl");
    assert_eq!(e.message, "--ttl must be positive");
    let b = Acl::bootstrap(generated());
    assert!(matches!(
        &b.command,
        Command::CreateToken { token, bootstrap: true } if token.user == BOOTSTRAP_USER
            && token.role == TokenRole::Admin
    ));
    let e = b
        .answer(Outcome::Rejected("already bootstrapped".into()))
        .expect_err("second bootstrap");
    assert_eq!(e.kind, ErrorKind::PermissionDenied, "exit 3");
    let c = Acl::create(generated(), "a".into(), TokenRole::User, None, AT_MS).expect("valid");
    let e = c
        .answer(Outcome::Rejected("why".into()))
        .expect_err("rejected");
    assert_eq!(e.kind, ErrorKind::Invalid);
}

#[test]
fn revoking_names_a_known_token_by_accessor_or_whole_token() {
    let mut t = TestState::new();
    let token = t.token("alice", TokenRole::User, None);
    let (accessor, _) = hetsched_common::tokens::parse(&token).expect("a token");
    let acl = Acl::new(&t.state);
    let expected = Command::RevokeToken {
        accessor: accessor.to_string(),
    };
    assert_eq!(acl.revoke(accessor.to_string()), Ok(expected.clone()));
    assert_eq!(acl.revoke(token.clone()), Ok(expected));
    let e = acl.revoke("0123".into()).expect_err("unknown");
    assert_eq!(e.kind, ErrorKind::NotFound, "exit 4");
    let ClientResponse::Tokens(list) = acl.tokens() else {
        panic!("not a listing");
    };
    assert_eq!(list.len(), 1);
    assert!(!format!("{list:?}").contains(&t.state.acl().tokens[accessor].hash));
    assert_eq!(
        Acl::revoked(Outcome::Ignored("revoked".into())),
        Ok(ClientResponse::Done)
    );
    assert_eq!(
        Acl::revoked(Outcome::Rejected("gone".into())).map_err(|e| e.kind),
        Err(ErrorKind::NotFound)
    );
}
