//! Every rule of the PostgreSQL ratchet, one refused statement each, in raw
//! SQL below the store (issue 19, point 4): the rules are rewritten from row
//! triggers into constraints and statement triggers, and this table says that
//! none is lost in translation.
//!
//! A fixture of quests in every state is built with legal statements; each
//! case then runs one statement in a transaction of its own, rolled back, and
//! asserts that the database refuses it with the rule's own text (or, for a
//! rule that is a `CHECK` constraint, the constraint's name). Each statement
//! breaks one rule only, so that the order in which the database checks its
//! rules does not decide the message. A second test reads the migrations and
//! asserts that every refusal they can raise has its case here.

use sqlx::{Connection, PgConnection};

use crate::helpers::on_postgres;
use crate::postgres::TestDatabase;
use crate::ratchet_fixture::*;

/// One refused statement: `rule` is the text of the `ratchet_refuse` call it
/// exercises, `check` the constraint that holds the rule where it is one, and
/// `shadowed_by` the rule that refuses first whatever breaks this one.
struct Case {
    rule: &'static str,
    check: Option<&'static str>,
    shadowed_by: Option<&'static str>,
    sql: String,
}

fn case(rule: &'static str, sql: impl Into<String>) -> Case {
    Case {
        rule,
        check: None,
        shadowed_by: None,
        sql: sql.into(),
    }
}

