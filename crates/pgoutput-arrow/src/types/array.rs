//! Arrays: the text literal of array_out (`{1,NULL,"a b",{...}}`, with `[0:2]=` before it
//! when a lower bound is not 1) and array_send's format (arrayfuncs.c). Both are read into
//! the same shape (dimensions) and element list, that the column then decodes one by one.

use super::num::err;
use super::value::{Result, ValueError};

/// Arrays have at most 6 dimensions (MAXDIM).
const MAXDIM: usize = 6;

#[derive(Clone, Copy)]
enum Elem {
    Null,
    /// Bytes of the input, unchanged.
    Input(usize, usize),
    /// Bytes unescaped into `ArrayDecoder::unescaped`.
    Unescaped(usize, usize),
}

/// Parses one array value; reused from value to value to avoid allocations.
#[derive(Default)]
pub(crate) struct ArrayDecoder {
    dims: Vec<usize>,
    lbound_not_one: bool,
    lbounds: Vec<i32>,
    elems: Vec<Elem>,
    unescaped: Vec<u8>,
}

impl ArrayDecoder {
    fn reset(&mut self) {
        self.dims.clear();
        self.lbound_not_one = false;
        self.lbounds.clear();
        self.elems.clear();
        self.unescaped.clear();
    }

    /// Lengths of the dimensions, outermost first; empty for an empty array.
    pub(crate) fn dims(&self) -> &[usize] {
        &self.dims
    }

    pub(crate) fn lower_bounds_not_one(&self) -> bool {
        self.lbound_not_one
    }

    /// Lower bounds of a binary array's dimensions.
    pub(crate) fn lower_bounds(&self) -> &[i32] {
        &self.lbounds
    }

    pub(crate) fn len(&self) -> usize {
        self.elems.len()
    }

