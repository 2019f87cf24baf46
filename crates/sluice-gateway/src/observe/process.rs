//! The usual process metrics, read from `/proc/self` at scrape time (Linux; elsewhere, absent).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Clock ticks per second in `/proc` times: `USER_HZ`, fixed at 100 in the Linux ABI.
const TICKS_PER_SEC: f64 = 100.0;

/// A snapshot of the process, every field optional (a system without `/proc` has none).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessStats {
    /// User plus system CPU time, seconds.
    pub cpu_seconds: Option<f64>,
    /// Resident memory, bytes.
    pub resident_bytes: Option<u64>,
    /// Open file descriptors.
    pub open_fds: Option<u64>,
    /// The soft limit on open file descriptors.
    pub max_fds: Option<u64>,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: Option<f64>,
}

impl ProcessStats {
    /// Reads `/proc/self` now.
    pub fn read() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let stat = read("/proc/self/stat");
        let times = stat.as_deref().and_then(parse_stat);
        let boot = read("/proc/stat").as_deref().and_then(parse_boot_time);
        Self {
            cpu_seconds: times.map(|t| (t.utime + t.stime) as f64 / TICKS_PER_SEC),
            resident_bytes: read("/proc/self/status").as_deref().and_then(parse_rss),
            open_fds: std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as u64),
            max_fds: read("/proc/self/limits").as_deref().and_then(parse_max_fds),
            start_time_seconds: times.zip(boot).map(|(t, b)| b as f64 + t.start_ticks as f64 / TICKS_PER_SEC),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct StatTimes {
    /// CPU time in user mode, clock ticks.
    utime: u64,
    /// CPU time in the kernel, clock ticks.
    stime: u64,
    /// When the process started, ticks since boot (for the start time).
    start_ticks: u64,
}

/// `/proc/self/stat`: fields after the command name (which may hold spaces and parentheses).
fn parse_stat(text: &str) -> Option<StatTimes> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state); utime is field 14, stime 15, starttime 22.
    let field = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    Some(StatTimes { utime: field(14)?, stime: field(15)?, start_ticks: field(22)? })
}

/// `btime` of `/proc/stat`: boot time, seconds since the epoch.
fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

/// `VmRSS:   1234 kB` of `/proc/self/status`.
fn parse_rss(text: &str) -> Option<u64> {
    let line = text.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

/// The soft limit of `Max open files` in `/proc/self/limits`.
fn parse_max_fds(text: &str) -> Option<u64> {
    let line = text.lines().find_map(|l| l.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// Encodes [`ProcessStats::read`] on every scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let p = ProcessStats::read();
        if let Some(v) = p.cpu_seconds {
            let c = ConstCounter::new(v);
            c.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                c.metric_type(),
            )?)?;
        }
        let gauges = [
            ("process_resident_memory_bytes", "Resident memory size in bytes.", p.resident_bytes.map(|v| v as f64)),
            ("process_open_fds", "Number of open file descriptors.", p.open_fds.map(|v| v as f64)),
            ("process_max_fds", "Maximum number of open file descriptors.", p.max_fds.map(|v| v as f64)),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                p.start_time_seconds,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                let g = ConstGauge::new(v);
                g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_found_after_a_command_name_with_spaces_and_parentheses() {
        let mut line = String::from("4242 (a (weird) name) S 1 2 3 4 5 6 7 8 9 10");
        // fields 14.. : utime stime cutime cstime priority nice threads itrealvalue starttime
        line.push_str(" 250 150 0 0 20 0 4 0 123456 999");
        let t = parse_stat(&line).unwrap();
        assert_eq!(t, StatTimes { utime: 250, stime: 150, start_ticks: 123456 });
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    #[test]
    fn status_stat_and_limits_lines_are_parsed() {
        assert_eq!(parse_rss("Name:\tx\nVmRSS:\t    2048 kB\n"), Some(2048 * 1024));
        assert_eq!(parse_boot_time("cpu 1 2\nbtime 1700000000\n"), Some(1_700_000_000));
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(parse_max_fds(limits), Some(1024));
        assert_eq!(parse_rss("nothing"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_described() {
        let p = ProcessStats::read();
        assert!(p.resident_bytes.unwrap() > 0);
        assert!(p.open_fds.unwrap() >= 3);
        let start = p.start_time_seconds.unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(start <= now + 1.0 && start > now - 86_400.0, "start {start}, now {now}");
    }
}
