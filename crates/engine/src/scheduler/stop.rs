//! Stop sequences: text that could be the start of a stop string is held back
//! until it is known not to be one, so a stop string is never emitted partially.

/// What [`StopMatcher::push`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopOutcome {
    /// No stop string yet; the text is safe to emit (may be empty).
    Continue(String),
    /// A stop string completed: `text` is what precedes it, `stop` which one.
    Stopped {
        /// Text before the stop string (safe to emit).
        text: String,
        /// The stop string that matched.
        stop: String,
    },
}

/// Watches streamed text for stop strings.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    pending: String,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            pending: String::new(),
        }
    }

    /// Adds `piece` and returns what can be emitted now.
    pub fn push(&mut self, piece: &str) -> StopOutcome {
        self.pending.push_str(piece);
        if self.stops.is_empty() {
            return StopOutcome::Continue(std::mem::take(&mut self.pending));
        }
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()).map(|p| (p, s)))
            .min_by_key(|(p, _)| *p);
        if let Some((p, stop)) = first {
            let stop = stop.clone();
            let text = self.pending[..p].to_owned();
            self.pending.clear();
            return StopOutcome::Stopped { text, stop };
        }
        let hold = self
            .stops
            .iter()
            .map(|s| longest_prefix_suffix(&self.pending, s))
            .max()
            .unwrap_or(0);
        let cut = self.pending.len() - hold;
        let out: String = self.pending.drain(..cut).collect();
        StopOutcome::Continue(out)
    }

    /// Releases the held-back text at the end of generation.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

/// Length of the longest proper prefix of `stop` that `text` ends with.
fn longest_prefix_suffix(text: &str, stop: &str) -> usize {
    stop.char_indices()
        .map(|(i, _)| i)
        .skip(1)
        .filter(|&k| text.ends_with(&stop[..k]))
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, Option<String>) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for p in pieces {
            match m.push(p) {
                StopOutcome::Continue(t) => out.push_str(&t),
                StopOutcome::Stopped { text, stop } => {
                    out.push_str(&text);
                    return (out, Some(stop));
                }
            }
        }
        out.push_str(&m.finish());
        (out, None)
    }

    #[test]
    fn stop_across_pieces_is_never_emitted() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("abc E"), StopOutcome::Continue("abc ".into()));
        assert_eq!(m.push("N"), StopOutcome::Continue(String::new()));
        assert_eq!(
            m.push("Dxyz"),
            StopOutcome::Stopped {
                text: String::new(),
                stop: "END".into()
            }
        );
    }

    #[test]
    fn false_start_is_released() {
        assert_eq!(run(&["END"], &["E", "N", "X"]), ("ENX".into(), None));
        assert_eq!(run(&["END"], &["ab", "EN"]), ("abEN".into(), None));
    }

    #[test]
    fn earliest_stop_wins() {
        assert_eq!(run(&["cd", "b"], &["abcd"]), ("a".into(), Some("b".into())));
        assert_eq!(
            run(&["xx", "ab"], &["a", "xab"]),
            ("ax".into(), Some("ab".into()))
        );
    }

    #[test]
    fn multibyte_prefixes() {
        assert_eq!(
            run(&["é!"], &["caf", "é", "!"]),
            ("caf".into(), Some("é!".into()))
        );
        assert_eq!(run(&["éa"], &["é", "b"]), ("éb".into(), None));
    }

    #[test]
    fn no_stops_passes_through() {
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), None));
        assert_eq!(run(&[""], &["a"]), ("a".into(), None));
    }
}
