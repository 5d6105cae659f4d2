//! Process memory figures for the stats lines of `run`, `chat` and `bench`.

/// Peak resident set size of this process in bytes (Linux `VmHWM`); `None`
/// where the platform does not expose it without FFI.
pub fn peak_rss_bytes() -> Option<u64> {
    proc_status_kib("VmHWM:").map(|k| k * 1024)
}

/// Current resident set size in bytes (Linux `VmRSS`).
pub fn current_rss_bytes() -> Option<u64> {
    proc_status_kib("VmRSS:").map(|k| k * 1024)
}

fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// `123.4 MiB`.
pub fn format_bytes(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if bytes as f64 >= 1024.0 * MIB {
        format!("{:.2} GiB", bytes as f64 / (1024.0 * MIB))
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_is_reported_on_linux() {
        if cfg!(target_os = "linux") {
            // Current first: other test threads may allocate between reads.
            let cur = current_rss_bytes().unwrap_or(0);
            let peak = peak_rss_bytes().unwrap_or(0);
            assert!(peak > 0 && cur > 0 && peak >= cur);
        }
        assert_eq!(format_bytes(3 * 1024 * 1024), "3.0 MiB");
    }
}
