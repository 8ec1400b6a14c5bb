//! `hetsched acl bootstrap` and `hetsched acl token create|list|revoke` (docs/SECURITY.md):
//! users' API tokens and their roles.

use super::client::{block_on, call};
use super::{exit, print_json, table};
use anyhow::bail;
use hetsched_common::protocol::{ClientRequest, ClientResponse, NewToken, TokenRole};

/// `hetsched acl ...`.
#[derive(clap::Subcommand, Debug)]
pub enum AclCommand {
    /// Create the first administrator token (answered once per cluster; needs the
    /// administrator's client certificate).
    Bootstrap {
        /// Print `{"token","user","role"}` as one JSON line.
        #[arg(long)]
        json: bool,
    },
    /// API tokens.
    #[command(subcommand)]
    Token(TokenCommand),
}

/// `hetsched acl token ...`.
#[derive(clap::Subcommand, Debug)]
pub enum TokenCommand {
    /// Create a token for a user; prints the token (shown only this once).
    Create {
        /// The user the token acts as.
        #[arg(long)]
        user: String,
        /// user (own jobs), operator (also drain, every job) or admin (also members,
        /// priority configuration, tokens).
        #[arg(long, default_value = "user")]
        role: String,
        /// Validity, e.g. 12h, 30d (default: no end).
        #[arg(long, value_parser = super::programs::parse_duration)]
        ttl: Option<std::time::Duration>,
        /// Print `{"token","user","role"}` as one JSON line.
        #[arg(long)]
        json: bool,
    },
    /// List tokens (accessors, users, roles; never secrets).
    List {
        /// Print one JSON line.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by its accessor (or the token itself).
    Revoke {
        /// The accessor, as `acl token list` shows it.
        accessor: String,
    },
}

/// Runs an `acl` subcommand.
pub fn run(masters: &[String], c: AclCommand) -> anyhow::Result<()> {
    let (req, json) = match c {
        AclCommand::Bootstrap { json } => (ClientRequest::AclBootstrap, json),
        AclCommand::Token(TokenCommand::Create {
            user,
            role,
            ttl,
            json,
        }) => {
            let role: TokenRole = role.parse().map_err(exit::bad_input)?;
            let ttl_ms = ttl.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            (ClientRequest::CreateToken { user, role, ttl_ms }, json)
        }
        AclCommand::Token(TokenCommand::List { json }) => (ClientRequest::Tokens, json),
        AclCommand::Token(TokenCommand::Revoke { accessor }) => {
            (ClientRequest::RevokeToken { accessor }, false)
        }
    };
    match block_on(call(masters, req, false))?? {
        ClientResponse::Token(t) => print_new(&t, json),
        ClientResponse::Tokens(list) if json => print_json(&list),
        ClientResponse::Tokens(list) => {
            let mut t = table::new(&["ACCESSOR", "USER", "ROLE", "CREATED", "EXPIRES"]);
            for i in list {
                t.add_row(vec![
                    i.accessor,
                    i.user,
                    i.role.to_string(),
                    when(Some(i.created_ms)),
                    when(i.expires_ms),
                ]);
            }
            table::print(&t)
        }
        ClientResponse::Done => {
            println!("revoked");
            Ok(())
        }
        other => bail!("unexpected answer: {other:?}"),
    }
}

fn print_new(t: &NewToken, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(&serde_json::json!({
            "token": t.token,
            "user": t.user,
            "role": t.role,
        }));
    }
    println!("{}", t.token);
    eprintln!(
        "token for user {} with role {} (accessor {}, expires {}); shown only this once",
        t.user,
        t.role,
        t.accessor,
        when(t.expires_ms)
    );
    Ok(())
}

fn when(ms: Option<u64>) -> String {
    match ms {
        None => "never".into(),
        Some(ms) => humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms),
        )
        .to_string(),
    }
}
