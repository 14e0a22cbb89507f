//! The fixture of the PostgreSQL ratchet's rule table (`ratchet_rules`):
//! quests in every state, built with legal statements, and the fixed ids
//! its cases name.

/// Fixed ids, readable in the statements: `id(kind, n)`.
pub(crate) fn id(kind: u8, n: u32) -> String {
    format!("00000000-0000-4000-800{kind}-{n:012}")
}
pub(crate) const SESSION: u8 = 1;
pub(crate) const QUEST: u8 = 2;
pub(crate) const LEASE: u8 = 3;
pub(crate) const SUBMISSION: u8 = 4;
pub(crate) const OTHER: u8 = 5;
pub(crate) const TOKEN: &str = "a0000000-0000-4000-8000-000000000001";

pub(crate) fn q(n: u32) -> String {
    id(QUEST, n)
}
pub(crate) fn l(n: u32) -> String {
    id(LEASE, n)
}
pub(crate) fn s(n: u32) -> String {
    id(SUBMISSION, n)
}

/// Session 1 (no AI verifiers, `max_tries` 3) holds quests 1 open, 2 leased,
/// 3 checking, 4 PASS, 5 REVIEW (with an approval on record), 6 DONE by
/// lapses, 10 leased after one FAIL, 11 REVIEW needing two reviewers (with
/// one approval on record); session 2 (with AI verifiers) holds 7
/// verifying, 8 leased with a decided PASS submission not yet applied, 9 PASS
/// after its verification. Submission `n` is quest `n`'s.
pub(crate) fn fixture() -> Vec<String> {
    let (s1, s2) = (id(SESSION, 1), id(SESSION, 2));
    let mut sql = vec![
        format!(
            "INSERT INTO tokens (id, name, role, hash, created_at) VALUES
             ('{TOKEN}', 'bot', 'agent', 'hash-bot', now())"
        ),
        format!(
            "INSERT INTO sessions (id, name, key_column, gate_kind, config, columns, source_name,
                                   source_type, total, max_tries, max_lapses, lease_seconds,
                                   created_by, created_at)
             VALUES ('{s1}', 'plain', 'key', 'schema', '{{}}', '[\"key\"]', 'f.csv', 'text/csv',
                     7, 3, 3, 60, 'admin', now()),
                    ('{s2}', 'verified', 'key', 'schema',
                     '{{\"verify\": {{\"verifiers\": [{{\"name\": \"v\"}}]}}}}', '[\"key\"]',
                     'f.csv', 'text/csv', 3, 3, 3, 60, 'admin', now())"
        ),
    ];
    let session_of = |n: u32| if (7..=9).contains(&n) { &s2 } else { &s1 };
    for n in 1..=11 {
        let reviewers = if n == 11 { 2 } else { 1 };
        sql.push(format!(
            "INSERT INTO quests (id, session_id, row_index, key, input, state, phase, max_tries,
                                 reviews_required, updated_at)
             VALUES ('{}', '{}', {n}, 'k{n}', '{{\"key\": \"k{n}\"}}', 'TODO', 'open', 3,
                     {reviewers}, now())",
            q(n),
            session_of(n)
        ));
    }
    for n in 2..=11 {
        sql.push(format!(
            "INSERT INTO leases (id, quest_id, session_id, agent, granted_at, expires_at)
             VALUES ('{}', '{}', '{}', '{TOKEN}/bot-{n}', now(), now() + interval '1 hour')",
            l(n),
            q(n),
            session_of(n)
        ));
        sql.push(format!(
            "UPDATE quests SET phase = 'leased', lease_id = '{}', leases = 1 WHERE id = '{}'",
            l(n),
            q(n)
        ));
    }
    // Submission n of quest n, decided as `verdict`, leaving `state` and `tries`.
    let submit = |n: u32, verdict: &str, state: &str, tries: u32| {
        let decided = if verdict == "PENDING" {
            "NULL, NULL, NULL".to_owned()
        } else {
            format!("'{state}', {tries}, now()")
        };
        format!(
            "INSERT INTO submissions (id, quest_id, session_id, lease_id, agent, result, result_hash,
                                      verdict, receipt, state_after, tries_after, decided_at, created_at)
             VALUES ('{}', '{}', '{}', '{}', '{TOKEN}/bot-{n}', '{{\"v\": {n}}}', 'hash-{n}',
                     '{verdict}', 'sha256:{n}', {decided}, now())",
            s(n),
            q(n),
            session_of(n),
            l(n)
        )
    };
    // What a verdict writes on its quest and lease.
    let decide = |n: u32, state: &str, tries: u32| {
        [
            format!(
                "UPDATE quests SET state = '{state}', phase = NULL, lease_id = NULL, tries = {tries},
                 result = '{{\"v\": {n}}}', submission_id = '{}', receipt = 'sha256:{n}',
                 decided_by = 'gate' WHERE id = '{}'",
                s(n),
                q(n)
            ),
            format!(
                "UPDATE leases SET ended_at = now(), end_reason = 'decided' WHERE id = '{}'",
                l(n)
            ),
        ]
    };
    let to_verifying = |n: u32| {
        [
            format!(
                "UPDATE quests SET phase = 'verifying', lease_id = NULL, tries = 1,
                 result = '{{\"v\": {n}}}', submission_id = '{}' WHERE id = '{}'",
                s(n),
                q(n)
            ),
            format!(
                "UPDATE leases SET ended_at = now(), end_reason = 'decided' WHERE id = '{}'",
                l(n)
            ),
        ]
    };
    sql.push(submit(3, "PENDING", "", 0));
    sql.push(format!(
        "UPDATE quests SET phase = 'checking' WHERE id = '{}'",
        q(3)
    ));
    sql.push(submit(4, "PASS", "PASS", 1));
    sql.extend(decide(4, "PASS", 1));
    sql.push(submit(5, "REVIEW", "REVIEW", 1));
    sql.extend(decide(5, "REVIEW", 1));
    sql.push(submit(11, "REVIEW", "REVIEW", 1));
    sql.extend(decide(11, "REVIEW", 1));
    sql.push(format!(
        "UPDATE quests SET state = 'DONE', phase = NULL, lease_id = NULL, lapses = 1,
         decided_by = 'limit' WHERE id = '{}'",
        q(6)
    ));
    sql.push(format!(
        "UPDATE leases SET ended_at = now(), end_reason = 'expired' WHERE id = '{}'",
        l(6)
    ));
    sql.push(submit(10, "FAIL", "TODO", 1));
    sql.push(format!(
        "UPDATE quests SET tries = 1, last_facts = '[{{\"check\": \"c\"}}]', submission_id = '{}'
         WHERE id = '{}'",
        s(10),
        q(10)
    ));
    sql.push(submit(7, "PASS", "TODO", 1));
    sql.extend(to_verifying(7));
    sql.push(submit(8, "PASS", "PASS", 1));
    sql.push(submit(9, "PASS", "TODO", 1));
    sql.extend(to_verifying(9));
    sql.push(format!(
        "INSERT INTO l2_decisions (submission_id, quest_id, session_id, state_after, facts, decided_at)
         VALUES ('{}', '{}', '{s2}', 'PASS', '[]', now())",
        s(9),
        q(9)
    ));
    sql.push(format!(
        "UPDATE quests SET state = 'PASS', phase = NULL, decided_by = 'gate' WHERE id = '{}'",
        q(9)
    ));
    // An L2 job still queued (quest 7) and one answered (quest 9).
    for (job, n, status) in [(1, 7, "queued"), (2, 9, "answered")] {
        sql.push(format!(
            "INSERT INTO l2_jobs (id, submission_id, quest_id, session_id, verifier, question_index,
                                  question, flag_on, request, status, created_at)
             VALUES ('{}', '{}', '{}', '{s2}', 'v', 0, 'Is it right?', 'no', '{{}}', '{status}', now())",
            id(OTHER, job),
            s(n),
            q(n)
        ));
    }
    sql.push(format!(
        "INSERT INTO l2_answers (job_id, submission_id, quest_id, session_id, verifier, model,
                                 question_index, question, flag_on, answer, detail, flagged,
                                 attempts, latency_ms, created_at)
         VALUES ('{}', '{}', '{}', '{s2}', 'v', 'm', 0, 'Is it right?', 'no', 'yes', '', false,
                 1, 5, now())",
        id(OTHER, 2),
        s(9),
        q(9)
    ));
    sql.push(format!(
        "INSERT INTO review_decisions (id, quest_id, reviewer, decision, note, created_at)
         VALUES ('{}', '{}', 'rev', 'approve', 'fine', now()),
                ('{}', '{}', 'rev', 'approve', 'fine', now())",
        id(OTHER, 3),
        q(5),
        id(OTHER, 7),
        q(11)
    ));
    sql.push(format!(
        "INSERT INTO verifier_switches (session_id, verifier, question_index, standing, upheld,
                                        overruled, missed, cleared, kappa, min_kappa, min_labels,
                                        decision_id, created_at)
         VALUES ('{s1}', 'v', 0, 'advisory', 0, 1, 0, 0, 0.1, 0.5, 1, '{}', now())",
        id(OTHER, 3)
    ));
    sql.push(format!(
        "INSERT INTO recheck_runs (id, session_id, started_by, started_at, total)
         VALUES ('{}', '{s1}', 'admin', now(), 1)",
        id(OTHER, 4)
    ));
    sql.push(format!(
        "INSERT INTO rechecks (id, run_id, quest_id, session_id, submission_id, verdict, outcome,
                               mark, facts, evidence, gate, gate_version, digest, created_at)
         VALUES ('{}', '{}', '{}', '{s1}', NULL, 'PASS', 'confirmed', NULL, '[]', '[]', 'schema',
                 '1', 'd', now())",
        id(OTHER, 5),
        id(OTHER, 4),
        q(4)
    ));
    sql.push(format!(
        "INSERT INTO token_pauses (id, session_id, token_id, agent, reason, figures, through_seq,
                                   created_at)
         VALUES ('{}', '{s1}', '{TOKEN}', '{TOKEN}/bot-2', 'consecutive_done', '3 of 3', 1, now())",
        id(OTHER, 6)
    ));
    sql.push(format!(
        "INSERT INTO audit_reviews (quest_id, session_id, drawn_at, decision, reviewer, note, decided_at)
         VALUES ('{}', '{s1}', now(), 'approve', 'rita', '', now())",
        q(4)
    ));
    // Session 1's gold companion, one gold item and its hand-out (to quest 4: raw SQL).
    sql.push(format!(
        "INSERT INTO sessions (id, name, key_column, gate_kind, config, columns, source_name,
                               source_type, total, max_tries, max_lapses, lease_seconds,
                               created_by, created_at, gold_of)
         SELECT '{}', name, key_column, gate_kind, config, columns, source_name, source_type, 0,
                max_tries, max_lapses, lease_seconds, created_by, created_at, id
         FROM sessions WHERE id = '{s1}'",
        id(SESSION, 9)
    ));
    sql.push(format!(
        "INSERT INTO gold_items (id, session_id, seq, kind, input, expected, created_at)
         VALUES ('{}', '{s1}', 0, 'gold', '{{}}', '{{}}', now())",
        id(OTHER, 7)
    ));
    sql.push(format!(
        "INSERT INTO gold_quests (quest_id, item_id, session_id, token_id, handed_at)
         VALUES ('{}', '{}', '{s1}', '{TOKEN}', now())",
        q(4),
        id(OTHER, 7)
    ));
    // Quest 4's suspect mark, under the pause of bot-2.
    sql.push(format!(
        "INSERT INTO suspect_marks (quest_id, session_id, token_id, pause_id, marked_at)
         VALUES ('{}', '{s1}', '{TOKEN}', '{}', now())",
        q(4),
        id(OTHER, 6)
    ));
    // Quest 4 recorded as a canary that passed (raw SQL: the item is gold).
    sql.push(format!(
        "INSERT INTO canary_passes (quest_id, session_id, token_id, item_id, decided_by, passed_at)
         VALUES ('{}', '{s1}', '{TOKEN}', '{}', 'gate', now())",
        q(4),
        id(OTHER, 7)
    ));
    sql
}
