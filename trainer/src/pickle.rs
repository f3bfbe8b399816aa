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
    /// Items in the order they were set.
    Dict(Vec<(Value, Value)>),
}

impl Value {
    /// The value under a string key of a dict.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(items) => items.iter().find(|(k, _)| matches!(k, Value::Str(s) if s == key)).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// What is on the machine's stack: a value, or a MARK.
enum Slot {
    Mark,
    Value(Value),
}

/// Decodes a whole pickle to its value; one line saying what is wrong otherwise.
pub fn load(bytes: &[u8]) -> Result<Value, String> {
    let mut at = 0usize;
    let mut stack: Vec<Slot> = Vec::new();
    let mut memo: HashMap<u64, Value> = HashMap::new();
    let take = |at: &mut usize, n: usize| -> Result<&[u8], String> {
        let end = at.checked_add(n).filter(|&e| e <= bytes.len()).ok_or("it ends in the middle of a value")?;
        let s = &bytes[*at..end];
        *at = end;
        Ok(s)
    };
    let uint = |b: &[u8]| b.iter().rev().fold(0u64, |n, &x| n << 8 | x as u64);
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).map_err(|_| "a string in it is not UTF-8".to_string());
    let pop = |stack: &mut Vec<Slot>| match stack.pop() {
        Some(Slot::Value(v)) => Ok(v),
        _ => Err("its program takes a value from an empty stack".to_string()),
    };
    // The values above the topmost MARK, which goes too.
    let pop_mark = |stack: &mut Vec<Slot>| -> Result<Vec<Value>, String> {
        let mark = stack.iter().rposition(|s| matches!(s, Slot::Mark)).ok_or("its program has no MARK where one is needed")?;
        let items = stack.split_off(mark + 1);
        stack.pop();
        Ok(items.into_iter().map(|s| if let Slot::Value(v) = s { v } else { Value::None }).collect())
    };
    loop {
        let op = *take(&mut at, 1)?.first().unwrap_or(&0);
        let value = match op {
            b'.' => {
                // STOP: the value left is the pickle's.
                let v = pop(&mut stack)?;
                return Ok(v);
            }
            0x80 => {
                // PROTO n
                let v = take(&mut at, 1)?[0];
                if !(2..=5).contains(&v) {
                    return Err(format!("it is pickle protocol {v}; vramfit reads protocols 2 to 5"));
                }
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
            0x94 => {
                // MEMOIZE: the top of the stack gets the next memo index.
                let top = match stack.last() {
                    Some(Slot::Value(v)) => v.clone(),
                    _ => return Err("its program memoizes nothing".into()),
                };
                memo.insert(memo.len() as u64, top);
                continue;
            }
            b'q' | b'r' => {
                // BINPUT (1-byte index), LONG_BINPUT (4-byte).
                let index = uint(take(&mut at, if op == b'q' { 1 } else { 4 })?);
                let top = match stack.last() {
                    Some(Slot::Value(v)) => v.clone(),
                    _ => return Err("its program memoizes nothing".into()),
                };
                memo.insert(index, top);
                continue;
            }
            b'h' | b'j' => {
                // BINGET, LONG_BINGET.
                let index = uint(take(&mut at, if op == b'h' { 1 } else { 4 })?);
                memo.get(&index).cloned().ok_or(format!("its program reads memo entry {index}, which was never written"))?
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
            b'}' => Value::Dict(Vec::new()),
            b']' | b')' => Value::List(Vec::new()),
            b't' | b'l' => Value::List(pop_mark(&mut stack)?),
            0x85..=0x87 => {
                // TUPLE1..3
                let n = (op - 0x84) as usize;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(pop(&mut stack)?);
                }
                items.reverse();
                Value::List(items)
            }
            b's' | b'u' => {
                // SETITEM (one key and value), SETITEMS (pairs above a MARK), into the dict below.
                let flat = if op == b's' {
                    let v = pop(&mut stack)?;
                    let k = pop(&mut stack)?;
                    vec![k, v]
                } else {
                    pop_mark(&mut stack)?
                };
                if flat.len() % 2 != 0 {
                    return Err("its program sets a dict key without a value".into());
                }
                let Some(Slot::Value(Value::Dict(items))) = stack.last_mut() else {
                    return Err("its program sets items of something that is not a dict".into());
                };
                let mut pairs = flat.into_iter();
                while let (Some(k), Some(v)) = (pairs.next(), pairs.next()) {
                    // A key set again replaces its value, as in Python.
                    match items.iter_mut().find(|(key, _)| *key == k) {
                        Some(item) => item.1 = v,
                        None => items.push((k, v)),
                    }
                }
                continue;
            }
            b'a' | b'e' => {
                // APPEND, APPENDS, onto the list below.
                let new = if op == b'a' { vec![pop(&mut stack)?] } else { pop_mark(&mut stack)? };
                let Some(Slot::Value(Value::List(items))) = stack.last_mut() else {
                    return Err("its program appends to something that is not a list".into());
                };
                items.extend(new);
                continue;
            }
            b'c' | 0x93 | b'R' | 0x81 | 0x92 | b'b' | b'i' | b'o' => {
                return Err(format!("it asks to import or call Python code (opcode 0x{op:02x}); vramfit reads plain data only"))
            }
            other => return Err(format!("it uses pickle opcode 0x{other:02x}, which vramfit does not read")),
        };
        stack.push(Slot::Value(value));
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
        assert!(load(b"hello world").is_err());
        assert!(load(b"\x80\x04h\x05.").unwrap_err().contains("memo entry 5"));
    }
}
