//! The store's contract where a submission must stay PENDING (no gate on a
//! live server holds still for it), driven directly on every backend
//! [`backends`] opens: the conflicts of a quest being checked, a lease used by
//! another token, and the holders of a result value.

use quest::domain::ids::{LeaseId, QuestId, SessionId, SubmissionId, TokenId};

use quest::domain::Phase;
use quest::domain::Verdict;
use quest::domain::session::SessionConfig;
use quest::domain::table::Row;
use quest::domain::work::AgentId;
use quest::store::{
    GateDecision, LeaseOutcome, NewSession, NewSubmission, Store, StoreError, SubmitOutcome,
};
use serde_json::json;

use crate::contract::backends;
use crate::helpers::contact_config;

/// A session of one quest on `store`, leased by an agent token: the token,
/// the quest and the lease.
async fn one_leased_quest(store: &dyn Store) -> (TokenId, QuestId, LeaseId) {
    let token = store
        .create_token(quest::store::NewToken::new(
            "bot",
            quest::domain::Role::Agent,
            "hash",
        ))
        .await
        .unwrap();
    let session = add_session(store, &["Acme"]).await;
    let LeaseOutcome::Assigned { quest, lease, .. } = store
        .lease_next(session, &AgentId::new(token.id, "bot"))
        .await
        .unwrap()
    else {
        panic!("a quest is open")
    };
    (token.id, quest.id, lease.id)
}

fn conflict_code(e: StoreError) -> &'static str {
    match e {
        StoreError::Refused(refusal) => refusal.code(),
        other => panic!("expected a conflict, got {other}"),
    }
}

#[tokio::test]
async fn while_the_gate_checks_a_new_result_and_a_release_are_refused() {
    for backend in backends("while_the_gate_checks_a_new_result_and_a_release_are_refused").await {
        let store = backend.store.as_ref();
        let (token, quest, lease) = one_leased_quest(store).await;
        let submit = |email: &str| NewSubmission {
            quest_id: quest,
            lease_id: lease,
            token_id: token,
            result: json!({"email": email}),
            result_hash: quest::domain::receipt::digest(&json!({"email": email})),
            idempotency_key: None,
        };
        let SubmitOutcome::Recorded { view: first, .. } =
            store.submit(submit("a@b.test"), None).await.unwrap()
        else {
            panic!("recorded")
        };
        assert_eq!(
            store.get_quest(quest).await.unwrap().phase,
            Some(Phase::Checking)
        );

        assert_eq!(
            conflict_code(
                store
                    .submit(submit("other@b.test"), None)
                    .await
                    .unwrap_err()
            ),
            "submission_in_progress"
        );
        assert_eq!(
            conflict_code(store.release(quest, lease, token).await.unwrap_err()),
            "quest_checking"
        );
        let SubmitOutcome::Replayed(same) = store.submit(submit("a@b.test"), None).await.unwrap()
        else {
            panic!("a replay")
        };
        assert_eq!(
            same.submission.id, first.submission.id,
            "the identical retry of a PENDING submission is the same submission"
        );
        assert_eq!(
            store.pending_submissions().await.unwrap(),
            [first.submission.id]
        );
        let quest_row = store.get_quest(quest).await.unwrap();
        assert_eq!(
            (quest_row.phase, quest_row.tries),
            (Some(Phase::Checking), 0),
            "the refusals changed nothing on {}",
            backend.name
        );
    }
}

#[tokio::test]
async fn a_token_other_than_the_holders_cannot_use_the_lease() {
    for backend in backends("a_token_other_than_the_holders_cannot_use_the_lease").await {
        let store = backend.store.as_ref();
        let (_token, quest, lease) = one_leased_quest(store).await;
        let other = store
            .create_token(quest::store::NewToken::new(
                "other",
                quest::domain::Role::Agent,
                "hash2",
            ))
            .await
            .unwrap();
        assert_eq!(
            conflict_code(store.heartbeat(quest, lease, other.id).await.unwrap_err()),
            "lease_lost"
        );
        assert_eq!(
            conflict_code(store.release(quest, lease, other.id).await.unwrap_err()),
            "lease_lost"
        );
    }
}

