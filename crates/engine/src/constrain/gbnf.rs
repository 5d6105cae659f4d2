//! GBNF, llama.cpp's grammar format (its `grammars/README.md`), translated
//! to llguidance's Lark syntax, which then enforces it. The language accepted
//! is llama.cpp's: `name ::= alternatives` rules ending at a newline (a rule
//! continues after `|` or inside parentheses), `"literals"` and `[classes]`
//! with llama.cpp's escapes (`\x..`, `\u....`, `\U........`, `\n \r \t \\ \"
//! \[ \]`), `.` (any character, newline included), groups, `* + ?`, `{m}`,
//! `{m,}`, `{m,n}`, `# comments`, and tokens: `<[id]>`, `<text>` (a text
//! that is one token of the model's vocabulary) and their negations `!<…>`.
//! The start rule is `root`.
//!
//! Two differences from llama.cpp, both in what is accepted: left-recursive
//! rules work (llguidance parses with Earley; llama.cpp refuses them), and a
//! rule defined twice is an error here (llama.cpp silently keeps the last).
//!
//! Why the translation keeps every lexeme one character long: llguidance
//! lexes greedily, so a multi-character terminal could swallow text a later
//! part of the grammar needs (`("a" | "ab") "b"` must accept `ab`). GBNF is
//! a character-level grammar, and one-character lexemes keep its meaning
//! exactly.

use std::collections::HashMap;
use std::fmt::Write;

/// Largest repetition count (`x{n}`) accepted: llguidance expands counts
/// into rules (logarithmically), and a grammar is user input.
pub const MAX_REPEAT: u32 = 10_000;

/// A grammar that cannot be translated, with where the problem is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GbnfError {
    /// 1-based line of the problem.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for GbnfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GBNF line {}, column {}: {}",
            self.line, self.column, self.message
        )
    }
}

impl std::error::Error for GbnfError {}

/// A token in a grammar: by id, or by its text.
#[derive(Debug, Clone, PartialEq)]
enum TokenRef {
    Id(u32),
    Text(String),
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    /// A literal, one character at a time (empty: matches nothing, i.e. ε).
    Literal(Vec<char>),
    /// A character class: inclusive ranges, possibly negated.
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    /// `.`: any one character.
    Any,
    /// A rule by name, with where it was used (for "undefined" errors).
    Ref { name: String, at: usize },
    /// `( alternatives )`.
    Group(Vec<Vec<Node>>),
    Repeat {
        node: Box<Node>,
        min: u32,
        max: Option<u32>,
    },
    Token {
        negated: bool,
        token: TokenRef,
        at: usize,
    },
}

struct Rule {
    name: String,
    at: usize,
    alternatives: Vec<Vec<Node>>,
}

