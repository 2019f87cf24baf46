//! A small YAML tree that remembers the line of every node, built from saphyr's events.
//!
//! Scalars keep their source text (`value: 0123` stays `0123`, as Go's YAML decoder gives it
//! to a string field); interpretation (bool, integer) is the loader's job, field by field.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle};

/// Nodes a document may expand to (aliases included), so that an alias bomb is refused.
const MAX_NODES: usize = 1_000_000;

/// Nesting a document may reach.
const MAX_DEPTH: usize = 64;

/// A node with the 1-based line it starts on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    /// Where it starts, for errors.
    pub line: usize,
    /// What it holds.
    pub kind: Kind,
}

/// The three YAML node kinds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    /// A scalar's text, and whether it was quoted (a quoted `true` is a string).
    Scalar(String, bool),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in document order.
    Map(Vec<(Node, Node)>),
}

impl Node {
    /// True for a plain `~`, `null` or empty scalar.
    pub fn is_null(&self) -> bool {
        matches!(&self.kind, Kind::Scalar(s, false) if matches!(s.as_str(), "" | "~" | "null" | "Null" | "NULL"))
    }
}

/// A syntax error: the line (when known) and the parser's message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SyntaxError {
    /// 1-based line.
    pub line: Option<usize>,
    /// What the parser said.
    pub message: String,
}

/// Parses the first document of `text`; `None` when the text holds no document.
pub(crate) fn parse(text: &str) -> Result<Option<Node>, SyntaxError> {
    let mut builder = Builder { stack: Vec::new(), anchors: HashMap::new(), nodes: 0, root: None };
    for item in Parser::new_from_str(text) {
        let (event, span) =
            item.map_err(|e| SyntaxError { line: Some(e.marker().line()), message: e.info().to_string() })?;
        let line = span.start.line();
        if builder.event(event, line)? {
            break;
        }
    }
    Ok(builder.root)
}

/// A collection being built.
enum Open {
    /// A sequence: its line, anchor, items.
    Seq(usize, usize, Vec<Node>),
    /// A mapping: its line, anchor, entries, and a key waiting for its value.
    Map(usize, usize, Vec<(Node, Node)>, Option<Node>),
}

struct Builder {
    /// Collections open around the next node.
    stack: Vec<Open>,
    /// Anchored nodes, by saphyr's anchor id, for aliases.
    anchors: HashMap<usize, Node>,
    /// Nodes made so far (aliases counted in full).
    nodes: usize,
    /// The finished document.
    root: Option<Node>,
}

impl Builder {
    /// Takes one event; true when the first document is complete.
    fn event(&mut self, event: Event<'_>, line: usize) -> Result<bool, SyntaxError> {
        let node = match event {
            Event::Scalar(text, style, anchor, _) => {
                let quoted = !matches!(style, ScalarStyle::Plain);
                self.anchored(Node { line, kind: Kind::Scalar(text.into_owned(), quoted) }, anchor)
            }
            Event::Alias(id) => {
                let node = self
                    .anchors
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| SyntaxError { line: Some(line), message: "alias to an unknown anchor".into() })?;
                self.count(count_nodes(&node), line)?;
                node
            }
            Event::SequenceStart(anchor, _) => {
                self.open(Open::Seq(line, anchor, Vec::new()), line)?;
                return Ok(false);
            }
            Event::MappingStart(anchor, _) => {
                self.open(Open::Map(line, anchor, Vec::new(), None), line)?;
                return Ok(false);
            }
            Event::SequenceEnd | Event::MappingEnd => match self.stack.pop() {
                Some(Open::Seq(l, anchor, items)) => self.anchored(Node { line: l, kind: Kind::Seq(items) }, anchor),
                Some(Open::Map(l, anchor, entries, _)) => {
                    self.anchored(Node { line: l, kind: Kind::Map(entries) }, anchor)
                }
                None => return Ok(false),
            },
            Event::DocumentEnd => return Ok(self.root.is_some()),
            _ => return Ok(false),
        };
        self.count(1, line)?;
        match self.stack.last_mut() {
            None => {
                self.root = Some(node);
                Ok(false)
            }
            Some(Open::Seq(_, _, items)) => {
                items.push(node);
                Ok(false)
            }
            Some(Open::Map(_, _, entries, key)) => {
                match key.take() {
                    None => *key = Some(node),
                    Some(k) => entries.push((k, node)),
                }
                Ok(false)
            }
        }
    }

    fn open(&mut self, open: Open, line: usize) -> Result<(), SyntaxError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(SyntaxError { line: Some(line), message: format!("nested deeper than {MAX_DEPTH} levels") });
        }
        self.stack.push(open);
        Ok(())
    }

    fn anchored(&mut self, node: Node, anchor: usize) -> Node {
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        node
    }

    fn count(&mut self, n: usize, line: usize) -> Result<(), SyntaxError> {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes > MAX_NODES {
            return Err(SyntaxError { line: Some(line), message: format!("more than {MAX_NODES} nodes") });
        }
        Ok(())
    }
}

fn count_nodes(node: &Node) -> usize {
    match &node.kind {
        Kind::Scalar(..) => 1,
        Kind::Seq(items) => 1 + items.iter().map(count_nodes).sum::<usize>(),
        Kind::Map(entries) => 1 + entries.iter().map(|(k, v)| count_nodes(k) + count_nodes(v)).sum::<usize>(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar(n: &Node) -> &str {
        match &n.kind {
            Kind::Scalar(s, _) => s,
            other => panic!("not a scalar: {other:?}"),
        }
    }

    #[test]
    fn lines_and_source_text_are_kept() {
        let root = parse("domain: d\ndescriptors:\n  - key: k\n    value: 0123\n").unwrap().unwrap();
        let Kind::Map(entries) = &root.kind else { panic!() };
        assert_eq!(entries[1].0.line, 2);
        let Kind::Seq(items) = &entries[1].1.kind else { panic!() };
        let Kind::Map(d) = &items[0].kind else { panic!() };
        assert_eq!((d[1].0.line, scalar(&d[1].1)), (4, "0123"));
    }

    #[test]
    fn aliases_expand_and_bombs_are_refused() {
        let root = parse("a: &x {k: v}\nb: *x\n").unwrap().unwrap();
        let Kind::Map(entries) = &root.kind else { panic!() };
        assert_eq!(entries[0].1.kind, entries[1].1.kind);
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..8 {
            let p = i - 1;
            bomb.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        assert!(parse(&bomb).unwrap_err().message.contains("nodes"));
    }

    #[test]
    fn syntax_errors_have_a_line() {
        let e = parse("domain: d\ndescriptors:\n  - key: [\n").unwrap_err();
        assert!(e.line.is_some(), "{e:?}");
    }
}
