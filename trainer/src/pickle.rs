//! Reads the `meta.pkl` nanoGPT's char-level prepare scripts write beside `train.bin` and
//! `val.bin` (`{'vocab_size': n, 'itos': {id: char}, 'stoi': {char: id}}`), so that such data
//! trains with its own vocabulary instead of being taken for GPT-2 tokens.
//!
//! A pickle is a program for a small stack machine. This reads the part of it that plain data
//! needs (protocols 2 to 5: dicts, lists, tuples, strings, numbers, booleans, None, and the memo
//! that lets a string appear in both `itos` and `stoi`) and refuses everything else, in
//! particular the opcodes that import and call Python code: a data file cannot run anything.
//! Opcodes and their encodings are those of CPython's `Lib/pickletools.py`.

use std::collections::HashMap;

/// A value of the pickled data.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    /// Lists and tuples alike.
    List(Vec<Value>),
    /// Items in the order they were set (a key set twice is there twice; see [`Value::get`]).
    Dict(Vec<(Value, Value)>),
}

impl Value {
    /// The value as Python's `repr` writes it (`'x'`, `-1`, `[1, 2]`), for error lines that
    /// quote a file's value in the file's own terms.
    pub fn python_repr(&self) -> String {
        let mut out = String::new();
        self.write_repr(&mut out);
        out
    }

    fn write_repr(&self, out: &mut String) {
        use std::fmt::Write;
        match self {
            Value::None => out.push_str("None"),
            Value::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
            Value::Int(n) => {
                let _ = write!(out, "{n}");
            }
            Value::Float(x) if x.is_nan() => out.push_str("nan"),
            Value::Float(x) if x.is_infinite() => out.push_str(if *x > 0.0 { "inf" } else { "-inf" }),
            // Python writes a whole float with ".0"; Rust's `{:?}` does too.
            Value::Float(x) => {
                let _ = write!(out, "{x:?}");
            }
            Value::Str(s) => {
                // Python quotes with ' unless the text has a ' and no ".
                let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
                out.push(quote);
                for c in s.chars() {
                    match c {
                        c if c == quote => {
                            out.push('\\');
                            out.push(c);
                        }
                        '\\' => out.push_str("\\\\"),
                        '\n' => out.push_str("\\n"),
                        '\r' => out.push_str("\\r"),
                        '\t' => out.push_str("\\t"),
                        c if c.is_control() => {
                            let _ = write!(out, "\\x{:02x}", c as u32);
                        }
                        c => out.push(c),
                    }
                }
                out.push(quote);
            }
            Value::Bytes(b) => {
                let quote = if b.contains(&b'\'') && !b.contains(&b'"') { b'"' } else { b'\'' };
                out.push('b');
                out.push(quote as char);
                for &x in b {
                    match x {
                        x if x == quote || x == b'\\' => {
                            out.push('\\');
                            out.push(x as char);
                        }
                        b'\n' => out.push_str("\\n"),
                        b'\r' => out.push_str("\\r"),
                        b'\t' => out.push_str("\\t"),
                        0x20..=0x7e => out.push(x as char),
                        _ => {
                            let _ = write!(out, "\\x{x:02x}");
                        }
                    }
                }
                out.push(quote as char);
            }
            Value::List(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    v.write_repr(out);
                }
                out.push(']');
            }
            Value::Dict(items) => {
                out.push('{');
                for (i, (k, v)) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    k.write_repr(out);
                    out.push_str(": ");
                    v.write_repr(out);
                }
                out.push('}');
            }
        }
    }

    /// The value under a string key of a dict (the last set, as Python keeps it).
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(items) => items.iter().rev().find(|(k, _)| matches!(k, Value::Str(s) if s == key)).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// What is on the machine's stack: a value (with how deep its containers nest), or a MARK.
enum Slot {
    Mark,
    Value(Value, usize),
}

/// Deepest nesting of lists and dicts read: plain data needs a few levels, and a value nested
/// a million deep (two bytes a level) would overflow the stack when dropped.
const MAX_DEPTH: usize = 64;

