//! The byte-layout tables of `docs/format.md`, read back so that a test can hold an
//! encoder to them. Shared by every crate's `format_doc` test through
//! `#[path = ...] mod`, so there is one parser.
//!
//! Theory: a layout table is a markdown table whose header row has `off` and `size`
//! columns (and `field`, optionally `notes` and `record`). A test names a table by a
//! *marker*: text that occurs in exactly one line of the document outside tables (a
//! heading, a bold paragraph title such as `**Log block**`, or a lead-in line such as
//! `Vdev entry:`); the table is the first layout table after that line, and reaching
//! the next heading first is an error. `off` and `size` cells are small expressions
//! (integers, names the test binds such as `i` or `name_len`, `+ − · × * /` and
//! parentheses); a size of `…` means "to the end of the structure".
//!
//! A test encodes a value whose fields hold distinct marker values and calls
//! [`Table::check`] with each field's expected bytes: every row must be claimed by
//! the longest field key its `field` cell starts with (its bytes at the documented
//! offset must be exactly
//! those, and the documented size must equal their length) or be a reserved/zero row
//! (whose bytes must all be zero). [`Table::assert_tiles`] checks that the rows cover
//! the structure without gaps or overlaps and end at the encoder's total. So moving a
//! field in either the code or the document fails the test.
//!
//! Limits: prose layouts (the L2ARC log entry, the dedup record) and tables without an
//! `off` column are not read.

#![allow(dead_code)]

use std::collections::HashMap;

/// One row of a layout table, with its expressions evaluated.
#[derive(Debug, Clone)]
pub struct Row {
    /// Byte offset of the field.
    pub off: usize,
    /// Byte length, or `None` for `…` (to the end of the structure).
    pub size: Option<usize>,
    /// The `field` cell, as written.
    pub field: String,
    /// The `record` cell of a table that lists several records, else empty.
    pub record: String,
}

impl Row {
    /// True for a row that only reserves bytes, which must be zero.
    pub fn is_zero(&self) -> bool {
        let f = self.field.to_ascii_lowercase();
        f.starts_with("reserved") || f.starts_with("zero")
    }

    fn matches(&self, key: &str) -> bool {
        match self.field.strip_prefix(key) {
            Some(rest) => !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '['),
            None => false,
        }
    }
}

/// One layout table of the document.
#[derive(Debug, Clone)]
pub struct Table {
    /// The marker the test asked for (for messages).
    pub title: String,
    /// The rows in document order.
    pub rows: Vec<Row>,
}

/// The text of `docs/format.md`.
pub fn doc_text() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/format.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// The first layout table after the only line containing `marker`, with the names in
/// `vars` bound for its offset and size expressions.
pub fn table(marker: &str, vars: &[(&str, usize)]) -> Table {
    table_in(&doc_text(), marker, vars)
}

/// [`table`] over a given text (for testing the parser itself).
pub fn table_in(text: &str, marker: &str, vars: &[(&str, usize)]) -> Table {
    let lines: Vec<&str> = text.lines().collect();
    let hits: Vec<usize> = (0..lines.len())
        .filter(|&i| !lines[i].trim_start().starts_with('|') && lines[i].contains(marker))
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "marker {marker:?} must occur in exactly one line of format.md, found {}",
        hits.len()
    );
    let vars: HashMap<&str, usize> = vars.iter().copied().collect();
    let mut i = hits[0] + 1;
    loop {
        assert!(i < lines.len(), "no layout table after {marker:?}");
        let line = lines[i].trim();
        assert!(!line.starts_with('#'), "no layout table after {marker:?} before the next heading");
        if line.starts_with('|') {
            let head = cells(line);
            if head.iter().any(|c| c == "off") && head.iter().any(|c| c == "size") {
                break;
            }
            // Some other table (object numbers, values): skip it.
            while i < lines.len() && lines[i].trim().starts_with('|') {
                i += 1;
            }
            continue;
        }
        i += 1;
    }
    let head = cells(lines[i].trim());
    let col = |name: &str| head.iter().position(|c| c == name);
    let (off_c, size_c) = (col("off").unwrap(), col("size").unwrap());
    let field_c = col("field").unwrap_or_else(|| panic!("table after {marker:?} has no field column"));
    let record_c = col("record");
    let mut rows = Vec::new();
    for line in lines[i + 2..].iter().map(|l| l.trim()).take_while(|l| l.starts_with('|')) {
        let c = cells(line);
        let size = if c[size_c] == "…" { None } else { Some(eval(&c[size_c], &vars)) };
        rows.push(Row {
            off: eval(&c[off_c], &vars),
            size,
            field: c[field_c].clone(),
            record: record_c.map(|r| c[r].clone()).unwrap_or_default(),
        });
    }
    assert!(!rows.is_empty(), "empty table after {marker:?}");
    Table {
        title: marker.to_string(),
        rows,
    }
}

fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|c| c.trim().to_string()).collect()
}

/// Evaluate an `off`/`size` cell: integers, bound names, `+ − - · × * /`, parentheses.
pub fn eval(expr: &str, vars: &HashMap<&str, usize>) -> usize {
    let toks = tokens(expr);
    let mut p = Parser {
        toks: &toks,
        pos: 0,
        vars,
        expr,
    };
    let v = p.sum();
    assert_eq!(p.pos, toks.len(), "trailing input in {expr:?}");
    v
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(usize),
    Name(String),
    Op(char),
}

fn tokens(expr: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let cs: Vec<char> = expr.replace('`', "").chars().collect();
    let mut i = 0;
    while i < cs.len() {
        let c = cs[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let mut v = 0usize;
            while i < cs.len() && cs[i].is_ascii_digit() {
                v = v * 10 + cs[i].to_digit(10).unwrap() as usize;
                i += 1;
            }
            out.push(Tok::Num(v));
        } else if c.is_ascii_alphabetic() || c == '_' {
            let s: String = cs[i..].iter().take_while(|c| c.is_ascii_alphanumeric() || **c == '_').collect();
            i += s.len();
            out.push(Tok::Name(s));
        } else {
            let op = match c {
                '+' => '+',
                '-' | '−' => '-',
                '*' | '·' | '×' => '*',
                '/' | '(' | ')' => c,
                _ => panic!("unexpected {c:?} in {expr:?}"),
            };
            out.push(Tok::Op(op));
            i += 1;
        }
    }
    out
}

struct Parser<'a> {
    toks: &'a [Tok],
    pos: usize,
    vars: &'a HashMap<&'a str, usize>,
    expr: &'a str,
}

impl Parser<'_> {
    fn peek_op(&self) -> Option<char> {
        match self.toks.get(self.pos) {
            Some(Tok::Op(c)) => Some(*c),
            _ => None,
        }
    }
    fn sum(&mut self) -> usize {
        let mut v = self.product();
        while let Some(op @ ('+' | '-')) = self.peek_op() {
            self.pos += 1;
            let r = self.product();
            v = if op == '+' {
                v + r
            } else {
                v.checked_sub(r).unwrap_or_else(|| panic!("negative {:?}", self.expr))
            };
        }
        v
    }
    fn product(&mut self) -> usize {
        let mut v = self.atom();
        while let Some(op @ ('*' | '/')) = self.peek_op() {
            self.pos += 1;
            let r = self.atom();
            v = if op == '*' { v * r } else { v / r };
        }
        v
    }
    fn atom(&mut self) -> usize {
        let t = self.toks.get(self.pos).cloned().unwrap_or_else(|| panic!("short expression {:?}", self.expr));
        self.pos += 1;
        match t {
            Tok::Num(v) => v,
            Tok::Name(n) => *self.vars.get(n.as_str()).unwrap_or_else(|| panic!("unbound {n:?} in {:?}", self.expr)),
            Tok::Op('(') => {
                let v = self.sum();
                assert_eq!(self.toks.get(self.pos), Some(&Tok::Op(')')), "unclosed ( in {:?}", self.expr);
                self.pos += 1;
                v
            }
            Tok::Op(c) => panic!("unexpected {c:?} in {:?}", self.expr),
        }
    }
}

impl Table {
    /// The rows whose `record` cell is `record` (tables listing several records).
    pub fn only(&self, record: &str) -> Table {
        let rows: Vec<Row> = self.rows.iter().filter(|r| r.record == record).cloned().collect();
        assert!(!rows.is_empty(), "no {record} rows in {:?}", self.title);
        Table {
            title: format!("{} / {record}", self.title),
            rows,
        }
    }

