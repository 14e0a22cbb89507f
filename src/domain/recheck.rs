//! Re-checks: a PASS quest's accepted result re-run through its gate against
//! the world as it is now. A re-check never unlocks anything: it only sets or
//! clears the quest's mark. [`judge`] is the one rule for what a re-check's
//! verdict means; [`Every`] parses a session's `recheck.every`; [`is_due`]
//! says when the schedule starts the next run.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use std::borrow::Cow;

use super::{Fact, Verdict, text};

/// What a PASS quest's latest re-check left on it. No mark: the world
/// confirmed it (or it was never re-checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mark {
    /// The world now contradicts the accepted result (the gate said FAIL).
    Stale,
    /// The world could not confirm it now (no answer, a timeout, a 5xx, a new doubt).
    Unconfirmed,
}
text_enum!(Mark { Stale => "stale", Unconfirmed => "unconfirmed" });

/// What one re-check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The gate passed the result again.
    Confirmed,
    /// The gate asked for review for no other reason than the one a person
    /// already approved (a free-mail address, say).
    ApprovedAgain,
    /// The gate failed the result.
    Stale,
    /// The gate asked for review for a reason nobody approved.
    Unconfirmed,
}
text_enum!(Outcome {
    Confirmed => "confirmed",
    ApprovedAgain => "approved_again",
    Stale => "stale",
    Unconfirmed => "unconfirmed",
});

impl Outcome {
    /// The mark this outcome leaves on the quest (`None` clears it).
    pub fn mark(self) -> Option<Mark> {
        match self {
            Outcome::Confirmed | Outcome::ApprovedAgain => None,
            Outcome::Stale => Some(Mark::Stale),
            Outcome::Unconfirmed => Some(Mark::Unconfirmed),
        }
    }
}

/// What a re-check's verdict means for a PASS quest.
///
/// `approved` holds the facts the quest carried when a person approved it
/// (`None` when the gate passed it). A REVIEW repeats what the person
/// accepted when every one of its facts is among them as the same finding:
/// the same check on the same field, expecting and finding the same thing
/// (the hint is advice, not part of it). A free-mail address approved once is
/// approved again; a 503 where the person approved an obfuscated address is
/// not, though both concern the source page. A fact the world left
/// unanswered ([`Fact::unanswered`]: an unreachable page, a timeout, a 5xx)
/// is never excused, even when the approved facts held the same one: the
/// world did not confirm the result this time. Any REVIEW not excused is a
/// doubt raised now, so it leaves the quest `unconfirmed`, never `stale`:
/// unconfirmable is not wrong.
pub fn judge(verdict: Verdict, facts: &[Fact], approved: Option<&[Fact]>) -> Outcome {
    match verdict {
        Verdict::Pass => Outcome::Confirmed,
        Verdict::Fail => Outcome::Stale,
        Verdict::Review => {
            let Some(approved) = approved else {
                return Outcome::Unconfirmed;
            };
            let accepted: HashSet<Finding<'_>> = approved.iter().map(Finding::of).collect();
            let excused = |f: &Fact| !f.unanswered && accepted.contains(&Finding::of(f));
            if !facts.is_empty() && facts.iter().all(excused) {
                Outcome::ApprovedAgain
            } else {
                Outcome::Unconfirmed
            }
        }
    }
}

/// What makes two facts the same reason for review: the check, the field,
/// what it expected and what it found, each cut as a verdict keeps it
/// ([`text::cut_fact`]), so that a fact approved before facts were cut still
/// matches the same finding found now.
#[derive(PartialEq, Eq, Hash)]
struct Finding<'a> {
    check: Cow<'a, str>,
    field: Cow<'a, str>,
    expected: Cow<'a, str>,
    actual: Cow<'a, str>,
}

