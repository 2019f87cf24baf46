//! The data of a server-sent-event stream, event by event (the WHATWG HTML "event stream"
//! format): lines end with CRLF, LF or CR, `data:` lines of one event are joined with `\n`, a
//! blank line ends the event, `:` starts a comment, other fields are not read. An event whose
//! data grows past a bound is dropped, so that a stream never holds more than that in memory.

/// The data of the event being read, and the line it is reading.
#[derive(Debug, Default)]
pub(crate) struct Events {
    /// The line read so far (without its end).
    line: Vec<u8>,
    /// The event's data so far: its `data:` lines joined with `\n`.
    data: Vec<u8>,
    /// A `data` field was seen in this event (its data may be empty).
    has_data: bool,
    /// The last byte was a CR: an LF right after it ends no second line.
    after_cr: bool,
    /// The event passed [`MAX_EVENT_BYTES`]: dropped when it ends.
    over: bool,
}

/// The most an event's data (and a line) may hold: an LLM's closing usage event is a few
/// hundred bytes; a bigger event is not read for its cost.
pub(crate) const MAX_EVENT_BYTES: usize = 64 * 1024;

impl Events {
    /// Reads `bytes`, the stream's next ones, calling `event` with the data of each event they
    /// end.
    pub(crate) fn feed(&mut self, bytes: &[u8], mut event: impl FnMut(&[u8])) {
        for &b in bytes {
            let after_cr = std::mem::take(&mut self.after_cr);
            match b {
                b'\n' if after_cr => {}
                b'\r' | b'\n' => {
                    self.after_cr = b == b'\r';
                    self.line_ended(&mut event);
                }
                _ if self.line.len() < MAX_EVENT_BYTES => self.line.push(b),
                _ => self.over = true,
            }
        }
    }

    fn line_ended(&mut self, event: &mut impl FnMut(&[u8])) {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            if self.has_data && !self.over {
                event(&self.data);
            }
            self.data.clear();
            self.has_data = false;
            self.over = false;
        } else if let Some(value) = line.strip_prefix(b"data") {
            // `data` alone, or `data:` and its value (one space after the colon is not part of it).
            let value = match value {
                [] => Some(&[][..]),
                [b':', b' ', rest @ ..] | [b':', rest @ ..] => Some(rest),
                _ => None, // `datafoo:`, another field
            };
            if let Some(value) = value {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.has_data = true;
                if self.data.len() + value.len() <= MAX_EVENT_BYTES {
                    self.data.extend_from_slice(value);
                } else {
                    self.over = true;
                }
            }
        }
        // Comments and other fields are not read; the line's buffer is kept for the next one.
        self.line = line;
        self.line.clear();
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<String> {
        let mut e = Events::default();
        let mut out = Vec::new();
        for c in chunks {
            e.feed(c, |d| out.push(String::from_utf8_lossy(d).into_owned()));
        }
        out
    }

    #[test]
    fn events_end_at_a_blank_line_whatever_the_line_ends() {
        let s = b"data: {\"a\":1}\n\ndata:x\r\ndata: y\r\n\r\n: comment\nevent: done\ndata\n\ndata: z\r\rdata: cut";
        assert_eq!(events(&[s]), ["{\"a\":1}", "x\ny", "", "z"]);
        // The same stream in any split: a CR and its LF in two chunks are one line end.
        for at in 0..s.len() {
            assert_eq!(events(&[&s[..at], &s[at..]]), ["{\"a\":1}", "x\ny", "", "z"], "split at {at}");
        }
    }

    #[test]
    fn other_fields_and_lookalikes_are_not_data() {
        assert_eq!(events(&[b"dat: 1\ndatas: 2\nid: 3\nretry: 4\n\n"]), Vec::<String>::new());
        assert_eq!(events(&[b"data:  two spaces\n\n"]), [" two spaces"]);
    }

    #[test]
    fn an_event_too_big_is_dropped_and_the_next_one_read() {
        let big = vec![b'x'; MAX_EVENT_BYTES + 1];
        let mut s = b"data: ".to_vec();
        s.extend_from_slice(&big);
        s.extend_from_slice(b"\n\ndata: after\n\n");
        assert_eq!(events(&[&s]), ["after"]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(sluice_core::fuzz_cases(300)))]

        /// Any bytes, in any chunks: nothing panics, no event holds more than the bound, and
        /// the events do not depend on where the stream was cut.
        #[test]
        fn any_stream_in_any_chunks_reads_the_same(stream in proptest::collection::vec(
            prop_oneof![Just(b'\r'), Just(b'\n'), Just(b':'), Just(b' '), Just(b'd'), Just(b'a'), Just(b't'), any::<u8>()], 0..200),
            cuts in proptest::collection::vec(0usize..200, 0..6),
        ) {
            let whole = events(&[&stream]);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(stream.len())).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut from = 0;
            for c in cuts {
                chunks.push(&stream[from..c]);
                from = c;
            }
            chunks.push(&stream[from..]);
            prop_assert_eq!(events(&chunks), whole.clone());
            prop_assert!(whole.iter().all(|e| e.len() <= MAX_EVENT_BYTES));
        }
    }
}