/// Bytes of strings a pickle may copy out of its memo: a 2-byte BINGET can repeat a long string
/// as often as it likes (references in Python, copies here).
const MAX_COPIED_BYTES: usize = 64 << 20;

/// The opcodes of pickle protocols 0 and 1 (`pickletools`' list), the only ones a pickle
/// without a PROTO opcode can hold: a file that starts with another byte, or reaches one
/// before any PROTO, is not a pickle at all.
const PROTOCOL_0_AND_1_OPCODES: &[u8] = b"().012FIJKLMNPQRSTUVXabcdeghijlopqrstu}]G";

/// Decodes a whole pickle to its value; one line saying what is wrong otherwise.
pub fn load(bytes: &[u8]) -> Result<Value, String> {
    match bytes.first() {
        None => return Err("it is empty".into()),
        Some(&first) if first != 0x80 && !PROTOCOL_0_AND_1_OPCODES.contains(&first) => {
            return Err(format!("it is not a pickle (no pickle starts with byte 0x{first:02x})"))
        }
        _ => {}
    }
    let mut at = 0usize;
    let mut stack: Vec<Slot> = Vec::new();
    let mut memo: HashMap<u64, Option<Value>> = HashMap::new();
    let take = |at: &mut usize, n: usize| -> Result<&[u8], String> {
        let end = at.checked_add(n).filter(|&e| e <= bytes.len()).ok_or("it ends in the middle of a value")?;
        let s = &bytes[*at..end];
        *at = end;
        Ok(s)
    };
    let uint = |b: &[u8]| b.iter().rev().fold(0u64, |n, &x| n << 8 | x as u64);
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).map_err(|_| "a string in it is not UTF-8".to_string());
    let pop = |stack: &mut Vec<Slot>| match stack.pop() {
        Some(Slot::Value(v, depth)) => Ok((v, depth)),
        _ => Err("its program takes a value from an empty stack".to_string()),
    };
    // The values above the topmost MARK, which goes too, and their deepest nesting.
    let pop_mark = |stack: &mut Vec<Slot>| -> Result<(Vec<Value>, usize), String> {
        let mark = stack.iter().rposition(|s| matches!(s, Slot::Mark)).ok_or("its program has no MARK where one is needed")?;
        let items = stack.split_off(mark + 1);
        stack.pop();
        let depth = items.iter().map(|s| if let Slot::Value(_, d) = s { *d } else { 0 }).max().unwrap_or(0);
        Ok((items.into_iter().map(|s| if let Slot::Value(v, _) = s { v } else { Value::None }).collect(), depth))
    };
    // A container around values nested `depth` deep.
    let nest = |depth: usize| match depth + 1 {
        d if d > MAX_DEPTH => Err(format!("it nests lists or dicts more than {MAX_DEPTH} deep")),
        d => Ok(d),
    };
    let mut copied = 0usize;
    let mut saw_proto = false;
    loop {
        let op = *take(&mut at, 1)?.first().unwrap_or(&0);
        let value = match op {
            b'.' => {
                // STOP: the value left is the pickle's.
                let (v, _) = pop(&mut stack)?;
                return Ok(v);
            }
            0x80 => {
                // PROTO n
                let v = take(&mut at, 1)?[0];
                if !(2..=5).contains(&v) {
                    return Err(format!("it is pickle protocol {v}; vramfit reads protocols 2 to 5"));
                }
                saw_proto = true;
                continue;
            }
            0x95 => {
                // FRAME: an 8-byte length; the frame's opcodes follow as usual.
                take(&mut at, 8)?;
                continue;
            }
            b'(' => {
                stack.push(Slot::Mark);
                continue;
            }
            0x94 | b'q' | b'r' => {
                // MEMOIZE (the next index), BINPUT (1-byte index), LONG_BINPUT (4-byte): the top
                // of the stack is remembered. Python remembers a reference; this keeps a copy of
                // a scalar or string, and for a list or dict (which is still filled in after
                // this, and which plain data never shares) that one was remembered.
                let index = match op {
                    0x94 => memo.len() as u64,
                    b'q' => uint(take(&mut at, 1)?),
                    _ => uint(take(&mut at, 4)?),
                };
                let kept = match stack.last() {
                    Some(Slot::Value(Value::List(_) | Value::Dict(_), _)) => None,
                    Some(Slot::Value(v, _)) => Some(v.clone()),
                    _ => return Err("its program memoizes nothing".into()),
                };
                memo.insert(index, kept);
                continue;
            }
            b'h' | b'j' => {
                // BINGET, LONG_BINGET.
                let index = uint(take(&mut at, if op == b'h' { 1 } else { 4 })?);
                let value = match memo.get(&index) {
                    Some(Some(v)) => v.clone(),
                    Some(None) => return Err("it refers to one list or dict from two places, which vramfit does not read".into()),
                    None => return Err(format!("its program reads memo entry {index}, which was never written")),
                };
                copied += match &value {
                    Value::Str(s) => s.len(),
                    Value::Bytes(b) => b.len(),
                    _ => 8,
                };
                if copied > MAX_COPIED_BYTES {
                    return Err("it repeats its strings past 64 MiB".into());
                }
                value
            }
            b'N' => Value::None,
            0x88 => Value::Bool(true),
            0x89 => Value::Bool(false),
            b'K' => Value::Int(uint(take(&mut at, 1)?) as i64),
            b'M' => Value::Int(uint(take(&mut at, 2)?) as i64),
            b'J' => Value::Int(i32::from_le_bytes(take(&mut at, 4)?.try_into().unwrap_or_default()) as i64),
            0x8a => {
                // LONG1: a little-endian two's-complement integer of n bytes.
                let n = take(&mut at, 1)?[0] as usize;
                let b = take(&mut at, n)?;
                if n > 8 {
                    return Err("an integer in it is larger than 64 bits".into());
                }
                let mut full = [if b.last().is_some_and(|&x| x & 0x80 != 0) { 0xff } else { 0 }; 8];
                full[..n].copy_from_slice(b);
                Value::Int(i64::from_le_bytes(full))
            }
            b'G' => Value::Float(f64::from_be_bytes(take(&mut at, 8)?.try_into().unwrap_or_default())),
            0x8c => {
                let n = uint(take(&mut at, 1)?) as usize;
                Value::Str(text(take(&mut at, n)?)?)
            }
            b'X' => {
                let n = uint(take(&mut at, 4)?) as usize;
                Value::Str(text(take(&mut at, n)?)?)
            }
            0x8d => {
                let n = usize::try_from(uint(take(&mut at, 8)?)).map_err(|_| "a string in it is too long")?;
                Value::Str(text(take(&mut at, n)?)?)
            }
            b'C' => {
                let n = uint(take(&mut at, 1)?) as usize;
                Value::Bytes(take(&mut at, n)?.to_vec())
            }
            b'B' => {
                let n = uint(take(&mut at, 4)?) as usize;
                Value::Bytes(take(&mut at, n)?.to_vec())
            }
            b'}' => {
                stack.push(Slot::Value(Value::Dict(Vec::new()), 1));
                continue;
            }
            b']' | b')' => {
                stack.push(Slot::Value(Value::List(Vec::new()), 1));
                continue;
            }
            b't' | b'l' => {
                let (items, depth) = pop_mark(&mut stack)?;
                stack.push(Slot::Value(Value::List(items), nest(depth)?));
                continue;
            }
            0x85..=0x87 => {
                // TUPLE1..3
                let n = (op - 0x84) as usize;
                let (mut items, mut depth) = (Vec::with_capacity(n), 0);
                for _ in 0..n {
                    let (v, d) = pop(&mut stack)?;
                    items.push(v);
                    depth = depth.max(d);
                }
                items.reverse();
                stack.push(Slot::Value(Value::List(items), nest(depth)?));
                continue;
            }
            b's' | b'u' => {
                // SETITEM (one key and value), SETITEMS (pairs above a MARK), into the dict below.
                let (flat, depth) = if op == b's' {
                    let (v, dv) = pop(&mut stack)?;
                    let (k, dk) = pop(&mut stack)?;
                    (vec![k, v], dv.max(dk))
                } else {
                    pop_mark(&mut stack)?
                };
                if flat.len() % 2 != 0 {
                    return Err("its program sets a dict key without a value".into());
                }
                let depth = nest(depth)?;
                let Some(Slot::Value(Value::Dict(items), dict_depth)) = stack.last_mut() else {
                    return Err("its program sets items of something that is not a dict".into());
                };
                *dict_depth = (*dict_depth).max(depth);
                // In order; a key set again is found last by `Value::get`, as Python keeps it.
                let mut pairs = flat.into_iter();
                while let (Some(k), Some(v)) = (pairs.next(), pairs.next()) {
                    items.push((k, v));
                }
                continue;
            }
            b'a' | b'e' => {
                // APPEND, APPENDS, onto the list below.
                let (new, depth) = if op == b'a' {
                    let (v, d) = pop(&mut stack)?;
                    (vec![v], d)
                } else {
                    pop_mark(&mut stack)?
                };
                let depth = nest(depth)?;
                let Some(Slot::Value(Value::List(items), list_depth)) = stack.last_mut() else {
                    return Err("its program appends to something that is not a list".into());
                };
                *list_depth = (*list_depth).max(depth);
                items.extend(new);
                continue;
            }
            b'c' | 0x93 | b'R' | 0x81 | 0x92 | b'b' | b'i' | b'o' => {
                return Err(format!("it asks to import or call Python code (opcode 0x{op:02x}); vramfit reads plain data only"))
            }
            // Protocols 0 and 1 start without PROTO and use text opcodes vramfit does not read.
            other if !saw_proto && !PROTOCOL_0_AND_1_OPCODES.contains(&other) => {
                return Err(format!("it is not a pickle (byte {} is 0x{other:02x}, which no pickle without a PROTO opcode holds)", at - 1))
            }
            other if !saw_proto => {
                return Err(format!(
                    "it is a protocol 0 or 1 pickle (opcode 0x{other:02x}); vramfit reads protocols 2 to 5: save it with pickle.dump(..., protocol=2) or later (Python 3's default)"
                ))
            }
            other => return Err(format!("it uses pickle opcode 0x{other:02x}, which vramfit does not read")),
        };
        stack.push(Slot::Value(value, 0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pickle.dumps({'a': [1, -2, 3.5, None, True], 'b': (b'x', 'é', 300, 70000, 2**40)}, protocol=4)`,
    /// as CPython 3.11 writes it.
    const MIXED: &[u8] = b"\x80\x04\x95?\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94]\x94(K\x01J\xfe\xff\xff\xffG@\x0c\x00\x00\x00\x00\x00\x00N\x88e\x8c\x01b\x94(C\x01x\x94\x8c\x02\xc3\xa9\x94M,\x01Jp\x11\x01\x00\x8a\x06\x00\x00\x00\x00\x00\x01t\x94u.";

    #[test]
    fn plain_values_decode_as_python_wrote_them() {
        let v = load(MIXED).unwrap();
        assert_eq!(v.get("a"), Some(&Value::List(vec![Value::Int(1), Value::Int(-2), Value::Float(3.5), Value::None, Value::Bool(true)])));
        assert_eq!(
            v.get("b"),
            Some(&Value::List(vec![
                Value::Bytes(b"x".to_vec()),
                Value::Str("é".into()),
                Value::Int(300),
                Value::Int(70000),
                Value::Int(1 << 40)
            ]))
        );
    }

    /// Error lines quote a file's values as Python writes them, not as Rust debugs them. The
    /// expected texts are CPython 3.11's `repr` of the same values (tuples, which the reader
    /// does not tell from lists, written as lists).
    #[test]
    fn values_are_quoted_as_python_writes_them() {
        let v = load(MIXED).unwrap();
        assert_eq!(v.python_repr(), "{'a': [1, -2, 3.5, None, True], 'b': [b'x', 'é', 300, 70000, 1099511627776]}");
        let odd = Value::List(vec![
            Value::Str("it's \\ a\n".into()),
            Value::Bytes(vec![0, b'\'', 0xff]),
            Value::Str("\"'\t".into()),
            Value::Float(2.0),
            Value::Float(f64::NEG_INFINITY),
            Value::Bool(false),
        ]);
        assert_eq!(odd.python_repr(), r#"["it's \\ a\n", b"\x00'\xff", '"\'\t', 2.0, -inf, False]"#);
    }

    #[test]
    fn code_truncation_and_garbage_are_one_line_errors() {
        // `pickle.dumps(os.system, protocol=2)` (a GLOBAL), and the same followed by a call.
        assert!(load(b"\x80\x02cposix\nsystem\nq\x00.").unwrap_err().contains("import or call Python code"));
        let code = b"\x80\x02cposix\nsystem\nq\x00X\x04\x00\x00\x00trueq\x01\x85q\x02Rq\x03.";
        assert!(load(code).unwrap_err().contains("import or call Python code"));
        for cut in [1, 10, MIXED.len() / 2, MIXED.len() - 1] {
            let err = load(&MIXED[..cut]).unwrap_err();
            assert!(!err.contains('\n'), "{err}");
        }
        assert!(load(b"").is_err());
        assert!(load(b"\x80\x01N.").unwrap_err().contains("protocol 1"));
        // `pickle.dumps({'a': 1}, protocol=0)`: says how to save one vramfit reads.
        let text = load(b"(dp0\nVa\np1\nI1\ns.").unwrap_err();
        assert!(text.contains("protocol 0 or 1 pickle") && text.contains("protocol=2"), "{text}");
        // Not pickles at all, empty, a text file, a byte no protocol-0/1 pickle holds: said so,
        // with no advice to save them again in another protocol.
        assert_eq!(load(b"").unwrap_err(), "it is empty");
        for not_one in [&b"vocab_size = 21\n"[..], b"\x82\x01\x02", b"K\x01\x82."] {
            let err = load(not_one).unwrap_err();
            assert!(err.starts_with("it is not a pickle") && !err.contains("protocol="), "{err}");
        }
        // Text that happens to start with an opcode is still refused (here a memo it never set).
        assert!(load(b"hello world").is_err());
        assert!(load(b"\x80\x04h\x05.").unwrap_err().contains("memo entry 5"));
    }

    /// What would take the reader's memory or stack: a list shared by reference (copies here,
    /// 8^12 of them from 250 bytes), nesting a million deep (two bytes a level), and one long
    /// string repeated by 2-byte references.
    #[test]
    fn hostile_pickles_are_refused_before_they_grow() {
        let mut shared = b"\x80\x04]\x94".to_vec();
        for level in 0..12u8 {
            shared.push(b'(');
            shared.extend(std::iter::repeat_n([b'h', level], 8).flatten());
            shared.extend([b'l', 0x94]);
        }
        shared.push(b'.');
        assert!(load(&shared).unwrap_err().contains("one list or dict from two places"));
        let depth = 200_000;
        let nested: Vec<u8> = std::iter::repeat_n(b'(', depth).chain(std::iter::repeat_n(b'l', depth)).chain([b'.']).collect();
        assert!(load(&nested).unwrap_err().contains("more than 64 deep"));
        let tuples: Vec<u8> = [b'N'].into_iter().chain(std::iter::repeat_n(0x85, depth)).chain([b'.']).collect();
        assert!(load(&tuples).unwrap_err().contains("more than 64 deep"));
        let big = 4usize << 20;
        let mut repeated = b"\x80\x04(\x8d".to_vec();
        repeated.extend((big as u64).to_le_bytes());
        repeated.extend(std::iter::repeat_n(b'x', big));
        repeated.push(0x94);
        repeated.extend(std::iter::repeat_n([b'h', 0], 20).flatten());
        repeated.extend(b"l.");
        assert!(load(&repeated).unwrap_err().contains("past 64 MiB"));
        // Plain data at the limits reads: 64 levels, and a key set twice (the last one counts).
        let deep: Vec<u8> = [b'N'].into_iter().chain(std::iter::repeat_n(0x85, 64)).chain([b'.']).collect();
        assert!(load(&deep).is_ok());
        let twice = load(b"\x80\x04}(\x8c\x01aK\x01\x8c\x01aK\x02u.").unwrap();
        assert_eq!(twice.get("a"), Some(&Value::Int(2)));
    }
}