/// Translates GBNF `src` to llguidance's Lark syntax; `token_id` resolves a
/// `<text>` token to its id (`None`: not a single token of the vocabulary).
pub fn gbnf_to_lark(
    src: &str,
    token_id: &dyn Fn(&str) -> Option<u32>,
) -> Result<String, GbnfError> {
    let mut parser = Parser {
        chars: src.chars().collect(),
        pos: 0,
    };
    let rules = parser.grammar()?;
    Printer::new(&parser, &rules, token_id)?.print(&rules)
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-'
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn error_at(&self, at: usize, message: impl Into<String>) -> GbnfError {
        let before: String = self.chars[..at.min(self.chars.len())].iter().collect();
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        GbnfError {
            line,
            column,
            message: message.into(),
        }
    }

    fn error(&self, message: impl Into<String>) -> GbnfError {
        self.error_at(self.pos, message)
    }

    /// Skips blanks and `#` comments, and newlines where `newlines` is set
    /// (llama.cpp's `parse_space`).
    fn space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\r' | '\n' if newlines => self.pos += 1,
                '#' => {
                    while self.peek().is_some_and(|c| c != '\n' && c != '\r') {
                        self.pos += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn grammar(&mut self) -> Result<Vec<Rule>, GbnfError> {
        let mut rules: Vec<Rule> = Vec::new();
        self.space(true);
        while self.peek().is_some() {
            let rule = self.rule()?;
            if let Some(first) = rules.iter().find(|r| r.name == rule.name) {
                let line = self.error_at(first.at, "").line;
                return Err(self.error_at(
                    rule.at,
                    format!("rule '{}' is already defined on line {line}", rule.name),
                ));
            }
            rules.push(rule);
            self.space(true);
        }
        if !rules.iter().any(|r| r.name == "root") {
            return Err(self.error_at(0, "the grammar has no 'root' rule (where output starts)"));
        }
        Ok(rules)
    }

    fn name(&mut self) -> Result<String, GbnfError> {
        let start = self.pos;
        while self.peek().is_some_and(is_word_char) {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.error("expected a rule name"));
        }
        Ok(self.chars[start..self.pos].iter().collect())
    }

    fn rule(&mut self) -> Result<Rule, GbnfError> {
        let at = self.pos;
        let name = self.name()?;
        self.space(false);
        if self.chars.get(self.pos..self.pos + 3) != Some(&[':', ':', '=']) {
            return Err(self.error(format!("expected '::=' after the rule name '{name}'")));
        }
        self.pos += 3;
        self.space(true);
        let alternatives = self.alternatives(false)?;
        match self.peek() {
            None => {}
            Some('\r') => {
                self.pos += 1;
                if self.peek() == Some('\n') {
                    self.pos += 1;
                }
            }
            Some('\n') => self.pos += 1,
            Some(c) => {
                return Err(self.error(format!("unexpected '{c}' (expected a newline or the end)")))
            }
        }
        Ok(Rule {
            name,
            at,
            alternatives,
        })
    }

    fn alternatives(&mut self, nested: bool) -> Result<Vec<Vec<Node>>, GbnfError> {
        let mut alternatives = vec![self.sequence(nested)?];
        while self.peek() == Some('|') {
            self.pos += 1;
            self.space(true);
            alternatives.push(self.sequence(nested)?);
        }
        Ok(alternatives)
    }

    fn sequence(&mut self, nested: bool) -> Result<Vec<Node>, GbnfError> {
        let mut seq: Vec<Node> = Vec::new();
        while let Some(c) = self.peek() {
            let at = self.pos;
            let node = match c {
                '"' => {
                    self.pos += 1;
                    let mut text = Vec::new();
                    loop {
                        match self.peek() {
                            None => return Err(self.error("a literal is not closed by '\"'")),
                            Some('"') => break,
                            Some(_) => text.push(self.char()?),
                        }
                    }
                    self.pos += 1;
                    Node::Literal(text)
                }
                '[' => self.class()?,
                '.' => {
                    self.pos += 1;
                    Node::Any
                }
                '(' => {
                    self.pos += 1;
                    self.space(true);
                    let inner = self.alternatives(true)?;
                    if self.peek() != Some(')') {
                        return Err(self.error("expected ')' to close the group"));
                    }
                    self.pos += 1;
                    Node::Group(inner)
                }
                '<' | '!' => self.token()?,
                '*' | '+' | '?' | '{' => {
                    let Some(last) = seq.pop() else {
                        return Err(self.error(format!("'{c}' has nothing before it to repeat")));
                    };
                    let (min, max) = self.repetition()?;
                    Node::Repeat {
                        node: Box::new(last),
                        min,
                        max,
                    }
                }
                c if is_word_char(c) => Node::Ref {
                    name: self.name()?,
                    at,
                },
                _ => break,
            };
            seq.push(node);
            self.space(nested);
        }
        Ok(seq)
    }

    /// One character of a literal or class, escapes decoded.
    fn char(&mut self) -> Result<char, GbnfError> {
        let at = self.pos;
        let Some(c) = self.peek() else {
            return Err(self.error("unexpected end of the grammar"));
        };
        self.pos += 1;
        if c != '\\' {
            return Ok(c);
        }
        let Some(e) = self.peek() else {
            return Err(self.error("an escape ('\\') at the end of the grammar"));
        };
        self.pos += 1;
        let digits = match e {
            'x' => 2,
            'u' => 4,
            'U' => 8,
            'n' => return Ok('\n'),
            'r' => return Ok('\r'),
            't' => return Ok('\t'),
            '\\' | '"' | '[' | ']' => return Ok(e),
            _ => return Err(self.error_at(at, format!("unknown escape '\\{e}'"))),
        };
        let hex: String = self.chars[self.pos..(self.pos + digits).min(self.chars.len())]
            .iter()
            .collect();
        if hex.len() != digits || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(self.error_at(at, format!("'\\{e}' needs {digits} hex digits")));
        }
        self.pos += digits;
        let code = u32::from_str_radix(&hex, 16).expect("checked hex digits");
        char::from_u32(code)
            .ok_or_else(|| self.error_at(at, format!("U+{code:X} is not a character")))
    }

    fn class(&mut self) -> Result<Node, GbnfError> {
        let at = self.pos;
        self.pos += 1; // '['
        let negated = self.peek() == Some('^');
        if negated {
            self.pos += 1;
        }
        let mut ranges = Vec::new();
        loop {
            match self.peek() {
                None => return Err(self.error_at(at, "a character class is not closed by ']'")),
                Some(']') => break,
                Some(_) => {}
            }
            let first = self.char()?;
            let last = if self.peek() == Some('-') && self.peek_at(1).is_some_and(|c| c != ']') {
                self.pos += 1;
                self.char()?
            } else {
                first
            };
            if last < first {
                return Err(self.error_at(at, format!("the range '{first}-{last}' is backwards")));
            }
            ranges.push((first, last));
        }
        self.pos += 1; // ']'
        if ranges.is_empty() && !negated {
            return Err(self.error_at(at, "an empty character class '[]' matches nothing"));
        }
        Ok(Node::Class { negated, ranges })
    }

    fn token(&mut self) -> Result<Node, GbnfError> {
        let at = self.pos;
        let negated = self.peek() == Some('!');
        if negated {
            self.pos += 1;
        }
        if self.peek() != Some('<') {
            return Err(self.error("expected a token ('<[id]>' or '<text>') after '!'"));
        }
        self.pos += 1;
        let start = self.pos;
        while self.peek().is_some_and(|c| c != '>' && !c.is_whitespace()) {
            self.pos += 1;
        }
        if self.peek() != Some('>') {
            return Err(self.error_at(at, "a token is not closed by '>'"));
        }
        let inner: String = self.chars[start..self.pos].iter().collect();
        self.pos += 1;
        let token = match inner.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            Some(id) => TokenRef::Id(
                id.parse()
                    .map_err(|_| self.error_at(at, format!("'<[{id}]>' is not a token id")))?,
            ),
            None if inner.is_empty() => return Err(self.error_at(at, "an empty token '<>'")),
            // The token's text is the whole `<…>`, as in `<think>`.
            None => TokenRef::Text(format!("<{inner}>")),
        };
        Ok(Node::Token { negated, token, at })
    }

    /// After `*`, `+`, `?` or `{`: the bounds.
    fn repetition(&mut self) -> Result<(u32, Option<u32>), GbnfError> {
        let c = self.peek().expect("called on a repetition operator");
        self.pos += 1;
        match c {
            '*' => return Ok((0, None)),
            '+' => return Ok((1, None)),
            '?' => return Ok((0, Some(1))),
            _ => {}
        }
        let at = self.pos - 1;
        self.space(true);
        let min = self.count()?;
        self.space(true);
        let max = match self.peek() {
            Some('}') => Some(min),
            Some(',') => {
                self.pos += 1;
                self.space(true);
                let max = if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    Some(self.count()?)
                } else {
                    None
                };
                self.space(true);
                if self.peek() != Some('}') {
                    return Err(self.error("expected '}' to close the repetition"));
                }
                max
            }
            _ => return Err(self.error("expected ',' or '}' in the repetition")),
        };
        self.pos += 1; // '}'
        if let Some(max) = max {
            if max < min {
                return Err(
                    self.error_at(at, format!("the repetition {{{min},{max}}} is backwards"))
                );
            }
        }
        Ok((min, max))
    }

    fn count(&mut self) -> Result<u32, GbnfError> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.error("expected a number in the repetition"));
        }
        let digits: String = self.chars[start..self.pos].iter().collect();
        match digits.parse::<u32>() {
            Ok(n) if n <= MAX_REPEAT => Ok(n),
            _ => Err(self.error_at(
                start,
                format!("the repetition count {digits} is over the limit of {MAX_REPEAT}"),
            )),
        }
    }
}

