//! The settlement script's call: some of a request's settlements (those of one slot), one
//! `EVALSHA` of `scripts/settle.lua`.

use redis::{Cmd, RedisResult, Value};
use sluice_store::Settle;

use crate::connection::Conn;
use crate::script::{SETTLE_SOURCE, ScriptCall, bad, eval, settle_sha};
use crate::stats::Counters;

/// One call of the settlement script.
pub(crate) type SettleCall<'a> = ScriptCall<'a, Settle>;

/// What a settlement does to its key: units given back, or charged beyond the reservation.
/// The charge is bounded at twice the limit, beyond which no algorithm counts a debt (the
/// script's arithmetic stays exact: `over × interval` below 2^53).
pub(crate) fn back_and_over(s: &Settle, limit: u64) -> (u64, u64) {
    let reserved = s.check.cost;
    if s.actual < reserved { (reserved - s.actual, 0) } else { (0, (s.actual - reserved).min(limit.saturating_mul(2))) }
}

impl SettleCall<'_> {
    fn command(&self, name: &str, script: &str) -> Cmd {
        let mut cmd = self.head(name, script, |s| &s.check);
        let at = self.caller_time();
        for &i in &self.indices {
            let s = &self.items[i];
            let plan = &self.plans[s.check.policy];
            let (back, over) = back_and_over(s, plan.limit);
            cmd.arg(&plan.args_at(&at, Some(s.charged_at))[..]).arg(s.charged_at / 1000).arg(back).arg(over);
        }
        cmd
    }

    /// Runs the script; an error unless it applied every settlement it was given.
    pub async fn run(&self, conn: &mut Conn, counters: &Counters) -> RedisResult<()> {
        let reply =
            eval(conn, counters, (settle_sha(), SETTLE_SOURCE), |name, script| self.command(name, script)).await?;
        match reply {
            Value::Int(n) if n == self.indices.len() as i64 => Ok(()),
            other => {
                Err(bad(&format!("the settlement script answered {other:?} for {} settlements", self.indices.len())))
            }
        }
    }
}