#[tokio::test]
async fn the_holders_of_a_result_value_are_the_other_quests_that_keep_it() {
    for backend in backends("the_holders_of_a_result_value_are_the_other_quests_that_keep_it").await
    {
        let store = backend.store.as_ref();
        let token = store
            .create_token(quest::store::NewToken::new(
                "bot",
                quest::domain::Role::Agent,
                "hash",
            ))
            .await
            .unwrap()
            .id;
        let session = add_session(store, &["Acme", "Beta", "Gamma", "Delta"]).await;
        let holders = |except: QuestId, value: &'static str| async move {
            store
                .result_holders(session, except, "email", value, 5)
                .await
                .unwrap()
        };
        let (acme, acme_sub) = submit_email(store, token, session, "a", "info@acme.test").await;
        let stranger = QuestId::new();
        assert_eq!(
            holders(stranger, "INFO@Acme.test").await,
            ["Acme"],
            "a submission still being checked holds its value, in any letter case"
        );
        assert!(
            holders(acme, "info@acme.test").await.is_empty(),
            "a quest is no holder for itself"
        );
        decide(store, acme_sub, Verdict::Pass).await;
        assert_eq!(holders(stranger, "info@acme.test").await, ["Acme"]);

        let (_beta, beta_sub) = submit_email(store, token, session, "b", "info@acme.test").await;
        assert_eq!(holders(acme, "info@acme.test").await, ["Beta"]);
        decide(store, beta_sub, Verdict::Fail).await;
        assert!(
            holders(acme, "info@acme.test").await.is_empty(),
            "a failed result holds nothing"
        );

        let (_gamma, gamma_sub) = submit_email(store, token, session, "c", "info@acme.test").await;
        decide(store, gamma_sub, Verdict::Review).await;
        assert_eq!(holders(stranger, "info@acme.test").await, ["Acme", "Gamma"]);
        assert_eq!(
            store
                .result_holders(session, stranger, "email", "info@acme.test", 1)
                .await
                .unwrap(),
            ["Acme"],
            "at most `limit`, in upload order"
        );
        assert!(holders(stranger, "sales@acme.test").await.is_empty());
        assert!(
            store
                .result_holders(session, stranger, "note", "x", 5)
                .await
                .unwrap()
                .len()
                == 2,
            "any plain field can be asked about"
        );

        // Another session's quests are no holders.
        let other = add_session(store, &["Acme again"]).await;
        assert!(
            store
                .result_holders(other, stranger, "email", "info@acme.test", 5)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(matches!(
            store
                .result_holders(session, stranger, "email') OR 1=1 --", "x", 5)
                .await,
            Err(StoreError::Corrupt(_))
        ));
    }
}

/// A session of the named companies (the contact config, max_tries 3) on `store`.
pub(crate) async fn add_session(store: &dyn Store, companies: &[&str]) -> SessionId {
    let rows = companies
        .iter()
        .map(|c| {
            let input = json!({"company": c}).as_object().unwrap().clone();
            (c.to_string(), Row::from_map(&input))
        })
        .collect();
    store
        .create_session(NewSession {
            review_key: None,
            id: SessionId::new(),
            name: "s".into(),
            key_column: "company".into(),
            config: SessionConfig::parse(contact_config(3)).unwrap(),
            columns: vec!["company".into()],
            source_name: "s.jsonl".into(),
            source_type: "application/x-ndjson".into(),
            source: Vec::new(),
            created_by: "admin".into(),
            rows,
        })
        .await
        .unwrap()
        .id
}

/// `agent` leases the next quest of `session` and submits `email` for it;
/// returns the quest and the PENDING submission.
async fn submit_email(
    store: &dyn Store,
    token: TokenId,
    session: SessionId,
    agent: &str,
    email: &str,
) -> (QuestId, SubmissionId) {
    let LeaseOutcome::Assigned { quest, lease, .. } = store
        .lease_next(session, &AgentId::new(token, agent))
        .await
        .unwrap()
    else {
        panic!("a quest is open")
    };
    let result = json!({"email": email, "note": "x"});
    let SubmitOutcome::Recorded { view, .. } = store
        .submit(
            NewSubmission {
                quest_id: quest.id,
                lease_id: lease.id,
                token_id: token,
                result_hash: quest::domain::receipt::digest(&result),
                idempotency_key: None,
                result,
            },
            None,
        )
        .await
        .unwrap()
    else {
        panic!("recorded")
    };
    (quest.id, view.submission.id)
}

async fn decide(store: &dyn Store, submission: SubmissionId, verdict: Verdict) {
    store
        .apply_verdict(
            submission,
            GateDecision {
                verdict,
                facts: Vec::new(),
                evidence: Vec::new(),
                gate: "schema".into(),
                gate_version: "1".into(),
                receipt: "sha256:0".into(),
                verify: None,
            },
        )
        .await
        .unwrap();
}