    /// The only row whose field is `key` (or starts with `key` then a non-word char).
    pub fn row(&self, key: &str) -> &Row {
        let hits: Vec<&Row> = self.rows.iter().filter(|r| r.field == key).collect();
        let hits = if hits.is_empty() {
            self.rows.iter().filter(|r| r.matches(key)).collect()
        } else {
            hits
        };
        assert_eq!(hits.len(), 1, "{:?}: field {key:?} names {} rows", self.title, hits.len());
        hits[0]
    }

    /// The rows cover `0..total` in order, without gaps or overlaps.
    pub fn assert_tiles(&self, total: usize) {
        let mut at = 0;
        for (k, r) in self.rows.iter().enumerate() {
            assert_eq!(
                r.off, at,
                "{:?}: row {:?} starts at {} where the previous row ended at {at}",
                self.title, r.field, r.off
            );
            at = match r.size {
                Some(s) => r.off + s,
                None => {
                    assert_eq!(k + 1, self.rows.len(), "{:?}: only the last row may run to the end", self.title);
                    total
                }
            };
        }
        assert_eq!(at, total, "{:?}: rows end at {at}, the structure at {total}", self.title);
    }

    /// Every row of the table against `bytes`, the encoding of a value whose fields
    /// hold the markers in `fields` (field key, expected bytes at its offset).
    /// Reserved and zero rows must be zero; any other row must be claimed by exactly
    /// one key, and every key must claim a row.
    pub fn check(&self, bytes: &[u8], fields: &[(&str, Vec<u8>)]) {
        let mut used = vec![false; fields.len()];
        for r in &self.rows {
            let end = r.size.map_or(bytes.len(), |s| r.off + s);
            assert!(
                end <= bytes.len(),
                "{:?}: row {:?} ends at {end}, past the encoding ({})",
                self.title,
                r.field,
                bytes.len()
            );
            let got = &bytes[r.off..end];
            // The longest matching key claims the row ("checksum algorithm" before "checksum").
            let claim = (0..fields.len()).filter(|&k| r.matches(fields[k].0)).max_by_key(|&k| fields[k].0.len());
            let Some(k) = claim else {
                assert!(r.is_zero(), "{:?}: row {:?} is neither checked nor reserved", self.title, r.field);
                assert!(got.iter().all(|&x| x == 0), "{:?}: reserved row at {} holds {got:02x?}", self.title, r.off);
                continue;
            };
            let (key, want) = &fields[k];
            assert!(!used[k], "{:?}: key {key:?} claims several rows", self.title);
            used[k] = true;
            assert_eq!(
                got.len(),
                want.len(),
                "{:?}: {key} is {} bytes in the code, {} in the doc",
                self.title,
                want.len(),
                got.len()
            );
            assert_eq!(got, &want[..], "{:?}: {key} at doc offset {} does not hold its marker", self.title, r.off);
        }
        for (k, (key, _)) in fields.iter().enumerate() {
            assert!(used[k], "{:?}: no row for {key:?}", self.title);
        }
    }
}

/// `v` as `size` little-endian bytes (`v` must fit).
pub fn le(v: u64, size: usize) -> Vec<u8> {
    assert!(size == 8 || v >> (8 * size) == 0, "{v:#x} does not fit {size} bytes");
    v.to_le_bytes()[..size].to_vec()
}

#[test]
fn parser_reads_a_table() {
    let text = "# T\n\n### Thing (16 bytes)\n\n| off | size | field | notes |\n|--:|--:|--|--|\n| 0 | 8 | a | x |\n| 8 | 4·n − 4 | reserved | zero |\n| 4 + 4·n | … | b | |\n\n# Next\n";
    let t = table_in(text, "Thing (16", &[("n", 1)]);
    assert_eq!(t.rows.len(), 3);
    assert_eq!((t.rows[1].off, t.rows[1].size), (8, Some(0)));
    assert_eq!(t.rows[2].off, 8);
    let mut b = vec![0u8; 16];
    b[..8].copy_from_slice(&le(7, 8));
    b[8..].fill(9);
    t.assert_tiles(16);
    t.check(&b, &[("a", le(7, 8)), ("b", vec![9; 8])]);
}