/// The refused statements, one per `ratchet_refuse` call of the migrations.
fn cases() -> Vec<Case> {
    let (s1, rerun, recheck) = (id(SESSION, 1), id(OTHER, 4), id(OTHER, 5));
    let (queued_job, answered_job, decision) = (id(OTHER, 1), id(OTHER, 2), id(OTHER, 3));
    let pause = id(OTHER, 6);
    let mut cases = vec![
        case(
            "a quest starts open, without tries or lapses",
            format!(
                "INSERT INTO quests (id, session_id, row_index, key, input, state, phase, tries,
                                     max_tries, updated_at)
                 VALUES ('{}', '{s1}', 50, 'k50', '{{}}', 'TODO', 'open', 1, 3, now())",
                q(50)
            ),
        ),
        case(
            "a quest starts with its session's max_tries",
            format!(
                "INSERT INTO quests (id, session_id, row_index, key, input, state, phase,
                                     max_tries, updated_at)
                 VALUES ('{}', '{s1}', 51, 'k51', '{{}}', 'TODO', 'open', 5, now())",
                q(51)
            ),
        ),
        case(
            "a quest's id, session, row, key and input never change",
            format!("UPDATE quests SET key = 'other' WHERE id = '{}'", q(1)),
        ),
        case(
            "a quest's id, session, row, key and input never change",
            format!(
                "UPDATE quests SET input = '{{\"key\": \"forged\"}}' WHERE id = '{}'",
                q(2)
            ),
        ),
        case(
            "a quest in PASS, REVIEW or DONE cannot return to TODO or change its verdict",
            format!("UPDATE quests SET state = 'REVIEW' WHERE id = '{}'", q(6)),
        ),
        case(
            "a decided quest is frozen",
            format!(
                "UPDATE quests SET receipt = 'sha256:forged' WHERE id = '{}'",
                q(6)
            ),
        ),
        case(
            "tries never decrease",
            format!(
                "UPDATE quests SET tries = 0, lapses = lapses + 1 WHERE id = '{}'",
                q(10)
            ),
        ),
        case(
            "lapses never decrease",
            format!("UPDATE quests SET lapses = 0 WHERE id = '{}'", q(6)),
        ),
        Case {
            check: Some("quests_tries_within_max_tries"),
            ..case(
                "tries never exceed the session's max_tries",
                format!(
                    "UPDATE quests SET tries = 4, lapses = lapses + 1 WHERE id = '{}'",
                    q(10)
                ),
            )
        },
        case(
            "a quest in REVIEW keeps the result under review",
            format!(
                "UPDATE quests SET result = '{{\"v\": \"other\"}}' WHERE id = '{}'",
                q(5)
            ),
        ),
        case(
            "illegal phase move",
            format!(
                "UPDATE quests SET phase = 'checking', lease_id = '{}' WHERE id = '{}'",
                l(2),
                q(1)
            ),
        ),
        // Only an open quest (or none) can break this rule, and the phase
        // moves refuse it first: it holds, and says nothing of its own.
        Case {
            shadowed_by: Some("illegal phase move"),
            ..case(
                "a quest is verified only after its gate passed it",
                format!(
                    "UPDATE quests SET phase = 'verifying' WHERE id = '{}'",
                    q(1)
                ),
            )
        },
        case(
            "AI verifiers may only pass a quest on or send it to REVIEW",
            format!(
                "UPDATE quests SET state = 'DONE', phase = NULL WHERE id = '{}'",
                q(7)
            ),
        ),
        case(
            "L2 never changes tries, the result or the lease of a quest",
            format!("UPDATE quests SET tries = 2 WHERE id = '{}'", q(7)),
        ),
        case(
            "a verdict needs its decided submission",
            format!(
                "UPDATE quests SET state = 'PASS', phase = NULL, lease_id = NULL, tries = 1,
                 result = '{{}}' WHERE id = '{}'",
                q(2)
            ),
        ),
        case(
            "a verdict needs its decided submission",
            format!("UPDATE quests SET phase = 'leased' WHERE id = '{}'", q(3)),
        ),
        case(
            "a PASS in a session with AI verifiers goes through them",
            format!(
                "UPDATE quests SET state = 'PASS', phase = NULL, lease_id = NULL, tries = 1,
                 result = '{{\"v\": 8}}', submission_id = '{}' WHERE id = '{}'",
                s(8),
                q(8)
            ),
        ),
        case(
            "a quest leaves REVIEW only by a recorded review decision",
            format!("UPDATE quests SET state = 'DONE' WHERE id = '{}'", q(5)),
        ),
        case(
            "a quest leaves REVIEW only when its reviewers agree or an adjudicator decides",
            format!("UPDATE quests SET state = 'PASS' WHERE id = '{}'", q(11)),
        ),
        case(
            "a quest's number of reviewers never changes",
            format!(
                "UPDATE quests SET reviews_required = 2 WHERE id = '{}'",
                q(1)
            ),
        ),
        case(
            "a quest's lease count never decreases",
            format!("UPDATE quests SET leases = 0 WHERE id = '{}'", q(2)),
        ),
        case(
            "quests are never deleted",
            format!("DELETE FROM quests WHERE id = '{}'", q(1)),
        ),
        case(
            "submissions are append-only",
            format!(
                "UPDATE submissions SET verdict = 'FAIL' WHERE id = '{}'",
                s(4)
            ),
        ),
        case(
            "submissions are append-only",
            format!(
                "UPDATE submissions SET result_hash = 'forged' WHERE id = '{}'",
                s(3)
            ),
        ),
        case(
            "submissions are never deleted",
            format!("DELETE FROM submissions WHERE id = '{}'", s(3)),
        ),
        case(
            "review decisions are append-only",
            format!("UPDATE review_decisions SET note = 'forged' WHERE id = '{decision}'"),
        ),
        case(
            "review decisions are never deleted",
            format!("DELETE FROM review_decisions WHERE id = '{decision}'"),
        ),
        case(
            "L2 answers are append-only",
            format!("UPDATE l2_answers SET answer = 'no' WHERE job_id = '{answered_job}'"),
        ),
        case(
            "L2 answers are append-only",
            format!("DELETE FROM l2_answers WHERE job_id = '{answered_job}'"),
        ),
        case(
            "L2 decisions are append-only",
            format!(
                "UPDATE l2_decisions SET state_after = 'REVIEW' WHERE submission_id = '{}'",
                s(9)
            ),
        ),
        case(
            "L2 decisions are append-only",
            format!("DELETE FROM l2_decisions WHERE submission_id = '{}'", s(9)),
        ),
        case(
            "an L2 job is answered once and never rewritten",
            format!("UPDATE l2_jobs SET question = 'Is it wrong?' WHERE id = '{queued_job}'"),
        ),
        case(
            "an L2 job is answered once and never rewritten",
            format!("UPDATE l2_jobs SET status = 'queued' WHERE id = '{answered_job}'"),
        ),
        case(
            "L2 jobs are never deleted",
            format!("DELETE FROM l2_jobs WHERE id = '{queued_job}'"),
        ),
        case(
            "a live lease is never deleted",
            format!("DELETE FROM leases WHERE id = '{}'", l(2)),
        ),
        case(
            "a PASS quest is frozen; only its re-check mark changes",
            format!(
                "UPDATE quests SET repeated_failure = true WHERE id = '{}'",
                q(4)
            ),
        ),
        case(
            "only a PASS quest is re-checked",
            format!(
                "UPDATE quests SET recheck_run = '{rerun}' WHERE id = '{}'",
                q(1)
            ),
        ),
        case(
            "a re-check mark needs its re-check record",
            format!(
                "UPDATE quests SET recheck_mark = 'stale', rechecked_at = now(),
                 recheck_facts = '[]' WHERE id = '{}'",
                q(4)
            ),
        ),
        case(
            "only a PASS quest is re-checked",
            format!(
                "INSERT INTO rechecks (id, run_id, quest_id, session_id, submission_id, verdict,
                                       outcome, mark, facts, evidence, gate, gate_version, digest,
                                       created_at)
                 VALUES ('{}', '{rerun}', '{}', '{s1}', NULL, 'PASS', 'confirmed', NULL, '[]',
                         '[]', 'schema', '1', 'd', now())",
                id(OTHER, 50),
                q(1)
            ),
        ),
        case(
            "re-checks are append-only",
            format!("UPDATE rechecks SET digest = 'forged' WHERE id = '{recheck}'"),
        ),
        case(
            "re-checks are append-only",
            format!("DELETE FROM rechecks WHERE id = '{recheck}'"),
        ),
        case(
            "a re-check run finishes once and is never rewritten",
            format!("UPDATE recheck_runs SET total = 5 WHERE id = '{rerun}'"),
        ),
        case(
            "re-check runs are never deleted",
            format!("DELETE FROM recheck_runs WHERE id = '{rerun}'"),
        ),
        case(
            "verifier switches are append-only",
            "UPDATE verifier_switches SET standing = 'voting'",
        ),
        case(
            "verifier switches are append-only",
            "DELETE FROM verifier_switches",
        ),
        case(
            "token endings are append-only",
            "UPDATE token_endings SET done = NOT done",
        ),
        case("token endings are append-only", "DELETE FROM token_endings"),
        case(
            "a pause is append-only but for its resume, written once",
            format!("UPDATE token_pauses SET figures = 'forged' WHERE id = '{pause}'"),
        ),
        case(
            "pauses are never deleted",
            format!("DELETE FROM token_pauses WHERE id = '{pause}'"),
        ),
        case(
            "audits are never deleted",
            format!("DELETE FROM audit_reviews WHERE quest_id = '{}'", q(4)),
        ),
        case(
            "an audit's label is final",
            format!(
                "UPDATE audit_reviews SET decision = 'reject', note = 'n' WHERE quest_id = '{}'",
                q(4)
            ),
        ),
        case(
            "a gold companion belongs to its session for good",
            format!(
                "UPDATE sessions SET gold_of = NULL WHERE id = '{}'",
                id(SESSION, 9)
            ),
        ),
        case(
            "gold items are never changed nor deleted",
            "UPDATE gold_items SET input = '{\"x\": 1}'",
        ),
        case(
            "gold items are never changed nor deleted",
            "DELETE FROM gold_items",
        ),
        case(
            "gold hand-outs are never changed nor deleted",
            format!(
                "UPDATE gold_quests SET token_id = token_id WHERE quest_id = '{}'",
                q(4)
            ),
        ),
        case(
            "gold hand-outs are never changed nor deleted",
            "DELETE FROM gold_quests",
        ),
        case(
            "suspect marks are never changed nor deleted",
            "UPDATE suspect_marks SET marked_at = now()",
        ),
        case(
            "suspect marks are never changed nor deleted",
            "DELETE FROM suspect_marks",
        ),
        case(
            "canary passes are never changed nor deleted",
            "UPDATE canary_passes SET decided_by = 'verifiers'",
        ),
        case(
            "canary passes are never changed nor deleted",
            "DELETE FROM canary_passes",
        ),
    ];
    // TRUNCATE skips row triggers: each append-only table refuses it too. A
    // table that others reference is refused by its foreign keys first, so
    // only the tables nothing references are listed.
    for (rule, table) in [
        ("L2 answers are append-only", "l2_answers"),
        ("L2 decisions are append-only", "l2_decisions"),
        ("verifier switches are append-only", "verifier_switches"),
        ("token endings are append-only", "token_endings"),
        ("re-checks are append-only", "rechecks"),
        (
            "gold hand-outs are never changed nor deleted",
            "gold_quests",
        ),
        (
            "suspect marks are never changed nor deleted",
            "suspect_marks",
        ),
        (
            "canary passes are never changed nor deleted",
            "canary_passes",
        ),
    ] {
        cases.push(case(rule, format!("TRUNCATE {table}")));
    }
    cases
}