impl<'a> Finding<'a> {
    fn of(f: &'a Fact) -> Finding<'a> {
        let part = |p: &'a str| text::cut(p, text::MAX_FACT_CHARS);
        Finding {
            check: part(&f.check),
            field: part(&f.field),
            expected: part(&f.expected),
            actual: part(&f.actual),
        }
    }
}

/// How often a session's PASS quests are re-checked (`recheck.every`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Every(Duration);

/// The shortest schedule: the world is not asked about a page more often.
pub const MIN_EVERY: Duration = Duration::from_secs(3600);
/// The longest schedule that is accepted.
pub const MAX_EVERY: Duration = Duration::from_secs(366 * 86_400);

impl Every {
    /// Parses `<number><unit>`, unit `h` (hours), `d` (days) or `w` (weeks):
    /// `"12h"`, `"7d"`, `"2w"`. Between one hour and 366 days.
    pub fn parse(text: &str) -> Result<Every, String> {
        let text = text.trim();
        let hint = "write a number and a unit: h (hours), d (days) or w (weeks), e.g. \"7d\"";
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(|| format!("`{text}` has no unit; {hint}"))?;
        let (number, unit) = text.split_at(split);
        let n: u64 = number
            .parse()
            .map_err(|_| format!("`{text}` does not start with a number; {hint}"))?;
        let unit_seconds = match unit {
            "h" => 3600,
            "d" => 86_400,
            "w" => 7 * 86_400,
            other => return Err(format!("`{other}` is not a unit; {hint}")),
        };
        let every = Duration::from_secs(n.saturating_mul(unit_seconds));
        if every < MIN_EVERY || every > MAX_EVERY {
            return Err(format!(
                "`{text}` is outside one hour to 366 days; re-checks ask the world again, so choose e.g. \"7d\""
            ));
        }
        Ok(Every(every))
    }