    /// Element `i`: None for NULL, else its bytes and, when they are a slice of `input`,
    /// their offset there.
    pub(crate) fn element<'a>(&'a self, i: usize, input: &'a [u8]) -> Option<(&'a [u8], Option<usize>)> {
        match self.elems.get(i)? {
            Elem::Null => None,
            Elem::Input(s, e) => Some((input.get(*s..*e)?, Some(*s))),
            Elem::Unescaped(s, e) => Some((self.unescaped.get(*s..*e)?, None)),
        }
    }

    /// array_send: ndim, has-null flag, element type, (length, lower bound) per dimension,
    /// then each element as Int32 length (-1 for NULL) and bytes.
    pub(crate) fn parse_binary(&mut self, b: &[u8], elem_oid: u32) -> Result<()> {
        self.reset();
        let bad = || err("binary array", b);
        let mut at = 0usize;
        let i32_at = |at: &mut usize| -> Option<i32> {
            let v = b.get(*at..*at + 4)?;
            *at += 4;
            Some(i32::from_be_bytes([v[0], v[1], v[2], v[3]]))
        };
        let (Some(ndim), Some(flags), Some(oid)) = (i32_at(&mut at), i32_at(&mut at), i32_at(&mut at)) else {
            return bad();
        };
        if ndim < 0 || ndim as usize > MAXDIM || !(0..=1).contains(&flags) {
            return bad();
        }
        if oid as u32 != elem_oid {
            return Err(ValueError::new(format!(
                "binary array of element type {}, expected {elem_oid}",
                oid as u32
            )));
        }
        let mut total: usize = 1;
        for _ in 0..ndim {
            let (Some(n), Some(lb)) = (i32_at(&mut at), i32_at(&mut at)) else { return bad() };
            if n < 0 {
                return bad();
            }
            self.lbound_not_one |= lb != 1;
            self.lbounds.push(lb);
            self.dims.push(n as usize);
            total = match total.checked_mul(n as usize) {
                // Every element takes 4 bytes at least: more cannot be there.
                Some(t) if t <= b.len() / 4 => t,
                _ => return bad(),
            };
        }
        if ndim == 0 {
            total = 0;
        }
        self.elems.reserve(total);
        for _ in 0..total {
            let Some(len) = i32_at(&mut at) else { return bad() };
            if len == -1 {
                self.elems.push(Elem::Null);
                continue;
            }
            let end = at.checked_add(len as usize).filter(|&e| len >= 0 && e <= b.len());
            let Some(end) = end else { return bad() };
            self.elems.push(Elem::Input(at, end));
            at = end;
        }
        if at != b.len() {
            return bad();
        }
        if self.dims.contains(&0) {
            // A dimension of length 0 holds nothing: the empty array.
            self.dims.clear();
        }
        Ok(())
    }

    /// array_out's literal. Elements containing the delimiter, braces, quotes, backslashes
    /// or white space, and empty strings, are double-quoted with `\` escapes; an unquoted
    /// NULL is the null element.
    pub(crate) fn parse_text(&mut self, s: &[u8], delim: u8) -> Result<()> {
        self.reset();
        let bad = || err("array", s);
        let mut i = 0;
        let ws = |c: u8| matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c);
        let mut declared: [usize; MAXDIM] = [0; MAXDIM];
        let mut ndeclared = 0;
        if s.first() == Some(&b'[') {
            // "[lb:ub][lb:ub]=": explicit bounds.
            while s.get(i) == Some(&b'[') {
                let close = match s[i..].iter().position(|&c| c == b']') {
                    Some(p) => i + p,
                    None => return bad(),
                };
                let inner = &s[i + 1..close];
                let (lb, ub) = match inner.iter().position(|&c| c == b':') {
                    Some(p) => (super::num::parse_i64(&inner[..p]), super::num::parse_i64(&inner[p + 1..])),
                    None => (Some(1), super::num::parse_i64(inner)),
                };
                let (Some(lb), Some(ub)) = (lb, ub) else { return bad() };
                let len = ub.checked_sub(lb).and_then(|d| d.checked_add(1)).filter(|&n| n >= 0);
                let Some(len) = len.filter(|_| ndeclared < MAXDIM) else { return bad() };
                self.lbound_not_one |= lb != 1;
                declared[ndeclared] = len as usize;
                ndeclared += 1;
                i = close + 1;
            }
            if s.get(i) != Some(&b'=') {
                return bad();
            }
            i += 1;
        }
        while s.get(i).copied().is_some_and(ws) {
            i += 1;
        }
        if s.get(i) != Some(&b'{') {
            return bad();
        }
        i += 1;
        // Per depth (1 = inside the outer braces): elements or sub-arrays counted so far.
        let mut counts: [usize; MAXDIM + 1] = [0; MAXDIM + 1];
        let mut dims: [Option<usize>; MAXDIM + 1] = [None; MAXDIM + 1];
        let mut depth = 1usize;
        let mut leaf: Option<usize> = None;
        loop {
            while s.get(i).copied().is_some_and(ws) {
                i += 1;
            }
            let Some(&c) = s.get(i) else { return bad() };
            if c == b'{' {
                if leaf.is_some_and(|l| depth >= l) || depth == MAXDIM {
                    return bad();
                }
                depth += 1;
                counts[depth] = 0;
                i += 1;
                continue;
            }
            if c == b'}' {
                if counts[depth] == 0 && (depth > 1 || leaf.is_some()) {
                    return bad();
                }
                match dims[depth] {
                    None => dims[depth] = Some(counts[depth]),
                    Some(n) if n == counts[depth] => {}
                    Some(_) => return bad(),
                }
                i += 1;
                depth -= 1;
                if depth == 0 {
                    break;
                }
                counts[depth] += 1;
            } else {
                // An element: only at the deepest level.
                match leaf {
                    None => leaf = Some(depth),
                    Some(l) if l == depth => {}
                    Some(_) => return bad(),
                }
                i = self.element_text(s, i, delim)?;
                counts[depth] += 1;
            }
            while s.get(i).copied().is_some_and(ws) {
                i += 1;
            }
            match s.get(i) {
                Some(&c) if c == delim => {
                    i += 1;
                    // After a delimiter comes an element or a sub-array, never a '}'.
                    while s.get(i).copied().is_some_and(ws) {
                        i += 1;
                    }
                    if s.get(i) == Some(&b'}') {
                        return bad();
                    }
                }
                Some(b'}') => {}
                _ => return bad(),
            }
        }
        while s.get(i).copied().is_some_and(ws) {
            i += 1;
        }
        if i != s.len() {
            return bad();
        }
        if let Some(l) = leaf {
            self.dims.extend(dims[1..=l].iter().map(|d| d.unwrap_or(0)));
        }
        if ndeclared > 0 && (ndeclared != self.dims.len() || declared[..ndeclared] != self.dims[..]) {
            return bad();
        }
        Ok(())
    }

    /// Reads one element starting at `i`; returns the index after it.
    fn element_text(&mut self, s: &[u8], mut i: usize, delim: u8) -> Result<usize> {
        let bad = || err("array", s);
        if s.get(i) == Some(&b'"') {
            i += 1;
            let start = i;
            let mut escaped = false;
            let ustart = self.unescaped.len();
            loop {
                let Some(&c) = s.get(i) else { return bad() };
                match c {
                    b'"' => break,
                    b'\\' => {
                        if !escaped {
                            escaped = true;
                            self.unescaped.extend_from_slice(&s[start..i]);
                        }
                        let Some(&n) = s.get(i + 1) else { return bad() };
                        self.unescaped.push(n);
                        i += 2;
                    }
                    _ => {
                        if escaped {
                            self.unescaped.push(c);
                        }
                        i += 1;
                    }
                }
            }
            self.elems.push(if escaped {
                Elem::Unescaped(ustart, self.unescaped.len())
            } else {
                Elem::Input(start, i)
            });
            return Ok(i + 1);
        }
        let start = i;
        let mut escaped = false;
        let ustart = self.unescaped.len();
        // The end of the value's non-space bytes (trailing white space is not part of it).
        let mut end = i;
        let mut uend = ustart;
        loop {
            let Some(&c) = s.get(i) else { return bad() };
            if c == delim || c == b'}' {
                break;
            }
            if c == b'{' || c == b'"' {
                return bad();
            }
            if c == b'\\' {
                if !escaped {
                    escaped = true;
                    self.unescaped.extend_from_slice(&s[start..i]);
                }
                let Some(&n) = s.get(i + 1) else { return bad() };
                self.unescaped.push(n);
                uend = self.unescaped.len();
                i += 2;
                end = i;
                continue;
            }
            if escaped {
                self.unescaped.push(c);
                if !matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) {
                    uend = self.unescaped.len();
                }
            }
            i += 1;
            if !matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) {
                end = i;
            }
        }
        if escaped {
            self.unescaped.truncate(uend);
            self.elems.push(Elem::Unescaped(ustart, uend));
        } else if s[start..end].eq_ignore_ascii_case(b"NULL") {
            self.elems.push(Elem::Null);
        } else if start == end {
            return bad();
        } else {
            self.elems.push(Elem::Input(start, end));
        }
        Ok(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> (Vec<usize>, Vec<Option<String>>, bool) {
        let mut d = ArrayDecoder::default();
        d.parse_text(s.as_bytes(), b',').unwrap();
        let elems = (0..d.len())
            .map(|i| d.element(i, s.as_bytes()).map(|(b, _)| String::from_utf8(b.to_vec()).unwrap()))
            .collect();
        (d.dims().to_vec(), elems, d.lower_bounds_not_one())
    }

    #[test]
    fn literals() {
        assert_eq!(text("{}"), (vec![], vec![], false));
        assert_eq!(
            text(r#"{1,NULL,"NULL","a b","q\"x\\",""}"#),
            (
                vec![6],
                vec![
                    Some("1".into()),
                    None,
                    Some("NULL".into()),
                    Some("a b".into()),
                    Some("q\"x\\".into()),
                    Some("".into())
                ],
                false
            )
        );
        assert_eq!(text("{{1,2},{3,4},{5,6}}").0, vec![3, 2]);
        assert_eq!(text("[0:1]={7,8}"), (vec![2], vec![Some("7".into()), Some("8".into())], true));
        for bad in ["{{1,2},{3}}", "{1,{2}}", "{{1},2}", "{1,}", "{,1}", "{1", "{1}x", "{{}}", "{\"a}", ""] {
            let mut d = ArrayDecoder::default();
            assert!(d.parse_text(bad.as_bytes(), b',').is_err(), "{bad}");
        }
    }
}
