//! The scripts' sources and SHA-1s; the decision script's call (one per slot group) and reply.

use std::sync::OnceLock;

use redis::{Cmd, ErrorKind, RedisError, RedisResult, Value};
use sluice_core::Decision;
use sluice_store::Check;

use crate::connection::Conn;
use crate::lean::LeanConn;
use crate::plan::ScriptPolicy;
use crate::resp;
use crate::stats::{Counters, bump};

/// The Lua source of the decision script (`scripts/common.lua` then `scripts/decide.lua`).
pub const SCRIPT_SOURCE: &str = concat!(include_str!("../scripts/common.lua"), include_str!("../scripts/decide.lua"));

/// The Lua source of the settlement script (`scripts/common.lua` then `scripts/settle.lua`).
pub const SETTLE_SOURCE: &str = concat!(include_str!("../scripts/common.lua"), include_str!("../scripts/settle.lua"));

/// The Lua source of the hold script (`scripts/common.lua` then `scripts/hold.lua`): a policing
/// bucket's units held for a quota lease, or a hold released.
pub const HOLD_SOURCE: &str = concat!(include_str!("../scripts/common.lua"), include_str!("../scripts/hold.lua"));

/// Values the script returns per check.
const PER_CHECK: usize = 6;

/// The decision script's SHA-1, as `EVALSHA` wants it.
pub fn script_sha() -> &'static str {
    static SHA: OnceLock<String> = OnceLock::new();
    SHA.get_or_init(|| redis::Script::new(SCRIPT_SOURCE).get_hash().to_string())
}

/// The settlement script's SHA-1.
pub fn settle_sha() -> &'static str {
    static SHA: OnceLock<String> = OnceLock::new();
    SHA.get_or_init(|| redis::Script::new(SETTLE_SOURCE).get_hash().to_string())
}

/// The hold script's SHA-1.
pub fn hold_sha() -> &'static str {
    static SHA: OnceLock<String> = OnceLock::new();
    SHA.get_or_init(|| redis::Script::new(HOLD_SOURCE).get_hash().to_string())
}

/// Runs `script` by SHA-1 through `command(name, script)`, sending its source again if Redis has
/// lost it (a restart, `SCRIPT FLUSH`): `EVAL` both runs it and puts it back in the script cache.
pub(crate) async fn eval(
    conn: &mut Conn,
    counters: &Counters,
    (sha, source): (&str, &str),
    command: impl Fn(&str, &str) -> Cmd,
) -> RedisResult<Value> {
    bump(&counters.redis_calls);
    match conn.query(&command("EVALSHA", sha)).await {
        Err(e) if e.kind() == ErrorKind::NoScriptError => {
            bump(&counters.script_reloads);
            bump(&counters.redis_calls);
            conn.query(&command("EVAL", source)).await
        }
        other => other,
    }
}

/// One script call: some of a request's items (those of one slot: its checks to decide, or its
/// settlements), and the time argument.
#[derive(Debug)]
pub(crate) struct ScriptCall<'a, T> {
    pub plans: &'a [ScriptPolicy],
    pub items: &'a [T],
    /// Which of `items` this call carries.
    pub indices: Vec<usize>,
    /// Microseconds since the epoch, or `None` for the server's clock.
    pub now: Option<u64>,
    /// Milliseconds added to every expiry.
    pub grace_ms: u64,
    /// Decide without charging (the decision script's trailing `peek` argument).
    pub peek: bool,
}

impl<T> ScriptCall<'_, T> {
    /// The time calendar windows are computed at: the caller's time when it passes one, else
    /// this machine's wall clock (Redis's may differ a little: the script then picks between
    /// the window of this time and the next, `common.lua`'s `calendar_window`). Read once per
    /// call, and only when a calendar window asks for it.
    pub(crate) fn caller_time(&self) -> impl Fn() -> sluice_core::Nanos + '_ {
        let read = std::cell::OnceCell::new();
        move || {
            *read.get_or_init(|| match self.now {
                Some(us) => us.saturating_mul(1000),
                None => sluice_core::wall_clock_now(),
            })
        }
    }

    /// `name script numkeys` and the stored key of each item, then the time arguments.
    pub(crate) fn head(&self, name: &str, script: &str, check: impl Fn(&T) -> &Check) -> Cmd {
        let mut cmd = redis::cmd(name);
        cmd.arg(script).arg(self.indices.len());
        for &i in &self.indices {
            let c = check(&self.items[i]);
            cmd.arg(self.plans[c.policy].key(&c.key));
        }
        match self.now {
            Some(us) => cmd.arg(us),
            None => cmd.arg(""),
        };
        cmd.arg(self.grace_ms);
        cmd
    }
}

/// The decision script's call.
pub(crate) type Call<'a> = ScriptCall<'a, Check>;

