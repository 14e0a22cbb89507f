//! A verifier's reply, read in exactly the form its prompt asks for.

use super::{Answer, MAX_REPLY_CHARS, cut};

/// Why a reply is no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotAnAnswer(pub String);

/// Reads a reply in exactly the form the prompt asks for, else says why it is
/// no answer. Case is ignored and surrounding blanks are trimmed.
///
/// A clean answer is one of:
/// - one line: `YES` or `NO`, optionally wrapped in Markdown emphasis
///   (`**NO**`), then either nothing or a separator and a reason. The
///   separators are `:`, `.`, an en or em dash, or a hyphen followed by a
///   blank: `NO: it is on the page`, `No. The email is on the page`,
///   `YES - a free mail address`, `YES`.
/// - two lines: the bare answer (`NO` or `NO:`) on the first, the reason on
///   the second. Models often break the line after the answer; the first
///   line alone is unambiguous, so the second can only be its reason.
///
/// Everything else is no answer, never a guess: a first word that merely
/// starts with yes or no (`No idea.`, `No way to tell`, `NO ANSWER`,
/// `Yes and no: it depends`, `Yes-ish, probably`), a comma (`No, I cannot
/// tell` is a hedge as often as an answer), an answer with a reason on its
/// line *and* another line, more than two lines, or a reason that is itself
/// a bare YES or NO (`YES\nNO`, `YES: no`).
pub fn parse_reply(raw: &str) -> Result<(Answer, String), NotAnAnswer> {
    let text = raw.trim();
    if text.is_empty() {
        return Err(NotAnAnswer("an empty reply".into()));
    }
    if text.chars().count() > MAX_REPLY_CHARS {
        return Err(NotAnAnswer(format!(
            "a reply longer than {MAX_REPLY_CHARS} characters"
        )));
    }
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let not_clean = || {
        NotAnAnswer(format!(
            "not `YES: <reason>` or `NO: <reason>`: {}",
            cut(text, 120)
        ))
    };
    let (answer, reason) = match lines.as_slice() {
        [line] => answer_line(line).ok_or_else(not_clean)?,
        [first, second] => match answer_line(first) {
            Some((answer, reason)) if reason.is_empty() => (answer, (*second).to_owned()),
            _ => return Err(not_clean()),
        },
        _ => {
            return Err(NotAnAnswer(
                "more than YES or NO and a one-line reason".into(),
            ));
        }
    };
    if is_bare_answer(&reason) {
        return Err(NotAnAnswer(format!(
            "two answers in one reply: {}",
            cut(text, 120)
        )));
    }
    Ok((answer, reason))
}

/// Markdown emphasis a model may wrap its answer in, longest first.
const EMPHASIS: [&str; 5] = ["**", "__", "*", "_", "`"];

/// One line of the form `YES`, `NO: reason`, `**No**. reason`, ...
fn answer_line(line: &str) -> Option<(Answer, String)> {
    let mark = EMPHASIS.iter().copied().find(|m| line.starts_with(m));
    let line = mark.map_or(line, |m| &line[m.len()..]);
    let head = |word: &str| {
        line.get(..word.len())
            .filter(|h| h.eq_ignore_ascii_case(word))
            .map(|_| &line[word.len()..])
    };
    let (answer, rest) = match (head("yes"), head("no")) {
        (Some(rest), _) => (Answer::Yes, rest),
        (_, Some(rest)) => (Answer::No, rest),
        _ => return None,
    };
    let rest = match mark {
        Some(m) => rest.strip_prefix(m).unwrap_or(rest),
        None => rest,
    };
    let rest = rest.trim_start();
    // Words right after the answer (`No idea`) are not a reason: a separator must come first.
    let after = if rest.is_empty() {
        ""
    } else {
        rest.strip_prefix([':', '.', '\u{2013}', '\u{2014}'])
            .or_else(|| {
                rest.strip_prefix('-')
                    .filter(|after| after.is_empty() || after.starts_with(char::is_whitespace))
            })?
    };
    // `**NO:** reason` closes the emphasis after the separator.
    let after = after.trim_start();
    let after = match mark {
        Some(m) => after.strip_prefix(m).unwrap_or(after),
        None => after,
    };
    Some((answer, after.trim().to_owned()))
}

/// A text that is nothing but YES or NO (with punctuation or emphasis).
fn is_bare_answer(text: &str) -> bool {
    let word = text.trim_matches(|c: char| !c.is_alphanumeric());
    word.eq_ignore_ascii_case("yes") || word.eq_ignore_ascii_case("no")
}
