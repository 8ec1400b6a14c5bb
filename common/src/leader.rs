//! Following the leader: one client for everything that must reach the leading master.
//!
//! A [`LeaderClient`] knows the configured masters and the *target*, the master it asks
//! next: first a remembered leader (a hint) or the first master; after an answer, the master
//! that answered (the leader, for requests only the leader serves). One [`attempt`] sends a
//! message to the target:
//!
//! - a reply that is not an error ends it; the target stays (it is the leader);
//! - `NotLeader` naming another master's address moves the target there and asks again at
//!   once, a few hops at most ([`LeaderOptions::max_redirects`]), so two confused masters
//!   cannot bounce a request forever;
//! - a broken connection, a timeout, `NotLeader` without a usable address, or `Unavailable`
//!   moves the target to the next configured master (round robin) and fails with a
//!   retryable error; `Unknown` (outcome unknown, leadership changing: the same request id
//!   is safe to send again) fails retryably at the same target;
//! - any other error answer is a refusal, returned as it is.
//!
//! [`request`] repeats attempts until a reply, a refusal, or an overall deadline, backing
//! off exponentially whenever a whole round of masters has failed or the same master is
//! asked again. The connection to the target is kept between requests.
//!
//! [`attempt`]: LeaderClient::attempt
//! [`request`]: LeaderClient::request

use crate::backoff::Backoff;
use crate::protocol::{ErrorKind, ErrorReply, Message};
use crate::wire::{CallError, Connection};
use std::time::{Duration, Instant};

/// Timing and retry policy of a [`LeaderClient`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderOptions {
    /// Longest wait for a connection to one master.
    pub connect_timeout: Duration,
    /// Longest wait for one master's answer.
    pub call_timeout: Duration,
    /// Most `NotLeader` redirects followed within one attempt.
    pub max_redirects: usize,
    /// First back-off of [`LeaderClient::request`].
    pub backoff_min: Duration,
    /// Largest back-off (each one doubles up to it).
    pub backoff_max: Duration,
    /// Treat `Busy` (admission back-pressure) as "retry later" instead of a refusal.
    pub retry_busy: bool,
}

impl Default for LeaderOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(1),
            call_timeout: Duration::from_secs(10),
            max_redirects: 4,
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_millis(500),
            retry_busy: false,
        }
    }
}

/// Why a request got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The client has no master address at all.
    #[error("no master address given")]
    NoMasters,
    /// A master could not be reached, or the connection broke or timed out before its answer.
    #[error("{addr}: {source}")]
    Unreachable {
        /// The master.
        addr: String,
        /// What the connection reported.
        #[source]
        source: CallError,
    },
    /// The master is not the leader and named none to follow (or the redirects ran out).
    #[error("{message}")]
    NoLeader {
        /// The master that answered.
        addr: String,
        /// Its words.
        message: String,
    },
    /// The master cannot serve the request now (`Unavailable`, `Unknown`, or `Busy` with
    /// [`LeaderOptions::retry_busy`]): retry later.
    #[error("{message}")]
    Unavailable {
        /// The master that answered.
        addr: String,
        /// Its answer's kind.
        kind: ErrorKind,
        /// Its words.
        message: String,
    },
    /// The master refused the request (invalid, not found, forbidden, unknown node, …).
    /// Retrying the same request would not help.
    #[error("{message}")]
    Refused {
        /// The master that answered.
        addr: String,
        /// Its answer's kind.
        kind: ErrorKind,
        /// Its words.
        message: String,
    },
    /// An answer of a kind the request does not take (made by callers through
    /// [`LeaderError::unexpected`]; the client itself passes every non-error reply on).
    #[error("unexpected answer from {addr}: {answer}")]
    Protocol {
        /// The master that answered.
        addr: String,
        /// The answer, shortened.
        answer: String,
    },
    /// [`LeaderClient::request`] found no leader to answer before its deadline.
    #[error("no leader answered within {deadline:?}: {last}")]
    Deadline {
        /// The deadline.
        deadline: Duration,
        /// The last failure.
        last: Box<LeaderError>,
    },
}