impl Call<'_> {
    fn command(&self, name: &str, script: &str) -> Cmd {
        let mut cmd = self.head(name, script, |c| c);
        let at = self.caller_time();
        for &i in &self.indices {
            let c = &self.items[i];
            cmd.arg(&self.plans[c.policy].args_at(&at, None)[..]).arg(c.cost);
        }
        if self.peek {
            cmd.arg("peek");
        }
        cmd
    }

    /// The same command as [`Call::command`], written as RESP straight into `out`.
    fn write(&self, out: &mut Vec<u8>, name: &[u8], script: &str) {
        let n = self.indices.len();
        resp::array(out, 5 + n * (1 + 5) + usize::from(self.peek));
        resp::bulk(out, name);
        resp::bulk(out, script.as_bytes());
        resp::bulk_u64(out, n as u64);
        for &i in &self.indices {
            let c = &self.items[i];
            let plan = &self.plans[c.policy];
            resp::bulk_header(out, plan.key_len());
            plan.push_key(out, &c.key);
            out.extend_from_slice(b"\r\n");
        }
        match self.now {
            Some(us) => resp::bulk_u64(out, us),
            None => resp::bulk(out, b""),
        }
        resp::bulk_u64(out, self.grace_ms);
        let at = self.caller_time();
        for &i in &self.indices {
            let c = &self.items[i];
            self.plans[c.policy].push_args_at(out, &at);
            resp::bulk_u64(out, c.cost);
        }
        if self.peek {
            resp::bulk(out, b"peek");
        }
    }

    /// Runs the script ([`eval`]): the time Redis decided at (microseconds), and the decisions.
    pub async fn run(&self, conn: &mut Conn, counters: &Counters) -> RedisResult<(u64, Vec<Decision>)> {
        if let Conn::Lean(lean) = conn {
            return self.run_lean(lean, counters).await;
        }
        let reply =
            eval(conn, counters, (script_sha(), SCRIPT_SOURCE), |name, script| self.command(name, script)).await?;
        let Value::Array(items) = reply else {
            return Err(bad("not an array"));
        };
        self.decisions(
            items.len(),
            items.iter().map(|v| match v {
                Value::Int(n) => Ok(*n),
                _ => Err(bad("a value is not a non-negative integer")),
            }),
        )
    }

    /// [`Call::run`] on a lean connection: the command written and its reply read without
    /// redis-rs (an error reply, rare, is still read by redis-rs, for the same errors).
    async fn run_lean(&self, lean: &LeanConn, counters: &Counters) -> RedisResult<(u64, Vec<Decision>)> {
        bump(&counters.redis_calls);
        let once = |name: &'static [u8], script: &'static str| {
            lean.request(move |out| self.write(out, name, script), |frame| self.decode(frame))
        };
        match once(b"EVALSHA", script_sha()).await? {
            Err(e) if e.kind() == ErrorKind::NoScriptError => {
                bump(&counters.script_reloads);
                bump(&counters.redis_calls);
                once(b"EVAL", SCRIPT_SOURCE).await?
            }
            other => other,
        }
    }

    /// The decisions in one whole reply.
    fn decode(&self, frame: &[u8]) -> RedisResult<(u64, Vec<Decision>)> {
        if frame.first() == Some(&b'-') {
            let error = redis::parse_redis_value(frame).and_then(Value::extract_error);
            return Err(error.err().unwrap_or_else(|| bad("an error reply that is not an error")));
        }
        let ints = resp::integers(frame).map_err(|e| bad(e.0))?;
        let len = ints.len();
        self.decisions(len, ints.map(|n| n.map_err(|e| bad(e.0))))
    }

    /// The time and decisions of a reply of `len` values: the time, then six per check.
    fn decisions(
        &self,
        len: usize,
        mut values: impl Iterator<Item = RedisResult<i64>>,
    ) -> RedisResult<(u64, Vec<Decision>)> {
        if len != 1 + PER_CHECK * self.indices.len() {
            return Err(bad(&format!("{len} values for {} checks", self.indices.len())));
        }
        let mut num = || match values.next() {
            Some(Ok(n)) if n >= 0 => Ok(n as u64),
            Some(Err(e)) => Err(e),
            _ => Err(bad("a value is not a non-negative integer")),
        };
        let now = num()?;
        let mut out = Vec::with_capacity(self.indices.len());
        for &i in &self.indices {
            let limit = self.plans[self.items[i].policy].limit;
            let [allowed, remaining, reset_after, retry_after, retry_extra, delay] =
                [num()?, num()?, num()?, num()?, num()?, num()?];
            out.push(Decision {
                allowed: allowed == 1,
                limit,
                remaining,
                reset_after: reset_after.saturating_mul(1000),
                retry_after: retry_after.saturating_mul(1000).saturating_add(retry_extra),
                delay: delay.saturating_mul(1000),
            });
        }
        Ok((now, out))
    }
}

pub(crate) fn bad(what: &str) -> RedisError {
    RedisError::from((ErrorKind::ParseError, "unexpected script reply", what.to_string()))
}
