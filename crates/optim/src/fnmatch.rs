//! Shell-style name patterns as Python's `fnmatch.fnmatchcase` reads them (what timm's
//! `no_weight_decay_list` entries are).

/// Whether `pattern` matches all of `name`: `*` any run of characters (`.` included), `?` one
/// character, `[seq]` one character of `seq` (ranges such as `a-z`; `[!seq]` one not in it; a
/// `]` right after the `[` or `[!` is part of the set), anything else itself. A `[` without
/// its `]` is an ordinary character, as in Python. Case-sensitive, as `fnmatch` on POSIX.
pub(crate) fn fnmatch(name: &str, pattern: &str) -> bool {
    let name: Vec<char> = name.chars().collect();
    let pattern: Vec<char> = pattern.chars().collect();
    matches(&name, &pattern)
}

/// One element of a pattern.
enum Token {
    /// `*`.
    Star,
    /// `?`.
    Any,
    /// `[...]`.
    Set(CharSet),
    /// A literal character.
    Char(char),
}

/// A `[...]` set: its ranges (a single character `c` is `(c, c)`) and whether it is negated.
struct CharSet {
    items: Vec<(char, char)>,
    negated: bool,
}

impl CharSet {
    fn contains(&self, c: char) -> bool {
        self.items.iter().any(|&(lo, hi)| lo <= c && c <= hi) != self.negated
    }
}

/// The token at the start of `p` and how many characters it spans.
fn token(p: &[char]) -> (Token, usize) {
    match p[0] {
        '*' => (Token::Star, 1),
        '?' => (Token::Any, 1),
        '[' => match set(&p[1..]) {
            Some((set, len)) => (Token::Set(set), len + 1),
            None => (Token::Char('['), 1),
        },
        c => (Token::Char(c), 1),
    }
}

/// Parses a set after its `[`, with the characters it spans including the closing `]`;
/// `None` if it is not closed.
fn set(p: &[char]) -> Option<(CharSet, usize)> {
    let negated = p.first() == Some(&'!');
    let start = usize::from(negated);
    // A `]` first in the set is a member, not the end.
    let first = if p.get(start) == Some(&']') { start + 1 } else { start };
    let close = first + p[first.min(p.len())..].iter().position(|&c| c == ']')?;
    let body = &p[start..close];
    let mut items = Vec::new();
    let mut i = 0;
    while i < body.len() {
        if i + 2 < body.len() && body[i + 1] == '-' {
            // Python drops a reversed range such as `z-a`: it matches nothing.
            if body[i] <= body[i + 2] {
                items.push((body[i], body[i + 2]));
            }
            i += 3;
        } else {
            items.push((body[i], body[i]));
            i += 1;
        }
    }
    Some((CharSet { items, negated }, close + 1))
}

/// Whether `pattern` matches all of `name` (a `*` tries every split, the patterns being short).
fn matches(name: &[char], pattern: &[char]) -> bool {
    if pattern.is_empty() {
        return name.is_empty();
    }
    let (tok, len) = token(pattern);
    let rest = &pattern[len..];
    match tok {
        Token::Star => (0..=name.len()).any(|skip| matches(&name[skip..], rest)),
        _ if name.is_empty() => false,
        Token::Any => matches(&name[1..], rest),
        Token::Char(c) => name[0] == c && matches(&name[1..], rest),
        Token::Set(set) => set.contains(name[0]) && matches(&name[1..], rest),
    }
}

#[cfg(test)]
mod tests {
    use super::fnmatch;

    #[test]
    fn patterns_match_as_pythons_fnmatchcase() {
        // Each case checked with Python 3.11's fnmatch.fnmatchcase.
        let cases = [
            ("fc.bias", "*.bias", true),
            ("bias", "*.bias", false),
            ("layer1.0.bn1.bias", "*.bias", true),
            ("class_token", "class_token", true),
            ("class_token", "class_toke", false),
            ("encoder.pos_embedding", "*pos_embedding", true),
            ("layer4.1.conv2.weight", "layer4.*.conv2.weight", true),
            ("layer4.1.conv1.weight", "layer4.*.conv2.weight", false),
            ("features.10.block.0.0.weight", "features.1[0-1].*", true),
            ("features.12.0.weight", "features.1[0-1].*", false),
            ("features.1.block.0.0.weight", "features.?.block.0.0.weight", true),
            ("features.10.block.0.0.weight", "features.?.block.0.0.weight", false),
            ("a1", "a[!0-9]", false),
            ("ab", "a[!0-9]", true),
            ("a]", "a[]]", true),
            ("a]", "a[!]]", false),
            ("a[", "a[", true),
            ("a[b", "a[b", true),
            ("am", "a[z-a]", false),
            ("a-", "a[-z]", true),
            ("a-", "a[b-]", true),
            ("-", "[a-b-c]", true),
            ("c", "[a-b-c]", true),
            ("a[!]", "a[!]", true),
            ("a!", "a[!]", false),
            ("FC.BIAS", "*.bias", false),
            ("", "*", true),
            ("", "?", false),
        ];
        for (name, pattern, expected) in cases {
            assert_eq!(fnmatch(name, pattern), expected, "fnmatchcase({name:?}, {pattern:?})");
        }
    }
}