impl LeaderError {
    /// Whether another attempt (at the same or the next master) may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            LeaderError::Unreachable { .. }
                | LeaderError::NoLeader { .. }
                | LeaderError::Unavailable { .. }
        )
    }

    /// A [`LeaderError::Protocol`] for `answer` from `addr` (its debug form, cut at 200
    /// characters).
    pub fn unexpected(addr: &str, answer: &Message) -> Self {
        let s = format!("{answer:?}");
        let answer = match s.char_indices().nth(200) {
            Some((i, _)) => format!("{}…", &s[..i]),
            None => s,
        };
        LeaderError::Protocol {
            addr: addr.to_string(),
            answer,
        }
    }
}

/// A client that sends requests to the leading master, following redirects and retrying.
/// Cloning copies the remembered target and shares the open connection.
#[derive(Clone)]
pub struct LeaderClient {
    masters: Vec<String>,
    /// The master asked next.
    target: String,
    /// Index in `masters` of the next fallback.
    next: usize,
    /// Whether the target is still the remembered leader given as a hint: when it fails,
    /// the configured masters are asked at once (the hint was not part of a round).
    on_hint: bool,
    conn: Option<Connection>,
    opts: LeaderOptions,
    /// TLS setup of its connections; `None`: the process's ([`crate::wire::tls::current`]).
    tls: Option<std::sync::Arc<crate::wire::tls::TlsSetup>>,
    /// Answers the masters' requests on its connections ([`Connection::connect_serving`]).
    commands: Option<crate::wire::Handler>,
    /// Connections opened so far.
    connects: u64,
}

