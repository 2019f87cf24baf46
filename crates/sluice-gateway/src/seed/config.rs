//! The default service's settings, read from the environment: `PORT`, `ADMIN_PORT`,
//! `RATE_LIMIT_CAPACITY`, `RATE_LIMIT_REFILL_PER_SECOND`.

use sluice_core::{ParamError, TokenBucket};

/// The default service's settings, from `PORT`, `RATE_LIMIT_CAPACITY` and
/// `RATE_LIMIT_REFILL_PER_SECOND`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeedConfig {
    /// Port to listen on (0: any free port).
    pub port: u16,
    /// Bucket capacity.
    pub capacity: u64,
    /// Tokens added per second.
    pub refill_per_second: f64,
    /// The admin listener's port on the loopback interface (`ADMIN_PORT`; 0: any free port);
    /// `None`: no admin listener (the default).
    pub admin_port: Option<u16>,
}

impl Default for SeedConfig {
    fn default() -> Self {
        Self { port: 3000, capacity: 5, refill_per_second: 1.0, admin_port: None }
    }
}

/// A variable whose value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?} is invalid: {expected}")]
pub struct EnvError {
    /// The variable.
    pub name: &'static str,
    /// Its value.
    pub value: String,
    /// What it should be.
    pub expected: &'static str,
}

impl SeedConfig {
    /// Reads the settings through `lookup` (e.g. `|k| std::env::var(k).ok()`). Unset or empty
    /// variables take their defaults; anything malformed is an error naming the variable.
    ///
    /// ```
    /// use sluice_gateway::seed::SeedConfig;
    /// let env = |k: &str| (k == "RATE_LIMIT_CAPACITY").then(|| "abc".to_string());
    /// let err = SeedConfig::from_lookup(env).unwrap_err();
    /// assert_eq!(err.name, "RATE_LIMIT_CAPACITY");
    /// ```
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, EnvError> {
        let mut cfg = Self::default();
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        if let Some(v) = get("PORT") {
            cfg.port = v.trim().parse().map_err(|_| EnvError {
                name: "PORT",
                value: v.clone(),
                expected: "a port number from 0 to 65535",
            })?;
        }
        if let Some(v) = get("ADMIN_PORT") {
            cfg.admin_port = Some(v.trim().parse().map_err(|_| EnvError {
                name: "ADMIN_PORT",
                value: v.clone(),
                expected: "a port number from 0 to 65535 (the admin listener, on 127.0.0.1)",
            })?);
        }
        if let Some(v) = get("RATE_LIMIT_CAPACITY") {
            cfg.capacity = v.trim().parse::<u64>().ok().filter(|&c| c > 0).ok_or(EnvError {
                name: "RATE_LIMIT_CAPACITY",
                value: v.clone(),
                expected: "a whole number of tokens, at least 1",
            })?;
        }
        if let Some(v) = get("RATE_LIMIT_REFILL_PER_SECOND") {
            cfg.refill_per_second =
                v.trim().parse::<f64>().ok().filter(|r| r.is_finite() && *r > 0.0).ok_or(EnvError {
                    name: "RATE_LIMIT_REFILL_PER_SECOND",
                    value: v.clone(),
                    expected: "a positive number of tokens per second, like 1 or 0.5",
                })?;
        }
        // Values that parse can still describe a bucket that cannot exist (its refill time
        // overflows 64-bit nanoseconds): name the variable at fault, not the core's field.
        if let Err(e) = cfg.policy() {
            let capacity_at_fault = match e {
                ParamError::Zero { field } | ParamError::TooLarge { field } | ParamError::BadRate { field, .. } => {
                    field == "capacity"
                }
                ParamError::DelayTooLarge { .. } => false,
            };
            let (name, value) = if capacity_at_fault {
                ("RATE_LIMIT_CAPACITY", get("RATE_LIMIT_CAPACITY").unwrap_or_else(|| cfg.capacity.to_string()))
            } else {
                let v = get("RATE_LIMIT_REFILL_PER_SECOND").unwrap_or_else(|| cfg.refill_per_second.to_string());
                ("RATE_LIMIT_REFILL_PER_SECOND", v)
            };
            return Err(EnvError {
                name,
                value,
                expected: "small enough that an empty bucket refills (capacity / rate) within about 584 years",
            });
        }
        Ok(cfg)
    }

    /// The token bucket these settings describe.
    pub fn policy(&self) -> Result<TokenBucket, ParamError> {
        TokenBucket::new(self.capacity, self.refill_per_second)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(SeedConfig::from_lookup(env(&[])).unwrap(), SeedConfig::default());
        let c = SeedConfig::from_lookup(env(&[
            ("PORT", "8080"),
            ("RATE_LIMIT_CAPACITY", "20"),
            ("RATE_LIMIT_REFILL_PER_SECOND", "2"),
        ]))
        .unwrap();
        assert_eq!(c, SeedConfig { port: 8080, capacity: 20, refill_per_second: 2.0, admin_port: None });
    }

    #[test]
    fn malformed_values_name_the_variable_and_value() {
        for (pairs, name) in [
            (&[("RATE_LIMIT_CAPACITY", "abc")][..], "RATE_LIMIT_CAPACITY"),
            (&[("RATE_LIMIT_CAPACITY", "0")][..], "RATE_LIMIT_CAPACITY"),
            (&[("RATE_LIMIT_CAPACITY", "-1")][..], "RATE_LIMIT_CAPACITY"),
            (&[("RATE_LIMIT_CAPACITY", "2.5")][..], "RATE_LIMIT_CAPACITY"),
            (&[("RATE_LIMIT_REFILL_PER_SECOND", "0")][..], "RATE_LIMIT_REFILL_PER_SECOND"),
            (&[("RATE_LIMIT_REFILL_PER_SECOND", "NaN")][..], "RATE_LIMIT_REFILL_PER_SECOND"),
            (&[("RATE_LIMIT_REFILL_PER_SECOND", "inf")][..], "RATE_LIMIT_REFILL_PER_SECOND"),
            (&[("PORT", "70000")][..], "PORT"),
            (&[("PORT", "http")][..], "PORT"),
            (&[("ADMIN_PORT", "65536")][..], "ADMIN_PORT"),
            (&[("ADMIN_PORT", "127.0.0.1:9090")][..], "ADMIN_PORT"),
            (&[("RATE_LIMIT_REFILL_PER_SECOND", "1e-300")][..], "RATE_LIMIT_REFILL_PER_SECOND"),
            (&[("RATE_LIMIT_CAPACITY", "18446744073709551615")][..], "RATE_LIMIT_CAPACITY"),
        ] {
            let pairs: &'static [(&str, &str)] = Box::leak(pairs.to_vec().into_boxed_slice());
            let e = SeedConfig::from_lookup(env(pairs)).unwrap_err();
            assert_eq!(e.name, name);
            assert_eq!(e.value, pairs[0].1);
            assert!(e.to_string().starts_with(&format!("{name}=")), "{e}");
        }
    }
}
