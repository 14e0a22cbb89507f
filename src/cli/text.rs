//! Text from agents, pages and models made safe to print on a terminal.
//!
//! A result, a page snippet or a model's reply can carry escape sequences that
//! move the cursor, rewrite earlier lines, set the window title or hide text,
//! and bidi overrides that show characters in another order than they are
//! stored. Everything the client verbs print passes through [`clean`]: newlines
//! and tabs stay where they are layout, every other control goes.

use std::borrow::Cow;

/// Prints a line like `println!`, with the text passed through [`clean`].
macro_rules! say {
    ($($arg:tt)*) => {
        println!("{}", $crate::cli::text::clean(&format!($($arg)*)))
    };
}
pub(crate) use say;

/// Prints a line on stderr like `eprintln!`, with the text passed through [`clean`].
macro_rules! say_err {
    ($($arg:tt)*) => {
        eprintln!("{}", $crate::cli::text::clean(&format!($($arg)*)))
    };
}
pub(crate) use say_err;

/// "1 quest remains in this session." / "3 quests remain in this session."
pub fn remain(n: u64) -> String {
    if n == 1 {
        "1 quest remains in this session.".to_owned()
    } else {
        format!("{n} quests remain in this session.")
    }
}

/// Whether `c` reorders text: the bidi embeddings, overrides and isolates.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{061C}')
}

/// Whether `c` is a control a terminal could act on: C0 but newline and tab, DEL, C1.
fn is_terminal_control(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || is_bidi_control(c)
}

/// `text` without escape sequences, other C0 and C1 controls, or bidi controls.
///
/// An escape sequence goes whole (CSI `ESC [ … final`, OSC `ESC ] … BEL|ST`,
/// and the two-character forms), so that no stray parameters are left behind.
pub fn clean(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_terminal_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.next() {
                Some('[') => skip_csi(&mut chars),
                Some(']' | 'P' | 'X' | '^' | '_') => skip_string(&mut chars),
                // A two-character sequence (ESC 7, ESC c, ...): both go.
                _ => {}
            },
            '\u{9b}' => skip_csi(&mut chars),
            '\u{9d}' | '\u{90}' | '\u{98}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars),
            c if is_terminal_control(c) => {}
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Skips a CSI sequence's parameters and intermediates, up to its final byte.
fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while let Some(&c) = chars.peek() {
        chars.next();
        if ('\u{40}'..='\u{7e}').contains(&c) || !('\u{20}'..='\u{3f}').contains(&c) {
            return;
        }
    }
}

/// Skips an OSC/DCS-like string up to BEL or ST (`ESC \` or U+009C).
fn skip_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while let Some(c) = chars.next() {
        match c {
            '\u{7}' | '\u{9c}' => return,
            '\u{1b}' => {
                if chars.peek() == Some(&'\\') {
                    chars.next();
                }
                return;
            }
            _ => {}
        }
    }
}

/// JSON text with every terminal control that serde_json writes raw (C1 and the
/// bidi controls; it already escapes C0) written as a `\uXXXX` escape instead.
///
/// Lossless: such characters can only stand inside JSON strings, where the
/// escape means the same character, so `--json` output parses to the same value.
pub fn json_safe(json: &str) -> Cow<'_, str> {
    if !json.chars().any(is_terminal_control) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if is_terminal_control(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_quest_remains_and_others_remain() {
        assert_eq!(remain(1), "1 quest remains in this session.");
        assert_eq!(remain(0), "0 quests remain in this session.");
        assert_eq!(remain(35), "35 quests remain in this session.");
    }

    #[test]
    fn escape_sequences_and_controls_are_removed_and_layout_stays() {
        let hostile = "ok\x1b[2J\x1b[1;31mred\x1b[0m\n\tnext\x1b]0;pwned title\x07 line\r\
                       \x1b]8;;http://evil.test\x1b\\link\x1b]8;;\x1b\\ \u{9b}31mc1\u{7f}\x00\x08end";
        assert_eq!(clean(hostile), "okred\n\tnext linelink c1end");
    }

    #[test]
    fn bidi_overrides_are_removed_but_other_scripts_stay() {
        let text = "invoice\u{202E}fdp.exe\u{202C} 주식회사 \u{2067}שלום\u{2069} café";
        assert_eq!(clean(text), "invoicefdp.exe 주식회사 שלום café");
    }

    #[test]
    fn clean_text_is_not_copied() {
        assert!(matches!(clean("plain\ttext\n"), Cow::Borrowed(_)));
    }

    #[test]
    fn an_unfinished_sequence_at_the_end_goes_too() {
        assert_eq!(clean("a\x1b[12"), "a");
        assert_eq!(clean("a\x1b]0;title"), "a");
        assert_eq!(clean("a\x1b"), "a");
    }

    #[test]
    fn json_output_keeps_its_value_and_loses_its_raw_controls() {
        let value = serde_json::json!({"note": "x\u{1b}[2Jy\u{9b}z\u{202E}w"});
        let text = serde_json::to_string_pretty(&value).unwrap();
        let safe = json_safe(&text);
        assert!(!safe.chars().any(|c| c.is_control() && c != '\n'), "{safe}");
        assert!(!safe.contains('\u{202E}'));
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, value);
    }
}