    /// The time between two scheduled runs.
    pub fn duration(self) -> Duration {
        self.0
    }
}

/// Whether the schedule starts a run now: `every` after the last run started,
/// or after the session was created when it never ran.
pub fn is_due(
    every: Every,
    created_at: DateTime<Utc>,
    last_started: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> bool {
    let since = last_started.unwrap_or(created_at);
    let every = chrono::Duration::from_std(every.duration()).unwrap_or(chrono::Duration::MAX);
    now - since >= every
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(check: &str, field: &str) -> Fact {
        Fact::new(check, field, "x", "y", "z")
    }

    #[test]
    fn a_pass_confirms_and_a_fail_marks_the_quest_stale() {
        assert_eq!(judge(Verdict::Pass, &[], None), Outcome::Confirmed);
        assert_eq!(
            judge(Verdict::Fail, &[fact("source", "/email")], None),
            Outcome::Stale
        );
        let approved = [fact("freemail", "/email")];
        assert_eq!(
            judge(
                Verdict::Fail,
                &[fact("freemail", "/email")],
                Some(&approved)
            ),
            Outcome::Stale,
            "an approval never excuses a FAIL"
        );
        assert_eq!(Outcome::Confirmed.mark(), None);
        assert_eq!(Outcome::Stale.mark(), Some(Mark::Stale));
    }

    #[test]
    fn a_review_that_repeats_the_approved_reason_confirms_and_any_other_leaves_it_unconfirmed() {
        let approved = [fact("freemail", "/email"), fact("l2:alpha", "")];
        let again = [fact("freemail", "/email")];
        assert_eq!(
            judge(Verdict::Review, &again, Some(&approved)),
            Outcome::ApprovedAgain
        );
        assert_eq!(Outcome::ApprovedAgain.mark(), None);
        let timeout = [fact("freemail", "/email"), fact("source", "/source")];
        assert_eq!(
            judge(Verdict::Review, &timeout, Some(&approved)),
            Outcome::Unconfirmed,
            "a new reason is a new doubt"
        );
        assert_eq!(
            judge(Verdict::Review, &again, None),
            Outcome::Unconfirmed,
            "a quest the gate passed was approved by nobody"
        );
        assert_eq!(
            judge(Verdict::Review, &[], Some(&approved)),
            Outcome::Unconfirmed
        );
        assert_eq!(Outcome::Unconfirmed.mark(), Some(Mark::Unconfirmed));
    }

    #[test]
    fn a_finding_approved_before_facts_were_cut_is_the_same_finding_cut_now() {
        let long = format!("https://a.test/{}", "p".repeat(3000));
        let approved = [Fact::new("source", "/source", "a page", &long, "")];
        let now = Fact::new(
            "source",
            "/source",
            "a page",
            text::cut(&long, text::MAX_FACT_CHARS),
            "",
        );
        assert_eq!(
            judge(Verdict::Review, &[now], Some(&approved)),
            Outcome::ApprovedAgain
        );
        let other = Fact::new("source", "/source", "a page", "https://b.test/", "");
        assert_eq!(
            judge(Verdict::Review, &[other], Some(&approved)),
            Outcome::Unconfirmed
        );
    }

    #[test]
    fn only_the_same_finding_repeats_an_approved_reason_whatever_its_hint() {
        let echo = Fact::new(
            "source",
            "/source",
            "a page that does not carry the address in its own URL",
            "https://acme.co.kr/contact?to=info%2540acme.co.kr",
            "a person will look",
        );
        let approved = [echo.clone()];
        let reworded = Fact {
            hint: "the gate could not test whether the page repeats it".into(),
            ..echo.clone()
        };
        assert_eq!(
            judge(Verdict::Review, &[reworded], Some(&approved)),
            Outcome::ApprovedAgain,
            "a new hint is the same finding"
        );
        let unwell = Fact::new(
            "source",
            "/source",
            "a page that answers HTTP 200",
            "HTTP 503",
            "the page could not be read now",
        )
        .no_answer();
        assert_eq!(
            judge(Verdict::Review, &[unwell], Some(&approved)),
            Outcome::Unconfirmed,
            "a 503 on the source page is not the source finding a person approved"
        );
        let elsewhere = Fact {
            actual: "https://acme.co.kr/about?to=info%2540acme.co.kr".into(),
            ..echo.clone()
        };
        assert_eq!(
            judge(Verdict::Review, &[elsewhere], Some(&approved)),
            Outcome::Unconfirmed,
            "the same check finding something else is a new doubt"
        );
        let redirect = |to: &str| {
            Fact::new(
                "domain",
                "/source",
                "a page on acme.co.kr",
                format!("redirected to {to}"),
                "a person will look",
            )
        };
        assert_eq!(
            judge(
                Verdict::Review,
                &[redirect("https://other.example/contact")],
                Some(&[redirect("https://acme-group.com/contact")])
            ),
            Outcome::Unconfirmed
        );
    }

    #[test]
    fn an_answer_the_world_did_not_give_is_never_excused_by_an_approval() {
        let timeout = Fact::new(
            "gate",
            "",
            "a verdict within 30000 ms",
            "no verdict: the gate timed out",
            "nothing for you to fix; a person will look at it",
        )
        .no_answer();
        let unwell = Fact::new(
            "source",
            "/source",
            "a page that answers HTTP 200",
            "HTTP 503",
            "the page could not be read now",
        )
        .no_answer();
        for silent in [timeout, unwell] {
            let approved = [silent.clone(), fact("freemail", "/email")];
            assert_eq!(
                judge(
                    Verdict::Review,
                    std::slice::from_ref(&silent),
                    Some(&approved)
                ),
                Outcome::Unconfirmed,
                "the person approved the quest despite {silent:?}; the world still did not answer"
            );
            assert_eq!(
                judge(
                    Verdict::Review,
                    &[fact("freemail", "/email"), silent.clone()],
                    Some(&approved)
                ),
                Outcome::Unconfirmed
            );
        }
    }

    #[test]
    fn every_takes_hours_days_and_weeks_within_bounds() {
        assert_eq!(Every::parse("7d").unwrap().duration().as_secs(), 7 * 86_400);
        assert_eq!(Every::parse("12h").unwrap().duration().as_secs(), 12 * 3600);
        assert_eq!(
            Every::parse(" 2w ").unwrap().duration().as_secs(),
            14 * 86_400
        );
        for bad in [
            "",
            "7",
            "d",
            "7m",
            "0h",
            "7 days",
            "-1d",
            "400d",
            "99999999999999999999d",
        ] {
            let e = Every::parse(bad).unwrap_err();
            assert!(e.contains("e.g."), "{bad}: {e}");
        }
    }

    #[test]
    fn a_run_is_due_every_period_after_the_last_start_or_the_scan() {
        let every = Every::parse("1d").unwrap();
        let t0 = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
        let day = chrono::Duration::days(1);
        assert!(!is_due(
            every,
            t0,
            None,
            t0 + day - chrono::Duration::seconds(1)
        ));
        assert!(is_due(every, t0, None, t0 + day));
        assert!(!is_due(every, t0, Some(t0 + day), t0 + day + day / 2));
        assert!(is_due(every, t0, Some(t0 + day), t0 + day * 2));
    }
}
