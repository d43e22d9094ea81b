//! Line and column of byte offsets in a policy's text, for many offsets at once: the line
//! starts are found once, then each offset costs a binary search and a count of the characters
//! before it on its line (so reporting every error or warning of a large policy is linear).

/// The start offsets of a text's lines.
pub struct LineIndex<'s> {
    src: &'s str,
    /// Byte offset of every line's first byte; `starts[0] == 0`.
    starts: Vec<usize>,
}

impl<'s> LineIndex<'s> {
    pub fn new(src: &'s str) -> LineIndex<'s> {
        let lines = memchr::memchr_iter(b'\n', src.as_bytes()).map(|i| i + 1);
        LineIndex {
            src,
            starts: std::iter::once(0).chain(lines).collect(),
        }
    }

    /// 1-based (line, column) of byte `offset` (clamped to the text, and back to a character
    /// boundary); the column counts characters.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let mut o = offset.min(self.src.len());
        while !self.src.is_char_boundary(o) {
            o -= 1;
        }
        let line = self.starts.partition_point(|&s| s <= o);
        let start = self.starts[line - 1];
        (line, self.src[start..o].chars().count() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every offset (inside characters, at the end, beyond) gets what counting from the start
    /// gives.
    #[test]
    fn every_offset_matches_counting_from_the_start() {
        let src = "a = 1\n\nné = \"é\"\r\n[[limit]]\nx\n";
        let lines = LineIndex::new(src);
        for offset in 0..src.len() + 3 {
            let mut o = offset.min(src.len());
            while !src.is_char_boundary(o) {
                o -= 1;
            }
            let before = &src[..o];
            let line = before.matches('\n').count() + 1;
            let column = before[before.rfind('\n').map_or(0, |i| i + 1)..]
                .chars()
                .count()
                + 1;
            assert_eq!(lines.line_col(offset), (line, column), "offset {offset}");
        }
        assert_eq!(LineIndex::new("").line_col(0), (1, 1));
    }
}
