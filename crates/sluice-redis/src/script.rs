//! The decision script: its source, its SHA-1, one call per slot group, and the reply.

use std::sync::OnceLock;

use redis::{Cmd, ErrorKind, RedisError, RedisResult, Value};
use sluice_core::Decision;
use sluice_store::Check;

use crate::connection::Conn;
use crate::plan::ScriptPolicy;
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

/// One script call: some of a request's checks (those of one slot), and the time argument.
#[derive(Debug)]
pub(crate) struct Call<'a> {
    pub plans: &'a [ScriptPolicy],
    pub checks: &'a [Check],
    /// Which of `checks` this call decides.
    pub indices: Vec<usize>,
    /// Their stored keys, in the same order.
    pub keys: Vec<String>,
    /// Microseconds since the epoch, or `None` for the server's clock.
    pub now: Option<u64>,
    /// Milliseconds added to every expiry.
    pub grace_ms: u64,
}

impl Call<'_> {
    fn command(&self, name: &str, script: &str) -> Cmd {
        let mut cmd = redis::cmd(name);
        cmd.arg(script).arg(self.keys.len()).arg(&self.keys);
        match self.now {
            Some(us) => cmd.arg(us),
            None => cmd.arg(""),
        };
        cmd.arg(self.grace_ms);
        for &i in &self.indices {
            let c = &self.checks[i];
            cmd.arg(&self.plans[c.policy].args[..]).arg(c.cost);
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
        if items.len() != 1 + PER_CHECK * self.indices.len() {
            return Err(bad(&format!("{} values for {} checks", items.len(), self.indices.len())));
        }
        let num = |v: &Value| match v {
            Value::Int(n) if *n >= 0 => Ok(*n as u64),
            _ => Err(bad("a value is not a non-negative integer")),
        };
        let us = |v: &Value| num(v).map(|n| n.saturating_mul(1000));
        let mut out = Vec::with_capacity(self.indices.len());
        for (chunk, &i) in items[1..].chunks_exact(PER_CHECK).zip(&self.indices) {
            let limit = self.plans[self.checks[i].policy].limit;
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