/// Runs the statement in a transaction that is rolled back; the database's
/// refusal, or `None` when it accepted the statement.
async fn refusal(conn: &mut PgConnection, sql: &str) -> Option<(String, String)> {
    let mut tx = conn.begin().await.expect("a transaction");
    let result = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut *tx)
        .await;
    tx.rollback().await.expect("the case is rolled back");
    match result {
        Ok(_) => None,
        Err(sqlx::Error::Database(e)) => Some((
            e.code().unwrap_or_default().into_owned(),
            e.message().to_owned(),
        )),
        Err(e) => panic!("{sql}: {e}"),
    }
}

#[tokio::test]
async fn raw_sql_breaking_any_rule_of_the_postgresql_ratchet_is_refused_by_that_rule() {
    // The database is PostgreSQL in either run of the suite: once is enough.
    if on_postgres() {
        return;
    }
    let test = "raw_sql_breaking_any_rule_of_the_postgresql_ratchet_is_refused_by_that_rule";
    let Some(db) = TestDatabase::create_or_skip(test).await else {
        return;
    };
    let mut conn = PgConnection::connect(&db.url).await.expect("a connection");
    sqlx::migrate!("./migrations/postgres")
        .run(&mut conn)
        .await
        .expect("the migrations run");
    for sql in fixture() {
        sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("the fixture is legal, but {sql}: {e}"));
    }

    let mut wrong = Vec::new();
    for case in cases() {
        let expected = format!("ratchet: {}", case.shadowed_by.unwrap_or(case.rule));
        match refusal(&mut conn, &case.sql).await {
            None => wrong.push(format!("accepted: {}\n  (rule: {})", case.sql, case.rule)),
            Some((code, message)) => {
                let by_rule = message == expected
                    || case
                        .check
                        .is_some_and(|c| message.contains(&format!("\"{c}\"")));
                if !code.starts_with("23") || !by_rule {
                    wrong.push(format!(
                        "refused with {code} {message:?}, not by its rule {expected:?}: {}",
                        case.sql
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The texts of every refusal the PostgreSQL migrations can raise: the
/// arguments of `ratchet_refuse(...)` and `ratchet_refuse_trigger(...)`.
fn refusals_in_the_migrations() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/postgres");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the migrations") {
        let sql = std::fs::read_to_string(entry.expect("a migration").path()).expect("readable");
        for (at, _) in sql.match_indices("ratchet_refuse") {
            let rest = &sql[at..];
            let Some(open) = rest.find('(') else { continue };
            let args = &rest[open + 1..];
            // A call names its text as one quoted literal ('' is a quote).
            let Some(body) = args.strip_prefix('\'') else {
                continue;
            };
            let mut text = String::new();
            let mut chars = body.chars().peekable();
            while let Some(c) = chars.next() {
                match c {
                    '\'' if chars.peek() == Some(&'\'') => {
                        chars.next();
                        text.push('\'');
                    }
                    '\'' => break,
                    c => text.push(c),
                }
            }
            found.push(text);
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn every_refusal_of_the_postgresql_migrations_has_its_case() {
    let listed: Vec<&str> = cases().iter().map(|c| c.rule).collect();
    let found = refusals_in_the_migrations();
    assert!(
        found.len() >= 30,
        "the migrations' refusals are found: {found:?}"
    );
    let missing: Vec<&String> = found
        .iter()
        .filter(|r| !listed.contains(&r.as_str()))
        .collect();
    assert!(missing.is_empty(), "refusals without a case: {missing:?}");
}