/// Writes the Lark text: `root` becomes `start`, every other rule a
/// lowercase name of its own.
struct Printer<'p> {
    parser: &'p Parser,
    names: HashMap<&'p str, String>,
    token_id: &'p dyn Fn(&str) -> Option<u32>,
}

impl<'p> Printer<'p> {
    fn new(
        parser: &'p Parser,
        rules: &'p [Rule],
        token_id: &'p dyn Fn(&str) -> Option<u32>,
    ) -> Result<Self, GbnfError> {
        let mut names = HashMap::new();
        let mut taken = std::collections::HashSet::new();
        for rule in rules {
            let lark = if rule.name == "root" {
                "start".to_owned()
            } else {
                let base = format!("g_{}", rule.name.to_ascii_lowercase().replace('-', "_"));
                let mut name = base.clone();
                let mut n = 2;
                while taken.contains(&name) {
                    name = format!("{base}_{n}");
                    n += 1;
                }
                name
            };
            taken.insert(lark.clone());
            names.insert(rule.name.as_str(), lark);
        }
        Ok(Self {
            parser,
            names,
            token_id,
        })
    }

    fn print(&self, rules: &[Rule]) -> Result<String, GbnfError> {
        let mut out = String::new();
        for rule in rules {
            let body = self.alternatives(&rule.alternatives)?;
            let _ = writeln!(out, "{}: {body}", self.names[rule.name.as_str()]);
        }
        Ok(out)
    }