impl std::fmt::Debug for LeaderClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderClient")
            .field("masters", &self.masters)
            .field("target", &self.target)
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl LeaderClient {
    /// A client for `masters` (cluster addresses, `HOST:PORT`) starting at the first one,
    /// with the default options.
    pub fn new(masters: Vec<String>) -> Self {
        let target = masters.first().cloned().unwrap_or_default();
        Self {
            next: usize::from(!masters.is_empty()),
            on_hint: false,
            masters,
            target,
            conn: None,
            opts: LeaderOptions::default(),
            tls: None,
            commands: None,
            connects: 0,
        }
    }

    /// The same client answering, with `handler`, the requests a master sends back on
    /// its connections (a slave's link takes its leader's commands so).
    pub fn with_commands(mut self, handler: crate::wire::Handler) -> Self {
        self.commands = Some(handler);
        self
    }

    /// How many connections the client has opened: a change means requests now go over
    /// a new one (a slave attaches again).
    pub fn connections_opened(&self) -> u64 {
        self.connects
    }

    /// The same client connecting with `setup` instead of the process's TLS setup.
    pub fn with_tls(mut self, setup: std::sync::Arc<crate::wire::tls::TlsSetup>) -> Self {
        self.tls = Some(setup);
        self
    }

    /// The same client with `opts`.
    pub fn with_options(mut self, opts: LeaderOptions) -> Self {
        self.opts = opts;
        self
    }

    /// Starts at `hint` (a leader remembered from before) when given; the configured masters
    /// follow from the first.
    pub fn with_leader_hint(mut self, hint: Option<String>) -> Self {
        if let Some(h) = hint.filter(|h| !h.is_empty()) {
            self.target = h;
            self.next = 0;
            self.on_hint = true;
            self.conn = None;
        }
        self
    }

    /// The configured masters.
    pub fn masters(&self) -> &[String] {
        &self.masters
    }

    /// The master asked next: after a reply, the one that gave it (the leader).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The options in force.
    pub fn options(&self) -> LeaderOptions {
        self.opts
    }

    /// One attempt: sends `msg` to the target, following `NotLeader` redirects. Never
    /// sleeps; on a retryable failure the target has already moved on (see the module
    /// documentation).
    pub async fn attempt(&mut self, msg: Message) -> Result<Message, LeaderError> {
        self.attempt_until(msg, None).await
    }

    /// Sends `msg` until a reply, a refusal, or `deadline` (from now) passes, backing off
    /// between rounds. No single connect or call outlasts the time left (nor 50 ms less).
    pub async fn request(
        &mut self,
        msg: Message,
        deadline: Duration,
    ) -> Result<Message, LeaderError> {
        let start = Instant::now();
        let mut backoff = Backoff::new(self.opts.backoff_min, self.opts.backoff_max);
        loop {
            let before = self.target.clone();
            let from_hint = self.on_hint;
            let err = match self
                .attempt_until(msg.clone(), Some((start, deadline)))
                .await
            {
                Ok(m) => return Ok(m),
                Err(e) if !e.is_retryable() => return Err(e),
                Err(e) => e,
            };
            if start.elapsed() >= deadline {
                return Err(LeaderError::Deadline {
                    deadline,
                    last: Box::new(err),
                });
            }
            // A full round failed, or the same master is asked again: wait first. A failed
            // hint (a stale remembered leader) moves on to the first master at once.
            if self.target == before || (self.round_over() && !from_hint) {
                let left = deadline.saturating_sub(start.elapsed());
                tokio::time::sleep(backoff.next_delay().min(left)).await;
            }
        }
    }

    async fn attempt_until(
        &mut self,
        msg: Message,
        budget: Option<(Instant, Duration)>,
    ) -> Result<Message, LeaderError> {
        if self.target.is_empty() {
            return Err(LeaderError::NoMasters);
        }
        let mut redirects = 0;
        loop {
            let addr = self.target.clone();
            let cap = |t: Duration| match budget {
                Some((start, deadline)) => t.min(
                    deadline
                        .saturating_sub(start.elapsed())
                        .max(Duration::from_millis(50)),
                ),
                None => t,
            };
            let conn = match &self.conn {
                Some(c) if !c.is_closed() && c.addr() == addr => c.clone(),
                _ => match Connection::connect_serving(
                    &addr,
                    cap(self.opts.connect_timeout),
                    crate::wire::FrameLimits::default(),
                    self.tls.clone().or_else(crate::wire::tls::current),
                    self.commands.clone(),
                )
                .await
                {
                    Ok(c) => {
                        self.connects += 1;
                        self.conn = Some(c.clone());
                        c
                    }
                    Err(source) => {
                        self.rotate();
                        return Err(LeaderError::Unreachable { addr, source });
                    }
                },
            };
            let answer = match conn.call(msg.clone(), cap(self.opts.call_timeout)).await {
                Ok(a) => {
                    tracing::debug!(target: "hetsched::trace", %addr, "client: answered");
                    a
                }
                Err(source) => {
                    self.rotate();
                    return Err(LeaderError::Unreachable { addr, source });
                }
            };
            let ErrorReply { kind, message } = match answer {
                Message::Error(e) => e,
                reply => return Ok(reply),
            };
            match kind {
                ErrorKind::NotLeader {
                    leader_addr: Some(leader),
                    ..
                } if redirects < self.opts.max_redirects && leader != addr => {
                    tracing::debug!(from = %addr, to = %leader, "following the leader");
                    redirects += 1;
                    self.target = leader;
                    self.on_hint = false;
                    self.conn = None;
                }
                ErrorKind::NotLeader { .. } => {
                    self.rotate();
                    return Err(LeaderError::NoLeader { addr, message });
                }
                ErrorKind::Unavailable => {
                    self.rotate();
                    return Err(LeaderError::Unavailable {
                        addr,
                        kind: ErrorKind::Unavailable,
                        message,
                    });
                }
                kind @ ErrorKind::Unknown => {
                    return Err(LeaderError::Unavailable {
                        addr,
                        kind,
                        message,
                    })
                }
                kind @ ErrorKind::Busy if self.opts.retry_busy => {
                    return Err(LeaderError::Unavailable {
                        addr,
                        kind,
                        message,
                    })
                }
                kind => {
                    return Err(LeaderError::Refused {
                        addr,
                        kind,
                        message,
                    })
                }
            }
        }
    }

    /// Whether the last move of the target went back to the first configured master.
    fn round_over(&self) -> bool {
        !self.masters.is_empty() && self.next == 1 % self.masters.len()
    }

    /// Moves the target to the next configured master.
    fn rotate(&mut self) {
        self.conn = None;
        self.on_hint = false;
        if self.masters.is_empty() {
            return;
        }
        self.target = self.masters[self.next % self.masters.len()].clone();
        self.next = (self.next + 1) % self.masters.len();
    }
}

#[cfg(test)]
#[path = "leader_tests.rs"]
mod tests;
