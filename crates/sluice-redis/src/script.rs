//! The decision script: its source, its SHA-1, one call per slot group, and the reply.

use std::sync::OnceLock;

use redis::{Cmd, ErrorKind, RedisError, RedisResult, Value};
use sluice_core::Decision;

use crate::connection::Conn;
use crate::stats::{Counters, bump};

/// The Lua source of the decision script (`scripts/decide.lua`).
pub const SCRIPT_SOURCE: &str = include_str!("../scripts/decide.lua");

/// Values the script returns per check.
const PER_CHECK: usize = 6;

/// The script's SHA-1, as `EVALSHA` wants it.
pub fn script_sha() -> &'static str {
    static SHA: OnceLock<String> = OnceLock::new();
    SHA.get_or_init(|| redis::Script::new(SCRIPT_SOURCE).get_hash().to_string())
}

/// One script call: the stored keys, `ARGV[1..2]`, and five arguments per check.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub keys: Vec<String>,
    /// Microseconds since the epoch, or empty for the server's clock.
    pub now: String,
    /// Milliseconds added to every expiry.
    pub grace_ms: u64,
    /// Per check: algorithm, a, b, c, cost.
    pub args: Vec<[String; 5]>,
    /// Per check: the limit, reported in its decision.
    pub limits: Vec<u64>,
}

impl Call {
    fn command(&self, name: &str, script: &str) -> Cmd {
        let mut cmd = redis::cmd(name);
        cmd.arg(script).arg(self.keys.len()).arg(&self.keys).arg(&self.now).arg(self.grace_ms);
        for a in &self.args {
            cmd.arg(&a[..]);
        }
        cmd
    }

    /// Runs the script by SHA-1, sending its source again if Redis has lost it (a restart,
    /// `SCRIPT FLUSH`): `EVAL` both runs it and puts it back in the script cache.
    pub async fn run(&self, conn: &mut Conn, counters: &Counters) -> RedisResult<Vec<Decision>> {
        bump(&counters.redis_calls);
        let reply = match conn.query(&self.command("EVALSHA", script_sha())).await {
            Err(e) if e.kind() == ErrorKind::NoScriptError => {
                bump(&counters.script_reloads);
                bump(&counters.redis_calls);
                conn.query(&self.command("EVAL", SCRIPT_SOURCE)).await?
            }
            other => other?,
        };
        self.decisions(reply)
    }

    fn decisions(&self, reply: Value) -> RedisResult<Vec<Decision>> {
        let bad = |what: &str| RedisError::from((ErrorKind::ParseError, "unexpected script reply", what.to_string()));
        let Value::Array(items) = reply else {
            return Err(bad("not an array"));
        };
        if items.len() != 1 + PER_CHECK * self.limits.len() {
            return Err(bad(&format!("{} values for {} checks", items.len(), self.limits.len())));
        }
        let num = |v: &Value| match v {
            Value::Int(n) if *n >= 0 => Ok(*n as u64),
            _ => Err(bad("a value is not a non-negative integer")),
        };
        let us = |v: &Value| num(v).map(|n| n.saturating_mul(1000));
        let mut out = Vec::with_capacity(self.limits.len());
        for (chunk, &limit) in items[1..].chunks_exact(PER_CHECK).zip(&self.limits) {
            out.push(Decision {
                allowed: num(&chunk[0])? == 1,
                limit,
                remaining: num(&chunk[1])?,
                reset_after: us(&chunk[2])?,
                retry_after: us(&chunk[3])?.saturating_add(num(&chunk[4])?),
                delay: us(&chunk[5])?,
            });
        }
        Ok(out)
    }
}