    fn alternatives(&self, alternatives: &[Vec<Node>]) -> Result<String, GbnfError> {
        // Lark has no empty alternative: `a | ε` is written `(a)?`.
        let mut written = Vec::new();
        let mut has_empty = false;
        for seq in alternatives {
            let s = self.sequence(seq)?;
            if s.is_empty() {
                has_empty = true;
            } else {
                written.push(s);
            }
        }
        Ok(match (written.is_empty(), has_empty) {
            (true, _) => "\"\"".to_owned(),
            (false, false) => written.join(" | "),
            (false, true) => format!("({})?", written.join(" | ")),
        })
    }

    fn sequence(&self, seq: &[Node]) -> Result<String, GbnfError> {
        let mut parts = Vec::new();
        for node in seq {
            let s = self.node(node)?;
            if !s.is_empty() {
                parts.push(s);
            }
        }
        Ok(parts.join(" "))
    }

    /// A node as one Lark atom (parenthesised where it is several), or ""
    /// for one that matches only the empty string.
    fn node(&self, node: &Node) -> Result<String, GbnfError> {
        Ok(match node {
            Node::Literal(chars) => match chars.len() {
                0 => String::new(),
                1 => lark_string(chars[0]),
                _ => format!(
                    "({})",
                    chars
                        .iter()
                        .map(|&c| lark_string(c))
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
            },
            Node::Class { negated, ranges } => {
                let mut rx = String::from(if *negated { "/[^" } else { "/[" });
                for &(a, b) in ranges {
                    let _ = write!(rx, "\\x{{{:X}}}", a as u32);
                    if b != a {
                        let _ = write!(rx, "-\\x{{{:X}}}", b as u32);
                    }
                }
                rx.push_str("]/");
                rx
            }
            Node::Any => "/(?s:.)/".to_owned(),
            Node::Ref { name, at } => match self.names.get(name.as_str()) {
                Some(lark) => lark.clone(),
                None => {
                    return Err(self
                        .parser
                        .error_at(*at, format!("the rule '{name}' is used but never defined")))
                }
            },
            Node::Group(alternatives) => {
                let inner = self.alternatives(alternatives)?;
                if inner == "\"\"" {
                    String::new()
                } else {
                    format!("({inner})")
                }
            }
            Node::Repeat { node, min, max } => {
                let inner = self.node(node)?;
                if inner.is_empty() || *max == Some(0) {
                    return Ok(String::new());
                }
                match (min, max) {
                    (0, None) => format!("{inner}*"),
                    (1, None) => format!("{inner}+"),
                    (0, Some(1)) => format!("{inner}?"),
                    (m, None) => format!("{inner}{{{m},}}"),
                    (m, Some(n)) => format!("{inner}{{{m},{n}}}"),
                }
            }
            Node::Token { negated, token, at } => {
                let id = match token {
                    TokenRef::Id(id) => *id,
                    TokenRef::Text(text) => (self.token_id)(text).ok_or_else(|| {
                        self.parser.error_at(
                            *at,
                            format!("'{text}' is not a single token of this model's vocabulary"),
                        )
                    })?,
                };
                format!("<[{}{id}]>", if *negated { "^" } else { "" })
            }
        })
    }
}

/// One character as a Lark string literal (JSON escapes; llguidance's lexer
/// refuses raw control characters and DEL inside strings).
fn lark_string(c: char) -> String {
    match c {
        '"' => "\"\\\"\"".to_owned(),
        '\\' => "\"\\\\\"".to_owned(),
        c if (c as u32) < 0x20 || c == '\x7f' => format!("\"\\u{:04x}\"", c as u32),
        c => format!("\"{c}\""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_tokens(_: &str) -> Option<u32> {
        None
    }

    fn lark(src: &str) -> String {
        gbnf_to_lark(src, &no_tokens).unwrap_or_else(|e| panic!("{src:?}: {e}"))
    }

    fn fails(src: &str) -> GbnfError {
        gbnf_to_lark(src, &no_tokens).expect_err(src)
    }

    #[test]
    fn rules_names_and_layout() {
        assert_eq!(
            lark("root ::= Item-list\nItem-list ::= \"ab\" | [a-c]+ .\n"),
            "start: g_item_list\ng_item_list: (\"a\" \"b\") | /[\\x{61}-\\x{63}]/+ /(?s:.)/\n"
        );
        // Names that differ only in case stay apart.
        assert_eq!(
            lark("root ::= a A\na ::= \"x\"\nA ::= \"y\""),
            "start: g_a g_a_2\ng_a: \"x\"\ng_a_2: \"y\"\n"
        );
    }

    #[test]
    fn newlines_end_a_rule_except_after_a_bar_or_inside_parentheses() {
        let src = "root ::= \"a\" |\n  \"b\"\nx ::= (\n \"c\"\n \"d\" ) # note\n";
        assert_eq!(lark(src), "start: \"a\" | \"b\"\ng_x: (\"c\" \"d\")\n");
        // A name on the next line is the next rule, not part of this one.
        let e = fails("root ::= \"a\"\n  b\n");
        assert_eq!((e.line, e.message.contains("'::='")), (2, true), "{e}");
    }

    #[test]
    fn escapes_and_repetitions() {
        assert_eq!(
            lark(r#"root ::= "\x41\u00e9\U0001F600\n\"\\" [^\]\[]{2,} "q"{3} "r"{0,2}"#),
            "start: (\"A\" \"é\" \"😀\" \"\\u000a\" \"\\\"\" \"\\\\\") /[^\\x{5D}\\x{5B}]/{2,} \"q\"{3,3} \"r\"{0,2}\n"
        );
        assert_eq!(lark("root ::= \"\" | \"a\""), "start: (\"a\")?\n");
        assert_eq!(lark("root ::= <[12]> !<[7]>"), "start: <[12]> <[^7]>\n");
        let by_text = |t: &str| (t == "<think>").then_some(5);
        assert_eq!(
            gbnf_to_lark("root ::= <think> !<think>", &by_text).unwrap(),
            "start: <[5]> <[^5]>\n"
        );
    }

    #[test]
    fn bad_grammars_are_refused_with_a_position() {
        for (src, line, needle) in [
            ("root ::= foo", 1, "'foo' is used but never defined"),
            ("foo ::= \"a\"", 1, "no 'root' rule"),
            (
                "root ::= \"a\"\nroot ::= \"b\"",
                2,
                "already defined on line 1",
            ),
            ("root ::= \"abc", 1, "not closed"),
            ("root ::= [a-", 1, "not closed"),
            ("root ::= [z-a]", 1, "backwards"),
            ("root ::= []", 1, "matches nothing"),
            ("root ::= \"a\"{3,1}", 1, "backwards"),
            ("root ::= \"a\"{99999}", 1, "over the limit"),
            ("root ::= * \"a\"", 1, "nothing before it"),
            ("root ::= \"\\q\"", 1, "unknown escape"),
            ("root ::= \"\\x4\"", 1, "hex digits"),
            ("root ::= \"\\uD800\"", 1, "not a character"),
            ("root ::= ( \"a\"", 1, "')'"),
            ("root ::= <nope>", 1, "not a single token"),
            ("root ::= <[x]>", 1, "not a token id"),
            ("root ::= \"a\" )", 1, "unexpected ')'"),
            ("\n\nroot = \"a\"", 3, "'::='"),
        ] {
            let e = fails(src);
            assert!(e.message.contains(needle), "{src:?}: {e}");
            assert_eq!(e.line, line, "{src:?}: {e}");
        }
    }
}
